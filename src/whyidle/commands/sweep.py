"""whyidle sweep: run the playbook's experiments until throughput plateaus.

Two forms::

    whyidle sweep sweep.py:make --batch-size 8..1024 --workers 0,2,4 --precision fp32,bf16 -o sweep.html
    whyidle sweep --batch-size 8..256 -- python train.py --bs {batch_size} --workers {num_workers}

Each trial runs in a fresh process (sweep/runner.py); the search is sweep/search.py. Progress goes
to stderr, one line per trial. Exit status: 0 a configuration was recommended; 1 no trial
succeeded; 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from whyidle.commands import _types as T
from whyidle.errors import UsageError

__all__ = ["add_parser", "run", "parse_batch_range", "parse_values"]

EXAMPLES = """\
  whyidle sweep sweep.py:make --batch-size 8..1024 --workers 0,2,4 --precision fp32,bf16 -o sweep.html
  whyidle sweep --batch-size 8..256 -- python train.py --bs {batch_size} --workers {num_workers}
"""
_BOOL = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
_FORMATS = {".json": "json", ".html": "html", ".htm": "html", ".txt": "terminal"}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="measure samples/s over batch sizes and levers (workers, precision, compile...) until it plateaus",
        description="Run training trials, each in a fresh process, and recommend the fastest configuration that keeps the "
        "loss within the quality guard. TARGET is FILE.py:FUNCTION (FUNCTION(cfg: whyidle.Trial) returns a whyidle.Workload), "
        "or, after --, a command whose arguments may hold {batch_size}, {num_workers}, {precision}... and whose loop uses "
        "whyidle.track(loader). Lists are comma-separated; the first value is the starting point.",
    )
    p.add_argument("target", nargs="*", metavar="TARGET", help="FILE.py:FUNCTION, or -- COMMAND ARGS...")
    p.add_argument("--batch-size", default="8..1024", metavar="LO..HI", help="batch sizes: doubled from LO up to HI (default 8..1024); one number fixes it")
    p.add_argument("--workers", default="0", metavar="LIST", help="DataLoader num_workers values (default 0)")
    p.add_argument("--pin-memory", default="off", metavar="LIST", help="off,on")
    p.add_argument("--persistent-workers", default="off", metavar="LIST", help="off,on")
    p.add_argument("--prefetch-factor", default="", metavar="LIST", help="DataLoader prefetch_factor values (with workers)")
    p.add_argument("--precision", default="fp32", metavar="LIST", help="fp32, tf32, bf16, fp16 (autocast; fp16 with GradScaler)")
    p.add_argument("--compile", default="off", metavar="LIST", help="off, default, reduce-overhead, max-autotune, or the backends eager, aot_eager")
    p.add_argument("--accumulation", default="1", metavar="LIST", help="gradient accumulation steps, at a constant effective batch")
    p.add_argument("--checkpointing", default="off", metavar="LIST", help="activation checkpointing: off,on")
    p.add_argument("--steps", type=T.integer(1, 1_000_000), default=50, help="stop measuring a trial after this many steps once it has three windows of at least 200 ms (default 50); a steady trial stops sooner")
    p.add_argument("--warmup", type=T.integer(0, 1_000_000), default=10, help="warm-up steps per trial, excluded from the figures (default 10)")
    p.add_argument("--time-limit", type=T.number(0, 86_400, lo_open=True), default=120.0, metavar="S", help="seconds per trial before it is stopped (default 120)")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda: passed to the trial as cfg.device")
    p.add_argument("--seed", type=T.integer(0, 2**32 - 1), default=0, help="the seed every trial starts from (default 0)")
    p.add_argument("--from-report", metavar="REPORT.json", help="a whyidle JSON report: the levers its findings name are tried first")
    p.add_argument("--cache", metavar="FILE", help="keep finished trials in FILE and reuse them: a rerun resumes the sweep")
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE (.json, .html or .txt); default: the terminal")
    p.add_argument("--format", choices=("terminal", "json", "html"), help="output format (default: from the -o suffix)")
    p.add_argument("--width", type=T.WIDTH, default=120, help="terminal width of the table")
    p.set_defaults(run=run)


def parse_batch_range(text: str) -> tuple[int, int]:
    lo_s, sep, hi_s = text.partition("..")
    try:
        lo, hi = int(lo_s), int(hi_s if sep else lo_s)
    except ValueError:
        raise UsageError(f"--batch-size {text!r}: expected LO..HI (e.g. 8..1024) or one number") from None
    if lo < 1 or hi < lo:
        raise UsageError(f"--batch-size {text!r}: expected 1 <= LO <= HI")
    return lo, hi


def parse_values(option: str, text: str) -> list[Any]:
    """One option's comma-separated values, checked and converted (ints, on/off, names)."""
    from whyidle.sweep.trial import COMPILE_MODES, PRECISIONS

    items = [t.strip() for t in text.split(",") if t.strip()]
    out: list[Any] = []
    for t in items:
        if option in ("workers", "prefetch-factor", "accumulation"):
            try:
                v: Any = int(t)
            except ValueError:
                raise UsageError(f"--{option} {text!r}: {t!r} is not a whole number") from None
            if v < (1 if option != "workers" else 0):
                raise UsageError(f"--{option} {text!r}: {t} is out of range")
        elif option in ("pin-memory", "persistent-workers", "checkpointing"):
            if t.lower() not in _BOOL:
                raise UsageError(f"--{option} {text!r}: expected on/off values")
            v = _BOOL[t.lower()]
        elif option == "precision":
            if t not in PRECISIONS:
                raise UsageError(f"--precision {text!r}: {t!r} is not one of {', '.join(PRECISIONS)}")
            v = t
        elif option == "compile":
            if t not in COMPILE_MODES:
                raise UsageError(f"--compile {text!r}: {t!r} is not one of {', '.join(COMPILE_MODES)}")
            v = t
        else:  # pragma: no cover - every option is listed above
            raise AssertionError(option)
        if v not in out:
            out.append(v)
    return out


