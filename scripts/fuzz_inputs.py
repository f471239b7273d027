"""Fuzz whyidle's input surfaces with seeded hostile inputs (issues 14 and 24): every input must
give a report or one clear WhyidleError and be byte-identical afterwards; any other exception is
a bug, printed with its input saved (``--keep``).

    PYTHONPATH=src python3 scripts/fuzz_inputs.py --n 1000 --seed 1   # the nightly size: 15,000 inputs
    PYTHONPATH=src python3 scripts/fuzz_inputs.py --n 300 --budget-s 60 --families requests,triton

Families (tests/hostile.py, tests/hostile_surfaces.py): ``kineto`` (structure-aware mutations of a
Kineto trace, read by the public API, and again by the out-of-core reader with small batches: both
must agree), ``bytes`` (byte-level damage, plain and gzip), ``counters`` (nvidia-smi / dcgmi logs),
``nsys`` (Nsight exports with odd cell values), ``report`` (saved JSON reports, loaded and rendered
in every format and given to ``compare``), ``requests`` (request logs: JSON lines, JSON, CSV, gzip,
odd values and bytes), ``triton`` (Triton traces), ``latency`` (latency curves), ``parquet``
(``whyidle convert`` output with tampered metadata, columns or bytes), ``options`` (command lines
of diagnose, compare, serving and batching with odd option values), ``rocprof`` (rocprofv3 JSON
output with odd values, types, missing fields and truncations), ``xplane`` (JAX XPlane captures
with odd planes and byte damage), ``runs`` (multi-rank run folders, ``whyidle diagnose RUN_DIR``:
odd names, mixed formats, empty files, symlinks, a FIFO, unreadable files, traces of other runs;
tests/hostile_runs.py), ``results`` (the features' saved results: a comparison, a sweep, a
batching result and a request-log diagnosis with odd fields, loaded by ``whyidle.load_report``
and rendered in each of their formats), ``config`` (``--config FILE`` settings files: Config's
names with values of every type and range, misplaced or unknown names, byte damage; read, then a
trace diagnosed with the settings; tests/hostile_config.py). tests/test_fuzz.py lists the
family of every reader and fails on one without. Prints one JSON line per family: inputs run,
reports, clear errors, readers that disagreed, inputs modified, and escaped exceptions (type and
place).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))

import hostile  # noqa: E402
import hostile_config  # noqa: E402
import hostile_runs  # noqa: E402
import hostile_surfaces  # noqa: E402

import whyidle  # noqa: E402
from whyidle.errors import WhyidleError  # noqa: E402

FAMILIES = ("kineto", "bytes", "counters", "nsys", "report", "requests", "triton", "latency", "parquet", "options", "rocprof", "xplane", "runs", "results", "config")


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    last = tb[-1] if tb else None
    return f"{type(exc).__name__} at {os.path.basename(last.filename)}:{last.lineno}" if last else type(exc).__name__


def _setup(family: str, work: Path) -> dict[str, Any]:
    """What a family's inputs are made from: a good trace, report, Parquet file or command lines."""
    ctx: dict[str, Any] = {"doc": hostile.rocprof_base() if family == "rocprof" else hostile.base_trace(2)}
    t = work / "t.json"
    t.write_text(json.dumps(hostile.base_trace(3)))
    if family == "report":
        from whyidle.render.json import render_json

        ctx["report"] = json.loads(render_json(whyidle.diagnose(t)))
        (work / "good.json").write_text(json.dumps(ctx["report"]))
    elif family == "runs":
        from whyidle.render.json import render_json

        ctx["report"] = render_json(whyidle.diagnose(t)).encode()
    elif family == "results":
        ctx["results"] = _good_results(t, work)
    elif family == "parquet":
        from whyidle.sources import load
        from whyidle.sources.parquet import write_parquet

        write_parquet(load(t), work / "good.parquet")
    elif family == "options":
        from whyidle.cli import build_parser

        (work / "log.jsonl").write_text("".join(json.dumps({"arrival": i, "start": i + 0.1, "finish": i + 0.3}) + "\n" for i in range(30)))
        ctx["parser"] = build_parser()
        ctx["bases"] = {
            "diagnose": [str(t)], "compare": [str(t), str(t)], "serving": [str(work / "log.jsonl")],
            "batching": ["--curve", "1:2:2.5,8:4:5", "--rate", "100", "--slo-ms", "50", "--requests-per-run", "300"],
            "run": ["--no-sampler", "-o", str(work / "run")],
        }  # fmt: skip
    return ctx


