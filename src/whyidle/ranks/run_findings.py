"""The findings of a multi-rank run, each with its fix (pure, derived from the MultiRankReport).

Three questions a reader of a distributed job asks after the per-rank table:

* **the straggler** (the rank the others waited for at collectives), its cause read from its own
  trace (:mod:`whyidle.ranks.analysis`), and the fix for that cause: the straggler rank's own
  finding's fix for a catalogue cause, else the lever for extra compute or uneven shapes;
* **exposed communication**: collective time no compute overlapped, summed over the ranks, when it
  reaches ``min_finding_share_of_window`` of their windows;
* **the top idle cause across ranks**: the cause with the most device-idle time summed over the
  ranks (capture artifacts left out), with the fix of the rank where it costs most.

When the files may not be one job (:mod:`whyidle.ranks.jobcheck`) the first two, which compare
ranks, are not made; the third is each rank's own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whyidle.catalogue import entry
from whyidle.config import Config
from whyidle.findings.model import DiagnosisData
from whyidle.ranks.analysis import COMPUTE_CAUSE, SHAPES_CAUSE, Straggler
from whyidle.units import format_ns

if TYPE_CHECKING:
    from whyidle.ranks.model import MultiRankReport

__all__ = ["RunFinding", "run_findings", "COMM_FIX", "COMPUTE_FIX", "SHAPES_FIX"]

COMM_FIX = (
    "Overlap communication with compute: with DDP keep the gradient all-reduce inside backward (no "
    "synchronising call between loss.backward() and optimizer.step(); try bucket_cap_mb and "
    "gradient_as_bucket_view=True; model.no_sync() on gradient-accumulation steps); with FSDP "
    "prefetch the next all-gather (backward_prefetch=BACKWARD_PRE, forward_prefetch=True)"
)
COMPUTE_FIX = (
    "Even out the work per rank: the same batch size and sequence lengths on every rank, and check "
    "the rank's GPU for lower clocks or throttling (nvidia-smi -q -d CLOCK,PERFORMANCE)"
)
SHAPES_FIX = (
    "Give every rank inputs of the same size: DistributedSampler(drop_last=True), and bucket or pad "
    "variable-length inputs so each rank's batch holds the same number of tokens"
)
_NO_CAUSE_FIX = (
    "Its own trace shows no cause: compare the rank's host with the others' (CPU load, other "
    "processes, GPU clocks: nvidia-smi -q -d CLOCK,PERFORMANCE)"
)


@dataclass(frozen=True)
class RunFinding:
    key: str  # "straggler", "exposed_communication", "top_cause"
    title: str
    time_ns: int  # the time it concerns, summed over the ranks
    what: str  # what was measured, with numbers
    fix: str  # what to change
    ranks: tuple[int, ...]


def _reports(m: MultiRankReport) -> dict[int, DiagnosisData]:
    return {e.rank: e.report for e in m.ranks if e.report is not None and not e.report.no_device_activity}


def _own_fix(report: DiagnosisData | None, key: str) -> str:
    """The fix of the rank's own finding for ``key``, else the catalogue's default lever."""
    for f in report.findings if report is not None else ():
        if f.key == key:
            return f.fix.summary
    try:
        ent = entry(key)
    except KeyError:
        return ""
    lever = ent.levers.get("") or next(iter(ent.levers.values()))
    return lever.summary


def _straggler(s: Straggler, reports: dict[int, DiagnosisData]) -> RunFinding:
    c = s.cause
    if c is None:
        why, fix = "; no cause stands out in its own trace", _NO_CAUSE_FIX
    else:
        why = f"; its own trace shows {c.key}, {format_ns(c.excess_ns_per_step)} per step more than the other ranks"
        fix = SHAPES_FIX if c.key == SHAPES_CAUSE else COMPUTE_FIX if c.key == COMPUTE_CAUSE else _own_fix(reports.get(s.rank), c.key)
    return RunFinding(
        "straggler",
        f"Rank {s.rank} is the straggler",
        s.lateness_ns,
        f"rank {s.rank} arrived last at {s.collectives_last} of {s.collectives_total} collectives; the others waited "
        f"{format_ns(s.lateness_ns)} for it in all{why}",
        fix,
        (s.rank,),
    )


def _exposed(m: MultiRankReport, reports: dict[int, DiagnosisData], cfg: Config) -> RunFinding | None:
    comm = [c for c in m.cross_rank.comm if c.rank in reports]
    exposed = sum(c.exposed_ns for c in comm)
    window = sum(reports[c.rank].window.duration_ns for c in comm)
    if not window or exposed < cfg.findings.min_finding_share_of_window * window:
        return None
    hidden = sum(c.hidden_ns for c in comm)
    worst = max(comm, key=lambda c: c.exposed_ns)
    return RunFinding(
        "exposed_communication",
        "Communication not overlapped with compute",
        exposed,
        f"{format_ns(exposed)} of collective time ran with no compute beside it, {exposed / window:.0%} of the ranks' "
        f"windows ({hidden / (hidden + exposed):.0%} of communication hidden); most on rank {worst.rank} ({format_ns(worst.exposed_ns)})",
        COMM_FIX,
        tuple(c.rank for c in comm if c.exposed_ns),
    )


def _top_cause(reports: dict[int, DiagnosisData]) -> RunFinding | None:
    by_cause: dict[str, dict[int, int]] = defaultdict(dict)
    for rank, r in reports.items():
        for key, ns in r.idle_by_cause_ns.items():
            if ns > 0 and not _artifact(key):
                by_cause[key][rank] = ns
    if not by_cause:
        return None
    key, per_rank = max(by_cause.items(), key=lambda kv: sum(kv[1].values()))
    total = sum(per_rank.values())
    idle = sum(r.utilization.idle_ns for r in reports.values())
    worst = max(per_rank, key=lambda k: per_rank[k])
    return RunFinding(
        "top_cause",
        f"Top idle cause across ranks: {key}",
        total,
        f"{format_ns(total)} of device idle over {len(per_rank)} of {len(reports)} ranks, {total / idle:.0%} of their idle time; "
        f"most on rank {worst} ({format_ns(per_rank[worst])})",
        _own_fix(reports[worst], key),
        tuple(sorted(per_rank)),
    )


def _artifact(key: str) -> bool:
    try:
        return entry(key).artifact
    except KeyError:
        return False


def run_findings(m: MultiRankReport, cfg: Config | None = None) -> tuple[RunFinding, ...]:
    """The run's findings, largest first within each kind: stragglers, exposed communication,
    the top cause across ranks (``m`` a MultiRankReport)."""
    cfg = cfg or Config()
    reports = _reports(m)
    out: list[RunFinding] = []
    if not m.not_one_job:
        out += [_straggler(s, reports) for s in m.cross_rank.stragglers[:3]]
        ex = _exposed(m, reports, cfg)
        if ex is not None:
            out.append(ex)
    top = _top_cause(reports)
    if top is not None:
        out.append(top)
    return tuple(out)
