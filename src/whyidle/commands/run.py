"""whyidle run [options] -- COMMAND ARGS...: run a program unchanged, diagnose it when it ends.

The command's stdin, stdout and stderr are its own while it runs; whyidle prints on stderr, after
the command has ended: what was recorded, then the report. The exit status is the command's
(128 + N when a signal N ended it; 127 / 126 when it cannot be started). The run folder holds
the profiler's trace, each process's record (``<worker>.steps.json``), the sampler's counters and
the report (``report.json``, ``report.html``, ``report.txt``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from whyidle.commands._command import cannot_start, command_words
from whyidle.commands._configfile import add_config_option, config_from
from whyidle.commands import _types as T
from whyidle.config import Config
from whyidle.errors import OutputError, UsageError

__all__ = ["add_parser", "run", "parse_window", "parse_duration"]

EXAMPLES = """\
  whyidle run -- python train.py                      # the report after the program's own output
  whyidle run --steps 40 -- python train.py           # stop after 40 steps (as Ctrl-C would)
  whyidle run --window 20s+5s -- python serve.py      # a server: profile 5 s, 20 s after import torch
  whyidle run --no-profiler -- python train.py        # the step tracker only
  whyidle run -o runs/fixed --baseline runs/starved -- python train.py --workers 4   # the gain of a fix
  whyidle run -o runs/exp1 -- torchrun --nproc_per_node 2 train.py
"""


# The longest duration an option takes: a year, far past any profiling window, short of float overflow.
_MAX_DURATION_S = 365 * 86_400.0


def parse_duration(text: str) -> float:
    """'20s', '1.5m', '300ms', '20' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(ms|s|m|min|h)?\s*", text)
    if not m:
        raise UsageError(f"{text!r}: expected a duration such as 20s, 1.5m or 300ms")
    scale = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[m.group(2)]
    seconds = float(m.group(1)) * scale
    if not seconds <= _MAX_DURATION_S:  # a 400-digit number is infinity as a float
        raise UsageError(f"{text[:40]!r}: expected a duration of at most {_MAX_DURATION_S // 86_400:.0f} days")
    return seconds


def parse_window(text: str) -> tuple[float, float]:
    """'20s+5s' -> (20.0, 5.0): start (after ``import torch``) and length."""
    start, sep, length = text.partition("+")
    if not sep:
        raise UsageError(f"--window {text!r}: expected START+LENGTH, such as 20s+5s")
    window = (parse_duration(start), parse_duration(length))
    if window[1] <= 0:
        raise UsageError(f"--window {text!r}: the window's length must be more than 0")
    return window