def _make(family: str, rng: random.Random, ctx: dict[str, Any], work: Path, i: int) -> Path | list[str]:
    if family == "nsys":
        return hostile.nsys_input(rng, work)
    if family == "options":
        return hostile_surfaces.option_argv(rng, ctx["bases"], ctx["parser"])
    if family == "runs":
        return hostile_runs.run_folder_input(rng, ctx["doc"], ctx, work / f"{i}_run")
    if family == "parquet":
        name, data = hostile_surfaces.parquet_input(rng, work / "good.parquet")
    elif family == "results":
        name, data = hostile.report_input(rng, rng.choice(ctx["results"]))
    else:
        gen = {"kineto": hostile.kineto_input, "bytes": hostile.bytes_input, "counters": hostile.counters_input, "report": hostile.report_input,
               "requests": hostile_surfaces.requests_input, "triton": hostile_surfaces.triton_input, "latency": hostile_surfaces.latency_input,
               "rocprof": hostile.rocprof_input, "xplane": hostile.xplane_input, "config": hostile_config.config_input}[family]
        name, data = gen(rng, ctx.get("report") if family == "report" else ctx["doc"])
    p = work / f"{i}_{name}"
    p.write_bytes(data)
    return p


def _run_one(family: str, p: Path, work: Path) -> str:
    """Run one input through its surface; "reports" or "clear errors" (a WhyidleError), else raises."""
    if family == "report":
        from whyidle.comparison.analysis import compare_reports, read_side
        from whyidle.comparison.render import render_text
        from whyidle.config import Config

        d = whyidle.load_report(p)  # every renderer, from the loaded report alone
        str(d), d.render("json"), d.render("html")
        if getattr(d, "gap_columns", None) is not None and getattr(d, "activity", None) is not None:
            d.render("perfetto")  # a loaded report draws every gap from its own columns
        render_text(compare_reports(read_side(str(p), Config()), read_side(str(work / "good.json"), Config()), limit=10))
    elif family in ("requests", "triton"):
        from whyidle.serving.report import serving_text
        from whyidle.serving.requests import diagnose_requests

        serving_text(diagnose_requests(whyidle.load_requests(p)))
    elif family == "runs":
        _run_folder(p, work)
    elif family == "results":
        _render_result(whyidle.load_report(p))
    elif family == "config":
        from whyidle.commands._configfile import load_config

        str(whyidle.diagnose(work / "t.json", config=load_config(p)))  # the settings reach a whole diagnosis
    elif family == "latency":
        from whyidle.serving.latency import load_latency

        prof = load_latency(p)
        prof.service_table(prof.max_batch), prof.sigma_table(prof.max_batch), prof.spread_table(prof.max_batch)
    else:
        str(whyidle.diagnose(p))
    return "reports"


