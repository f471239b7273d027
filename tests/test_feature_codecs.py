"""The features' results saved and read back through their field tables: a comparison, a sweep, a
batching result and a request-log diagnosis each save to JSON, load back with
``whyidle.load_report`` into the same typed result, and save again to the same bytes; a file that
is malformed, foreign, of a newer major schema or of another kind is refused in one line naming
the file (and the field), exit status 2 through the command line."""

from __future__ import annotations

import importlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whyidle
from whyidle.cli import main
from whyidle.comparison.model import COMPARISON, Change, Comparison, NameChange, PredictionCheck
from whyidle.comparison.render import render_comparison_json
from whyidle.config import SweepConfig
from whyidle.serving.batching import BatchingResult, Candidate, Outcome
from whyidle.serving.instances import MIG_PROFILES, InstanceAdvice
from whyidle.serving.latency import LatencyProfile
from whyidle.serving.requestlog import load_requests
from whyidle.serving.requests import ServingCause, ServingDiagnosis, diagnose_requests
from whyidle.serving.report import batching_dict
from whyidle.serving.saved import BatchingReport
from whyidle.serving.simulate import Settings
from whyidle.serving.traffic import RequestStats
from whyidle.sweep.codec import SWEEP
from whyidle.sweep.guard import Guard
from whyidle.sweep.report import render_sweep_json
from whyidle.sweep.search import BatchOutcome, Entry, Space, Sweep
from whyidle.sweep.trial import COMPILE_MODES, PRECISIONS, Trial, TrialResult

DATA = Path(__file__).parent / "data" / "h200" / "run2"

text = st.text(max_size=12)
fin = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)
pos = st.floats(min_value=1, max_value=1e12, allow_nan=False)
count = st.integers(0, 2**40)


def _json_of(kind: str, result: Any) -> str:
    """The JSON each command writes for its result (compare and sweep: msgspec; batching and serving: json)."""
    if kind == "comparison":
        return render_comparison_json(result)
    if kind == "sweep":
        return render_sweep_json(result)
    if kind == "batching":
        return json.dumps(batching_dict(result.result, result.profile, result.advice), indent=1) + "\n"
    return json.dumps(result.to_dict(), indent=1) + "\n"


def _round_trip(kind: str, result: Any) -> Any:
    """Save, load with whyidle.load_report, save again: the same bytes; the loaded result."""
    saved = _json_of(kind, result)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"{kind}.json"
        p.write_text(saved)
        back = whyidle.load_report(p)
    assert _json_of(kind, back) == saved
    return back


# -- a comparison ----------------------------------------------------------------------------------

