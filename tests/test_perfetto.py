"""The Perfetto / chrome://tracing exports: the original trace plus a whyidle track (annotate), and
a trace drawn from the diagnosis alone (render_perfetto).

Checks that the annotated output is valid Chrome trace JSON holding every original event, one B/E
slice per gap named by its cause with the evidence in its arguments, flow arrows that land inside
the CPU op they name, and that whyidle reads the annotated trace to the same diagnosis; and that
the diagnosis alone, its input deleted or saved as JSON and loaded back, still draws every gap.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import whyidle
from whyidle.analyses import causes as C
from whyidle.pipeline import analyse
from whyidle.findings.labels import cause_label
from whyidle.lab.synthetic import training_trace, write_trace
from whyidle.render.json import report_to_dict
from whyidle.render.perfetto import FLOW_CATEGORY, GAP_CATEGORY, annotate, render_perfetto


def _same_diagnosis(a: whyidle.Report, b: whyidle.Report) -> None:
    da, db = report_to_dict(a), report_to_dict(b)
    da["source"].pop("path")
    db["source"].pop("path")
    assert da == db


def _export(trace: Path, tmp_path: Path, name: str = "annotated.json") -> tuple[whyidle.Report, dict[str, Any], Path]:
    r = whyidle.diagnose(trace)
    out = tmp_path / name
    out.write_bytes(annotate(trace, r, gzip=name.endswith(".gz")))
    raw = out.read_bytes()
    doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    return r, doc, out


def _by(events: list[dict[str, Any]], ph: str, cat: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ph") == ph and e.get("cat") == cat]


@pytest.mark.parametrize("flaw", ["starvation", "sync", "h2d"])
def test_one_slice_per_gap_named_by_its_cause(flaw: str, tmp_path: Path) -> None:
    trace = write_trace(training_trace(flaw), tmp_path / f"{flaw}.pt.trace.json")
    original = json.loads(trace.read_text())
    r, doc, _ = _export(trace, tmp_path)
    tl = whyidle.load(trace)
    g = analyse(tl).gaps
    events = doc["traceEvents"]
    # Every original event is still there, unchanged; the other top-level keys too.
    added = [e for e in events if e not in original["traceEvents"]]
    assert len(events) - len(added) == len(original["traceEvents"])
    assert doc["deviceProperties"] == original["deviceProperties"]
    begins, ends = _by(events, "B", GAP_CATEGORY), _by(events, "E", GAP_CATEGORY)
    assert len(begins) == len(ends) == len(g) == r.gap_count
    # Slices in order on each GPU's thread, never overlapping: B/E pairs nest trivially.
    by_tid: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for b, e in zip(begins, ends):
        assert (b["tid"], b["name"]) == (e["tid"], e["name"]) and e["ts"] >= b["ts"]
        by_tid[b["tid"]].append((b["ts"], e["ts"]))
    for spans in by_tid.values():
        assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))
    # Names, causes and times match the gaps.
    order = sorted(range(len(g)), key=lambda i: (int(g.device[i]), int(g.start_ns[i])))
    primary = g.primary
    for b, i in zip(begins, order):
        key = C.CAUSES[int(primary[i])].key
        assert b["name"] == cause_label(key) and b["args"]["cause"] == key
        assert b["args"]["idle_ns"] == int(g.dur_ns[i]) and b["args"]["start_ns"] == int(g.start_ns[i])
        assert sum(b["args"]["causes_ns"].values()) == int(g.dur_ns[i])
        assert b["ts"] == round(int(g.start_ns[i]) / 1000)
    meta = [e for e in events if e.get("ph") == "M" and e.get("pid") == begins[0]["pid"]]
    assert {e["name"] for e in meta} >= {"process_name", "thread_name"}


def test_flow_arrows_land_inside_the_explaining_op(tmp_path: Path) -> None:
    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json")
    _, doc, _ = _export(trace, tmp_path)
    events = doc["traceEvents"]
    starts, finishes = _by(events, "s", FLOW_CATEGORY), _by(events, "f", FLOW_CATEGORY)
    assert starts and len(starts) == len(finishes)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    loader = [o for o in ops if "DataLoader" in o["name"]]
    slices = _by(events, "B", GAP_CATEGORY)
    starving = [b for b in slices if b["args"]["cause"] == "starvation/input_pipeline"]
    assert len(starving) == 5 and all("DataLoader" in b["args"]["cpu_op_during"] for b in starving)
    landed_in_loader = 0
    for s, f in zip(sorted(starts, key=lambda e: e["id"]), sorted(finishes, key=lambda e: e["id"])):
        assert s["id"] == f["id"] and f["bp"] == "e"
        assert (f["pid"], f["tid"]) == (1000, 1000)  # the training thread, with the trace's own int ids
        assert any(b["ts"] <= s["ts"] <= next(e["ts"] for e in _by(events, "E", GAP_CATEGORY) if e["ts"] >= b["ts"]) for b in slices)
        if any(o["ts"] <= f["ts"] <= o["ts"] + o["dur"] for o in loader):
            landed_in_loader += 1
    assert landed_in_loader == 5


def test_annotated_trace_round_trips_through_whyidle(tmp_path: Path) -> None:
    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json.gz")
    r, doc, out = _export(trace, tmp_path, "annotated.json.gz")
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert len(whyidle.load(out)) == len(whyidle.load(trace))
    _same_diagnosis(r, whyidle.diagnose(out))
    # ... and exporting the annotated trace again adds a second track, not a corrupted one.
    again = json.loads(annotate(out, whyidle.diagnose(out)))
    assert len(_by(again["traceEvents"], "B", GAP_CATEGORY)) == 2 * r.gap_count


def test_base_time_and_bare_list_traces(tmp_path: Path) -> None:
    doc = training_trace("starvation")
    base_ns = 1_700_000_000_000_000_000
    doc["baseTimeNanoseconds"] = base_ns
    with_base = write_trace(doc, tmp_path / "base.pt.trace.json")
    r = whyidle.diagnose(with_base)
    out = json.loads(annotate(with_base, r))
    first = min(_by(out["traceEvents"], "B", GAP_CATEGORY), key=lambda e: e["ts"])
    assert first["ts"] == round((first["args"]["start_ns"] - base_ns) / 1000)
    assert first["args"]["start_ns"] > base_ns
    bare = write_trace(training_trace("starvation")["traceEvents"], tmp_path / "bare.json")
    out2 = json.loads(annotate(bare, whyidle.diagnose(bare)))
    assert isinstance(out2, list) and _by(out2, "B", GAP_CATEGORY)


def test_annotating_needs_the_original_trace(tmp_path: Path) -> None:
    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json")
    r = whyidle.diagnose(trace)
    trace.unlink()
    with pytest.raises(whyidle.InputError, match="needs the original trace"):
        annotate(trace, r)


def _gap_slices(doc: dict[str, Any]) -> list[tuple[int, str, int, int]]:
    """(GPU, cause, start_ns, idle_ns) of every gap slice of a trace, sorted."""
    return sorted((b["tid"], b["args"]["cause"], b["args"]["start_ns"], b["args"]["idle_ns"]) for b in _by(doc["traceEvents"], "B", GAP_CATEGORY))


def test_diagnosis_alone_draws_every_gap_after_the_input_is_gone(resnet0: Path, tmp_path: Path) -> None:
    """The done-when test of the lossless Diagnosis: diagnose a real trace, delete the input,
    and the Perfetto and HTML outputs still carry every gap, as the annotated trace did."""
    import shutil

    from whyidle.render.html import render_html

    copy = tmp_path / resnet0.name
    shutil.copyfile(resnet0, copy)
    r = whyidle.diagnose(copy)
    annotated = json.loads(annotate(copy, r))
    html_before = render_html(r)
    copy.unlink()
    drawn = json.loads(render_perfetto(r))
    assert len(_by(drawn["traceEvents"], "B", GAP_CATEGORY)) == r.gap_count == 8286
    assert _gap_slices(drawn) == _gap_slices(annotated)
    # the arguments of each gap slice are the annotated trace's, field for field
    assert _gap_args(drawn) == _gap_args(annotated)
    html_after = render_html(r)
    assert html_after == html_before  # the HTML never needed the file
    assert "in 8,286 gaps" in html_after and '"devices":[{"device":0' in html_after  # the strip, drawn from every gap
    # busy time: the GPU's compute slices add up to the utilisation's compute time
    busy = [e for e in drawn["traceEvents"] if e.get("cat") == "whyidle_busy" and e["name"] == "compute"]
    assert abs(sum(e["dur"] for e in busy) * 1000 - r.utilization.compute_ns) <= len(busy)
    steps = [e for e in drawn["traceEvents"] if e.get("pid") == 8_999_999 and e["ph"] == "X"]
    assert [e["name"] for e in steps] == [f"step {n}" for n in r.window.steps]
    # every flow arrow lands inside a CPU op slice of the thread it names
    ops = [e for e in drawn["traceEvents"] if e.get("cat") == "cpu_op"]
    finishes = _by(drawn["traceEvents"], "f", FLOW_CATEGORY)
    assert finishes and all(any((o["pid"], o["tid"]) == (f["pid"], f["tid"]) and o["ts"] <= f["ts"] <= o["ts"] + o["dur"] for o in ops) for f in finishes)


def _gap_args(doc: dict[str, Any]) -> list[str]:
    return sorted(json.dumps(b["args"], sort_keys=True) for b in _by(doc["traceEvents"], "B", GAP_CATEGORY))


def test_saved_report_draws_the_same_trace(tmp_path: Path) -> None:
    """A JSON report saved and loaded back draws the same Perfetto trace and HTML page."""
    from whyidle.render.html import render_html

    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json")
    r = whyidle.diagnose(trace)
    saved = tmp_path / "r.json"
    r.save(saved, columns=True)
    trace.unlink()
    back = whyidle.load_report(saved)
    assert isinstance(back, whyidle.Diagnosis)
    assert render_perfetto(back) == render_perfetto(r)
    assert render_html(back) == render_html(r)
    assert back.render("json") == r.render("json") and str(back) == str(r)


def test_cli_suffixes(tmp_path: Path) -> None:
    from whyidle.cli import main

    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json.gz")
    gz, js, fmt = tmp_path / "a.json.gz", tmp_path / "r.json", tmp_path / "p.json"
    assert main(["diagnose", str(trace), "-o", str(gz)]) == 0
    assert _by(json.loads(gzip.decompress(gz.read_bytes()))["traceEvents"], "B", GAP_CATEGORY)
    assert main(["diagnose", str(trace), "-o", str(js)]) == 0
    assert "schema_version" in json.loads(js.read_text())  # -o x.json stays the JSON report
    assert main(["diagnose", str(trace), "--format", "perfetto", "-o", str(fmt)]) == 0
    assert _by(json.loads(fmt.read_text())["traceEvents"], "B", GAP_CATEGORY)


def test_resnet_round_trip(resnet0: Path, tmp_path: Path) -> None:
    r, doc, out = _export(resnet0, tmp_path, "resnet.json.gz")
    begins = _by(doc["traceEvents"], "B", GAP_CATEGORY)
    assert len(begins) == r.gap_count == 8286
    biggest = max(begins, key=lambda b: b["args"]["idle_ns"])
    assert biggest["args"]["cause"] == "starvation/input_pipeline"
    assert "SingleProcessDataLoaderIter" in biggest["args"]["cpu_op_during"]
    assert biggest["args"]["python_line"] == "resnet50_profiler_api.py:42 in <module>"
    _same_diagnosis(r, whyidle.diagnose(out))


def _small_shared() -> list[Path]:
    from conftest import SHARED_TRACES

    if not SHARED_TRACES.exists():
        return []
    found = sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    return [p for p in found if p.stat().st_size < 1_500_000]


@pytest.mark.parametrize("path", _small_shared(), ids=lambda p: p.name[:50])
def test_every_small_shared_trace_round_trips(path: Path, tmp_path: Path) -> None:
    try:
        tl = whyidle.load(path)
        r = whyidle.diagnose(tl)
    except whyidle.WhyidleError:
        pytest.skip("whyidle does not diagnose this trace (tested in test_real_traces.py)")
    out = tmp_path / "annotated.json"
    out.write_bytes(annotate(path, r))
    doc = json.loads(out.read_bytes())
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    assert len(_by(events, "B", GAP_CATEGORY)) == r.gap_count
    _same_diagnosis(r, whyidle.diagnose(out))


def test_export_refuses_inputs_without_events(tmp_path: Path) -> None:
    from msgspec.structs import replace

    log = Path(__file__).parent / "data" / "h200" / "watch_bursty_matmul.counters.csv"
    with pytest.raises(whyidle.UnsupportedInputError, match="use -o report.html"):
        render_perfetto(whyidle.diagnose(log))
    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json")
    r = whyidle.diagnose(trace)
    other = replace(r, source=replace(r.source, format="nvidia-smi dmon"))
    with pytest.raises(whyidle.UnsupportedInputError, match="annotate"):
        annotate(trace, other)


def test_run_folder_exports_one_annotated_trace_per_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import shared_trace

    from whyidle.cli import main
    from whyidle.ranks.run import diagnose_ranks

    run = shared_trace("multirank/param__v100x8_dlrm_step12")
    m = diagnose_ranks(run, jobs=2)
    out = tmp_path / "job.json.gz"
    assert main(["diagnose", str(run), "--jobs", "2", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert not out.exists()  # one file per rank, named after it
    for e in m.ranks:
        assert e.report is not None
        f = tmp_path / f"job.rank{e.rank}.json.gz"
        assert f"whyidle: wrote one rank's annotated trace (open it in ui.perfetto.dev) to {f}" in err
        back = whyidle.diagnose(f)  # the annotated trace reads back to the rank's own diagnosis
        assert back.gap_count == e.report.gap_count and back.idle_by_cause_ns == e.report.idle_by_cause_ns
        with gzip.open(f) as fh:
            doc = json.load(fh)
        assert any(ev.get("name") == "process_name" and ev.get("args", {}).get("name", "").startswith("whyidle") for ev in doc["traceEvents"])


def test_nsys_capture_exports_a_trace_built_from_its_timeline(tmp_path: Path) -> None:
    from nsysbuild import standard_db

    db = standard_db(tmp_path / "run.sqlite", "2024.6.2.25")  # the scenario of tests/test_nsys.py
    r = whyidle.diagnose(db)
    tl = whyidle.load(db)
    doc = json.loads(annotate(tl, r))
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(tl)  # every event of the capture, once
    kernels = [e for e in complete if e["cat"] == "kernel"]
    assert len(kernels) == int((tl.kind == int(whyidle.Kind.KERNEL)).sum()) > 0
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} >= {"GPU 0", "whyidle: device idle"}
    assert len(_by(events, "B", GAP_CATEGORY)) == r.gap_count
    # every flow arrow ends on a host thread that the trace declares
    threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    ends = [(e["pid"], e["tid"]) for e in events if e["ph"] == "f"]
    assert ends and set(ends) <= threads
    assert doc["whyidle_annotation"]["built_from"] == "nsys"
    out = tmp_path / "run.json.gz"
    from whyidle.cli import main

    assert main(["diagnose", str(db), "-o", str(out)]) == 0
    with gzip.open(out) as fh:
        assert len(json.load(fh)["traceEvents"]) == len(events)


@pytest.mark.parametrize("name", ["serving_queue_wait", "lab_launch_cuda", "sync_after_each_kernel"])
def test_brief_context_is_gap_context(name: str) -> None:
    """The Perfetto track's CPU context (brief_context, bisect on lists) is gap_context's, on every gap."""
    from whyidle.analyses.context import brief_context, gap_context

    tl = whyidle.load(Path(__file__).parent / "data" / "h200" / f"{name}.pt.trace.json.gz")
    a = analyse(tl)
    assert len(a.gaps) > 100
    for i in range(len(a.gaps)):
        c = gap_context(tl, a.gaps, i, a.index)
        assert brief_context(tl, a.gaps, i, a.index) == (c.before, c.python_line, c.runtime_call), i


def test_cli_perfetto_on_stdout_is_the_annotated_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.cli import main

    trace = write_trace(training_trace("starvation"), tmp_path / "s.pt.trace.json")
    assert main(["diagnose", str(trace), "--format", "perfetto"]) == 0
    assert capsys.readouterr().out == annotate(trace, whyidle.diagnose(trace)).decode()


def test_the_renderer_registry() -> None:
    """Every format resolves to a function taking a diagnosis and the options it declares; the
    suffixes choose the formats the command line documents."""
    import inspect

    from whyidle.render import RENDERERS, format_for, render, renderer

    for fmt, entry in RENDERERS.items():
        params = inspect.signature(renderer(fmt)).parameters
        assert list(params)[0] in ("report", "diagnosis", "r") and set(entry.options) <= set(params), fmt
        assert entry.suffixes and entry.what
    names = {"r.json": "json", "r.txt": "terminal", "r.html": "html", "r.htm": "html", "t.json.gz": "perfetto", "s.png": "png", "s.svg": "svg"}
    assert {n: format_for(None, n) for n in names} == names
    with pytest.raises(whyidle.UsageError, match="unknown render option"):
        render(whyidle.diagnose(Path(__file__).parent / "data" / "lab" / "lab_starvation.pt.trace.json.gz"), "json", widht=3)
