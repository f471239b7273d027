"""Predictions checked against measured results: the ResNet-50 pair, the H200 lab pairs, the CPU lab.

The tolerances are the errors measured when these tests were written (docs/metrics.md, "What-if
predictions"), each with the reason it is as wide as it is; they are not tuned constants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import whyidle
from whyidle.config import Config
from whyidle.findings.predict import predict_from_steps, predict_lever
from whyidle.findings.saved import report_from_dict
from whyidle.sources import load

H200 = Path(__file__).parent / "data" / "h200"


def test_resnet_workers_prediction_from_the_num_workers_0_trace_alone(resnet0: Path, resnet4: Path) -> None:
    before = whyidle.diagnose(resnet0)
    top = before.findings[0]
    assert top.cause == "input_pipeline" and top.prediction is not None
    after = whyidle.diagnose(resnet4)  # the measured answer: whyidle's own mean step of the nw=4 run
    steps = after.utilization.steps
    measured = sum(s.duration_ns for s in steps) / len(steps)
    err = (top.prediction.step_ns_after - measured) / measured
    # Measured: 121.8 ms predicted vs 141.1 ms, -13.7% (118.7 ms, -15.9%, before the warm-up
    # backlog below). Step by step, predicted 126.4 116.7 116.1 125.2 114.2 132.1 against
    # 181.6 124.0 126.9 126.3 163.5 124.2: the medians differ by 4.4%. The first measured step
    # waited 36.5 ms in its pageable copy for device work its unprofiled warm-up step left; the
    # replay predicts 19.4 ms of it (its profiler-cost estimate is a lower bound: torch 1.8 spent
    # part of its per-op cost inside the records). The fifth ran its host ops up to 2x slower
    # (worker processes competing for the CPU), which the num_workers=0 trace cannot show. Both
    # make the run slower than the replay, never faster.
    assert -0.15 <= err < 0.0
    assert "behind the device work of its unprofiled warm-up step" in top.prediction.assumption
    assert "4 worker" in top.prediction.lever


def _pairs() -> dict[str, dict[str, object]]:
    pairs: dict[str, dict[str, object]] = json.loads((H200 / "measured.json").read_text())["pairs"]
    return pairs


def test_h200_starvation_pair_predicted_from_the_before_trace() -> None:
    """On the profiled basis the prediction meets the after trace; the tracker's steady state is
    faster than any profiled step because the profiler's own host cost is gone."""
    pair = _pairs()["starvation"]
    before, after = pair["before"], pair["after"]
    assert isinstance(before, dict) and isinstance(after, dict)
    p = predict_lever(load(H200 / str(before["trace"])), "input_pipeline", workers=int(after["job"]["num_workers"]))
    assert p is not None
    traced_after = whyidle.diagnose(H200 / str(after["trace"]))
    steps = sorted(s.duration_ns for s in traced_after.utilization.steps)
    # Measured: 5.13 ms predicted vs 5.11 ms median profiled step after (+0.4%). The after trace's
    # third step (31 ms) waited on a worker's start-up, so the median is the steady state.
    assert abs(p.step_ns_after - steps[1]) / steps[1] < 0.10
    # Against the tracker (no profiler): samples/s x3.64 measured (all 30 steps, worker start-up
    # included), median step x4.66. Predicted x3.65. The profiled run's host work is slower than
    # the untraced run's, so the prediction stays at or below the steady-state speed-up.
    measured_median_x = float(before["step_ns_median"]) / float(after["step_ns_median"])
    assert 1.0 < p.speedup <= measured_median_x
    assert abs(p.speedup - float(pair["speedup_samples_per_s"])) / float(pair["speedup_samples_per_s"]) < 0.15


@pytest.mark.parametrize(("flaw", "lever", "kw"), [("sync", "host_sync", {}), ("launch", "fused_optimizer", {}), ("smallbatch", "batch_size", {"batch_factor": 32.0})])
def test_h200_host_bound_pairs_are_predicted_conservatively(flaw: str, lever: str, kw: dict[str, float]) -> None:
    """These flaws' steps are host-bound, and the profiler adds host time per recorded op (the
    profiled steps were 1.37x, 1.37x and 1.89x the untraced tracker steps). The replay keeps that
    cost, so it predicts a real gain but less than was measured: sync x2.03 vs x3.92 (-48%),
    launch x1.85 vs x2.44 (-24%), smallbatch x32.0 vs x44.7 (-28%), samples/s basis."""
    pair = _pairs()[flaw]
    before = pair["before"]
    assert isinstance(before, dict)
    p = predict_lever(load(H200 / str(before["trace"])), lever, batch_size=int(before["job"]["batch_size"]), **kw)
    assert p is not None
    measured = float(pair["speedup_samples_per_s"])  # type: ignore[arg-type]
    assert p.speedup > 1.0
    assert p.speedup < measured
    assert p.speedup > 0.45 * measured


