"""The rocprofv3 JSON reader (issue 28): documents built in code (tests/rocbuild.py) with exact
expected rows, the shared MI350X capture against an independent reading of its raw JSON, and
damaged files ending in one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import whyidle
from whyidle.cli import main
from whyidle.errors import InputError, TraceFormatError
from whyidle.sources import load
from whyidle.timeline.model import Kind, LaneKind

from conftest import shared_trace
from rocbuild import GPU1, RocDoc, hip_training

SHARED = "rocprof/tracelens__rocprofv3_908_results.json.gz"


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "run.json", gz: bool = False) -> Path:
    p = tmp_path / name
    text = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(text) if gz else text)
    return p


def _rows(tl: Any, kind: Kind) -> list[tuple[int, int, str, int]]:
    idx = np.flatnonzero(tl.kind == int(kind))
    return [(int(tl.start_ns[i]), int(tl.end_ns[i]), tl.name_of(int(i)), int(tl.corr[i])) for i in idx]


def test_records_become_rows_on_their_lanes(tmp_path: Path) -> None:
    d = RocDoc()
    c = d.hip("hipLaunchKernel", 1_000, 3_000)
    d.kernel("gemm", 5_000, 9_000, corr=c, stream=7, grid=(1024, 2, 1), wg=(256, 1, 1))
    d.kernel("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", 9_500, 20_000, stream=8)
    c = d.hip("hipMemcpyAsync", 10_000, 11_000, tid=909)
    d.copy("MEMORY_COPY_DEVICE_TO_HOST", 12_000, 13_000, 4096, corr=c, src=GPU1, dst=100)
    d.rccl("ncclAllReduce", 8_000, 9_000)
    tl = load(_write(tmp_path, d.doc()))
    assert _rows(tl, Kind.KERNEL) == [(5_000, 9_000, "gemm", 1)]
    assert _rows(tl, Kind.COLLECTIVE)[0][:3] == (9_500, 20_000, "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)")
    assert _rows(tl, Kind.RUNTIME) == [(1_000, 3_000, "hipLaunchKernel", 1), (10_000, 11_000, "hipMemcpyAsync", 3)]
    assert _rows(tl, Kind.MEMCPY) == [(12_000, 13_000, "Memcpy DtoH (Device -> Host)", 3)]
    assert _rows(tl, Kind.CPU_OP) == [(8_000, 9_000, "ncclAllReduce", -1)]
    k = int(np.flatnonzero(tl.kind == int(Kind.KERNEL))[0])
    assert (int(tl.grid[k]), int(tl.block[k])) == (8, 256)  # 2048 work-items in workgroups of 256
    assert tl.blocks_per_sm[k] == pytest.approx(8 / 256)
    lane = tl.lanes[tl.lane[k]]
    assert (lane.kind, lane.device, lane.tid) == (LaneKind.GPU_STREAM, 0, "7")
    copy = int(np.flatnonzero(tl.kind == int(Kind.MEMCPY))[0])
    assert tl.lanes[tl.lane[copy]].device == 1 and int(tl.nbytes[copy]) == 4096  # the GPU side of the copy
    threads = {(ln.tid, ln.name) for ln in tl.lanes if ln.kind is LaneKind.CPU_THREAD}
    assert threads == {("908", "main thread"), ("909", "")}


def test_launch_shapes_past_any_device_are_unknown(tmp_path: Path) -> None:
    d = RocDoc()
    big = (1 << 31) - 1
    d.kernel("huge grid", 10, 20, grid=(big, big, big), wg=(1, 1, 1))
    d.kernel("huge block", 30, 40, grid=(64, 1, 1), wg=(big, big, 1))
    tl = load(_write(tmp_path, d.doc()))
    assert tl.grid.tolist() == [-1, -1] and tl.block.tolist() == [1, -1]


def test_device_table_is_amd_with_its_generation(tmp_path: Path) -> None:
    d = RocDoc()
    d.kernel("k", 10, 20)
    tl = load(_write(tmp_path, d.doc()))
    assert tl.meta.vendor == "amd" and tl.meta.source_format == "rocprofv3"
    assert [(x["id"], x["name"], x["gcnArchName"], x["cuCount"]) for x in tl.meta.devices] == [
        (0, "AMD Instinct MI350X", "gfx950", 256),
        (1, "AMD Instinct MI350X", "gfx950", 256),
    ]
    r = whyidle.diagnose(_write(tmp_path, d.doc(), "again.json"))
    assert (r.advice.vendor, r.advice.generation) == ("amd", "CDNA4 (gfx950)")
    assert any("used 1 of the node's 2 GPUs (GPU 0)" in q for q in r.quality)


def test_without_stream_ids_the_queue_is_the_lane(tmp_path: Path) -> None:
    d = RocDoc(streams=False)
    d.kernel("k", 10, 20, queue=3)
    d.kernel("k", 30, 40, queue=4)
    tl = load(_write(tmp_path, d.doc()))
    assert sorted(ln.tid for ln in tl.lanes) == ["queue 3", "queue 4"]


def test_markers_are_steps_ops_or_annotations(tmp_path: Path) -> None:
    d = RocDoc()
    d.marker("ProfilerStep#4", 0, 100)
    d.marker("aten::mm, seq = 12, op_id = 3", 10, 20)
    d.marker("load batch", 30, 40)
    d.marker("point", 50, 50, kind="MARKER_CORE_API")
    tl = load(_write(tmp_path, d.doc()))
    assert _rows(tl, Kind.STEP) == [(0, 100, "ProfilerStep#4", -1)]
    assert _rows(tl, Kind.CPU_OP) == [(10, 20, "aten::mm", -1)]
    assert [r[2] for r in _rows(tl, Kind.ANNOTATION)] == ["load batch", "point"]


def test_hsa_calls_are_read_only_without_hip(tmp_path: Path) -> None:
    d = RocDoc()
    d.hsa("hsa_signal_store_screlease", 0, 10)
    d.kernel("k", 20, 30)
    tl = load(_write(tmp_path, d.doc()))
    assert [r[2] for r in _rows(tl, Kind.RUNTIME)] == ["hsa_signal_store_screlease"]
    d.hip("hipLaunchKernel", 0, 15)
    tl = load(_write(tmp_path, d.doc(), "both.json"))
    assert [r[2] for r in _rows(tl, Kind.RUNTIME)] == ["hipLaunchKernel"]
    assert any("1 HSA API calls of process 908 were not read" in q for q in tl.meta.quality)


def test_several_processes_keep_their_correlations_apart(tmp_path: Path) -> None:
    a, b = RocDoc(pid=1), RocDoc(pid=2)
    for d, t in ((a, 0), (b, 1_000)):
        c = d.hip("hipLaunchKernel", t, t + 10)
        d.kernel("k", t + 20, t + 30, corr=c)
    tl = load(_write(tmp_path, {"rocprofiler-sdk-tool": [a.process(), b.process()]}))
    k = np.flatnonzero(tl.kind == int(Kind.KERNEL))
    rt = np.flatnonzero(tl.kind == int(Kind.RUNTIME))
    assert len(set(tl.corr[k].tolist())) == 2 and set(tl.corr[k].tolist()) == set(tl.corr[rt].tolist())
    assert {tl.lanes[tl.lane[i]].pid for i in k.tolist()} == {"1", "2"}


@pytest.mark.parametrize("gz", [False, True])
def test_format_is_told_from_the_bytes_not_the_name(tmp_path: Path, gz: bool) -> None:
    d = RocDoc()
    d.kernel("k", 10, 20)
    tl = load(_write(tmp_path, d.doc(), "capture.dat", gz=gz))
    assert tl.meta.source_format == "rocprofv3" and len(tl) == 1


def test_a_hip_program_gets_hip_advice(tmp_path: Path) -> None:
    r = whyidle.diagnose(_write(tmp_path, hip_training().doc()))
    assert (r.source.workload, r.advice.framework, r.advice.idiom) == ("non_pytorch", "hip", "hip")
    assert len(r.utilization.steps) == 3  # the ROCTx "step N" ranges
    top = r.findings[0]
    assert top.key == "synchronization/host_sync" and "hipDeviceSynchronize" in top.fix.code
    assert "cudaDeviceSynchronize" not in top.fix.code + " ".join(top.fix.steps)
    # the kernels wait for the copy queued before them: the capture that names it is rocprofv3's
    queued = next(f for f in r.findings if f.key == "unattributed/queued_work_waiting")
    assert queued.fix.code.startswith("rocprofv3 --runtime-trace") and "nsys" not in " ".join(queued.fix.steps)


def test_pytorch_ops_as_roctx_ranges_give_pytorch_advice(tmp_path: Path) -> None:
    d = hip_training()
    d.marker("aten::linear, seq = 1", 1_010_000, 1_030_000)
    r = whyidle.diagnose(_write(tmp_path, d.doc()))
    assert r.advice.idiom == "pytorch"


def test_kernels_without_hip_calls_name_the_rocprofv3_option(tmp_path: Path) -> None:
    d = RocDoc()
    for i in range(5):
        d.kernel("k", i * 1_000_000, i * 1_000_000 + 100_000)
    r = whyidle.diagnose(_write(tmp_path, d.doc()))
    top = r.findings[0]
    assert top.key == "unattributed/no_launch_info"
    assert top.fix.code.startswith("rocprofv3 --runtime-trace")
    assert any("capture with rocprofv3 --runtime-trace" in q for q in r.quality)


# -- damaged files: one line, exit 2 -------------------------------------------------------------


def _damaged(kind: str) -> dict[str, Any]:
    d = RocDoc()
    c = d.hip("hipLaunchKernel", 0, 10)
    d.kernel("k", 20, 30, corr=c)
    doc = d.doc()
    rec = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]
    if kind == "type":
        rec["start_timestamp"] = "20"
    elif kind == "negative":
        rec["end_timestamp"] = -5
    elif kind == "huge":
        rec["end_timestamp"] = 2**64 + 1
    elif kind == "reversed":
        rec["start_timestamp"], rec["end_timestamp"] = 40, 30
    elif kind == "agent":
        rec["dispatch_info"]["agent_id"]["handle"] = 999
    elif kind == "tool":
        doc["rocprofiler-sdk-tool"] = "x"
    return doc


@pytest.mark.parametrize(
    "kind,says",
    [
        ("type", "kernel_dispatch[0].start_timestamp"),
        ("negative", "kernel_dispatch[0].end_timestamp"),
        ("huge", "kernel_dispatch[0].end_timestamp"),
        ("reversed", "ends (30 ns) before it starts (40 ns)"),
        ("agent", "on agent 999"),
        ("tool", "damaged field"),
    ],
)
def test_damaged_records_end_in_one_line(tmp_path: Path, kind: str, says: str) -> None:
    p = _write(tmp_path, _damaged(kind))
    with pytest.raises(TraceFormatError) as exc:
        load(p)
    assert says in str(exc.value) and "\n" not in str(exc.value) and str(p) in str(exc.value)


@pytest.mark.parametrize("cut", [40, 1000, -3])
def test_truncated_file_is_one_line_and_exit_2(tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(hip_training().doc()).encode()
    p = tmp_path / "cut.json"
    p.write_bytes(text[:cut])
    assert main(["diagnose", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cut.json" in err and "Traceback" not in err


def test_large_rocprof_output_is_not_sent_to_the_kineto_stream_reader(tmp_path: Path) -> None:
    from whyidle.sources.kineto_stream import should_stream

    d = RocDoc()
    d.kernel("k", 10, 20)
    assert not should_stream(_write(tmp_path, d.doc(), gz=True), min_bytes=0)


def test_over_the_in_memory_cap_it_is_refused_in_one_line(tmp_path: Path) -> None:
    from whyidle.config import ReadSettings
    from whyidle.sources import _read_rocprof

    p = _write(tmp_path, hip_training().doc())
    with pytest.raises(InputError) as exc:
        _read_rocprof(p, ReadSettings(rocprof_max_bytes=1000))
    assert "rocprofv3 --collection-period" in str(exc.value) and "\n" not in str(exc.value)


# -- the shared MI350X capture -------------------------------------------------------------------


def _independent_busy(path: Path) -> tuple[int, int]:
    """Union of the capture's kernel dispatches, and their count, from the raw JSON with the
    standard library only."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    proc = doc["rocprofiler-sdk-tool"][0]
    spans = sorted((r["start_timestamp"], r["end_timestamp"]) for r in proc["buffer_records"]["kernel_dispatch"])
    total, cur_s, cur_e = 0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s, len(spans)


