"""A multi-rank run's JSON report: one report per rank beside the cross-rank analysis
(read back by :mod:`whyidle.ranks.saved`)."""

from __future__ import annotations

from typing import Any

from whyidle import __version__
from whyidle.render.json import SCHEMA_VERSION, dumps, report_to_dict

__all__ = ["cross_rank_to_dict", "multi_rank_to_dict", "render_multi_rank_json"]


def cross_rank_to_dict(cr: Any) -> dict[str, Any]:
    """The cross-rank analysis (whyidle.ranks.analysis.CrossRank) as plain data."""

    def cause(c: Any) -> dict[str, Any] | None:
        return None if c is None else {"cause": c.key, "excess_ns_per_step": c.excess_ns_per_step, "facts": dict(c.facts)}

    return {
        "ranks": list(cr.ranks),
        "basis": cr.basis,
        "collective_ns": cr.collective_ns,
        "waiting_ns": cr.waiting_ns,
        "transfer_ns": cr.transfer_ns,
        "unmatched_collectives": cr.unmatched_collectives,
        "stragglers": [
            {
                "rank": s.rank,
                "steps": list(s.steps),
                "collectives_last": s.collectives_last,
                "collectives_total": s.collectives_total,
                "lateness_ns": s.lateness_ns,
                "max_lateness_ns": s.max_lateness_ns,
                "cause": cause(s.cause),
                "other_causes": [cause(c) for c in s.other_causes],
            }
            for s in cr.stragglers
        ],
        "communication": [
            {
                "rank": c.rank,
                "collective_ns": c.collective_ns,
                "waiting_ns": c.waiting_ns,
                "transfer_ns": c.transfer_ns,
                "exposed_ns": c.exposed_ns,
                "hidden_ns": c.hidden_ns,
                "overlap_fraction": c.overlap_fraction,
            }
            for c in cr.comm
        ],
        "imbalance": {
            "mean_step_spread": cr.mean_step_spread,
            "mean_compute_spread": cr.mean_compute_spread,
            "steps": [
                {
                    "step": s.step,
                    "step_ns": list(s.step_ns),
                    "compute_ns": list(s.compute_ns),
                    "slowest_rank": s.slowest_rank,
                    "step_spread": s.step_spread,
                    "compute_spread": s.compute_spread,
                }
                for s in cr.steps
            ],
        },
        "collectives": [
            {
                "step": m.step,
                "name": m.name,
                "occurrence": m.occurrence,
                "dur_ns": list(m.dur_ns),
                "transfer_ns": m.transfer_ns,
                "last_rank": m.last_rank,
                "lateness_ns": m.lateness_ns,
            }
            for m in cr.collectives
        ],
        "notes": list(cr.notes),
    }


def multi_rank_to_dict(r: Any, columns: bool = False) -> dict[str, Any]:
    """A MultiRankReport: one entry per rank with its report (``columns``: in its full form),
    beside the cross-rank results."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "whyidle", "version": __version__},
        "kind": "multi_rank",
        "run_dir": r.run_dir,
        "rank_basis": r.rank_basis,
        "world_size": r.world_size,
        "ranks": [
            {
                "rank": e.rank,
                "path": e.path,
                "error": e.error or None,
                "report": report_to_dict(e.report, columns) if e.report is not None else None,
            }
            for e in r.ranks
        ],
        "cross_rank": cross_rank_to_dict(r.cross_rank),
        "not_one_job": list(r.not_one_job),
        "run_findings": [
            {"key": f.key, "title": f.title, "time_ns": f.time_ns, "what": f.what, "fix": f.fix, "ranks": list(f.ranks)}
            for f in r.run_findings
        ],
        "notes": list(r.notes),
    }


def render_multi_rank_json(r: Any, columns: bool = False) -> str:
    """The JSON report of a multi-rank run (``whyidle diagnose RUN_DIR --json``)."""
    return dumps(multi_rank_to_dict(r, columns))