def test_untraced_estimate_lies_between_the_profiled_and_the_tracked_step() -> None:
    """The profiler-cost estimate (analyses/profcost.py) is a lower bound: removing it from the
    flawed runs' traces moves each replayed step toward the step tracker's untraced median and
    never past it. Measured (profiled -> untraced estimate vs tracker, ms): h2d 14.13 -> 13.57 vs
    10.67, launch 36.90 -> 29.86 vs 26.95, smallbatch 8.16 -> 6.75 vs 4.34, starvation 18.72 ->
    18.27 vs 15.50, sync 14.81 -> 14.08 vs 10.83."""
    import msgspec.structs

    from whyidle.analyses import whatif as W
    from whyidle.analyses.links import link_launches
    from whyidle.analyses.window import select_window
    from whyidle.findings.predict import _graph
    from whyidle.findings.settings import RuleSettings

    for flaw, pair in _pairs().items():
        before = pair["before"]
        assert isinstance(before, dict)
        if not before.get("trace") or flaw == "none":
            continue
        tl = load(H200 / str(before["trace"]))
        links = link_launches(tl)
        g, _ = _graph(tl, RuleSettings(), select_window(tl, links, Config().window), links)
        assert g is not None
        profiled = W.replay(g).mean_step_ns
        untraced = W.replay(g, msgspec.structs.replace(W.NO_EDIT, profiler_removed=True)).mean_step_ns
        tracked = float(before["step_ns_median"])
        assert tracked < untraced < profiled, (flaw, tracked, untraced, profiled)


def test_run2_lab_table_from_the_committed_traces() -> None:
    """docs/gpu-validation.md's run-2 table: each fix predicted from the committed lab trace of
    the flawed job (tests/data/lab, recorded in the same session) on the untraced basis, against
    the speed-up `whyidle lab --flaw all --fix` measured (the step tracker's median steps, so the
    prediction is the steady-state step). Measured: starvation x4.61 vs x5.20 (-11%), h2d x2.13
    vs x2.67 (-20%), sync x3.27 vs x3.54 (-7%), smallbatch x31.20 vs x37.11 (-16%), launch x1.65
    vs x1.81 (-9%). All under-predict."""
    from whyidle.lab.predict import recorded_labfix

    rows = recorded_labfix(H200 / "run2" / "labfix.json", H200.parent / "lab")
    assert sorted(r.flaw for r in rows) == ["h2d", "launch", "smallbatch", "starvation", "sync"]
    for r in rows:
        assert r.prediction is not None and r.error is not None and r.measured_speedup is not None
        assert "without the profiler" in r.prediction.assumption
        assert 1.0 < r.prediction.speedup < r.measured_speedup, r.line()
        assert r.error > -0.25, r.line()


def test_recorded_pairs_table_covers_every_pair_with_a_lever() -> None:
    from whyidle.lab.predict import recorded_pairs

    rows = recorded_pairs(H200 / "measured.json")
    assert sorted(r.flaw for r in rows) == ["h2d", "launch", "smallbatch", "starvation", "sync"]
    for r in rows:
        assert r.prediction is not None and r.error is not None
        assert r.flaw in r.line() and "predicted x" in r.line() and "measured x" in r.line()


def test_tracker_prediction_of_workers_on_two_part_steps() -> None:
    # 80 ms steps, 50 of them waiting on the loader: with 4 workers a step is max(30 + 0.11, 12.5).
    p = predict_from_steps([80_000_000] * 5, [50_000_000] * 5, "input_pipeline", Config().predictions, batch_size=128)
    assert p is not None
    assert p.step_ns_after == 30_110_000
    assert p.samples_per_s_after == pytest.approx(128 / 0.03011)
    # With one worker the loader's production rate (50 ms per batch) bounds the step.
    p1 = predict_from_steps([80_000_000] * 5, [50_000_000] * 5, "input_pipeline", Config().predictions, workers=1)
    assert p1 is not None and p1.step_ns_after == 50_000_000
    assert predict_from_steps([1], [0], "host_sync", Config().predictions) is None


def test_prediction_survives_the_saved_json_report() -> None:
    r = whyidle.diagnose(H200 / "lab_starvation_cuda.pt.trace.json.gz")
    d = r.to_dict()
    back = report_from_dict(json.loads(json.dumps(d)))
    assert back.findings[0].prediction == r.findings[0].prediction
    assert d["extra"]["critical_path"]["by_kind_ns"]["loader"] > 0


