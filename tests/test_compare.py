"""whyidle compare: deltas, verdict, CI gate; saved JSON reports read back exactly.

First end to end: the real pair resnet50_num_workers_0 -> resnet50_num_workers_4 (the same
ResNet-50 job on a V100 with DataLoader workers turned on).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import whyidle
from whyidle.analyses.links import link_launches
from whyidle.analyses.names import name_times
from whyidle.cli import main
from whyidle.config import Config
from whyidle.pipeline import analyse, report_from
from whyidle.errors import UsageError
from whyidle.findings.saved import load_report, looks_like_report, report_from_dict
from whyidle.lab.synthetic import training_trace, write_trace
from whyidle.render.json import render_json, report_to_dict
from whyidle.comparison.analysis import Change, compare_reports, parse_regression

from tlbuild import TL, US


def _side(path: Path | whyidle.Timeline):  # type: ignore[no-untyped-def]
    tl = path if isinstance(path, whyidle.Timeline) else whyidle.load(path)
    a = analyse(tl)
    return report_from(a, Config()), name_times(tl, link_launches(tl), a.window)


# -- the real pair ---------------------------------------------------------------------------------


def test_resnet_workers_0_to_4(resnet0: Path, resnet4: Path) -> None:
    (b, nb), (a, na) = _side(resnet0), _side(resnet4)
    c = compare_reports(b, a, nb, na)
    assert c.basis == "per step"
    assert c.verdict == "input starvation removed: \u221258 ms per step; the largest remaining wait is launch overhead, 26 ms per step"
    ip = c.idle_by_cause_ns["starvation/input_pipeline"]
    assert ip.before == pytest.approx(58.73e6, rel=1e-3) and ip.after == pytest.approx(1.18e6, rel=1e-2)
    assert c.step_time_ns.before == pytest.approx(177.6e6, rel=1e-3) and c.step_time_ns.after == pytest.approx(141.1e6, rel=1e-3)
    assert c.samples_per_s.before == pytest.approx(180.2, rel=1e-3) and c.samples_per_s.after == pytest.approx(226.8, rel=1e-3)
    assert c.throughput_basis == "samples/s" and c.regression == pytest.approx(1 - 226.8 / 180.2, abs=1e-3)
    assert c.busy_fraction.delta == pytest.approx(0.159, abs=1e-3)
    # The single-process DataLoader op is the op that changed most: 69 ms per step -> gone.
    top = c.ops[0]
    assert top.name == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" and top.after_ns == 0
    assert top.before_ns == pytest.approx(69.3e6, rel=1e-3)
    assert len(c.kernels) == 10 and all(abs(x.delta_ns) >= abs(c.kernels[-1].delta_ns) for x in c.kernels)
    # Reversed, the same change is a regression and the verdict says what grew.
    r = compare_reports(a, b, na, nb)
    assert r.verdict.startswith("input starvation grew: +58 ms per step")
    assert r.regression == pytest.approx(1 - 180.2 / 226.8, abs=1e-3)


def test_cli_compare_and_gate(resnet0: Path, resnet4: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["compare", str(resnet0), str(resnet4), "--max-regression", "5%"]) == 0
    out = capsys.readouterr().out
    assert "Verdict: input starvation removed" in out and "samples/s" in out
    assert main(["compare", str(resnet4), str(resnet0), "--max-regression", "5%"]) == 1
    captured = capsys.readouterr()
    assert "gate failed: throughput (samples/s) fell 20.6%" in captured.err
    assert main(["compare", str(resnet4), str(resnet0), "--max-regression", "25%", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"].startswith("input starvation grew") and d["regression"] == pytest.approx(0.205, abs=1e-3)
    assert d["ops"][0]["name"].startswith("enumerate(DataLoader)")
    out_file = tmp_path / "cmp.json"
    assert main(["compare", str(resnet0), str(resnet4), "-o", str(out_file)]) == 0
    assert json.loads(out_file.read_text())["basis"] == "per step"


def test_saved_reports_compare_like_their_traces(resnet0: Path, resnet4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rb, ra = tmp_path / "before.json", tmp_path / "after.json"
    assert main(["diagnose", str(resnet0), "-o", str(rb)]) == 0
    assert main(["diagnose", str(resnet4), "-o", str(ra)]) == 0
    capsys.readouterr()
    assert main(["compare", str(rb), str(ra), "--json"]) == 0
    from_reports = json.loads(capsys.readouterr().out)
    assert main(["compare", str(resnet0), str(ra), "--json"]) == 0  # a trace against a saved report
    mixed = json.loads(capsys.readouterr().out)
    (b, nb), (a, na) = _side(resnet0), _side(resnet4)
    from_traces = compare_reports(b, a, nb, na).to_dict()
    for d in (from_reports, mixed):  # a saved report holds the per-name times: nothing is lost
        assert d["verdict"] == from_traces["verdict"]
        assert d["idle_by_cause_ns"] == from_traces["idle_by_cause_ns"]
        assert d["kernels"] == from_traces["kernels"] != [] and d["ops"] == from_traces["ops"] and d["names_note"] == ""
    assert whyidle.compare(rb, ra).to_dict() == from_traces  # the public API, from either


# -- saved reports ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flaw", ["starvation", "sync", "inference_idle", "fp32"])
def test_report_json_round_trips_exactly(flaw: str, tmp_path: Path) -> None:
    if flaw == "fp32":
        from whyidle.lab.synthetic import Sim

        sim = Sim(device_name="NVIDIA A100", compute_capability=(8, 0))
        with sim.step(1):
            with sim.op("aten::mm"):
                for _ in range(5):
                    sim.launch("volta_sgemm_128x64_nn", 2000)
            with sim.op("Optimizer.step#SGD.step"):
                sim.launch("k", 10)
        sim.t = sim.dev_free + 10
        doc = sim.trace()
    else:
        doc = training_trace(flaw)
    r = whyidle.diagnose(write_trace(doc, tmp_path / "t.json"))
    d = report_to_dict(r)
    back = report_from_dict(json.loads(json.dumps(d)))
    assert report_to_dict(back) == d
    saved = tmp_path / "r.json"
    saved.write_text(render_json(r))
    assert looks_like_report(saved.read_bytes()[:512])
    assert report_to_dict(load_report(saved)) == d


def test_resnet_report_round_trips(resnet0: Path) -> None:
    d = report_to_dict(whyidle.diagnose(resnet0))
    assert report_to_dict(report_from_dict(d)) == d


def test_bad_saved_reports_fail_clearly(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text('{"schema_version": "2.0"}')
    with pytest.raises(whyidle.TraceFormatError, match="schema 2.0; this whyidle reads schema 1.x"):
        load_report(p)
    p.write_text('{"schema_version": "1.0", "source": {}}')
    with pytest.raises(whyidle.TraceFormatError, match="without the field window"):
        load_report(p)
    assert main(["compare", str(p), str(p)]) == 2
    good = json.loads(whyidle.diagnose(write_trace(training_trace("starvation"), tmp_path / "t.json")).render("json", columns=True))
    breakages = [
        ("start_ns", lambda g: g["start_ns"].pop(), "has 309 values, expected 310"),
        ("next_work", lambda g: g["next_work"].__setitem__(0, 10**6), "points past the string table"),
        ("thread", lambda g: g["thread"].__setitem__(0, 99), "points past the lanes"),
        ("causes_ns", lambda g: g["causes_ns"].__setitem__("starvation/teleport", [0] * 310), "does not know"),
        ("end_ns", lambda g: g["end_ns"].__setitem__(0, "x"), "not a list of integers"),
        ("host_end_ns", lambda g: g["host_end_ns"].__setitem__(0, 2**62), "out of range"),
    ]
    assert good["gap_columns"]["count"] == 310
    for _key, breaks, message in breakages:
        d = json.loads(json.dumps(good))
        breaks(d["gap_columns"])
        p.write_text(json.dumps(d))
        with pytest.raises(whyidle.TraceFormatError, match=message):
            load_report(p)
    d = json.loads(json.dumps(good))
    d["activity"][0]["compute"]["end_ns"][0] = d["activity"][0]["compute"]["start_ns"][0]
    p.write_text(json.dumps(d))
    with pytest.raises(whyidle.TraceFormatError, match="sorted list of disjoint intervals"):
        load_report(p)


# -- exact comparisons on timelines built in code -------------------------------------------------


def _loader_job(loader_us: float, steps: int = 2) -> whyidle.Timeline:
    """Per step of 1000 us: the loader, then one kernel launched after it, running to the step end.

    device  ..... idle (input pipeline: loader_us + 5 launch tail) .....|████ kernel ████|
    host    [ DataLoader.__next__ 0..loader_us ][launch]"""
    t = TL()
    t.host("Optimizer.step#SGD.step", -50, -40)
    t.work("k0", -30, 0, launch_at=-40)
    for s in range(steps):
        base = s * 1000.0
        t.step(s + 1, base, base + 1000)
        t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base, base + loader_us)
        t.work("gemm", base + loader_us + 5, base + 1000, launch_at=base + loader_us)
    return t.build()


def test_exact_per_step_deltas_and_verdict() -> None:
    (b, nb), (a, na) = _side(_loader_job(600)), _side(_loader_job(100))
    c = compare_reports(b, a, nb, na)
    ip = c.idle_by_cause_ns["starvation/input_pipeline"]
    assert (ip.before, ip.after) == (605 * US, 105 * US)
    assert c.verdict == "input starvation reduced: \u2212500 us per step; the largest remaining wait is input starvation, 105 us per step"
    (op,) = [x for x in c.ops if "DataLoader" in x.name]
    assert (op.before_ns, op.after_ns) == (600 * US, 100 * US)
    (k,) = c.kernels
    assert (k.name, k.before_ns, k.after_ns) == ("gemm", 395 * US, 895 * US)
    assert c.step_time_ns.delta == 0 and c.regression == pytest.approx(0.0)
    import msgspec

    old = msgspec.structs.replace(_side(_loader_job(0.001))[0], name_times=None)  # as saved before name_times
    removed = compare_reports(b, old)
    assert removed.verdict.startswith("input starvation removed: \u2212")
    assert "per-name times from both runs" in removed.names_note and removed.kernels == ()


def test_no_change_verdict() -> None:
    b = _side(_loader_job(300))[0]
    assert compare_reports(b, b).verdict.startswith("no idle cause changed by more than")


def test_change_arithmetic() -> None:
    assert Change(200.0, 150.0).delta == -50.0 and Change(200.0, 150.0).relative == -0.25
    assert Change(None, 1.0).delta is None and Change(0.0, 1.0).relative is None


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0", 0.0)])
def test_parse_regression(text: str, value: float) -> None:
    assert parse_regression(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "-1%", "fast", ""])
def test_parse_regression_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_regression(text)


@pytest.mark.parametrize(
    "source",
    [
        Path(__file__).parent / "data" / "h200" / "watch_bursty_matmul.counters.csv",
        Path(__file__).parent / "data" / "h200" / "lab_h2d_cuda.pt.trace.json.gz",
        Path(__file__).parent / "data" / "h200" / "serving_queue_wait.pt.trace.json.gz",
    ],
    ids=lambda p: p.name.split(".")[0],
)
def test_a_saved_report_is_the_same_diagnosis(source: Path, tmp_path: Path) -> None:
    """Saved and loaded back, a diagnosis renders every text output the same (the counter
    section of a counter log included) and compares as its trace does."""
    r = whyidle.diagnose(source)
    saved = tmp_path / "r.json"
    r.save(saved, columns=True)  # the full form: every gap and the busy intervals
    back = whyidle.load_report(saved)
    for fmt in ("json", "terminal", "html"):
        assert back.render(fmt) == r.render(fmt), fmt
    assert back.render("json", columns=True) == r.render("json", columns=True)
    if r.gap_columns is not None:
        assert back.render("perfetto") == r.render("perfetto")
    assert whyidle.compare(back, r).to_dict() == whyidle.compare(r, r).to_dict()
    # the default, summary form: the same JSON and terminal report, and the same comparison
    r.save(saved)
    summary = whyidle.load_report(saved)
    assert summary.gap_columns is None and summary.render("json") == r.render("json") and str(summary) == str(r)
    assert whyidle.compare(summary, r).to_dict() == whyidle.compare(r, r).to_dict()


def test_compare_shows_mfu_and_the_kernel_time_split(resnet0: Path, resnet4: Path) -> None:
    """Issue 26: compare shows the useful work inside busy time before and after."""
    from whyidle.comparison.analysis import compare_reports
    from whyidle.comparison.render import render_text

    before, after = whyidle.diagnose(resnet0), whyidle.diagnose(resnet4)
    assert before.work is not None and after.work is not None
    c = compare_reports(before, after)
    assert c.mfu.before == before.work.mfu and c.mfu.after == after.work.mfu
    assert set(c.kernel_split) == {"near_roofline", "compute_slow", "memory_bound", "unmodelled"}
    assert abs(sum(ch.before or 0 for ch in c.kernel_split.values()) + (before.work.unrated_ns / before.work.kernel_ns) - 1) < 1e-9
    text = render_text(c)
    assert "MFU (model FLOPs / peak)" in text and "kernel time near-roofline" in text
    assert c.to_dict()["mfu"]["before"] == before.work.mfu
