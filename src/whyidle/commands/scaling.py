"""whyidle scaling GPUS:SAMPLES_PER_S ... [--before A --after B]: scaling efficiency per GPU.

    whyidle scaling 1:1000 4:2400
    -> 4 GPUs: 600 samples/s per GPU = 60% of the 1-GPU rate; 40% lost

Efficiency per GPU = (throughput / GPUs) / (baseline throughput / baseline GPUs), the baseline
being the point with the fewest GPUs. Given two diagnoses (``--before`` the smaller run,
``--after`` the larger; JSON reports from ``whyidle diagnose --json``, traces, or run folders),
it also says what the lost share went to: the growth of the mean step, per GPU, split into
compute, exposed communication (waiting for the slowest rank vs transfer, when the after-run has
several ranks), copies, and device idle by cause. Weak scaling (the same batch per GPU) is
assumed when the reports give no throughput.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whyidle.errors import InputError, UsageError
from whyidle.units import MS2, format_ns

__all__ = ["add_parser", "run", "parse_point", "efficiencies", "step_composition", "loss_breakdown", "superlinear_note", "Point"]

# Efficiency per GPU above which the inputs are questioned: 2% over linear, an allowance for the
# run-to-run noise of a throughput measurement (a judgement, not a measured value).
SUPERLINEAR_EFFICIENCY = 1.02


@dataclass(frozen=True)
class Point:
    gpus: int
    samples_per_s: float


def parse_point(text: str) -> Point:
    try:
        g, t = text.split(":", 1)
        p = Point(int(g), float(t))
    except ValueError:
        raise UsageError(f"{text!r}: expected GPUS:SAMPLES_PER_S, e.g. 4:2400") from None
    if p.gpus <= 0 or p.samples_per_s <= 0:
        raise UsageError(f"{text!r}: GPUs and samples/s must be positive")
    return p


def efficiencies(points: list[Point]) -> list[tuple[Point, float, float]]:
    """(point, samples/s per GPU, efficiency vs the fewest-GPU point), sorted by GPUs."""
    pts = sorted(points, key=lambda p: p.gpus)
    base = pts[0].samples_per_s / pts[0].gpus
    return [(p, p.samples_per_s / p.gpus, (p.samples_per_s / p.gpus) / base) for p in pts]


def superlinear_note(eff: float, what: str) -> str | None:
    """A question for an efficiency above 100%, which usually means the inputs are not comparable."""
    if eff <= SUPERLINEAR_EFFICIENCY:
        return None
    return (
        f"Check the inputs: {eff:.0%} efficiency per GPU means {what} ran faster per GPU than the baseline. "
        "That is rare; it usually means the numbers are not comparable: total samples/s for one and per-GPU "
        "for the other, a different batch size per GPU, or a baseline measured during warm-up. Real causes "
        "exist (a per-GPU share that now fits in cache or memory, a baseline that was itself starved)."
    )


# -- what the lost share went to ----------------------------------------------------------


def _load_report(path: str) -> dict[str, Any]:
    p = Path(path)
    if p.is_file() and p.name.endswith(".json"):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(p, f"cannot be read as JSON ({exc})") from None
        if isinstance(doc, dict) and ("steps" in doc or doc.get("kind") == "multi_rank"):
            return doc
    # a trace, a Parquet timeline or a run folder: diagnose it
    from whyidle.commands._ranks import is_run_dir

    if is_run_dir(path):
        from whyidle.ranks import diagnose_ranks

        return diagnose_ranks(path).to_dict()
    from whyidle.pipeline import diagnose

    return diagnose(path).to_dict()


def step_composition(doc: dict[str, Any]) -> tuple[dict[str, float], int]:
    """Mean per-step ns by component (averaged over ranks for a multi-rank report), and GPUs."""
    reports = [e["report"] for e in doc["ranks"] if e.get("report")] if doc.get("kind") == "multi_rank" else [doc]
    total: dict[str, float] = {}
    counted = 0
    for r in reports:
        steps = r.get("steps") or []
        if not steps:
            continue
        counted += 1
        n = len(steps)
        for s in steps:
            parts = {"compute": s["compute_ns"], "communication": s["communication_ns"], "copies": s["memcpy_ns"] + s["memset_ns"]}
            parts.update({f"idle: {k}": v for k, v in s["idle_by_cause_ns"].items()})
            parts["step"] = s["duration_ns"]
            for k, v in parts.items():
                total[k] = total.get(k, 0.0) + v / n
    if not counted:
        raise UsageError("a report has no steps (no ProfilerStep markers): cannot compare step composition")
    comp = {k: v / counted for k, v in total.items()}
    if doc.get("kind") == "multi_rank":
        cr = doc["cross_rank"]
        coll = cr.get("collective_ns") or 0
        if coll and comp.get("communication"):
            waiting = cr["waiting_ns"] / coll
            c = comp.pop("communication")
            comp["communication: waiting for the slowest rank"] = c * waiting
            comp["communication: transfer"] = c * (1 - waiting)
    gpus = max(len(reports), 1)
    return comp, gpus


def loss_breakdown(before: dict[str, float], after: dict[str, float]) -> list[tuple[str, float, float]]:
    """(component, ns per step it grew (or, negative, shrank) by, share of the summed growth)."""
    keys = [k for k in {*before, *after} if k != "step"]
    if "communication" in before and "communication" not in after:
        before = {**before, "communication: transfer": before["communication"]}
        keys = [k for k in keys if k != "communication"]
    grow = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in keys}
    gross = sum(d for d in grow.values() if d > 0)  # components that shrank are listed apart
    out = [(k, d, d / gross if gross > 0 else 0.0) for k, d in grow.items() if d != 0]
    out.sort(key=lambda t: -t[1])
    return out


EXAMPLES = """\
  whyidle scaling 1:1000 4:2400 8:4400          # GPUS:SAMPLES_PER_S points
  whyidle scaling --before 1gpu.json --after runs/job-42/
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scaling", help="scaling efficiency per GPU, and what the lost share went to")
    p.add_argument("points", nargs="*", metavar="GPUS:SAMPLES_PER_S", help="e.g. 1:1000 4:2400")
    p.add_argument("--before", help="the smaller run: a JSON report, a trace or a run folder")
    p.add_argument("--after", help="the larger run: a JSON report, a trace or a run folder")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
        b_doc, a_doc = _load_report(args.before), _load_report(args.after)
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