def _good_results(trace: Path, work: Path) -> list[dict[str, Any]]:
    """A comparison, the H200 sweep and batching result, and a request-log diagnosis, as saved."""
    from whyidle.serving.requests import diagnose_requests

    log = work / "results_log.jsonl"
    log.write_text("".join(json.dumps({"arrival_ms": i, "start_ms": i + 0.5, "finish_ms": i + 2, "batch_id": i // 2}) + "\n" for i in range(8)))
    h200 = REPO / "tests" / "data" / "h200" / "run2"
    return [
        whyidle.compare(trace, trace).to_dict(), json.loads((h200 / "sweep_h200.json").read_text()),
        json.loads((h200 / "batching.json").read_text()), diagnose_requests(whyidle.load_requests(log)).to_dict(),
    ]  # fmt: skip


def _render_result(r: Any) -> None:
    """Every output of a feature's result read back from a file."""
    from whyidle.comparison.render import render_comparison_json, render_text
    from whyidle.serving.report import batching_html, batching_text, serving_html, serving_text
    from whyidle.serving.saved import BatchingReport
    from whyidle.sweep.report import render_sweep_html, render_sweep_json, render_sweep_terminal
    from whyidle.sweep.search import Sweep

    if isinstance(r, whyidle.Comparison):
        render_text(r), render_comparison_json(r)
    elif isinstance(r, Sweep):
        render_sweep_terminal(r), render_sweep_html(r), render_sweep_json(r)
    elif isinstance(r, BatchingReport):
        batching_text(r.result, r.profile, r.advice), batching_html(r.result, r.profile, r.advice)
    elif isinstance(r, whyidle.ServingDiagnosis):
        serving_text(r), serving_html(r), json.dumps(r.to_dict())
    else:  # a diagnosis: a mutated kind or schema field can make one of a feature's result
        str(r), r.render("json")


def _run_folder(p: Path, work: Path) -> None:
    """``whyidle diagnose RUN_DIR`` as the command runs it: the ranks read one by one, the report
    rendered as text and JSON, and saved as HTML (a page per rank) and Perfetto (a trace per
    rank, annotating the rank's own file) beside the folder, never inside it."""
    from whyidle.ranks.run import diagnose_ranks
    from whyidle.render import render, save_report

    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    _run_argv(["diagnose", str(p), "--jobs", "1", "-o", str(out / "cli.html")])  # the command's own dispatch (one trace or a run)
    report = diagnose_ranks(p, jobs=1)
    render(report, "terminal"), render(report, "json")
    for name, fmt in (("job.html", "html"), ("job.json.gz", "perfetto")):
        save_report(report, str(out / name), fmt, inputs=(str(p),))


def _run_argv(argv: list[str]) -> str:
    """A command line through ``whyidle.cli.main``: exit 0, 1 or 2 with no internal error."""
    import contextlib
    import io

    from whyidle.cli import main as cli_main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as exc:  # argparse's own exit
            rc = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    if rc not in (0, 1, 2) or "could not be analysed" in text or "Traceback" in text:
        raise RuntimeError(f"exit {rc}: {text.strip()[-200:]}")
    return "reports" if rc in (0, 1) else "clear errors"


def _readers_agree(p: Path, counts: collections.Counter[str], escaped: collections.Counter[str]) -> None:
    """The two Kineto readers: the same timeline, or both an error."""
    from whyidle.sources import _io
    from whyidle.sources import kineto_stream as ks
    from whyidle.sources.kineto import parse_kineto

    out: list[Any] = []
    for read in (lambda: parse_kineto(_io.read_bytes(p), str(p)), lambda: ks.parse_kineto_stream(p, jobs=1)):
        try:
            out.append(read())
        except WhyidleError as exc:
            out.append(exc)
        except Exception as exc:
            escaped[_where(exc)] += 1
            out.append(exc)
    a, b = out
    if isinstance(a, BaseException) != isinstance(b, BaseException):
        counts["readers disagree"] += 1
    elif not isinstance(a, BaseException):
        from tlbuild import assert_same_timeline

        try:
            assert_same_timeline(a, b)
        except AssertionError:
            counts["readers disagree"] += 1


def _state(item: Path | list[str]) -> Any:
    """What must be the same after an input is read: its bytes (a folder: each entry's)."""
    if not isinstance(item, Path):
        return b""
    return hostile_runs.snapshot(item) if item.is_dir() else item.read_bytes()


def run_family(family: str, n: int, seed: int, budget_s: float, work: Path, keep: Path | None = None) -> dict[str, Any]:
    """Run up to ``n`` inputs of ``family`` (stopping after ``budget_s``); the counts. Every input
    must give a report or one WhyidleError, and be byte-identical afterwards."""
    from whyidle.sources import kineto_stream as ks

    rng = random.Random(f"{family}-{seed}")
    ctx = _setup(family, work)
    counts: collections.Counter[str] = collections.Counter()
    escaped: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    saved_batch = ks._BATCH
    ks._BATCH = 4096  # many batches: cuts land everywhere
    try:
        for i in range(n):
            if time.monotonic() - t0 > budget_s:
                break
            item = _make(family, rng, ctx, work, i)
            counts["inputs"] += 1
            before = _state(item)
            try:
                counts[_run_argv(item) if isinstance(item, list) else _run_one(family, item, work)] += 1
            except WhyidleError:
                counts["clear errors"] += 1
            except Exception as exc:  # the bug this script looks for
                escaped[_where(exc)] += 1
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    target = keep / f"{family}_{i}"
                    target.write_bytes(item.read_bytes() if isinstance(item, Path) else json.dumps(item).encode())
            if isinstance(item, Path):
                if _state(item) != before:
                    counts["inputs modified"] += 1
                if family in ("kineto", "bytes"):
                    _readers_agree(item, counts, escaped)
                shutil.rmtree(item) if item.is_dir() else item.unlink(missing_ok=True)
    finally:
        ks._BATCH = saved_batch
    return {"family": family, **counts, "escaped": dict(escaped), "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="inputs per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--budget-s", type=float, default=3600.0, help="time per family")
    ap.add_argument("--keep", type=Path, help="save inputs whose exception escaped here")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for fam in args.families.split(","):
            res = run_family(fam, args.n, args.seed, args.budget_s, Path(d), args.keep)
            print(json.dumps(res), flush=True)
            bad += sum(res["escaped"].values()) + res.get("readers disagree", 0) + res.get("inputs modified", 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
