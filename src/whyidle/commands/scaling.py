"""whyidle scaling GPUS:SAMPLES_PER_S ... [--before A --after B]: scaling efficiency per GPU.

    whyidle scaling 1:1000 4:2400
    -> 4 GPUs: 600 samples/s per GPU = 60% of the 1-GPU rate; 40% lost

Efficiency per GPU = (throughput / GPUs) / (baseline throughput / baseline GPUs), the baseline
being the point with the fewest GPUs. Given two diagnoses (``--before`` the smaller run,
``--after`` the larger; JSON reports from ``whyidle diagnose --json``, traces, or run folders),
it also says what the lost share went to: the growth of the mean step, per GPU, split into
compute, exposed communication (waiting for the slowest rank vs transfer, when the after-run has
several ranks), copies, and device idle by cause. Weak scaling (the same batch per GPU) is
assumed when the reports give no throughput. The analysis is :mod:`whyidle.ranks.scaling`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from whyidle.commands._configfile import add_config_option, config_from
from whyidle.errors import UsageError
from whyidle.ranks.scaling import efficiencies, load_run_report, loss_breakdown, parse_point, step_composition, superlinear_note
from whyidle.units import MS2, format_ns

__all__ = ["add_parser", "run"]

EXAMPLES = """\
  whyidle scaling 1:1000 4:2400 8:4400          # GPUS:SAMPLES_PER_S points
  whyidle scaling --before 1gpu.json --after runs/job-42/
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scaling", help="scaling efficiency per GPU, and what the lost share went to")
    p.add_argument("points", nargs="*", metavar="GPUS:SAMPLES_PER_S", help="e.g. 1:1000 4:2400")
    p.add_argument("--before", help="the smaller run: a JSON report, a trace or a run folder")
    p.add_argument("--after", help="the larger run: a JSON report, a trace or a run folder")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)  # a bad file is said even when no trace is diagnosed
    points = [parse_point(t) for t in args.points]
    if bool(args.before) != bool(args.after):
        raise UsageError("pass both --before and --after (or neither)")
    if not points and not args.before:
        raise UsageError("give throughput points (1:1000 4:2400) and/or --before A --after B")
    out = sys.stdout
    if len(points) == 1:
        raise UsageError("give at least two GPUS:SAMPLES_PER_S points to compare")
    if points:
        rows = efficiencies(points)
        base = rows[0][0]
        out.write(f"Baseline: {base.gpus} GPU(s), {base.samples_per_s:g} samples/s, {base.samples_per_s / base.gpus:g} per GPU\n")
        for p, per_gpu, eff in rows[1:]:
            if p.gpus == base.gpus:
                out.write(
                    f"{p.gpus} GPU(s) again: {p.samples_per_s:g} samples/s, {eff - 1:+.0%} on the baseline at the same "
                    "GPU count: two measurements of one size, not a scaling step; check which one is right\n"
                )
                continue
            lost = f"{1 - eff:.0%} lost" if eff <= 1 else f"{eff - 1:.0%} more than linear"
            out.write(f"{p.gpus} GPU{'s' if p.gpus > 1 else ''}: {p.samples_per_s:g} samples/s, {per_gpu:g} per GPU = {eff:.0%} efficiency per GPU; {lost}\n")
            note = superlinear_note(eff, f"the {p.gpus}-GPU point")
            if note:
                out.write(textwrap.fill(note, width=100) + "\n")
    if args.before:
        b_doc, a_doc = load_run_report(args.before, cfg), load_run_report(args.after, cfg)
        b, b_gpus = step_composition(b_doc)
        a, a_gpus = step_composition(a_doc)
        eff = b["step"] / a["step"] if a["step"] else 0.0
        out.write(
            f"Reports: mean step {format_ns(b['step'], MS2)} on {b_gpus} GPU(s) -> {format_ns(a['step'], MS2)} on {a_gpus} GPU(s); "
            f"{eff:.0%} efficiency per GPU assuming the same batch per GPU\n"
        )
        note = superlinear_note(eff, "the larger run")
        if note:
            out.write(textwrap.fill(note, width=100) + "\n")
        parts = loss_breakdown(b, a)
        if not parts:
            out.write("No component of the step grew: nothing was lost per step.\n")
        else:
            out.write("The lost share went to (what grew in the mean step, per GPU; share of the growth):\n")
            for k, d, share in parts:
                if d > 0:
                    out.write(f"  {k:<52} +{format_ns(d, MS2):>11}  {share:.0%}\n")
            shrank = [(k, d) for k, d, _ in parts if d < 0]
            if shrank:
                out.write("Offset by what shrank: " + ", ".join(f"{k} {format_ns(d, MS2)}" for k, d in shrank) + "\n")
    return 0
