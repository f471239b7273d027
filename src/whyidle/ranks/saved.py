"""Saved multi-rank JSON reports read back (the inverse of :func:`whyidle.ranks.render_json.multi_rank_to_dict`).

``whyidle diagnose RUN_DIR -o run.json`` saves one report per rank beside the cross-rank analysis
(stragglers, exposed communication, step imbalance, matched collectives). Each rank's report is
read by :func:`whyidle.findings.saved.report_from_dict`; the cross-rank part is rebuilt here, so
the loaded run renders to the same JSON as the original (``tests/test_saved_ranks.py``).
"""

from __future__ import annotations

from typing import Any

from whyidle.diagnosis import as_diagnosis
from whyidle.errors import TraceFormatError
from whyidle.findings.saved import check_schema, report_from_dict
from whyidle.ranks.analysis import CollectiveMatch, CrossRank, RankComm, StepImbalance, Straggler, StragglerCause
from whyidle.ranks.model import MultiRankReport, RankEntry

__all__ = ["multi_rank_from_dict"]


def multi_rank_from_dict(d: dict[str, Any], where: str = "<dict>") -> MultiRankReport:
    """A multi-rank run from its JSON report's dict (``"kind": "multi_rank"``); raises
    TraceFormatError naming ``where`` (and the rank) when a field is missing or malformed."""
    check_schema(d, where)
    try:
        ranks = tuple(_rank(e, where) for e in d["ranks"])
        world = d.get("world_size")
        return MultiRankReport(
            run_dir=str(d.get("run_dir", "")),
            rank_basis=str(d.get("rank_basis", "")),
            world_size=None if world is None else int(world),
            ranks=ranks,
            cross_rank=_cross_rank(d["cross_rank"]),
            notes=tuple(str(n) for n in d.get("notes", ())),
            not_one_job=tuple(str(n) for n in d.get("not_one_job", ())),  # run_findings: derived again
        )
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise TraceFormatError(where, f"is a whyidle multi-rank report with a missing or malformed field ({type(exc).__name__}: {exc})") from None


def _rank(e: dict[str, Any], where: str) -> RankEntry:
    report = e.get("report")
    one = None if report is None else as_diagnosis(report_from_dict(report, f"{where} (rank {e['rank']})"))
    return RankEntry(int(e["rank"]), str(e["path"]), one, str(e.get("error") or ""))


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _cause(c: Any) -> StragglerCause | None:
    if c is None:
        return None
    facts = c.get("facts", {})
    return StragglerCause(str(c["cause"]), float(c["excess_ns_per_step"]), tuple((str(k), v) for k, v in facts.items()))


def _straggler(s: dict[str, Any]) -> Straggler:
    others = tuple(c for c in map(_cause, s["other_causes"]) if c is not None)
    return Straggler(
        int(s["rank"]), _ints(s["steps"]), int(s["collectives_last"]), int(s["collectives_total"]),
        int(s["lateness_ns"]), int(s["max_lateness_ns"]), _cause(s["cause"]), others,
    )


def _cross_rank(c: dict[str, Any]) -> CrossRank:
    im = c["imbalance"]
    return CrossRank(
        ranks=_ints(c["ranks"]),
        basis=str(c["basis"]),
        collectives=tuple(
            CollectiveMatch(int(m["step"]), str(m["name"]), int(m["occurrence"]), _ints(m["dur_ns"]), int(m["transfer_ns"]), int(m["last_rank"]), int(m["lateness_ns"]))
            for m in c["collectives"]
        ),
        unmatched_collectives=int(c["unmatched_collectives"]),
        stragglers=tuple(map(_straggler, c["stragglers"])),
        comm=tuple(
            RankComm(int(x["rank"]), int(x["collective_ns"]), int(x["waiting_ns"]), int(x["transfer_ns"]), int(x["exposed_ns"]), int(x["hidden_ns"]), _opt_float(x["overlap_fraction"]))
            for x in c["communication"]
        ),
        steps=tuple(
            StepImbalance(int(s["step"]), _ints(s["step_ns"]), _ints(s["compute_ns"]), int(s["slowest_rank"]), float(s["step_spread"]), float(s["compute_spread"]))
            for s in im["steps"]
        ),
        mean_step_spread=_opt_float(im["mean_step_spread"]),
        mean_compute_spread=_opt_float(im["mean_compute_spread"]),
        notes=tuple(str(n) for n in c["notes"]),
    )