def _space(args: argparse.Namespace) -> Any:
    from whyidle.sweep.search import Space, levers_for_findings
    from whyidle.sweep.trial import LEVERS

    lo, hi = parse_batch_range(args.batch_size)
    levers = {
        "num_workers": parse_values("workers", args.workers),
        "pin_memory": parse_values("pin-memory", args.pin_memory),
        "persistent_workers": parse_values("persistent-workers", args.persistent_workers),
        "prefetch_factor": parse_values("prefetch-factor", args.prefetch_factor),
        "precision": parse_values("precision", args.precision),
        "compile": parse_values("compile", args.compile),
        "accumulation": parse_values("accumulation", args.accumulation),
        "checkpointing": parse_values("checkpointing", args.checkpointing),
    }
    levers = {k: v for k, v in levers.items() if v}
    order = ["batch_size", *LEVERS]
    if args.from_report:
        first = levers_for_findings(_finding_ids(args.from_report))
        order = first + [s for s in order if s not in first]
    return Space(batch_lo=lo, batch_hi=hi, levers=levers, order=order, seed=args.seed, device=args.device)


def _finding_ids(path: str) -> list[str]:
    import msgspec

    try:
        doc = msgspec.json.decode(open(path, "rb").read())
    except OSError as exc:
        raise UsageError(f"--from-report {path}: cannot read it ({exc.strerror or exc})") from None
    except msgspec.DecodeError:
        raise UsageError(f"--from-report {path}: not JSON; expected a report written by whyidle diagnose --format json") from None
    findings = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(findings, list):
        raise UsageError(f"--from-report {path}: no 'findings' list; expected a report written by whyidle diagnose --format json")
    return [str(f.get("id", "")) for f in findings if isinstance(f, dict)]


