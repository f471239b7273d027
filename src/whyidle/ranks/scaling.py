"""Scaling efficiency per GPU, and what the lost share went to (``whyidle scaling``).

Efficiency per GPU = (throughput / GPUs) / (baseline throughput / baseline GPUs), the baseline
being the point with the fewest GPUs. Given two diagnoses' JSON reports (the smaller run and the
larger; a multi-rank report's ranks averaged), :func:`step_composition` splits the mean step into
compute, exposed communication (waiting for the slowest rank vs transfer, when the run has several
ranks), copies and device idle by cause, and :func:`loss_breakdown` says what grew.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whyidle.config import Config
from whyidle.errors import InputError, UsageError

__all__ = ["parse_point", "efficiencies", "step_composition", "loss_breakdown", "superlinear_note", "load_run_report", "Point", "SUPERLINEAR_EFFICIENCY"]


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


def load_run_report(path: str, config: Config | None = None) -> dict[str, Any]:
    """The JSON report (as plain data) of a saved report, a trace or a run folder (diagnosed, with
    ``config``; a saved report is read as it was made)."""
    p = Path(path)
    if p.is_file() and p.name.endswith(".json"):
        import msgspec

        from whyidle.findings.saved import load_saved
        from whyidle.sources import read_bytes

        try:
            doc = msgspec.json.decode(read_bytes(p, expected="a whyidle JSON report or a trace"))
        except RecursionError:
            raise InputError(p, "has JSON nested too deeply to be a whyidle report or a trace") from None
        except msgspec.DecodeError as exc:
            raise InputError(p, f"cannot be read as JSON ({exc})") from None
        if isinstance(doc, dict) and ("steps" in doc or doc.get("kind") == "multi_rank"):
            if "schema_version" in doc:
                load_saved(p)  # a saved report: checked field by field before its figures are used
            return doc
    # a trace, a Parquet timeline or a run folder: diagnose it
    from whyidle.ranks import is_run_dir
    from whyidle.ranks.run import diagnose_ranks

    if is_run_dir(path):
        return diagnose_ranks(path, config).to_dict()
    from whyidle.pipeline import diagnose

    return diagnose(path, config).to_dict()


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
