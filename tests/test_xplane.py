"""The XPlane reader (issue 28, JAX half): XSpace bytes built in code (tests/xplanebuild.py)
with exact expected rows, damaged files, detection, log folders, and the shared MI300X capture
checked against an independent union of its device events read from the raw file."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import whyidle
from whyidle.cli import main
from whyidle.errors import TraceFormatError, WhyidleError
from whyidle.sources import load
from whyidle.timeline.model import Kind, LaneKind

from conftest import shared_trace
from xplanebuild import Ev, Ln, f_bytes, f_int, jax_gpu_capture, plane, space

MI300X = "jax/tracelens__mi300x_jax_conv_minimal.xplane.pb"


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    p = tmp_path / "host0.xplane.pb"
    p.write_bytes(jax_gpu_capture())
    return p


def _rows(tl: whyidle.Timeline, kind: Kind) -> np.ndarray:
    return np.flatnonzero(tl.kind == int(kind))


def test_device_and_host_rows(capture: Path) -> None:
    tl = load(capture)
    assert tl.meta.source_format == "xplane"
    kernels, copies = _rows(tl, Kind.KERNEL), _rows(tl, Kind.MEMCPY)
    assert len(kernels) == 6 and len(copies) == 3
    # offsets are picoseconds from the line's timestamp: the first kernel at 1 ms + 250 us, for 1 ms
    assert int(tl.start_ns[kernels[0]]) == 1_250_000 and int(tl.end_ns[kernels[0]]) == 2_250_000
    assert {tl.lanes[int(ln)].label for ln in tl.lane[kernels]} == {"GPU 0 stream 7", "GPU 0 stream 8"}
    # the copy is named by its launch call's direction, as Kineto names copies
    assert {tl.name_of(int(r)) for r in copies} == {"Memcpy HtoD (Pinned -> Device)"}
    # every device row is linked to its launch call by correlation_id
    launches = _rows(tl, Kind.RUNTIME)
    assert sorted(tl.corr[launches].tolist()) == sorted(tl.corr[np.concatenate([kernels, copies])].tolist())
    # Python tracer frames in Kineto's form; the waits also as sync records
    names = set(tl.strings)
    assert "api.py(3154): block_until_ready" in names and "train.py(42): main" in names
    syncs = _rows(tl, Kind.SYNC)
    assert len(syncs) == 3 and tl.name_of(int(syncs[0])) == "BlockHostUntilReady (api.py(3154): block_until_ready)"
    assert tl.meta.devices[0]["computeMajor"] == 9 and tl.meta.vendor == "nvidia"


def test_launch_threads_are_read_as_the_dispatching_python_thread(capture: Path) -> None:
    tl = load(capture)
    python = {i for i, ln in enumerate(tl.lanes) if ln.name == "python3"}
    # runtime calls (their own "Host Threads" line) joined to the XLA execute thread holding them,
    # and that thread read as the Python thread that dispatched its work
    for kind in (Kind.RUNTIME, Kind.CPU_OP, Kind.SYNC):
        assert set(tl.lane[_rows(tl, kind)].tolist()) <= python
    assert any("joined" in q for q in tl.meta.quality) and any("JAX dispatch" in q for q in tl.meta.quality)


def test_steps_from_repeated_jitted_calls(capture: Path) -> None:
    tl = load(capture)
    steps = _rows(tl, Kind.STEP)
    assert [tl.name_of(int(r)) for r in steps] == ["train step #1", "train step #2", "train step #3"]
    assert tl.start_ns[steps].tolist() == [1_000_000, 11_000_000, 21_000_000]
    assert tl.end_ns[steps].tolist() == [11_000_000, 21_000_000, 21_500_000]


def test_step_markers_with_step_num_are_the_steps(tmp_path: Path) -> None:
    evs = [Ev("train", 1_000 + i * 5_000, 4_000, {"step_num": 40 + i}) for i in range(3)]
    evs += [Ev("PjitFunction(f)", 1_100 + i * 5_000, 100) for i in range(3)]
    gpu = plane(1, "/device:GPU:0", [Ln(1, "Stream #1", [Ev("k", 1_500 + i * 5_000, 500) for i in range(3)])])
    p = tmp_path / "s.xplane.pb"
    p.write_bytes(space([gpu, plane(0, "/host:CPU", [Ln(5, "python", evs)])]))
    tl = load(p)
    steps = _rows(tl, Kind.STEP)
    assert [tl.name_of(int(r)) for r in steps] == ["train 40", "train 41", "train 42"]
    assert whyidle.diagnose(p).window.steps[:1] == (40,)


def test_jax_advice_for_a_host_sync(capture: Path) -> None:
    d = whyidle.diagnose(capture)
    assert d.advice is not None and d.advice.framework == "jax"
    top = d.findings[0]
    assert top.key == "synchronization/host_sync"
    text = " ".join((top.fix.summary, *top.fix.steps, top.fix.code))
    assert "block_until_ready" in text and "torch" not in text and ".item()" not in text
    assert any("api.py:3154" in line for line, _ in top.evidence.python_lines)
    assert "torch" not in "\n".join(d.quality)


def _unknown_fields() -> bytes:
    return f_int(15, 7) + f_bytes(16, b"\x01\x02") + bytes([0x8D, 0x01]) + b"\x00\x00\x00\x00"  # varint, bytes, fixed32 (field 17)


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    base = jax_gpu_capture(steps=2)
    a, b = tmp_path / "a.xplane.pb", tmp_path / "b.xplane.pb"
    a.write_bytes(base)
    b.write_bytes(_unknown_fields() + base + _unknown_fields())
    ta, tb = load(a), load(b)
    assert len(ta) == len(tb) and ta.start_ns.tolist() == tb.start_ns.tolist() and ta.strings == tb.strings


def test_aggregated_events_are_left_out_with_a_note(tmp_path: Path) -> None:
    ev = f_bytes(4, f_int(1, 1) + f_int(5, 12) + f_int(3, 1000))  # num_occurrences instead of an offset
    line = f_bytes(3, f_int(1, 3) + f_bytes(2, "Stream #3") + f_int(3, 10) + ev)
    body = plane(1, "/device:GPU:0", [Ln(4, "Stream #4", [Ev("k", 2_000, 10)])]) + line
    p = tmp_path / "agg.xplane.pb"
    p.write_bytes(space([body]))
    tl = load(p)
    assert len(tl) == 1 and any("1 aggregated events" in q for q in tl.meta.quality)


def test_gzip_and_detection_from_the_bytes(tmp_path: Path) -> None:
    raw = jax_gpu_capture(steps=2)
    gz, plain = tmp_path / "h.xplane.pb.gz", tmp_path / "capture.bin"
    gz.write_bytes(gzip.compress(raw))
    plain.write_bytes(raw)
    assert len(load(gz)) == len(load(plain)) > 0
    assert load(plain).meta.source_format == "xplane"


def test_a_jax_log_folder_reads_its_newest_run(tmp_path: Path) -> None:
    for run, steps in (("2026_01_01_10_00_00", 2), ("2026_01_02_10_00_00", 3)):
        d = tmp_path / "plugins" / "profile" / run
        d.mkdir(parents=True)
        (d / "host0.xplane.pb").write_bytes(jax_gpu_capture(steps=steps))
        (d / "host0.trace.json.gz").write_bytes(b"")  # written beside it by jax; not a trace to read
    tl = load(tmp_path)
    assert len(_rows(tl, Kind.STEP)) == 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated mid-plane
        lambda b: b[:-3],  # truncated in the last field
        lambda b: b[:1] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + b[1:],  # a length past 64 bits
        lambda b: b[:5] + bytes([0x0F]) + b[6:],  # wire type 7 inside a plane
        lambda b: space([plane(0, "/host:CPU", [])]),  # no events at all
    ],
    ids=["half", "last-field", "huge-length", "bad-wire-type", "no-events"],
)
def test_a_damaged_file_is_one_line_naming_it(tmp_path: Path, damage: object, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.xplane.pb"
    p.write_bytes(damage(jax_gpu_capture(steps=2)))  # type: ignore[operator]
    with pytest.raises(TraceFormatError) as exc:
        load(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value) and "XPlane" in str(exc.value)
    assert main(["diagnose", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_convert_to_parquet_keeps_the_diagnosis(capture: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "t.parquet"
    assert main(["convert", str(capture), "-o", str(out)]) == 0
    a, b = whyidle.diagnose(capture), whyidle.diagnose(out)
    assert (a.utilization.busy_ns, a.idle_by_cause_ns) == (b.utilization.busy_ns, b.idle_by_cause_ns)
    assert b.advice is not None and b.advice.framework == "jax"


# -- the shared capture, against a second reading of its raw bytes ------------------------------


def _message(buf: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's fields, read independently of whyidle's decoder."""
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def var() -> int:
        nonlocal i
        shift = v = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = var()
        wt = key & 7
        if wt == 0:
            out.append((key >> 3, var()))
        elif wt == 2:
            n = var()
            out.append((key >> 3, buf[i : i + n]))
            i += n
        else:
            i += 8 if wt == 1 else 4
    return out