def _progress(entry: Any) -> None:
    r = entry.result
    from whyidle.sweep.report import format_rate

    what = f"{format_rate(r.samples_per_s)} samples/s" + ("" if r.steady else " (not steady)") if r.ok else f"{r.status}: {r.message}"
    tail = f" - {entry.decision}" if entry.decision else ""
    if entry.guard is not None:
        tail += f" [quality guard: {entry.guard.message}]"
    cached = " (cached)" if r.cached else f" ({r.wall_ns / 1e9:.1f} s)"
    clear = "\r\x1b[K" if sys.stderr.isatty() else ""  # over the "running..." line
    print(f"{clear}whyidle sweep: [{entry.stage}] {r.trial.label()}: {what}{cached}{tail}", file=sys.stderr, flush=True)


def _started(stage: str, trial: Any) -> None:
    """On a terminal, a "running..." line that the trial's result line replaces."""
    if sys.stderr.isatty():
        print(f"whyidle sweep: [{stage}] {trial.label()}: running...", end="", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from whyidle.output import check_not_input, write_atomic, write_stdout
    from whyidle.config import SweepConfig
    from whyidle.sweep.report import render_sweep_html, render_sweep_json, render_sweep_terminal
    from whyidle.sweep.runner import CommandRunner, FunctionRunner, TrialRunner
    from whyidle.sweep.search import run_sweep

    target: list[str] = args.target
    if not target:
        raise UsageError("no TARGET: give FILE.py:FUNCTION, or -- COMMAND with {batch_size} in its arguments")
    if args.steps < 1 or args.warmup < 0 or args.time_limit <= 0:
        raise UsageError("--steps must be >= 1, --warmup >= 0 and --time-limit > 0")
    fmt = args.format or (next((f for s, f in _FORMATS.items() if args.output.lower().endswith(s)), None) if args.output else "terminal")
    if fmt is None:
        raise UsageError(f"cannot tell the output format from {args.output!r}; use .json, .html or .txt, or pass --format")
    cfg = SweepConfig()
    space = _space(args)
    function_form = len(target) == 1 and ":" in target[0] and " " not in target[0]
    runner: TrialRunner
    if function_form:
        from pathlib import Path

        file_part = target[0].rpartition(":")[0]
        if file_part.endswith(".py") and not Path(file_part).is_file():
            raise UsageError(f"{file_part}: no such file (TARGET is FILE.py:FUNCTION)")
        runner = FunctionRunner(target[0], warmup=args.warmup, max_steps=args.steps, time_limit_s=args.time_limit, config=cfg)
    else:
        from whyidle.sweep.runner import format_command
        from whyidle.sweep.trial import Trial

        format_command(target, Trial(batch_size=1))  # unknown placeholders fail before any trial
        runner = CommandRunner(target, warmup=args.warmup, max_steps=args.steps, time_limit_s=args.time_limit, config=cfg)
    inputs = (args.cache, target[0].rpartition(":")[0] if function_form else None)
    if args.output:
        check_not_input(args.output, inputs)  # before any trial runs
    if args.cache:
        from whyidle.sweep.cache import CachedRunner

        context = f"{' '.join(target)}|steps={args.steps}|warmup={args.warmup}"
        runner = CachedRunner(runner, args.cache, context)
    sw = run_sweep(space, runner, cfg, on_entry=_progress, on_start=_started)
    if fmt == "json":
        out = render_sweep_json(sw, cfg)
    elif fmt == "html":
        out = render_sweep_html(sw, cfg)
    else:
        out = render_sweep_terminal(sw, width=args.width, color=sys.stdout.isatty() and not args.output)
    if args.output:
        write_atomic(args.output, out, inputs=inputs)  # never over the training script or the cache
        print(f"whyidle sweep: written to {args.output}", file=sys.stderr)
    else:
        write_stdout(out)
    return 0 if sw.best is not None else 1