def test_cpu_lab_fix_prediction_within_25_percent() -> None:
    """The starved CPU lab run predicts its workers fix within 25%, on the median of five
    before/after pairs. One pair is not enough on a shared 2-core machine: the training thread's
    compute per step moved between 35 and 130 ms from one run to the next under other jobs' load
    (errors of single pairs measured while writing this: -20%, -5%, +7%, +9%, +18%, +50%), and
    the predicted step after the fix is that compute."""
    pytest.importorskip("torch")
    import os

    load_per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    if load_per_core > 1.0:
        # Measured at a load of 3.5 per core (other jobs' test suites): errors of -36%, -34%,
        # -33%, -9%, +61%: the machine, not the model, decided the timing.
        pytest.skip(f"the machine is oversubscribed (load {load_per_core:.1f} per core): CPU timings cannot be compared")
    from whyidle.lab.predict import run_fix

    errors = []
    for _ in range(5):
        r = run_fix("starvation", "cpu", steps=8)
        assert r.prediction is not None and r.basis == "tracker" and r.error is not None
        errors.append(r.error)
    errors.sort()
    assert abs(errors[2]) <= 0.25, errors


def test_live_demo_prints_predicted_beside_measured(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from whyidle.cli import main

    assert main(["demo", "--device", "cpu", "--steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "from the starved run alone, with DataLoader with" in out and "error " in out
    # one basis for every rate and ratio: the samples/s ratio is the median steps' (issue 25, item 6)
    rates = next(ln for ln in out.splitlines() if ln.strip().startswith("samples/s"))
    steps = next(ln for ln in out.splitlines() if ln.strip().startswith("median step"))
    b, a = float(steps.split()[2]), float(steps.split()[5])
    assert abs(float(rates.rsplit("(x", 1)[1].rstrip(")")) - b / a) < 0.02
    assert main(["demo", "--device", "cpu", "--steps", "6", "--json"]) == 0
    sp = json.loads(capsys.readouterr().out)["speedup"]
    # The 25% agreement is checked on the lab's fix above (the demo runs the same prediction).
    assert sp["predicted"] > 1.0 and sp["measured"] > 0 and sp["basis"].startswith("median")


def test_compare_checks_the_prediction_of_the_fix_applied(resnet0: Path, resnet4: Path) -> None:
    from whyidle.comparison.analysis import compare_reports

    before, after = whyidle.diagnose(resnet0), whyidle.diagnose(resnet4)
    c = compare_reports(before, after)
    pc = c.prediction
    assert pc is not None and pc.cause == "starvation/input_pipeline"
    assert pc.predicted == before.findings[0].prediction.step_ns_after  # type: ignore[union-attr]
    assert pc.measured == c.step_time_ns.after
    assert pc.error == (pc.predicted - pc.measured) / pc.measured
    assert c.to_dict()["prediction"]["applied"] == "starvation/input_pipeline"
    # Nothing fell: no fix to check.
    assert compare_reports(after, after).prediction is None


def test_html_report_draws_the_critical_path_and_the_predictions() -> None:
    from whyidle.render.html import render_html

    r = whyidle.diagnose(H200 / "lab_starvation_cuda.pt.trace.json.gz")
    page = render_html(r)
    cp = r.extra["critical_path"]
    assert f"Critical path of the median step (step {cp['step']}" in page
    bar = page.split('aria-label="critical path">', 1)[1].split("</div>", 1)[0]
    assert bar.count("<span ") == len(cp["segments"])
    assert 'title="loader: ' in bar
    assert "Predicted with DataLoader with 4 worker processes" in page


def test_lab_fix_refuses_flaws_without_a_fix_or_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from whyidle.cli import main

    assert main(["lab", "--flaw", "none", "--fix", "--device", "cpu"]) == 2
    assert "has no fix to apply" in capsys.readouterr().err
    assert main(["lab", "--flaw", "sync", "--fix", "--device", "cpu"]) == 2
    assert "needs CUDA" in capsys.readouterr().err


def test_lab_fix_json_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from whyidle.cli import main

    assert main(["lab", "--flaw", "starvation", "--fix", "--device", "cpu", "--steps", "4", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["flaw"] == "starvation" and row["basis"] == "tracker"
    assert row["predicted_speedup"] > 1.0 and row["measured_speedup"] > 0
    assert row["error"] == pytest.approx((row["predicted_speedup"] - row["measured_speedup"]) / row["measured_speedup"])
