"""A multi-rank report from per-rank step reports and one synchronising call per step.

For ranks whose traces cannot be compared (a CPU job: no device activity, no collective kernels),
``whyidle run`` records for each rank its step tracker's report and, per step, the start and
duration of the call in which the ranks synchronise (DDP's gradient all-reduce runs inside the
backward call). :func:`multi_rank_from_steps` turns those into :class:`RankProfile` s and runs the
same cross-rank analysis as for traces (:func:`whyidle.ranks.analysis.cross_rank`): the rank
whose synchronising call is shortest arrived last, late by the longest minus the shortest::

    rank 0  [fwd][backward ...... waits for rank 1 ..........|reduce][opt]
    rank 1  [ slow: 30 ms more ..... ][fwd][backward |reduce][opt]
                                                     ^ last to arrive: shortest call

Each rank's exposed wait in a step (its call's duration minus the step's shortest) is its
communication; the rest of the step's busy time is its own work, so a straggler's extra work
shows as its excess over the median other rank (``compute/more_device_work``; on CPU the host's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from whyidle.config import Config
from whyidle.findings.model import DiagnosisData
from whyidle.ranks.analysis import CollectiveCall, RankProfile, StepProfile, cross_rank
from whyidle.ranks.model import MultiRankReport, RankEntry
import whyidle.ranks.register  # noqa: F401  (a MultiRankReport made here renders: its renderers registered)

__all__ = ["RankSteps", "multi_rank_from_steps"]


@dataclass(frozen=True)
class RankSteps:
    """One rank: its report (with per-step figures) and its synchronising call per step."""

    rank: int
    path: str  # the rank's record, named in the report
    report: DiagnosisData
    sync_calls: tuple[tuple[int, int, int], ...]  # (step, start_ns, duration_ns)
    sync_name: str = "backward (DDP's gradient all-reduce)"


def _profile(r: RankSteps, shortest: dict[int, int]) -> RankProfile:
    calls = {step: (start, dur) for step, start, dur in r.sync_calls}
    steps = []
    comm_total = 0
    for f in r.report.utilization.steps:
        if f.number not in calls or f.number not in shortest:
            continue
        wait = max(calls[f.number][1] - shortest[f.number], 0)
        comm_total += wait
        steps.append(
            StepProfile(f.number, f.duration_ns, max(f.compute_ns - wait, 0), wait, f.idle_ns, tuple(int(v) for v in f.idle_by_cause_ns), -1)
        )
    used = {s.number for s in steps}
    collectives = tuple(CollectiveCall(step, r.sync_name, start, dur) for step, start, dur in r.sync_calls if step in used)
    return RankProfile(r.rank, collectives, tuple(steps), comm_total, comm_total, sum(s.compute_ns for s in steps), bool(steps))


def multi_rank_from_steps(run_dir: str, ranks: Sequence[RankSteps], world_size: int | None, basis: str, config: Config | None = None) -> MultiRankReport:
    """The multi-rank report of ``ranks`` (pure): cross-rank analysis on the steps all of them have."""
    cfg = config or Config()
    per_rank = [{step: dur for step, _, dur in r.sync_calls} for r in ranks]
    common = set(per_rank[0]) if per_rank else set()
    for d in per_rank[1:]:
        common &= set(d)
    shortest = {step: min(d[step] for d in per_rank) for step in common}
    profiles = [_profile(r, shortest) for r in ranks]
    notes = [
        f"ranks compared by their steps (the step tracker, host clock) and the {ranks[0].sync_name if ranks else 'synchronising call'} "
        "of each step: the rank whose call is shortest arrived last"
    ]
    present = {r.rank for r in ranks}
    if world_size is not None and len(present) < world_size:
        missing = ", ".join(str(i) for i in range(world_size) if i not in present)
        notes.append(f"{len(present)} of {world_size} ranks left a record; missing: {missing}")
    entries = tuple(RankEntry(r.rank, r.path, r.report) for r in sorted(ranks, key=lambda r: r.rank))
    return MultiRankReport(run_dir, basis, world_size, entries, cross_rank(profiles, cfg.attribution), tuple(notes))