def _schedule(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(v) for v in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0 or parts[2] == 0:
        raise UsageError(f"--schedule {text!r}: expected WAIT,WARMUP,ACTIVE steps such as 5,2,3 (ACTIVE > 0)")
    return parts[0], parts[1], parts[2]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a program unchanged (python, torchrun...) and diagnose it when it ends",
        description="Run COMMAND unchanged; Python processes that import torch are instrumented through a "
        "start-up hook (steps from optimizer.step() or DataLoader batches, the step tracker, a torch.profiler "
        "session over a few steady steps); the process tree and GPUs are sampled. When it ends (or on Ctrl-C, "
        "--duration, --steps) the diagnosis is printed on stderr and written into the run folder.",
    )
    p.add_argument("-o", "--output", metavar="DIR", help="run folder (default: whyidle-runs/<time>)")
    p.add_argument("--steps", type=T.integer(0, 10**9), default=0, metavar="N", help="interrupt the program (SIGINT) after N steps")
    p.add_argument("--duration", metavar="TIME", help="interrupt the program (SIGINT) after TIME (20s, 5m)")
    p.add_argument("--window", metavar="START+LEN", help="profile a time window after `import torch` (a server without optimizer steps), e.g. 20s+5s")
    p.add_argument("--schedule", default="5,2,3", metavar="W,U,A", help="profiler: wait, warm-up, record steps (default 5,2,3)")
    p.add_argument("--no-profiler", action="store_true", help="no torch.profiler session (the step tracker only)")
    p.add_argument("--no-tracker", action="store_true", help="no step tracker (the profiler's trace only)")
    p.add_argument("--no-sampler", action="store_true", help="no NVML / process-tree sampling")
    p.add_argument("--no-hook", action="store_true", help="inject nothing: run the command with the sampler only")
    p.add_argument("--baseline", metavar="RUN", help="compare with an earlier run: its run folder or report.json (shows the gain of a fix)")
    p.add_argument("--interval", type=T.number(0.01, 3600), default=0.5, metavar="SECONDS", help="sampler: time between samples (default 0.5)")
    add_config_option(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command to run, after --")
    p.set_defaults(run=run)


def _options(args: argparse.Namespace, run_dir: Path) -> Any:
    from whyidle.capture.launch import LaunchOptions
    from whyidle.capture.run_env import HookOptions

    if args.steps < 0:
        raise UsageError(f"--steps {args.steps}: expected a positive number of steps")
    hook = None
    if not args.no_hook:
        hook = HookOptions(
            tracker=not args.no_tracker,
            profiler=not args.no_profiler,
            schedule=_schedule(args.schedule),
            steps=args.steps,
            window=parse_window(args.window) if args.window else None,
        )
    if not 0.01 <= args.interval <= 60:
        raise UsageError(f"--interval {args.interval}: expected between 0.01 and 60 seconds")
    duration = parse_duration(args.duration) if args.duration else None
    interval = args.interval if not args.no_sampler else 0.05  # without samples: just wait for the exit
    return LaunchOptions(run_dir, hook, sampler=not args.no_sampler, interval_s=interval, duration_s=duration)


def run(args: argparse.Namespace) -> int:
    from whyidle.capture.launch import launch

    cmd = command_words(args.cmd, "no command to run; usage: whyidle run -- python train.py")
    run_dir = Path(args.output or f"whyidle-runs/{time.strftime('%Y%m%d-%H%M%S')}")
    options = _options(args, run_dir)
    cfg = config_from(args)  # before the command runs: a bad file is said at once
    try:
        launched = launch(cmd, options)
    except (FileNotFoundError, PermissionError) as exc:
        return cannot_start("whyidle run", cmd, exc)
    _report(launched, cmd, cfg, args.baseline)
    rc = launched.returncode
    return 128 - rc if rc < 0 else rc


def _report(launched: Any, cmd: list[str], cfg: Config, baseline: str | None = None) -> None:
    """Print what was recorded and the report (stderr), write the report files into the run folder."""
    from whyidle.capture.run_report import diagnose_process, main_record, summary_lines

    main = main_record(launched.records)
    for line in summary_lines(launched, cmd, main):
        print(line, file=sys.stderr)
    if launched.sampled is not None and launched.sampled.rows:
        _write_counters(launched, cmd)
    if main is None:  # nothing from the hook: what the sampler saw is all there is
        if launched.sampled is not None:
            from whyidle.capture.watch import summarize

            for line in summarize(launched.sampled, cmd)[1:]:  # after its first line (the exit status, said above)
                print(f"whyidle run: sampler: {line.strip()}", file=sys.stderr)
        return
    ranked = [r for r in launched.records if r.rank is not None]
    if len({r.rank for r in ranked}) >= 2:
        _show(_multi_rank(launched, ranked, cfg), launched.run_dir, "each rank's record and trace")
        return
    found = diagnose_process(main, launched.run_dir, cfg)
    for n in found.notes:
        print(f"whyidle run: {n}", file=sys.stderr)
    if found.report is None:
        print("whyidle run: nothing to diagnose (the step tracker was off and no trace was written)", file=sys.stderr)
        return
    _show(found.report, launched.run_dir, f"the {found.basis}'s data")
    if baseline:
        _compare(baseline, found.report, cfg)


def _show(report: Any, run_dir: Path, holds: str) -> None:
    """Print the report on stderr and save it as report.json, report.html, report.txt."""
    from whyidle.render.terminal import render_terminal

    err = sys.stderr
    text = render_terminal(report, color=bool(getattr(err, "isatty", lambda: False)())) if not hasattr(report, "cross_rank") else str(report)
    err.write(text if text.endswith("\n") else text + "\n")
    for name in ("report.json", "report.html", "report.txt"):
        try:
            report.save(run_dir / name)
        except OutputError as exc:
            print(f"whyidle run: {exc}", file=sys.stderr)
    print(f"whyidle run: the run folder is {run_dir} (report.json, report.html, {holds})", file=sys.stderr)


def _multi_rank(launched: Any, ranked: list[Any], cfg: Config) -> Any:
    """The multi-rank report: from the ranks' traces when their devices were busy (a GPU job),
    else from their step reports and per-step backward calls (ranks.steps)."""
    from whyidle.capture.run_report import diagnose_process
    from whyidle.ranks.steps import RankSteps, multi_rank_from_steps

    found = [diagnose_process(r, launched.run_dir, cfg) for r in ranked]
    if all(f.basis == "trace" for f in found):
        from whyidle.ranks.run import diagnose_ranks

        return diagnose_ranks(launched.run_dir / "traces", cfg)
    entries = [
        RankSteps(r.rank, r.path.name, f.report, tuple((int(a), int(b), int(c)) for a, b, c in r.data.get("backward") or ()))
        for r, f in zip(ranked, found)
        if f.report is not None
    ]
    world = max((int(r.data.get("world_size") or 0) for r in ranked), default=0) or None
    return multi_rank_from_steps(str(launched.run_dir), entries, world, "the RANK environment variable of each process")


def _compare(baseline: str, report: Any, cfg: Config) -> None:
    """The comparison with an earlier run (its folder's report.json, or a report or trace)."""
    from whyidle.comparison.analysis import compare_reports, read_side
    from whyidle.comparison.render import render_text
    from whyidle.errors import WhyidleError

    path = Path(baseline)
    if path.is_dir():
        path = path / "report.json"
    try:
        text = render_text(compare_reports(read_side(path, cfg), report))
    except (OSError, WhyidleError) as exc:
        print(f"whyidle run: --baseline {baseline}: cannot compare ({exc})", file=sys.stderr)
        return
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


def _write_counters(launched: Any, cmd: list[str]) -> None:
    from whyidle.capture.watch import to_counter_file
    from whyidle.output import write_atomic

    try:
        write_atomic(launched.run_dir / "counters.csv", to_counter_file(launched.sampled, cmd))
    except OutputError as exc:
        print(f"whyidle run: {exc}", file=sys.stderr)
