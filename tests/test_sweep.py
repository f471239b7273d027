"""whyidle sweep without torch: the search and plateau rules with a fake runner (exact trial
sequences), the steady-state rule with a fake clock, the quality guard with losses built here,
the runners with a fake launcher, the cache, the renderers and the command line's usage errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from whyidle.cli import main
from whyidle.config import SweepConfig
from whyidle.sweep.report import SWEEP_SCHEMA, render_sweep_html, render_sweep_json, render_sweep_terminal, series_of
from whyidle.sweep.cache import CachedRunner
from whyidle.sweep.child import Request, is_oom
from whyidle.sweep.fakes import FakeClock, FakeLauncher, FakeRunner
from whyidle.sweep.guard import check_guard
from whyidle.sweep.measure import is_steady, measure_workload, percentile
from whyidle.sweep.runner import STEPS_ENV, CommandRunner, Exit, FunctionRunner, format_command, measure_records
from whyidle.sweep.search import Space, levers_for_findings, plateaued, run_sweep
from whyidle.sweep.trial import Trial, TrialResult

CFG = SweepConfig()
STEPS = msgspec.structs.replace(CFG, window_min_ns=0)  # windows of exactly window_steps steps
H200 = Path(__file__).parent / "data" / "h200" / "measured.json"


def batches(runner: FakeRunner) -> list[int]:
    return [t.batch_size for t in runner.calls]


# -- the plateau rule and the batch search ------------------------------------------------------


def test_plateau_rule_compares_the_best_of_the_last_tries_with_the_one_before() -> None:
    assert not plateaued([100, 200], CFG)  # too few tries
    assert not plateaued([100, 200, 400], CFG)
    assert not plateaued([200, 400, 410, 421], CFG)  # 421 >= 400 * 1.05 = 420
    assert plateaued([200, 400, 410, 419], CFG)
    assert plateaued([400, 390, 380], CFG)  # falling is a plateau too


def test_batch_search_doubles_until_the_plateau_then_chooses_the_knee() -> None:
    rates = {8: 100.0, 16: 200.0, 32: 400.0, 64: 410.0, 128: 415.0, 256: 420.0}
    r = FakeRunner(lambda t: rates[t.batch_size])
    sw = run_sweep(Space(batch_lo=8, batch_hi=1024), r)
    assert batches(r) == [8, 16, 32, 64, 128]
    assert sw.batch.plateau and sw.batch.best == 128
    assert sw.batch.chosen == 32  # the smallest batch within 5% of 415
    assert sw.best is not None and sw.best.trial.batch_size == 32
    assert sw.baseline is not None and sw.baseline.trial.batch_size == 8


def test_batch_search_bisects_the_memory_edge() -> None:
    r = FakeRunner(lambda t: t.batch_size * 10.0 if t.batch_size <= 350 else None)
    sw = run_sweep(Space(batch_lo=8, batch_hi=4096), r)
    assert batches(r) == [8, 16, 32, 64, 128, 256, 512, 384, 320]
    assert sw.batch.edge == 512 and sw.batch.edge_status == "oom" and not sw.batch.plateau
    assert sw.batch.chosen == 320
    assert [e.decision for e in sw.entries][-3:] == ["oom: the edge of the batch search", "bisecting the memory edge: oom", "bisecting the memory edge: fits; chosen batch size"]


def test_a_crash_ends_the_batch_search_without_bisecting() -> None:
    def rate(t: Trial) -> float | TrialResult:
        if t.batch_size == 64:
            return TrialResult(trial=t, status="error", message="ValueError: boom")
        return float(t.batch_size)

    r = FakeRunner(rate)
    sw = run_sweep(Space(batch_lo=8, batch_hi=1024), r)
    assert batches(r) == [8, 16, 32, 64]
    assert sw.batch.edge == 64 and sw.batch.edge_status == "error" and sw.batch.chosen == 32


def test_no_successful_trial_recommends_nothing() -> None:
    r = FakeRunner(lambda t: TrialResult(trial=t, status="killed", message="killed by SIGKILL"))
    sw = run_sweep(Space(batch_lo=8, batch_hi=64, levers={"precision": ["fp32", "bf16"]}), r)
    assert batches(r) == [8] and sw.best is None and sw.notes


def test_the_h200_batch_sweep_has_no_plateau_up_to_8192() -> None:
    # the lab MLP on an NVIDIA H200 (tests/data/h200/measured.json): every doubling gained > 5%
    rows = json.loads(H200.read_text())["sweep"]["rows"]
    rates = {row["batch_size"]: row["samples_per_s"] for row in rows}
    r = FakeRunner(lambda t: rates[t.batch_size])
    sw = run_sweep(Space(batch_lo=256, batch_hi=8192), r)
    assert batches(r) == [256, 512, 1024, 2048, 4096, 8192]
    assert not sw.batch.plateau and sw.batch.chosen == 8192
    assert sw.best is not None and sw.best.samples_per_s == pytest.approx(824583.2754219265)


# -- levers -------------------------------------------------------------------------------------


def lever_rate(t: Trial) -> float:
    base = {0: 100.0, 2: 200.0, 4: 205.0}[t.num_workers] * (t.batch_size / 64)
    return base * (1.5 if t.precision == "bf16" else 1.0)


def test_levers_are_tried_at_the_best_batch_and_kept_only_when_they_help() -> None:
    r = FakeRunner(lever_rate, losses=lambda t: [2.0, 1.8, 1.6])
    space = Space(batch_lo=64, batch_hi=64, levers={"num_workers": [0, 2, 4], "precision": ["fp32", "bf16"]})
    sw = run_sweep(space, r)
    assert [(t.batch_size, t.num_workers, t.precision) for t in r.calls] == [(64, 0, "fp32"), (64, 2, "fp32"), (64, 4, "fp32"), (64, 2, "bf16")]
    assert [e.kept for e in sw.entries] == [True, True, False, True]  # the chosen batch, then each lever kept
    assert sw.entries[1].decision == "kept: +100.0% samples/s"
    assert sw.entries[2].decision == "not kept: +2.5% samples/s (needs +5%)"
    guard = sw.entries[3].guard
    assert guard is not None and guard.passed and guard.max_rel_dev == 0.0
    assert sw.best is not None and (sw.best.trial.num_workers, sw.best.trial.precision) == (2, "bf16")


def test_a_faster_lever_that_breaks_the_quality_guard_is_never_recommended() -> None:
    def losses(t: Trial) -> list[float]:
        return [2.0, 1.8, 1.6] if t.precision == "fp32" else [2.0, 1.8, 1.9]  # 18.75% off at step 2

    r = FakeRunner(lever_rate, losses=losses)
    sw = run_sweep(Space(batch_lo=64, batch_hi=64, levers={"precision": ["fp32", "bf16"]}), r)
    e = sw.entries[-1]
    assert e.guard is not None and not e.guard.passed and e.guard.worst_step == 2
    assert e.guard.max_rel_dev == pytest.approx(0.1875)
    assert not e.kept and e.decision.startswith("fails the quality guard")
    assert sw.best is not None and sw.best.trial.precision == "fp32"


def test_the_guard_runs_the_fp32_baseline_when_the_sweep_has_none() -> None:
    r = FakeRunner(lever_rate, losses=lambda t: [1.0, 1.0])
    space = Space(batch_lo=64, batch_hi=64, levers={"precision": ["bf16"], "compile": ["off", "eager"]})
    sw = run_sweep(space, r)
    assert [(t.precision, t.compile) for t in r.calls] == [("bf16", "off"), ("bf16", "eager"), ("fp32", "off")]
    assert [e.stage for e in sw.entries] == ["batch_size", "compile", "guard baseline"]


def test_accumulation_holds_the_effective_batch() -> None:
    r = FakeRunner(lambda t: 1000.0 / t.accumulation)
    sw = run_sweep(Space(batch_lo=64, batch_hi=64, levers={"accumulation": [1, 2, 4, 3]}), r)
    assert [(t.batch_size, t.accumulation) for t in r.calls] == [(64, 1), (32, 2), (16, 4)]  # 3 does not divide 64
    assert all(t.effective_batch == 64 for t in r.calls)
    assert sw.best is not None and sw.best.trial.accumulation == 1


def test_checkpointing_is_retried_at_the_batch_that_ran_out_of_memory() -> None:
    def rate(t: Trial) -> float | None:
        limit = 1024 if t.checkpointing else 256
        return t.batch_size * (8.0 if t.checkpointing else 10.0) if t.batch_size <= limit else None

    r = FakeRunner(rate)
    sw = run_sweep(Space(batch_lo=64, batch_hi=4096, levers={"checkpointing": [False, True]}), r)
    assert [(t.batch_size, t.checkpointing) for t in r.calls] == [(64, False), (128, False), (256, False), (512, False), (384, False), (320, False), (256, True), (512, True)]
    assert sw.best is not None and (sw.best.trial.batch_size, sw.best.trial.checkpointing) == (512, True)
    assert sw.entries[-1].stage == "checkpointing+batch" and sw.entries[-1].decision == "kept: +60.0% samples/s"


def test_a_report_puts_the_levers_its_findings_name_first() -> None:
    assert levers_for_findings(["input_pipeline.single_process", "fp32_math", "host_sync"]) == ["num_workers", "prefetch_factor", "persistent_workers", "precision"]
    r = FakeRunner(lever_rate)
    order = ["num_workers", "batch_size", "precision"]
    run_sweep(Space(batch_lo=64, batch_hi=128, levers={"num_workers": [0, 2]}, order=order), r)
    assert [(t.batch_size, t.num_workers) for t in r.calls] == [(64, 0), (64, 2), (128, 2)]


# -- the steady-state rule and measuring ----------------------------------------------------------


def test_steady_rule_needs_the_last_windows_within_the_tolerance() -> None:
    assert not is_steady([100.0, 100.0], CFG)
    assert is_steady([50.0, 100.0, 105.0, 96.0], CFG)  # (105 - 96) / 100 = 9%
    assert not is_steady([100.0, 112.0, 100.0], CFG)  # 12% of the median 100
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([5, 1, 3, 2, 4], 95) == 5 and percentile([], 50) is None


def test_measure_excludes_warmup_and_stops_once_steady() -> None:
    clock = FakeClock()
    calls = []

    def step(batch: Any) -> float:
        calls.append(batch)
        clock.sleep(1.0 if len(calls) <= 2 else 0.010)  # warm-up (compilation) is slow
        return 1.0

    def loader() -> Any:
        for i in range(1000):
            clock.sleep(0.002)  # 2 ms data wait per batch
            yield [i] * 32

    m = measure_workload(step, loader(), 32, warmup=2, max_steps=100, budget_ns=10**12, cfg=STEPS, clock=clock)
    assert m.steady and m.steps == 15 and m.warmup_steps == 2
    assert m.window_rates == pytest.approx([32 / 0.012] * 3)  # 12 ms a step: 10 compute + 2 data
    s = m.summary()
    assert s["step_ns_p50"] == 12_000_000 and s["data_wait_share"] == pytest.approx(2 / 12)
    assert s["warmup_ns"] == 2_004_000_000 and len(m.losses) == 17  # two 1 s steps and two 2 ms waits


def test_measure_stops_at_the_step_limit_unsteady() -> None:
    clock = FakeClock()
    n = [0]

    def step(batch: Any) -> None:
        n[0] += 1
        clock.sleep(0.01 * (1 + n[0] % 2 * (n[0] // 5)))  # ever more uneven

    m = measure_workload(step, iter([[0]] * 100), None, warmup=0, max_steps=12, budget_ns=10**12, cfg=STEPS, clock=clock)
    assert not m.steady and m.capped and m.steps == 15 and len(m.window_rates) == 3  # past 12: three windows first


def test_measure_records_applies_the_same_rules_to_streamed_steps() -> None:
    rows = [[i * 10_000_000, (i + 1) * 10_000_000, 1_000_000, 0, 16] for i in range(40)]
    m = measure_records(rows, warmup=5, max_steps=100, cfg=STEPS)
    assert m.steady and m.steps == 15 and m.window_rates == pytest.approx([1600.0] * 3)
    assert m.summary()["data_wait_share"] == pytest.approx(0.1)
    assert measure_records(rows[:5], warmup=5, max_steps=100, cfg=STEPS).window_rates == []
    # with the default 200 ms minimum, 10 ms steps make windows of 20 steps
    rows = [[i * 10_000_000, (i + 1) * 10_000_000, 0, 0, 16] for i in range(100)]
    m = measure_records(rows, warmup=5, max_steps=100, cfg=CFG)
    assert m.steady and m.steps == 60 and len(m.window_rates) == 3


def test_windows_last_at_least_the_minimum_time() -> None:
    clock = FakeClock()

    def step(batch: Any) -> None:
        clock.sleep(0.001)

    m = measure_workload(step, iter([[0]] * 10_000), None, warmup=0, max_steps=10_000, budget_ns=10**12, cfg=CFG, clock=clock)
    assert m.steady and m.steps == 600 and m.window_rates == pytest.approx([1000.0] * 3)  # 3 windows of 200 steps


# -- the quality guard ----------------------------------------------------------------------------


def result(**kw: Any) -> TrialResult:
    return TrialResult(trial=Trial(batch_size=8), status="ok", samples_per_s=1.0, **kw)


def test_guard_max_relative_deviation_and_nonfinite_losses() -> None:
    g = check_guard([2.0, 1.0, 0.5], result(losses=[2.0, 1.02, 0.52]), CFG)
    assert g.passed and g.checked and g.worst_step == 2 and g.max_rel_dev == pytest.approx(0.04)
    g = check_guard([2.0, 1.0, 0.5], result(losses=[2.0, 1.0, 0.53]), CFG)
    assert not g.passed and g.max_rel_dev == pytest.approx(0.06)
    g = check_guard([2.0, 1.0], result(losses=[2.0, math.nan]), CFG)
    assert not g.passed and g.nonfinite_losses == 1 and "NaN/inf" in g.message
    g = check_guard([2.0], result(losses=[], scaler_skipped_steps=3), CFG)
    assert not g.checked and g.passed and g.message == "not checked: step() returned no loss" and g.scaler_skipped_steps == 3
    g = check_guard([2.0, 1.0], result(losses=[2.0, 1.0], scaler_skipped_steps=2), CFG)
    assert g.passed and "GradScaler skipped 2 step(s)" in g.message


# -- runners with a fake launcher -----------------------------------------------------------------


def test_function_runner_reads_the_result_the_trial_process_wrote() -> None:
    clock = FakeClock()
    trial = Trial(batch_size=32)

    def write(argv: Any, env: dict[str, str]) -> None:
        req = msgspec.json.decode(Path(argv[-2]).read_bytes(), type=Request)
        assert req.trial == trial and req.warmup == 3 and req.max_steps == 20 and req.budget_ns == 8 * 10**9
        Path(argv[-1]).write_bytes(msgspec.json.encode(TrialResult(trial=trial, status="ok", samples_per_s=123.0, peak_host_bytes=10)))

    launcher = FakeLauncher(clock, runs_for_s=2.0, exit=Exit(0, None, 2048), on_start=write)
    runner = FunctionRunner("spec.py:make", warmup=3, max_steps=20, time_limit_s=10, launcher=launcher, clock=clock, sleep=clock.sleep)
    res = runner.run(trial)
    assert res.status == "ok" and res.samples_per_s == 123.0 and res.peak_host_bytes == 2048
    assert res.wall_ns == pytest.approx(2e9, abs=6e7)
    assert launcher.started[0][1:3] == ["-m", "whyidle.sweep.child"]


def test_function_runner_stops_a_trial_past_its_time_limit() -> None:
    clock = FakeClock()
    launcher = FakeLauncher(clock, runs_for_s=1000.0, exit=Exit(0, None, None))
    res = FunctionRunner("spec.py:make", warmup=1, max_steps=5, time_limit_s=5, launcher=launcher, clock=clock, sleep=clock.sleep).run(Trial(batch_size=8))
    assert res.status == "timeout" and launcher.processes[0].stopped
    assert clock.now_ns == pytest.approx(5e9, abs=1e8)


def test_function_runner_records_a_killed_process() -> None:
    clock = FakeClock()
    launcher = FakeLauncher(clock, runs_for_s=1.0, exit=Exit(None, 9, 4096))
    res = FunctionRunner("spec.py:make", warmup=1, max_steps=5, time_limit_s=5, launcher=launcher, clock=clock, sleep=clock.sleep).run(Trial(batch_size=8))
    assert res.status == "killed" and res.message.startswith("killed by SIGKILL (the kernel's out-of-memory killer")


def stream_steps(n: int, step_ms: float = 10.0, samples: int = 8) -> Any:
    def write(argv: Any, env: dict[str, str]) -> None:
        lines = [json.dumps([int(i * step_ms * 1e6), int((i + 1) * step_ms * 1e6), 0, 0, samples]) for i in range(n)]
        Path(env[STEPS_ENV]).write_text("\n".join(lines) + "\n" + '{"peak_device_bytes": 777}\n')

    return write


def test_command_runner_fills_placeholders_and_stops_the_command_once_steady() -> None:
    clock = FakeClock()
    launcher = FakeLauncher(clock, runs_for_s=100.0, exit=Exit(0, None, 5000), on_start=stream_steps(30, step_ms=100.0))
    runner = CommandRunner(["python", "train.py", "--bs", "{batch_size}", "--amp={precision}"], warmup=2, max_steps=50, time_limit_s=60, launcher=launcher, clock=clock, sleep=clock.sleep)
    res = runner.run(Trial(batch_size=8, precision="bf16"))
    assert launcher.started == [["python", "train.py", "--bs", "8", "--amp=bf16"]]
    assert launcher.processes[0].stopped and clock.now_ns < 1e9
    assert res.status == "ok" and res.steady and res.samples_per_s == pytest.approx(80.0) and res.peak_device_bytes == 777


def test_command_runner_explains_a_command_without_the_tracker() -> None:
    clock = FakeClock()
    launcher = FakeLauncher(clock, runs_for_s=1.0, exit=Exit(0, None, None))
    res = CommandRunner(["true"], warmup=2, max_steps=10, time_limit_s=60, launcher=launcher, clock=clock, sleep=clock.sleep).run(Trial(batch_size=8))
    assert res.status == "error" and "whyidle.track(...)" in res.message and "after 0 tracked step(s)" in res.message


def test_unknown_placeholders_are_a_usage_error() -> None:
    from whyidle.errors import UsageError

    assert format_command(["x", "{effective_batch}", "{num_workers}"], Trial(batch_size=8, accumulation=2)) == ["x", "16", "0"]
    with pytest.raises(UsageError, match="unknown placeholder 'bs'"):
        format_command(["--bs", "{bs}"], Trial(batch_size=8))


def test_oom_recognition() -> None:
    assert is_oom(MemoryError()) and is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("out of memory"))


# -- the cache ------------------------------------------------------------------------------------


def test_cache_resumes_a_sweep_without_rerunning_finished_trials(tmp_path: Path) -> None:
    def rate(t: Trial) -> float | None | TrialResult:
        if t.batch_size == 64:
            return TrialResult(trial=t, status="timeout")
        return None if t.batch_size > 64 else float(t.batch_size)

    first = FakeRunner(rate)
    space = Space(batch_lo=8, batch_hi=32)
    run_sweep(space, CachedRunner(first, tmp_path / "c.jsonl", "ctx"))
    again = FakeRunner(rate)
    sw = run_sweep(space, CachedRunner(again, tmp_path / "c.jsonl", "ctx"))
    assert batches(first) == [8, 16, 32] and again.calls == []
    assert all(r.cached for r in sw.trials)
    other = FakeRunner(rate)
    run_sweep(Space(batch_lo=8, batch_hi=128), CachedRunner(other, tmp_path / "c.jsonl", "ctx"))
    assert batches(other) == [64]  # the timeout is not cached; it is the edge again
    changed = FakeRunner(rate)
    run_sweep(space, CachedRunner(changed, tmp_path / "c.jsonl", "other settings"))
    assert batches(changed) == [8, 16, 32]


def test_a_broken_cache_file_is_one_clear_error(tmp_path: Path) -> None:
    from whyidle.errors import InputError

    p = tmp_path / "c.jsonl"
    p.write_text("not json\n")
    with pytest.raises(InputError, match="line 1 is not a sweep cache record"):
        CachedRunner(FakeRunner(lambda t: 1.0), p, "ctx")


# -- renderers ------------------------------------------------------------------------------------


def lever_sweep() -> Any:
    r = FakeRunner(lambda t: float(min(t.batch_size, 64)) * (2 if t.precision == "bf16" else 1), losses=lambda t: [1.0])
    return run_sweep(Space(batch_lo=16, batch_hi=512, levers={"precision": ["fp32", "bf16"]}), r)


def test_json_output_names_the_plateau_and_the_winning_configuration_as_code() -> None:
    sw = lever_sweep()
    doc = json.loads(render_sweep_json(sw))
    assert doc["schema"] == SWEEP_SCHEMA
    assert [t["trial"]["batch_size"] for t in doc["trials"]] == [16, 32, 64, 128, 256, 64]
    assert doc["batch"]["plateau"] and doc["batch"]["chosen"] == 64
    assert doc["best"]["trial"] == {
        "batch_size": 64, "num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None,
        "precision": "bf16", "compile": "off", "accumulation": 1, "checkpointing": False, "seed": 0, "device": "auto",
    }  # fmt: skip
    assert doc["best"]["label"] == "batch 64, precision=bf16" and doc["best"]["message"] == ""
    assert "torch.autocast(device_type, dtype=torch.bfloat16)" in doc["best"]["code"]
    assert doc["speedup_vs_baseline"] == pytest.approx(8.0)  # 128 samples/s vs 16 at the first trial
    assert doc["rules"]["plateau_gain"] == 0.05 and doc["trials"][-1]["guard"]["passed"]


def test_terminal_and_html_outputs() -> None:
    sw = lever_sweep()
    text = render_sweep_terminal(sw, width=200)
    assert "recommended: batch 64, precision=bf16 -> 128 samples/s (8.00x the first configuration)" in text
    assert "plateau" in text and "batch_size = 64" in text
    page = render_sweep_html(sw)
    assert page.count("<polyline") == 1  # one line per lever setting with more than one batch
    assert set(series_of(sw)) == {"baseline levers", "precision=bf16"}
    assert "<script" not in page and "default-src 'none'" in page


def test_html_escapes_messages() -> None:
    r = FakeRunner(lambda t: TrialResult(trial=t, status="error", message="<img src=x onerror=alert(1)>") if t.batch_size > 8 else 5.0)
    page = render_sweep_html(run_sweep(Space(batch_lo=8, batch_hi=64), r))
    assert "<img src=x" not in page and "&lt;img src=x" in page


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["sweep"], "no TARGET"),
        (["sweep", "spec.py:make", "--batch-size", "64..8"], "--batch-size '64..8'"),
        (["sweep", "spec.py:make", "--batch-size", "x"], "expected LO..HI"),
        (["sweep", "spec.py:make", "--precision", "fp8"], "'fp8' is not one of fp32, tf32, bf16, fp16"),
        (["sweep", "spec.py:make", "--workers", "two"], "'two' is not a whole number"),
        (["sweep", "nowhere.py:make"], "nowhere.py: no such file"),
        (["sweep", "--", "python", "t.py", "--bs", "{bs}"], "unknown placeholder 'bs'"),
        (["sweep", "spec.py:make", "-o", "x.pdf"], "cannot tell the output format"),
        (["sweep", "spec.py:make", "--from-report", "spec.py"], "--from-report spec.py: not JSON"),
        (["sweep", "spec.py:make", "--from-report", "list.json"], "no 'findings' list"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.py").write_text("def make(cfg): raise SystemExit('must not run')\n")
    (tmp_path / "list.json").write_text("[]")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_tracker_streams_its_steps_when_a_sweep_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whyidle.capture.tracker import track
    from whyidle.sweep.runner import read_steps

    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv(STEPS_ENV, str(path))
    ticks = iter(range(0, 10**12, 50_000_000))  # 50 ms per clock read
    tr = track([[1, 2, 3]] * 6, device="cpu", clock=lambda: next(ticks))
    for _ in tr:
        pass
    assert tr._sink is not None
    tr._sink.flush()  # what the exit handler does
    rows, peak = read_steps(path)
    assert [r[4] for r in rows] == [3] * 6 and peak is None
    assert [r[1] - r[0] for r in rows] == [100_000_000] * 6  # two clock reads per step
    assert rows == [[s.start_ns, s.end_ns, s.data_wait_ns, s.copy_ns, s.samples] for s in tr.stats().steps]
    monkeypatch.delenv(STEPS_ENV)
    assert track([1], device="cpu")._sink is None


def test_the_sweep_says_when_each_trial_starts_and_how_it_ended() -> None:
    events: list[str] = []
    r = FakeRunner(lambda t: 100.0 if t.batch_size == 8 else None)
    run_sweep(Space(batch_lo=8, batch_hi=16), r, on_start=lambda stage, t: events.append(f"start {t.batch_size}"), on_entry=lambda e: events.append(f"{e.result.status} {e.result.trial.batch_size}"))
    assert events == ["start 8", "ok 8", "start 16", "oom 16", "start 12", "oom 12", "start 10", "oom 10"]  # then two bisections
