"""whyidle diagnose TRACE: the ranked, evidence-backed diagnosis of one profile."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from whyidle.analyses.causes import GROUPS
from whyidle.commands import _types as T
from whyidle.commands._configfile import add_config_option, config_from
from whyidle.commands._output import progress, say_written
from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.findings.gate import gate_failures
from whyidle.output import check_not_input, clean, write_stdout
from whyidle.render import RENDERERS, format_for

__all__ = ["add_parser", "run", "parse_steps"]


# The most step numbers --steps may name: a profiler trace holds a few to a few thousand steps,
# and the selection is a tuple of numbers (--steps 1-100000000 would be 100 million of them).
MAX_SELECTED_STEPS = 100_000


def parse_steps(text: str) -> tuple[int, ...]:
    """'3-6' or '3,4,5' -> (3, 4, 5, 6)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if len(part) > 40:
                raise ValueError(part)
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b - a + 1 + len(out) > MAX_SELECTED_STEPS:
                    raise UsageError(f"--steps {part} names {b - a + 1} steps; at most {MAX_SELECTED_STEPS} can be selected (a trace holds a few thousand at most)")
                out.extend(range(a, b + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise UsageError(f"--steps {shown!r}: expected step numbers like 3-6 or 3,4,5") from None
    if len(out) > MAX_SELECTED_STEPS:
        raise UsageError(f"--steps names {len(out)} steps; at most {MAX_SELECTED_STEPS} can be selected")
    if not out:
        raise UsageError(f"--steps {text!r} selects no step")
    return tuple(out)


EXAMPLES = """\
  whyidle diagnose trace.pt.trace.json.gz                 # terminal report
  whyidle diagnose trace.pt.trace.json.gz -o report.html  # HTML (.json, .txt, .json.gz = Perfetto, .png/.svg)
  whyidle diagnose trace.pt.trace.json.gz --skip-first 1 --fail-on starvation --min-busy 0.8   # CI gate
  whyidle diagnose run.nsys-rep --step-range '^train_step'  # Nsight Systems
  whyidle diagnose gpu.log                                 # nvidia-smi dmon / dcgmi dmon / whyidle watch log
  whyidle diagnose trace.json.gz --counters gpu.log        # a trace joined with a counter log
  whyidle diagnose runs/job-42/                            # a folder with one trace per rank
  whyidle diagnose runs/job-42/ --workers 8                # ranks on a local Dask cluster
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diagnose", help="diagnose a profile: utilisation, idle gaps, causes and fixes")
    p.add_argument(
        "trace",
        help=(
            "the input: a PyTorch profiler trace (.json, .json.gz, also whyidle's annotated export); an Nsight Systems "
            "capture (.nsys-rep, or its .sqlite export); a GPU counter log (nvidia-smi dmon or --query-gpu CSV, "
            "dcgmi dmon, whyidle watch); a timeline from whyidle convert (.parquet); or a folder: one trace, or one "
            "per rank (a distributed job)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    p.add_argument(
        "--full-json",
        action="store_true",
        help="a JSON report in its full form: every gap as columns and each device's busy intervals (large; what a saved report needs to draw the HTML strip and the Perfetto trace)",
    )
    p.add_argument("-o", "--output", help="write the report here (format from the suffix: .json, .txt, .html, .json.gz = annotated Perfetto trace, .png/.svg = step plot)")
    p.add_argument("--format", help="terminal, json, html, perfetto, png or svg (default: from -o, else terminal)")
    p.add_argument("--steps", help="ProfilerStep numbers to analyse, e.g. 3-6")
    p.add_argument("--skip-first", type=T.integer(0), metavar="N", help="drop the first N steps (cold start; default 0)")
    p.add_argument("--batch-size", type=T.integer(1), help="samples per step, when the trace cannot tell")
    p.add_argument("--fail-on", metavar="GROUP[,GROUP]", help=f"exit 1 if a finding is in these groups ({', '.join(GROUPS)})")
    p.add_argument("--min-busy", type=float, metavar="FRACTION", help="exit 1 if the device busy fraction is below this (0..1)")
    p.add_argument("--width", type=T.WIDTH, default=None, help="terminal width (default: the terminal's, at most 100)")
    p.add_argument("--counters", metavar="LOG", help="a GPU counter log (nvidia-smi dmon / --query-gpu, dcgmi dmon, whyidle watch) joined with the trace by wall-clock time")
    p.add_argument("--step-range", metavar="REGEX", help="Nsight Systems: NVTX range names that mark steps (default: ProfilerStep#N and common trainer names)")
    p.add_argument("--counters-utc-offset", type=T.integer(-1440, 1440), metavar="MINUTES", help="time zone of nvidia-smi timestamps, minutes east of UTC (default: this machine's)")
    p.add_argument("--counters-interval-ms", type=T.MS, metavar="MS", help="sampling interval of counter logs without timestamps (dcgmi dmon -d)")
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="processes to use. A folder of rank traces: N ranks are read at once (default: one per core). "
        "One trace: 1 runs in this process only; 2 or more add a helper process that decodes part of the trace and replays "
        "the predictions beside the other analyses (large traces: N chunks at once; default 2)",
    )
    p.add_argument("--workers", type=T.integer(1, 4096), metavar="N", help="multi-rank folders: run the ranks on a local Dask cluster of N processes")
    p.add_argument("--scheduler", metavar="ADDRESS", help="multi-rank folders: run the ranks on this Dask scheduler (tcp://host:8786)")
    add_config_option(p)
    p.set_defaults(run=run)


def _config(args: argparse.Namespace) -> Config:
    """The settings: the --config file's (if any), with the options given here over it."""
    fail_on: tuple[str, ...] | None = None
    if args.fail_on:
        fail_on = tuple(g.strip() for g in args.fail_on.split(",") if g.strip())
        bad = [g for g in fail_on if g not in GROUPS]
        if bad:
            raise UsageError(f"--fail-on {','.join(bad)}: expected groups among {', '.join(GROUPS)}")
    if args.min_busy is not None and not 0.0 <= args.min_busy <= 1.0:
        raise UsageError(f"--min-busy {args.min_busy}: expected a fraction between 0 and 1")
    if args.skip_first is not None and args.skip_first < 0:
        raise UsageError("--skip-first must be 0 or more")
    if args.batch_size is not None and args.batch_size <= 0:
        raise UsageError("--batch-size must be a positive number of samples")
    return config_from(
        args,
        skip_first_steps=args.skip_first,
        steps=parse_steps(args.steps) if args.steps else None,
        batch_size=args.batch_size,
        fail_on_groups=fail_on,
        min_busy_fraction=args.min_busy,
        step_range=getattr(args, "step_range", None),
        counters_utc_offset_min=getattr(args, "counters_utc_offset", None),
        counters_interval_ms=getattr(args, "counters_interval_ms", None),
    )


def emit(report: Any, args: argparse.Namespace, original: Any = None) -> None:
    """Print or write the diagnosis as the arguments ask; ``original``: the input (a path or
    its Timeline), which a Perfetto output annotates."""
    from whyidle.render import produce, render, save_report

    fmt = "json" if args.json and not args.output else format_for(args.format, args.output)
    if not RENDERERS[fmt].printable and not args.output:
        raise UsageError(f"--format {fmt} writes an image; pass -o FILE{RENDERERS[fmt].suffixes[0]}")
    if args.output:
        inputs = (args.trace, getattr(args, "counters", None))
        for w in save_report(report, args.output, fmt, width=args.width or 80, inputs=inputs, original=original, columns=args.full_json):
            say_written(w.path, w.what)
        if args.json:
            write_stdout(str(render(report, "json", columns=args.full_json)))
        return
    width = args.width or min(getattr(sys.stdout, "isatty", lambda: False)() and __import__("shutil").get_terminal_size().columns or 80, 100)
    out, _what = produce(report, fmt, original=original, width=width, color=bool(sys.stdout.isatty()), columns=args.full_json)
    text = out if isinstance(out, str) else out.decode()
    write_stdout(text if fmt in ("terminal", "json") else clean(text))  # the terminal renderer escapes its own


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.output:
        check_not_input(args.output, (args.trace, getattr(args, "counters", None)))  # before reading
    from whyidle.sources import ReadAhead

    # The trace is read while numpy imports, and decoded by a forked child while the analyses do.
    with ReadAhead(imports=("whyidle.pipeline", "whyidle.render.perfetto", "whyidle.render.json")) as read_ahead:
        read_ahead.start(args.trace, cfg.read.stream_min_bytes, cfg.read)
        from whyidle.commands._ranks import is_run_dir, run_ranks

        if is_run_dir(args.trace) or args.workers or args.scheduler:
            run_report = run_ranks(args, cfg)
            emit(run_report, args)
            failures = [f"rank {e.rank}: {m}" for e in run_report.ranks if e.report is not None for m in gate_failures(e.report, cfg.findings)]
        else:
            from whyidle.parallel import Helpers, small_pages
            from whyidle.sources import read

            jobs = 2 if args.jobs is None else args.jobs
            with small_pages(), progress(f"whyidle: reading {args.trace}"):  # small pages: whyidle.parallel.pages
                timeline = read(args.trace, None, Helpers(fork=jobs >= 2), read_ahead=read_ahead, settings=cfg.read)
                from whyidle.pipeline import diagnose  # imported by load already when it forked

                report = diagnose(timeline, cfg, counters=getattr(args, "counters", None), jobs=jobs)
            from whyidle.render.perfetto import annotation_source

            emit(report, args, annotation_source(args.trace, timeline))
            failures = gate_failures(report, cfg.findings)
    for msg in failures:
        print(f"whyidle: gate failed: {clean(msg, newlines=False)}", file=sys.stderr)  # titles quote trace names
    return 1 if failures else 0
