"""whyidle lab --flaw FLAW: train a small job with one injected flaw, diagnose it, self-check.

Exit status: 0 the diagnosis named the flaw (or, for ``none``, found no problem); 1 the
self-check failed; 2 bad usage (a flaw this machine cannot show, torch missing...).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from whyidle.commands import _types as T
from whyidle.errors import UsageError

__all__ = ["add_parser", "run"]

_FLAWS = ("none", "starvation", "h2d", "sync", "smallbatch", "launch")


EXAMPLES = """\
  whyidle lab --flaw starvation
  whyidle lab --flaw all --device cpu
  whyidle lab --flaw sync --trace-dir traces/ --json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "lab",
        help="train a small job with an injected flaw, diagnose it and check the diagnosis names it",
        description="The flaw lab: a self-contained training job (synthetic data) with one injected flaw, "
        "on CUDA if present, otherwise on CPU. On CPU the flaws 'none' and 'starvation' can show; the others need CUDA.",
    )
    p.add_argument("--flaw", choices=_FLAWS + ("all",), default="starvation", help="the flaw to inject ('all': every flaw this machine can show)")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--steps", type=T.integer(1, 100_000), help="tracked steps (default: 12 on CPU, 30 on CUDA)")
    p.add_argument("--trace-dir", metavar="DIR", help="also capture a profiler trace into DIR (always on CUDA)")
    p.add_argument("--json", action="store_true", help="print the JSON report (with the check under extra.lab); with --flaw all, a list of them")
    p.add_argument("--width", type=T.WIDTH, default=100, help="terminal width of the report")
    p.add_argument(
        "--fix",
        action="store_true",
        help="predict the flaw's fix from the flawed run, apply it, run again, and print predicted vs measured speed-up",
    )
    p.add_argument("--record-all", metavar="DIR", help="CUDA only: record every flaw's trace into DIR, check each, write DIR/RECORDED.md")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.capture import require_torch

    require_torch("whyidle lab")
    if args.record_all:
        return _record(args.record_all)
    if args.steps is not None and args.steps < 2:
        raise UsageError("--steps must be at least 2 (the first step is left out as start-up)")
    from whyidle.lab.check import CPU_FLAWS, GPU_ONLY
    from whyidle.lab.run import pick_device, run_lab

    dev = pick_device(args.device)
    if args.fix:
        return _fix(args, dev)
    flaws = [args.flaw] if args.flaw != "all" else list(_FLAWS if dev == "cuda" else CPU_FLAWS)
    failed = 0
    reports: list[dict[str, Any]] = []
    for flaw in flaws:
        res = run_lab(flaw, dev, steps=args.steps, trace_dir=args.trace_dir)
        if args.json:
            from whyidle.render.json import to_dict

            reports.append(to_dict(res.report))
        else:
            from whyidle.render.terminal import render_terminal

            print(f"== whyidle lab: flaw '{flaw}' on {dev} ==")
            print(render_terminal(res.report, width=args.width, color=sys.stdout.isatty()))
        if res.run.trace_path:
            cpu_note = " (a CPU run: the trace has no device events; the check read the step tracker)" if dev == "cpu" else ""
            print(f"whyidle lab: trace saved to {res.run.trace_path}{cpu_note}", file=sys.stderr)
        status = "PASS" if res.check.passed else "FAIL"
        print(f"whyidle lab: {status} flaw={flaw} device={dev} basis={res.check.basis}: {res.check.message}", file=sys.stderr)
        failed += not res.check.passed
    if args.json:
        import msgspec

        doc: Any = reports[0] if len(reports) == 1 else reports
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
    if args.flaw == "all" and dev == "cpu":
        for flaw, why in GPU_ONLY.items():
            print(f"whyidle lab: SKIP flaw={flaw}: needs CUDA ({why})", file=sys.stderr)
    return 1 if failed else 0


def _record(out_dir: str) -> int:
    from whyidle.lab.record import record_all

    results = record_all(out_dir)
    for r in results:
        print(f"{'PASS' if r.passed else 'FAIL'} {r.name}: {r.message}")
    print(f"notes written to {out_dir}/RECORDED.md")
    return 0 if all(r.passed for r in results) else 1


def _fix(args: argparse.Namespace, dev: str) -> int:
    """Predicted vs measured speed-up of each flaw's fix (samples/s of the step tracker)."""
    from whyidle.lab.check import CPU_FLAWS, GPU_ONLY
    from whyidle.lab.predict import FIXABLE, run_fix

    flaws = [args.flaw] if args.flaw != "all" else [f for f in FIXABLE if dev == "cuda" or f in CPU_FLAWS]
    for flaw in flaws:
        if flaw not in FIXABLE:
            raise UsageError(f"--fix: flaw {flaw!r} has no fix to apply; flaws with one: {', '.join(FIXABLE)}")
        if dev == "cpu" and flaw not in CPU_FLAWS:
            raise UsageError(f"--fix: flaw {flaw!r} needs CUDA: {GPU_ONLY[flaw]}")
    results = [run_fix(flaw, dev, steps=args.steps) for flaw in flaws]
    if args.json:
        import msgspec

        doc = [
            {
                "flaw": r.flaw,
                "device": r.device,
                "change": r.change,
                "basis": r.basis,
                "predicted_speedup": r.prediction.speedup if r.prediction else None,
                "predicted_step_ns": [r.prediction.step_ns_before, r.prediction.step_ns_after] if r.prediction else None,
                "predicted_range": [r.prediction.step_ns_low, r.prediction.step_ns_high] if r.prediction else None,
                "measured_samples_per_s": [r.measured_before, r.measured_after],
                "measured_speedup": r.measured_speedup,
                "error": r.error,
            }
            for r in results
        ]
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    print("Predicted (from the flawed run alone) vs measured speed-up of samples/s:")
    for r in results:
        print("  " + r.line())
    return 0
