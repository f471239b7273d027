"""Fuzz whyidle's readers with seeded hostile inputs (issue 14): every input must give a report
or one clear WhyidleError; any other exception is a bug, printed with its input saved.

    PYTHONPATH=src python3 scripts/fuzz_inputs.py --n 2000 --seed 1 [--families kineto,bytes,...]
    PYTHONPATH=src python3 scripts/fuzz_inputs.py --n 300 --budget-s 60   # what the test suite runs

Families (tests/hostile.py): ``kineto`` (structure-aware mutations of a Kineto trace, read by the
public API, and again by the out-of-core reader with small batches: both must agree),
``bytes`` (byte-level damage, plain and gzip), ``counters`` (nvidia-smi / dcgmi logs), ``nsys``
(Nsight exports with odd cell values), ``report`` (saved JSON reports given to ``compare``),
``rocprof`` (rocprofv3 JSON output with odd values, types, missing fields and truncations),
``xplane`` (JAX XPlane captures with odd planes and byte damage).
Prints one JSON line per family: inputs run, reports, clear errors, readers that disagreed, and
escaped exceptions (type and place).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
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

import whyidle  # noqa: E402
from whyidle.errors import WhyidleError  # noqa: E402

FAMILIES = ("kineto", "bytes", "counters", "nsys", "report", "rocprof", "xplane")


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    last = tb[-1] if tb else None
    return f"{type(exc).__name__} at {os.path.basename(last.filename)}:{last.lineno}" if last else type(exc).__name__


def run_family(family: str, n: int, seed: int, budget_s: float, work: Path, keep: Path | None = None) -> dict[str, Any]:
    """Run up to ``n`` inputs of ``family`` (stopping after ``budget_s``); the counts."""
    from whyidle.sources import _io
    from whyidle.sources import kineto_stream as ks
    from whyidle.sources.kineto import parse_kineto

    rng = random.Random(f"{family}-{seed}")
    doc = hostile.rocprof_base() if family == "rocprof" else hostile.base_trace(2)
    report_doc: dict[str, Any] = {}
    good = work / "good.json"
    if family == "report":
        from whyidle.render.json import render_json

        t = work / "t.json"
        t.write_text(json.dumps(hostile.base_trace(3)))
        report_doc = json.loads(render_json(whyidle.diagnose(t)))
        good.write_text(json.dumps(report_doc))
    counts: collections.Counter[str] = collections.Counter()
    escaped: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    saved_batch = ks._BATCH
    ks._BATCH = 4096  # many batches: cuts land everywhere
    try:
        for i in range(n):
            if time.monotonic() - t0 > budget_s:
                break
            if family == "nsys":
                p = hostile.nsys_input(rng, work)
            else:
                gen = {
                    "kineto": hostile.kineto_input, "bytes": hostile.bytes_input, "counters": hostile.counters_input,
                    "report": hostile.report_input, "rocprof": hostile.rocprof_input, "xplane": hostile.xplane_input,
                }[family]  # fmt: skip
                name, data = gen(rng, report_doc if family == "report" else doc)
                p = work / f"{i}_{name}"
                p.write_bytes(data)
            counts["inputs"] += 1
            try:
                if family == "report":
                    from whyidle.config import Config
                    from whyidle.comparison.render import render_text
                    from whyidle.render.perfetto import render_perfetto
                    from whyidle.comparison.analysis import compare_reports, read_side

                    a = read_side(str(p), Config())
                    b = read_side(str(good), Config())
                    render_text(compare_reports(a, b, limit=10))
                    if a.gap_columns is not None and a.activity is not None:
                        render_perfetto(a)  # a loaded report draws every gap from its own columns
                else:
                    whyidle.diagnose(p)
                counts["reports"] += 1
            except WhyidleError:
                counts["clear errors"] += 1
            except Exception as exc:  # the bug this script looks for
                escaped[_where(exc)] += 1
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / p.name).write_bytes(p.read_bytes())
            if family in ("kineto", "bytes"):  # the two Kineto readers: same timeline or both an error
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
            p.unlink(missing_ok=True)
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
            bad += sum(res["escaped"].values()) + res.get("readers disagree", 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