def test_shared_capture_busy_time_is_the_union_of_its_dispatches() -> None:
    path = shared_trace(SHARED)
    busy, n = _independent_busy(path)
    r = whyidle.diagnose(path)
    assert r.utilization.busy_ns == busy  # the window is the span of device activity: every dispatch is in it
    assert r.kernels.count == n == 43_915
    assert r.utilization.window_ns == 15_122_023_494
    assert (r.advice.vendor, r.advice.generation) == ("amd", "CDNA4 (gfx950)")
    assert r.source.devices == ("AMD Instinct MI350X",) * 8
    # RCCL's kernels are the communication: 3.95 s of the 4.23 s busy
    assert r.utilization.communication_ns == 3_951_430_401
    assert r.utilization.steps == ()  # no ROCTx ranges in this capture
    # ATen's backward kernels make it PyTorch training; no launch was recorded, and the fix says how
    assert (r.source.workload, r.advice.framework) == ("training", "pytorch")
    assert r.findings[0].key == "unattributed/no_launch_info" and r.findings[0].fix.code.startswith("rocprofv3 --runtime-trace")


def test_shared_capture_converts_to_parquet_and_back(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = shared_trace(SHARED)
    out = tmp_path / "t.parquet"
    assert main(["convert", str(path), "-o", str(out)]) == 0
    a, b = load(path), load(out)
    assert len(a) == len(b) and np.array_equal(a.start_ns, b.start_ns) and np.array_equal(a.kind, b.kind)
    assert whyidle.diagnose(out).utilization.busy_ns == _independent_busy(path)[0]