changes = st.builds(Change, st.none() | fin, st.none() | fin)
comparisons = st.builds(
    Comparison,
    before_path=text, after_path=text, basis=st.sampled_from(["per step", "per second of window"]),
    step_time_ns=changes, steps_per_s=changes, samples_per_s=changes, busy_fraction=changes, idle_ns=changes,
    idle_by_group_ns=st.dictionaries(text, changes, max_size=3), idle_by_cause_ns=st.dictionaries(text, changes, max_size=3),
    kernels=st.lists(st.builds(NameChange, text, fin, fin), max_size=3).map(tuple),
    ops=st.lists(st.builds(NameChange, text, fin, fin), max_size=3).map(tuple),
    names_note=text, throughput_basis=text, regression=st.none() | fin, verdict=text, notes=st.lists(text, max_size=3).map(tuple),
    prediction=st.none() | st.builds(PredictionCheck, text, text, fin, fin, fin, fin),
    mfu=changes, kernel_split=st.dictionaries(text, changes, max_size=4),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(comparisons)
def test_a_comparison_saves_loads_and_saves_identically(c: Comparison) -> None:
    back = _round_trip("comparison", c)
    assert isinstance(back, whyidle.Comparison)
    assert back == c


def test_a_real_comparison_loads_back(tmp_path: Path) -> None:
    """The lab's H2D flaw before and after its fix (H200 traces): compare -o, load, the same comparison."""
    out = tmp_path / "diff.json"
    before, after = DATA / "lab_h2d_cuda.pt.trace.json.gz", DATA / "lab_h2d_cuda_fixed.pt.trace.json.gz"
    assert main(["compare", str(before), str(after), "-o", str(out)]) == 0
    c = whyidle.compare(before, after)
    back = whyidle.load_report(out)
    assert back == c and out.read_text() == render_comparison_json(back)
    assert json.loads(out.read_text())["kind"] == "comparison"


# -- a sweep ---------------------------------------------------------------------------------------

trials = st.builds(
    Trial,
    batch_size=st.integers(1, 4096), num_workers=st.integers(0, 16), pin_memory=st.booleans(), persistent_workers=st.booleans(),
    prefetch_factor=st.none() | st.integers(1, 8), precision=st.sampled_from(PRECISIONS), compile=st.sampled_from(COMPILE_MODES),
    accumulation=st.integers(1, 8), checkpointing=st.booleans(), seed=st.integers(0, 99), device=st.sampled_from(["auto", "cpu", "cuda"]),
)  # fmt: skip
results = st.builds(
    TrialResult,
    trial=trials, status=st.sampled_from(["ok", "oom", "error", "killed", "timeout"]), message=text,
    samples_per_s=st.none() | pos, samples_per_s_min=st.none() | pos, samples_per_s_max=st.none() | pos, steady=st.booleans(),
    warmup_steps=count, measured_steps=count, setup_ns=count, warmup_ns=count, measure_ns=count,
    step_ns_p50=st.none() | count, step_ns_p95=st.none() | count, data_wait_share=st.none() | fin,
    peak_device_bytes=st.none() | count, peak_host_bytes=st.none() | count, losses=st.lists(fin, max_size=4),
    nonfinite_losses=count, scaler_skipped_steps=st.none() | count, graph_breaks=st.none() | count,
    graph_break_reasons=st.lists(text, max_size=2), compiled_graphs=st.none() | count, recompilations=st.none() | count,
    recompile_reasons=st.lists(text, max_size=2), wall_ns=count, cached=st.booleans(),
)  # fmt: skip
guards = st.builds(
    Guard, checked=st.booleans(), passed=st.booleans(), message=text, steps=count, max_rel_dev=st.none() | fin,
    worst_step=st.none() | count, nonfinite_losses=count, scaler_skipped_steps=st.none() | count,
)  # fmt: skip
lever_values = st.lists(st.integers(0, 8) | st.booleans() | st.sampled_from(PRECISIONS), min_size=1, max_size=3)
sweeps = st.builds(
    Sweep,
    space=st.builds(
        Space, batch_lo=st.integers(1, 64), batch_hi=st.integers(64, 8192),
        levers=st.dictionaries(st.sampled_from(["num_workers", "pin_memory", "precision"]), lever_values, max_size=3),
        seed=st.integers(0, 9), device=st.sampled_from(["auto", "cpu"]),
    ),
    rules=st.builds(SweepConfig, keep_gain=st.floats(0, 1), guard_steps=st.integers(0, 100), plateau_tries=st.integers(1, 5)),
    entries=st.lists(st.builds(Entry, stage=text, result=results, decision=text, kept=st.booleans(), guard=st.none() | guards), max_size=3),
    batch=st.builds(
        BatchOutcome, chosen=st.none() | st.integers(1, 4096), best=st.none() | st.integers(1, 4096), plateau=st.booleans(),
        edge=st.none() | st.integers(1, 4096), edge_status=st.none() | st.sampled_from(["oom", "killed", "error"]), rule=text,
    ),
    best=st.none() | results, baseline=st.none() | results, notes=st.lists(text, max_size=2),
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sweeps)
def test_a_sweep_saves_loads_and_saves_identically(sw: Sweep) -> None:
    back = _round_trip("sweep", sw)
    assert isinstance(back, whyidle.Sweep)
    assert back == sw


def test_the_h200_sweep_saved_before_its_reader_loads_and_saves_identically() -> None:
    """tests/data/h200/run2/sweep_h200.json: written by `whyidle sweep` on an H200 before the sweep had a codec."""
    path = DATA / "sweep_h200.json"
    sw = whyidle.load_report(path)
    assert isinstance(sw, Sweep)
    assert render_sweep_json(sw) == path.read_text()
    assert sw.best is not None and sw.best.trial.precision == "bf16" and sw.batch.chosen == 8192


# -- a batching result -----------------------------------------------------------------------------


@st.composite
def profiles(draw: Callable[..., Any]) -> LatencyProfile:
    sizes = tuple(sorted(draw(st.sets(st.integers(1, 512), min_size=1, max_size=5))))
    med = tuple(draw(st.lists(pos, min_size=len(sizes), max_size=len(sizes))))
    p90 = draw(st.none() | st.lists(pos, min_size=len(sizes), max_size=len(sizes)).map(tuple))
    smp = draw(st.none() | st.lists(st.lists(pos, min_size=1, max_size=3).map(tuple), min_size=len(sizes), max_size=len(sizes)).map(tuple))
    return LatencyProfile(
        sizes, med, p90, source=draw(text), device=draw(text), memory_bytes=draw(st.none() | count), samples_ns=smp,
        notes=tuple(draw(st.lists(text, max_size=2))),
    )  # fmt: skip


outcomes = st.builds(Outcome, fin, fin, fin, fin, fin, fin, fin, fin)
candidates = st.builds(
    Candidate,
    settings=st.builds(Settings, st.integers(1, 256), st.integers(0, 10**9), st.integers(1, 8), st.lists(st.integers(1, 256), max_size=3).map(tuple)),
    capacity_per_s=fin, at_rate=st.none() | outcomes,
)  # fmt: skip
batching_results = st.builds(
    BatchingResult,
    percentile=st.floats(1, 99.9), slo_ns=st.integers(1, 10**10), traffic_source=text, burstiness=fin, rate_per_s=st.none() | pos,
    requests_per_run=count, candidates=st.lists(candidates, max_size=3).map(tuple), best=st.none() | candidates, baseline=candidates,
    frontier=st.lists(candidates, max_size=3).map(tuple), simulations=count, seconds=fin, jitter=text,
)  # fmt: skip
advice = st.builds(
    InstanceAdvice,
    verdict=st.sampled_from(["demand", "instances_may_help", "device_bound", "unknown"]), lines=st.lists(text, max_size=2).map(tuple),
    single_capacity_per_s=fin, peak_curve_per_s=fin, instances_that_fit=st.none() | st.integers(0, 64), mig_gpu=st.none() | text,
    mig_fits=st.lists(st.sampled_from(MIG_PROFILES["H200-141GB"]), max_size=2).map(tuple), on_cpu=st.booleans(),
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.builds(BatchingReport, batching_results, profiles(), st.none() | advice))
def test_a_batching_result_saves_loads_and_saves_identically(r: BatchingReport) -> None:
    back = _round_trip("batching", r)
    assert isinstance(back, whyidle.BatchingReport)
    assert back == r


def test_a_batching_result_saved_before_it_was_versioned_loads() -> None:
    """tests/data/h200/run2/batching.json (an H200 curve, before `schema_version`, the curve's
    `notes` and the advice's `on_cpu`): read as 1.0; saved again it gains only those fields."""
    path = DATA / "batching.json"
    r = whyidle.load_report(path)
    assert isinstance(r, BatchingReport) and r.profile.notes == ()
    again, before = r.to_dict(), json.loads(path.read_text())
    assert [k for k in again if k not in before] == ["schema_version", "tool"]
    assert again["latency"].pop("notes") == [] and again["instances"].pop("on_cpu") is False
    assert {k: v for k, v in again.items() if k in before} == before


# -- a request-log diagnosis -----------------------------------------------------------------------

@st.composite
def stats(draw: Callable[..., Any]) -> RequestStats:
    """The log's figures; those that need start times all given or all null, as a log has them or not."""
    started = draw(st.booleans())
    f, c = (fin, count) if started else (st.none(), st.none())
    return RequestStats(
        requests=draw(count), window_ns=draw(count), rate_per_s=draw(fin), burstiness=draw(fin), peak_rate_per_s=draw(fin),
        peak_window_ns=draw(count), concurrency_mean=draw(fin), concurrency_max=draw(count), littles_law_concurrency=draw(fin),
        queue_depth_mean=draw(f), queue_depth_max=draw(c), latency_p50_ns=draw(fin), latency_p90_ns=draw(fin), latency_p95_ns=draw(fin),
        latency_p99_ns=draw(fin), wait_p50_ns=draw(f), wait_p99_ns=draw(f), batches=draw(c),
        batch_sizes=draw(st.dictionaries(st.integers(1, 512), count, max_size=4)), mean_batch=draw(f), server_busy_ns=draw(c),
        idle_no_request_ns=draw(count), idle_requests_waiting_ns=draw(c), left_behind_batches=draw(c), left_behind_busy_ns=draw(c),
        arrivals_to_idle_server=draw(f),
    )  # fmt: skip


causes = st.builds(ServingCause, text, text, count, fin, text, text)
diagnoses = st.builds(
    ServingDiagnosis, stats(), st.none() | fin, text, st.lists(causes, max_size=3).map(tuple), st.none() | causes,
    st.lists(text, max_size=2).map(tuple), text,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(diagnoses)
def test_a_serving_diagnosis_saves_loads_and_saves_identically(d: ServingDiagnosis) -> None:
    back = _round_trip("serving", d)
    assert isinstance(back, whyidle.ServingDiagnosis)
    assert back == d


def test_a_serving_diagnosis_of_one_request_keeps_its_undefined_rates(tmp_path: Path) -> None:
    """One arrival time: no rate, burstiness or peak (NaN), written null (JSON has no NaN) and read back as NaN."""
    log = tmp_path / "one.jsonl"
    log.write_text('{"arrival_ms": 1, "start_ms": 1.5, "finish_ms": 3, "batch_id": 0}\n')
    out = tmp_path / "d.json"
    assert main(["serving", str(log), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["stats"]["rate_per_s"] is None
    back = whyidle.load_report(out)
    assert isinstance(back, ServingDiagnosis) and math.isnan(back.stats.rate_per_s) and math.isnan(back.stats.burstiness)
    assert back.stats.requests == 1 and back.tuner_command == diagnose_requests(load_requests(log)).tuner_command
    assert json.dumps(back.to_dict(), indent=1) + "\n" == out.read_text()


# -- what is refused -------------------------------------------------------------------------------


def _a_log(tmp: Path) -> Path:
    p = tmp / "log.jsonl"
    p.write_text("".join(json.dumps({"arrival_ms": i, "start_ms": i + 0.5, "finish_ms": i + 2, "batch_id": i}) + "\n" for i in range(5)))
    return p


def _write(tmp_path: Path, d: Any, name: str = "r.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


def _refusal(p: Path) -> str:
    with pytest.raises(whyidle.TraceFormatError) as exc:
        whyidle.load_report(p)
    msg = str(exc.value)
    assert "\n" not in msg and str(p) in msg
    return msg


def _good_comparison() -> dict[str, Any]:
    c = Comparison("a", "b", "per step", *(Change(1.0, 2.0),) * 5, {}, {}, (), (), "", "steps/s", 0.1, "v", ())
    return COMPARISON.write(c)


def test_a_malformed_field_is_named_by_its_path(tmp_path: Path) -> None:
    d = _good_comparison()
    d["idle_ns"]["before"] = "lots"
    assert "field idle_ns.before is malformed" in _refusal(_write(tmp_path, d))
    d = _good_comparison()
    d["verdict"] = 5  # a type only the check of the built result sees
    assert "field verdict is malformed: expected str, found int 5" in _refusal(_write(tmp_path, d))
    d = _good_comparison()
    del d["basis"]
    assert "without the field basis" in _refusal(_write(tmp_path, d))
    sw = json.loads((DATA / "sweep_h200.json").read_text())
    sw["trials"][1]["samples_per_s"] = "fast"
    assert "sweep whose field trials[1]" in _refusal(_write(tmp_path, sw))
    sw = json.loads((DATA / "sweep_h200.json").read_text())
    sw["trials"][0]["trial"]["batch_size"] = 0  # a type the model allows, a value no sweep writes
    assert "sweep whose field trials[0].trial has a batch size or accumulation below 1" in _refusal(_write(tmp_path, sw))
    b = json.loads((DATA / "batching.json").read_text())
    b["latency"]["rows"][0]["latency_ns_median"] = 0
    assert "batching result whose field latency.rows[0].latency_ns_median is malformed (expected a median latency of 1 ns" in _refusal(_write(tmp_path, b))
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"arrival_ms": i, "start_ms": i + 0.5, "finish_ms": i + 2, "batch_id": i}) + "\n" for i in range(5)))
    s = diagnose_requests(load_requests(log)).to_dict()
    s["stats"]["batches"] = None  # a log has start times or not: its figures are all given or all null
    assert "field stats.batches is null beside figures that need start times too" in _refusal(_write(tmp_path, s))


def test_a_newer_major_schema_or_none_is_refused(tmp_path: Path) -> None:
    d = _good_comparison()
    d["schema_version"] = "2.0"
    assert "comparison of schema 2.0; this whyidle reads schema 1.x" in _refusal(_write(tmp_path, d))
    del d["schema_version"]
    assert "not a whyidle comparison (no schema version)" in _refusal(_write(tmp_path, d))
    sw = json.loads((DATA / "sweep_h200.json").read_text())
    sw["schema"] = "whyidle.sweep/2.1"
    assert "sweep of schema 2.1" in _refusal(_write(tmp_path, sw))


def test_a_foreign_kind_is_refused(tmp_path: Path) -> None:
    assert "not a whyidle report (kind 'recipe'" in _refusal(_write(tmp_path, {"kind": "recipe", "eggs": 2}))
    assert "which no imported package reads" in _refusal(_write(tmp_path, {"schema_version": "1.0", "kind": "recipe"}))


@pytest.mark.parametrize("kind", ["comparison", "batching", "serving"])
def test_a_feature_result_given_to_compare_is_refused_in_one_line(tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``whyidle compare`` reads saved reports: a feature's result there is exit 2 with one line naming it."""
    if kind == "comparison":
        p = _write(tmp_path, _good_comparison())
    elif kind == "batching":
        p = tmp_path / "b.json"
        p.write_text(json.dumps(whyidle.load_report(DATA / "batching.json").to_dict()))  # type: ignore[union-attr]
    else:
        log = tmp_path / "log.jsonl"
        log.write_text("".join(json.dumps({"arrival_ms": i, "start_ms": i + 0.5, "finish_ms": i + 2, "batch_id": i}) + "\n" for i in range(5)))
        p = tmp_path / "s.json"
        assert main(["serving", str(log), "-o", str(p)]) == 0
        capsys.readouterr()
    assert main(["compare", str(p), str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(p) in err and f"is a whyidle {kind} result" in err and "Traceback" not in err


def test_each_written_key_has_its_row_in_the_schema_doc(tmp_path: Path) -> None:
    from whyidle.commands.schema import markdown

    doc = markdown()
    sw = whyidle.load_report(DATA / "sweep_h200.json")
    for key in SWEEP.write(sw):
        assert f"| `{key}` |" in doc, key
    for key in _good_comparison():
        assert f"| `{key}` |" in doc, key
    batching = whyidle.load_report(DATA / "batching.json")
    assert isinstance(batching, BatchingReport)
    for key in batching.to_dict():
        assert f"| `{key}` |" in doc, key
    for key in diagnose_requests(load_requests(_a_log(tmp_path))).to_dict():
        assert f"| `{key}` |" in doc, key


def _render_all(r: Any) -> None:
    """Every output of a loaded result: what a malformed field must not reach."""
    from whyidle.comparison.render import render_text
    from whyidle.serving.report import batching_html, batching_text, serving_html, serving_text
    from whyidle.sweep.report import render_sweep_html, render_sweep_terminal

    if isinstance(r, Comparison):
        render_text(r), render_comparison_json(r)
    elif isinstance(r, Sweep):
        render_sweep_terminal(r), render_sweep_html(r), render_sweep_json(r)
    elif isinstance(r, BatchingReport):
        batching_text(r.result, r.profile, r.advice), batching_html(r.result, r.profile, r.advice)
    else:
        assert isinstance(r, ServingDiagnosis)
        serving_text(r), serving_html(r), json.dumps(r.to_dict())


def test_hostile_fields_are_refused_or_render(tmp_path: Path) -> None:
    """Seeded odd values (past int64, non-finite, wrong types, control characters) in each kind's
    saved JSON: either a one-line TraceFormatError naming the file, or a result every renderer takes."""
    import random

    from hostile import report_input

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"arrival_ms": i, "start_ms": i + 0.5, "finish_ms": i + 2, "batch_id": i // 2}) + "\n" for i in range(8)))
    serving = json.loads(json.dumps(diagnose_requests(load_requests(log)).to_dict()))
    docs = [_good_comparison(), json.loads((DATA / "sweep_h200.json").read_text()), json.loads((DATA / "batching.json").read_text()), serving]
    rng = random.Random(29)
    refused = loaded = 0
    for doc in docs:
        for _ in range(60):
            name, body = report_input(rng, doc)
            p = tmp_path / name
            p.write_bytes(body)
            try:
                r = whyidle.load_report(p)
            except whyidle.TraceFormatError as exc:
                assert "\n" not in str(exc) and str(p) in str(exc)
                refused += 1
                continue
            _render_all(r)
            loaded += 1
    assert refused and loaded  # both happen: the odd values are not all refused, nor all harmless


def test_a_saved_result_given_as_a_trace_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``whyidle diagnose`` on a result whyidle saved says what it is and what reads it back (it
    said "a JSON object without a 'traceEvents' list"), from the in-memory and the streaming
    readers alike; a foreign JSON object keeps the plain message."""
    from whyidle.sources.kineto_stream import parse_kineto_stream

    report = tmp_path / "report.json"
    assert main(["diagnose", str(DATA / "lab_h2d_cuda.pt.trace.json.gz"), "-o", str(report)]) == 0
    comparison = _write(tmp_path, _good_comparison(), "diff.json")
    cases = [
        (report, "is a whyidle report saved as JSON, not a profiler trace; whyidle compare takes it as a side"),
        (comparison, "is a whyidle comparison saved as JSON"),
        (DATA / "sweep_h200.json", "is a whyidle sweep saved as JSON"),
        (DATA / "batching.json", "is a whyidle batching result saved as JSON"),
        (_write(tmp_path, {"name": "not ours", "events": []}, "other.json"), "is a JSON object without a 'traceEvents' list"),
    ]
    capsys.readouterr()
    for path, says in cases:
        assert main(["diagnose", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err and str(path) in err, (path, err)
        with pytest.raises(whyidle.TraceFormatError, match=says.replace("(", r"\(").replace("'", "'")):
            parse_kineto_stream(path)


def test_the_trace_readers_name_every_saved_kind() -> None:
    """The Kineto readers name a saved result by its kind (sources/kineto.py ``_SAVED_WHAT``, a
    table kept beside them: the sources layer imports no reader of results); every kind a package
    registers a reader for must have its words there."""
    from whyidle.findings import saved
    from whyidle.sources.kineto import _SAVED_WHAT

    for package in ("comparison", "ranks", "serving", "sweep"):  # the packages that register readers
        importlib.import_module(f"whyidle.{package}.register")
    missing = set(saved._READERS) - set(_SAVED_WHAT)
    assert not missing, f"kinds with a reader but no words in whyidle.sources.kineto._SAVED_WHAT: {sorted(missing)}"
