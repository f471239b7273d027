"""Live capture: the step tracker (fake clock and device, then real torch on CPU), the profiler
handler, the sync finder and the watch sampler."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import whyidle
from whyidle.analyses import causes as C
from whyidle.capture.sync import SyncFinder, sync_finder
from whyidle.capture.tracker import StepTracker, batch_samples, track
from whyidle.capture.tracker_report import report_from_tracker
from whyidle.capture.watch import Row, WatchResult, runs, summarize, to_counter_file, watch
from whyidle.capture.fakes import FakeClock, FakeDevice, FakeGpuProbe, FakeHostProbe, FakeLoader, FakeProc
from whyidle.cli import main

MS = 1_000_000


# -- tracker: exact figures with a fake clock -------------------------------------------------
def test_tracker_measures_wait_copy_and_step_exactly() -> None:
    clock = FakeClock()
    waits = [50 * MS, 8 * MS, 8 * MS, 8 * MS]
    tr = track(FakeLoader(clock, waits), clock=clock, device="cpu")
    seen = []
    for batch in tr:
        with tr.copy():
            clock.advance(1 * MS)
        clock.advance(11 * MS)  # compute
        seen.append(batch)
    st = tr.stats()
    assert len(seen) == 4 and seen[0] == list(range(32))
    assert [s.data_wait_ns for s in st.steps] == waits
    assert [s.copy_ns for s in st.steps] == [MS] * 4
    assert [s.duration_ns for s in st.steps] == [w + 12 * MS for w in waits]
    assert all(s.samples == 32 for s in st.steps)
    assert st.loop_line.startswith("test_capture.py:")
    # the report drops the first (start-up) step: 3 steps of 20 ms, 8 ms waiting, 1 ms copying
    r = report_from_tracker(st)
    assert r.window.steps == (1, 2, 3)
    assert r.utilization.window_ns == 60 * MS
    assert r.utilization.busy_ns == 33 * MS
    assert r.idle_by_cause_ns[C.INPUT_PIPELINE.key] == 24 * MS
    assert r.idle_by_cause_ns[C.H2D_COPY.key] == 3 * MS
    assert r.utilization.samples_per_s == pytest.approx(3 * 32 / 0.060)
    f = r.findings[0]
    assert (f.key, f.id, f.variant) == ("starvation/input_pipeline", "input_pipeline.single_process", "single_process")
    assert f.evidence.per_step_idle_ns == pytest.approx(8 * MS)
    assert f.evidence.share_of_step == pytest.approx(0.4)
    assert "num_workers=0" in f.fix.steps[0]
    assert "1.67x" in f.fix.expected  # 20 ms -> 12 ms per step at best
    # the copy (3 ms of 60) is 5%: exactly at the threshold, so it is a finding too
    assert [x.key for x in r.findings] == ["starvation/input_pipeline", "starvation/h2d_copy"]


def test_tracker_variant_follows_num_workers_and_threshold() -> None:
    clock = FakeClock()
    tr = track(FakeLoader(clock, [MS] + [4 * MS] * 3, num_workers=4), clock=clock)
    for _ in tr:
        clock.advance(16 * MS)
    assert report_from_tracker(tr.stats()).findings[0].id == "input_pipeline.multi_process"
    clock = FakeClock()
    tr = track(FakeLoader(clock, [MS] + [MS // 2] * 3, num_workers=4), clock=clock)
    for _ in tr:
        clock.advance(16 * MS)  # waits are 3% of the step: below the 5% rule
    assert report_from_tracker(tr.stats()).findings == ()


def test_tracker_reads_device_marks_lazily_and_never_waits_in_the_loop() -> None:
    clock = FakeClock()
    dev = FakeDevice(per_step_ns=10 * MS)
    tr = StepTracker(FakeLoader(clock, [MS] * 5), device_timer=dev, clock=clock)
    for i, _ in enumerate(tr):
        clock.advance(10 * MS)
        dev.reached = 2 * i  # the device lags: it has passed the marks of earlier steps only
    assert dev.calls and not any(dev.calls)  # the hot path only asked without waiting
    in_loop = [s.device_ns for s in tr.stats(wait=False).steps]
    assert in_loop[0] == 10 * MS and in_loop[-1] is None
    st = tr.stats()  # after the loop: waits for the rest
    assert all(s.device_ns == 10 * MS for s in st.steps) and st.device_timing
    r = report_from_tracker(st)
    assert r.utilization.busy_ns == 4 * 10 * MS  # device time, not host time
    assert r.idle_by_cause_ns[C.INPUT_PIPELINE.key] == 4 * MS  # the 1 ms waits
    assert r.idle_by_cause_ns[C.UNTRACED_HOST.key] == 0
    assert r.source.devices == ("fake:0",)


def test_tracker_fails_open_with_one_warning() -> None:
    clock = FakeClock()

    class Broken(FakeDevice):
        def mark(self) -> int:
            if self.n >= 3:
                raise RuntimeError("device lost")
            return super().mark()

    tr = StepTracker(FakeLoader(clock, [MS] * 6), device_timer=Broken(MS), clock=clock)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        batches = [b for b in tr]
    assert len(batches) == 6  # the loop went on
    assert tr.broken
    ours = [w for w in ws if "whyidle.track stopped measuring" in str(w.message)]
    assert len(ours) == 1 and "device lost" in str(ours[0].message)
    st = tr.stats()
    assert 1 <= len(st.steps) < 6 and any("stopped measuring" in n for n in st.notes)


def test_tracker_does_not_swallow_loader_errors_and_closes_on_break() -> None:
    def bad() -> Iterator[int]:
        yield 1
        raise ValueError("corrupt sample")

    tr = track(bad())
    with pytest.raises(ValueError, match="corrupt sample"):
        for _ in tr:
            pass
    clock = FakeClock()
    tr2 = track(FakeLoader(clock, [MS] * 10), clock=clock)
    for i, _ in enumerate(tr2):
        clock.advance(5 * MS)
        if i == 2:
            break
    assert [s.duration_ns for s in tr2.stats().steps] == [6 * MS] * 3


def test_tracker_does_not_keep_the_loader_alive() -> None:
    """No reference cycle: a DataLoader's worker processes end with the loop, not at a GC pass."""
    import gc
    import weakref

    gc.disable()
    try:
        clock = FakeClock()
        loader = FakeLoader(clock, [MS] * 3)
        ref = weakref.ref(loader)
        tr = track(loader, clock=clock)
        for _ in tr:
            with tr.copy():
                clock.advance(MS)
        del tr, loader
        assert ref() is None
    finally:
        gc.enable()


