"""whyidle demo: diagnose a bundled example (a SYNTHETIC trace from whyidle's host/device model)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="diagnose a bundled example trace (synthetic) and show before/after a fix")
    p.add_argument("--json", action="store_true", help="print the JSON report of the starved run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.diagnose import diagnose
    from whyidle.lab.synthetic import training_trace, write_trace
    from whyidle.render.json import render_json
    from whyidle.render.terminal import render_terminal

    with tempfile.TemporaryDirectory() as d:
        before = diagnose(write_trace(training_trace("starvation"), Path(d) / "synthetic_starved.pt.trace.json.gz"))
        after = diagnose(write_trace(training_trace("none"), Path(d) / "synthetic_fixed.pt.trace.json.gz"))
    if args.json:
        sys.stdout.write(render_json(before))
        return 0
    print("SYNTHETIC example: a trace written by whyidle's host/device model (not recorded on a GPU),")
    print("a training loop whose DataLoader runs in the training process (num_workers=0).\n")
    print(render_terminal(before, width=80, color=sys.stdout.isatty()))
    b, a = before.utilization, after.utilization
    print("After the fix (workers prepare batches ahead; same model):")
    print(f"  GPU busy {b.busy_fraction:.1%} -> {a.busy_fraction:.1%}")
    if b.samples_per_s and a.samples_per_s:
        print(f"  samples/s {b.samples_per_s:.0f} -> {a.samples_per_s:.0f} ({a.samples_per_s / b.samples_per_s:.2f}x)")
    return 0