def _device_intervals(raw: bytes) -> dict[int, list[tuple[int, int]]]:
    """Per GPU: every event of its stream lines as (start, end) ns (offset and duration in ps)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for num, pl in _message(raw):
        if num != 1:
            continue
        fields = _message(pl)  # type: ignore[arg-type]
        name = next(bytes(v).decode() for n, v in fields if n == 2)  # type: ignore[arg-type]
        if not name.startswith("/device:GPU:"):
            continue
        for n, line in fields:
            if n != 3:
                continue
            lf = dict((k, v) for k, v in _message(line) if k != 4)  # type: ignore[arg-type]
            ts = int(lf.get(3, 0))  # type: ignore[arg-type]
            for k, ev in _message(line):  # type: ignore[arg-type]
                if k == 4:
                    e = dict(x for x in _message(ev) if x[0] in (2, 3))  # type: ignore[arg-type]
                    off, dur = int(e.get(2, 0)), int(e.get(3, 0))  # type: ignore[arg-type]
                    out.setdefault(int(name.rsplit(":", 1)[1]), []).append((ts + off // 1000, ts + (off + dur) // 1000))
    return out


def _union_in(iv: list[tuple[int, int]], lo: int, hi: int) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)  # type: ignore[operator]


def test_shared_capture_busy_time_is_the_union_of_its_device_events() -> None:
    p = shared_trace(MI300X)
    d = whyidle.diagnose(p)
    per_gpu = _device_intervals(p.read_bytes())
    assert len(per_gpu) == 8 == d.utilization.n_devices
    w = d.window
    assert d.utilization.busy_ns == sum(_union_in(iv, w.start_ns, w.end_ns) for iv in per_gpu.values())
    assert sum(len(v) for v in per_gpu.values()) == 235  # 200 kernels and 35 copies
    assert len(w.steps) == 5 and w.basis == "steps"


def test_shared_capture_is_an_amd_jax_job_with_jax_fixes() -> None:
    d = whyidle.diagnose(shared_trace(MI300X))
    assert d.advice is not None and (d.advice.framework, d.advice.vendor) == ("jax", "amd")
    assert "CDNA3" in d.advice.generation
    top = d.findings[0]
    assert top.key == "synchronization/host_sync" and "block_until_ready" in top.fix.summary
    for f in d.findings:
        assert "torch" not in " ".join((f.fix.summary, *f.fix.steps, f.fix.code)), f.key


def test_every_damaged_prefix_of_the_shared_capture_is_a_clear_error(tmp_path: Path) -> None:
    raw = shared_trace(MI300X).read_bytes()
    p = tmp_path / "cut.xplane.pb"
    for cut in range(1, len(raw), len(raw) // 23):
        p.write_bytes(raw[:cut])
        try:
            whyidle.diagnose(p)
        except WhyidleError as exc:
            assert "\n" not in str(exc)


def test_xplane_lanes_are_streams_and_threads(capture: Path) -> None:
    tl = load(capture)
    kinds = {ln.kind for ln in tl.lanes}
    assert kinds == {LaneKind.GPU_STREAM, LaneKind.CPU_THREAD}


def test_derived_lines_are_marks_beside_streams_and_work_alone(tmp_path: Path) -> None:
    ops = Ln(2, "XLA Ops", [Ev("fusion", 1_000, 500)])
    stream = Ln(3, "Stream #3", [Ev("fusion_kernel", 1_100, 300)])
    beside, alone = tmp_path / "beside.xplane.pb", tmp_path / "alone.xplane.pb"
    beside.write_bytes(space([plane(1, "/device:GPU:0", [ops, stream])]))
    alone.write_bytes(space([plane(1, "/device:TPU:0", [ops])]))
    a, b = load(beside), load(alone)
    assert sorted(Kind(k).name for k in a.kind.tolist()) == ["GPU_ANNOTATION", "KERNEL"]
    assert [Kind(k).name for k in b.kind.tolist()] == ["KERNEL"]


def test_a_run_folder_with_one_file_per_host_is_read_rank_by_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "plugins" / "profile" / "2026_01_01_10_00_00"
    run.mkdir(parents=True)
    (run / "hostA.xplane.pb").write_bytes(jax_gpu_capture(steps=3))
    (run / "hostB.xplane.pb").write_bytes(jax_gpu_capture(steps=3, sync_ns=3_000_000))
    assert main(["diagnose", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 traces" in out and "rank" in out