def test_explicit_form_data_copy_step() -> None:
    clock = FakeClock()
    tr: StepTracker[Any] = track(clock=clock, batch_size=16)
    for _ in range(3):
        with tr.data():
            clock.advance(4 * MS)
        with tr.copy():
            clock.advance(MS)
        clock.advance(5 * MS)
        tr.step()
    st = tr.stats()
    assert [(s.duration_ns, s.data_wait_ns, s.copy_ns, s.samples) for s in st.steps] == [(10 * MS, 4 * MS, MS, 16)] * 3
    with pytest.raises(TypeError, match="no loader"):
        iter(tr).__next__()


def test_batch_samples_reads_the_leading_dimension() -> None:
    np = pytest.importorskip("numpy")
    assert batch_samples(np.zeros((7, 3))) == 7
    assert batch_samples((np.zeros((5, 2)), np.zeros(5))) == 5
    assert batch_samples({"x": np.zeros((4, 1)), "y": [1, 2]}) == 4
    assert batch_samples([1, 2, 3]) == 3
    assert batch_samples([[1], object()]) is None
    assert batch_samples(np.float64(3.0)) is None


# -- tracker with real torch on CPU -----------------------------------------------------------
torch = pytest.importorskip("torch")


def _train(tracked: bool, steps: int = 6) -> list[float]:
    from whyidle.lab.job import run_job, spec_for

    spec = replace(spec_for("none", "cpu", steps=steps), width=128)
    return run_job(spec, tracker=tracked).losses


def test_tracker_does_not_change_results_bitwise() -> None:
    a, b = _train(False), _train(True)
    assert len(a) == 6
    assert a == b  # float equality of every loss: bitwise the same arithmetic


def test_tracker_on_a_real_dataloader() -> None:
    ds = torch.utils.data.TensorDataset(torch.randn(96, 8), torch.randint(0, 2, (96,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=0)
    tr = whyidle.track(loader, device="cpu")  # a CPU model: host timing even where a GPU is present
    assert len(tr) == 3
    model = torch.nn.Linear(8, 2)
    for x, y in tr:
        with tr.copy():
            x = x.to("cpu")
        torch.nn.functional.cross_entropy(model(x), y).backward()
    st = tr.stats()
    assert [s.samples for s in st.steps] == [32, 32, 32]
    assert st.loader.num_workers == 0 and st.loader.kind == "DataLoader" and st.loader.batch_size == 32
    r = tr.report()
    assert isinstance(r, whyidle.Report)
    assert r.source.format == "whyidle.track" and not st.device_timing
    d = r.to_dict()
    assert d["extra"]["tracker"]["loader"]["num_workers"] == 0
    assert len(d["extra"]["tracker"]["steps"]) == 3


# -- profiler handler ---------------------------------------------------------------------------
def test_schedule_skips_the_cold_start() -> None:
    from torch.profiler import ProfilerAction

    sched = whyidle.schedule()
    actions = [sched(i) for i in range(11)]
    assert actions[:5] == [ProfilerAction.NONE] * 5
    assert actions[5:7] == [ProfilerAction.WARMUP] * 2
    assert actions[7:9] == [ProfilerAction.RECORD] * 2
    assert actions[9] == ProfilerAction.RECORD_AND_SAVE
    with pytest.raises(ValueError, match="active > 0"):
        whyidle.schedule(active=0)


def test_handler_saves_gzipped_trace_and_reports(tmp_path: Path) -> None:
    out = io.StringIO()
    h = whyidle.handler(tmp_path / "runs", "worker0", stream=out)
    model = torch.nn.Linear(16, 4)
    x = torch.randn(8, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=whyidle.schedule(wait=1, warmup=1, active=2), on_trace_ready=h) as prof:
        for _ in range(4):
            model(x).sum().backward()
            prof.step()
    assert len(h.paths) == 1 and len(h.reports) == 1
    trace = h.paths[0]
    assert trace.name.startswith("worker0.") and trace.name.endswith(".pt.trace.json.gz")
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    assert any(str(e.get("name", "")).startswith("ProfilerStep#") for e in doc["traceEvents"])
    stem = str(trace)[: -len(".pt.trace.json.gz")]
    assert json.loads(Path(stem + ".whyidle.json").read_text())["schema_version"]
    assert "whyidle" in Path(stem + ".whyidle.txt").read_text()
    assert f"trace saved to {trace}" in out.getvalue()
    # a CPU-only trace holds no device events, and the report says so rather than inventing any
    assert h.reports[0].no_device_activity
    assert h.reports[0].window.steps == (2, 3)


def test_handler_never_raises_into_training(tmp_path: Path) -> None:
    class BadProf:
        def export_chrome_trace(self, path: str) -> None:
            raise OSError("disk full")

    h = whyidle.handler(tmp_path)
    with pytest.warns(RuntimeWarning, match="disk full"):
        h(BadProf())
    h2 = whyidle.handler(tmp_path, raise_errors=True)
    with pytest.raises(OSError):
        h2(BadProf())
    with pytest.raises(ValueError, match="report="):
        whyidle.handler(tmp_path, report="loud")


def test_profile_steps_returns_the_report() -> None:
    calls = []
    model = torch.nn.Linear(8, 2)

    def step() -> None:
        calls.append(1)
        model(torch.randn(4, 8)).sum().backward()

    r = whyidle.profile_steps(step, n=2, wait=0, warmup=1)
    assert isinstance(r, whyidle.Report) and len(calls) == 3
    assert r.source.format == "kineto" and r.window.steps == (1, 2)
    with pytest.raises(ValueError):
        whyidle.profile_steps(step, n=0)


# -- sync finder --------------------------------------------------------------------------------
class FakeSyncMode:
    def __init__(self) -> None:
        self.mode: int | str = 0
        self.history: list[int | str] = []

    def available(self) -> tuple[bool, str]:
        return True, ""

    def get(self) -> int | str:
        return self.mode

    def set(self, mode: int | str) -> None:
        self.mode = mode
        self.history.append(mode)


def _item() -> None:  # stands in for a synchronising op: the warning points at its caller
    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)


def test_sync_finder_counts_by_python_line() -> None:
    mode = FakeSyncMode()
    with pytest.warns(DeprecationWarning, match="unrelated"), sync_finder(mode) as found:
        for _ in range(5):
            _item()  # line A: every step
            if True:
                _item(); _item()  # line B: twice per step  # noqa: E702
        warnings.warn("an unrelated warning", DeprecationWarning)
    assert mode.history == ["warn", 0] and mode.mode == 0  # restored
    assert [(s.where.split(":")[0], s.count) for s in found.sites] == [("test_capture.py", 10), ("test_capture.py", 5)]
    a = found.sites[1]
    assert a.code == "_item()  # line A: every step"
    text = found.summary(steps=5)
    assert "2 line(s) synchronise" in text and "15 syncs in 5 steps" in text
    assert f"{a.where}  _item()  # line A: every step  5x (every step)" in text
    assert "(2.0 per step)" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_sync_finder_on_cpu_says_it_needs_cuda() -> None:
    ran = False
    with pytest.warns(RuntimeWarning, match="needs CUDA"):
        with whyidle.sync_finder() as found:
            ran = True
    assert ran and not found.available and "needs CUDA" in found.summary()
    assert SyncFinder(True).summary() == "sync finder: no implicit host synchronisation in this block"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: PyTorch's sync debug mode only fires on CUDA synchronisations")
def test_sync_finder_on_cuda_finds_item() -> None:  # pragma: no cover - GPU only
    x = torch.ones(4, device="cuda")
    with whyidle.sync_finder() as found:
        for _ in range(3):
            x.sum().item()
    assert found.sites and found.sites[0].count == 3 and "item()" in found.sites[0].code


# -- watch ----------------------------------------------------------------------------------------
def test_watch_with_fakes_writes_a_readable_counter_file(tmp_path: Path) -> None:
    utils = [0, 95, 97, 2, 1, 96, 99, 0, 0, 98, 0]
    t = [0.0]
    wall = [1_700_000_000_000_000_000]

    def sleep(s: float) -> None:
        t[0] += s
        wall[0] += int(s * 1e9)

    res = watch(
        ["train"],
        0.25,
        probes=lambda pid: ([FakeGpuProbe(utils), FakeHostProbe()], [], {"0": {"name": "Fake GPU"}}),
        popen=lambda cmd: FakeProc(polls=10, rc=3),
        clock=lambda: t[0],
        wall_ns=lambda: wall[0],
        sleep=sleep,
    )
    assert res.returncode == 3
    assert len(res.rows) == 22 and res.duration_s == pytest.approx(2.5)
    text = summarize(res, ["train"])
    joined = "\n".join(text)
    assert "exited with status 3" in joined and "11 samples" in joined
    assert "GPU 0 (Fake GPU)" in joined
    assert "3 bursts (median 0.50 s) separated by 2 pauses (median 0.50 s)" in joined
    assert "the CPUs are saturated" in joined  # 190% of 2 cores
    path = tmp_path / "run.counters.csv"
    path.write_text(to_counter_file(res, ["train"]))
    from whyidle.sources.counters import load_counters

    log = load_counters(path)
    assert log.source_format == "whyidle counters" and log.clock == "epoch"
    assert set(log.gpu_ids) == {"0"} and log.get("host", "host_cpu_pct") is not None and log.gpus["0"]["name"] == "Fake GPU"
    util = log.get("0", "gpu_util_pct")
    assert util is not None and list(util.value) == utils
    assert log.interval_ns == 250_000_000
    assert log.get("host", "host_cpu_pct") is not None


def test_runs_splits_bursts_and_pauses() -> None:
    flags = [False, True, True, False, True, False, False]
    times = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert runs(flags, times) == ([2.0, 1.0], [1.0])  # leading and trailing idle are not pauses
    assert runs([], []) == ([], [])


def test_watch_probe_failure_is_a_note_not_a_crash() -> None:
    class Dies:
        name = "nvml"

        def sample(self) -> list[tuple[str, dict[str, float]]]:
            raise RuntimeError("GPU fell off the bus")

    res = watch(["x"], 0.1, probes=lambda pid: ([Dies()], [], {}), popen=lambda cmd: FakeProc(2, 0), sleep=lambda s: None)
    assert res.returncode == 0 and res.rows == []
    assert any("GPU fell off the bus" in n for n in res.notes)
    assert "nothing was sampled" in "\n".join(summarize(res, ["x"]))
    empty = WatchResult(0, [Row(1, "host", {"host_cpu_pct": 0.0, "host_rss_mib": 1.0})], cpu_count=1)
    assert "process tree" in "\n".join(summarize(empty, ["x"]))


def test_watch_command_exit_status_is_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.csv"
    rc = main(["watch", "-o", str(out), "--interval", "0.05", "--", sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(5)"])
    assert rc == 5
    err = capsys.readouterr().err
    assert "exited with status 5" in err
    if "psutil" in sys.modules or _has("psutil"):
        assert out.read_text().startswith("# whyidle counters v1\n")
    assert main(["watch", "--", "no-such-command-whyidle"]) == 127
    assert main(["watch"]) == 2


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def test_watch_without_drivers_says_so() -> None:
    from whyidle.capture.watch import default_probes

    probes, notes, gpus = default_probes(__import__("os").getpid())
    if not _has("pynvml"):
        assert any("pip install 'whyidle[nvml]'" in n for n in notes)
    elif not gpus:
        assert any("no NVIDIA driver" in n or "no GPU" in n for n in notes)
    if _has("psutil"):
        assert any(p.name == "process tree" for p in probes)


# -- public API -------------------------------------------------------------------------------------
def test_import_whyidle_does_not_import_torch() -> None:
    code = "import sys, whyidle; whyidle.track; whyidle.sync_finder; whyidle.handler; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert {"track", "schedule", "handler", "profile_steps", "sync_finder"} <= set(whyidle.__all__)
    assert "track" in dir(whyidle)
    with pytest.raises(AttributeError):
        whyidle.no_such_thing  # noqa: B018


def _fake_pynvml(fail_init: bool = False) -> Any:
    import types

    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class Util:
        gpu, memory = 87, 41

    class Mem:
        used = 3 * 2**30

    class Pci:
        busId = "00000000:07:00.0"

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def power(h: int) -> int:
        if h == 1:
            raise NVMLError("Not Supported")
        return 312_500

    nv.NVMLError = NVMLError  # type: ignore[attr-defined]
    nv.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1  # type: ignore[attr-defined]
    nv.nvmlInit = init  # type: ignore[attr-defined]
    nv.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    nv.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    nv.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H200"  # type: ignore[attr-defined]
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    nv.nvmlDeviceGetPciInfo = lambda h: Pci()  # type: ignore[attr-defined]
    nv.nvmlDeviceGetUtilizationRates = lambda h: Util()  # type: ignore[attr-defined]
    nv.nvmlDeviceGetMemoryInfo = lambda h: Mem()  # type: ignore[attr-defined]
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1980  # type: ignore[attr-defined]
    nv.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    nv.nvmlDeviceGetPcieThroughput = lambda h, c: 2048 if c == 0 else 4096  # type: ignore[attr-defined]
    return nv


def test_nvml_probe_reads_every_counter_and_leaves_unsupported_ones_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    from whyidle.capture.watch import NvmlProbe

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    p = NvmlProbe()
    assert p.info()["0"] == {"name": "NVIDIA H200", "uuid": "GPU-0", "pci_bus_id": "00000000:07:00.0"}
    (g0, v0), (g1, v1) = p.sample()
    assert g0 == "0" and v0 == {
        "gpu_util_pct": 87.0,
        "mem_util_pct": 41.0,
        "mem_used_mib": 3072.0,
        "sm_clock_mhz": 1980.0,
        "power_w": 312.5,
        "pcie_tx_bytes_per_s": 2048 * 1024.0,  # NVML reports KB/s
        "pcie_rx_bytes_per_s": 4096 * 1024.0,
    }
    assert g1 == "1" and "power_w" not in v1 and v1["gpu_util_pct"] == 87.0
    res = WatchResult(0, [Row(1_000, g, v) for g, v in p.sample()], gpus=p.info())
    from whyidle.sources.counters import parse_counters

    log = parse_counters(to_counter_file(res).encode(), "x.csv")
    pw = log.get("1", "power_w")
    assert log.gpus["1"]["name"] == "NVIDIA H200" and (pw is None or bool(np_isnan(pw.value[0])))


def np_isnan(v: float) -> bool:
    return v != v


def test_no_driver_is_a_note_and_the_process_is_still_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    from whyidle.capture.watch import default_probes

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=True))
    probes, notes, gpus = default_probes(__import__("os").getpid())
    assert gpus == {} and any("no NVIDIA driver answered" in n and "Driver Not Loaded" in n for n in notes)
    if _has("psutil"):
        assert [p.name for p in probes] == ["process tree"]
        (series, values), = probes[0].sample()
        assert series == "host" and values["host_rss_mib"] > 0
