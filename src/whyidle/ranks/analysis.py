"""Cross-rank analysis of a distributed job: stragglers, collectives, overlap, imbalance.

Each rank is first diagnosed on its own (gaps, causes, steps). :func:`rank_profile` then keeps
the few things the cross-rank analysis needs from its timeline (the collectives of each step and
the leading input dimension of each step), and :func:`cross_rank` compares the ranks step by step.

Collectives are matched across ranks by step number and by order among the collectives of the
same name inside the step. A collective completes on every rank at about the same moment (no rank
can finish before the last one has joined), so a rank that joins late spends the least time in
the collective kernel::

    rank 0  ████ compute ████|ncclAllReduce ........ waiting ........|transfer|
    rank 1  ███ compute ███|ncclAllReduce ......... waiting .........|transfer|
    rank 2  ██████████ input pipeline / compute ███████████████|AllReduce ...|
                                                             ^ last to arrive: shortest kernel

So per collective: ``transfer`` = the shortest duration of that collective across ranks; each
rank's ``waiting`` = its duration minus the transfer; the straggler is the rank with the shortest
duration, late by ``longest - shortest``. This reads durations only and so does not depend on the
ranks' clocks being synchronised.

Why a rank straggles is read from its own single-rank attribution in the steps where it was last:
the idle cause (or the extra compute) by which it exceeds the median of the other ranks in the
same steps, and whether its input's leading dimension was larger than theirs (uneven shapes).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from whyidle.analyses import causes as C
from whyidle.analyses.hostops import h2d_copy_rows
from whyidle.analyses.links import Links
from whyidle.analyses.utilization import Utilization
from whyidle.analyses.window import Window
from whyidle.config import AttributionSettings
from whyidle.timeline.model import Kind, Timeline

__all__ = [
    "CollectiveCall",
    "StepProfile",
    "RankProfile",
    "rank_profile",
    "CollectiveMatch",
    "StragglerCause",
    "Straggler",
    "RankComm",
    "StepImbalance",
    "CrossRank",
    "cross_rank",
    "COMPUTE_CAUSE",
    "SHAPES_CAUSE",
]

# Straggler causes that are not device-idle causes.
COMPUTE_CAUSE = "compute/more_device_work"  # the rank's device computed longer than the others
SHAPES_CAUSE = "imbalance/uneven_input_shapes"  # and its input's leading dimension was larger


@dataclass(frozen=True)
class CollectiveCall:
    step: int  # ProfilerStep number, -1 without step markers
    name: str
    start_ns: int
    dur_ns: int


@dataclass(frozen=True)
class StepProfile:
    number: int
    duration_ns: int
    compute_ns: int
    communication_ns: int  # exposed
    idle_ns: int
    idle_by_cause_ns: tuple[int, ...]  # aligned with analyses.causes.CAUSES
    input_dim: int  # leading dimension of the first tensor copied to the device, -1 unknown


@dataclass(frozen=True)
class RankProfile:
    """What the cross-rank analysis needs from one rank: small, picklable, no timeline."""

    rank: int
    collectives: tuple[CollectiveCall, ...]
    steps: tuple[StepProfile, ...]
    communication_total_ns: int
    communication_exposed_ns: int
    compute_ns: int
    has_device_activity: bool


def _step_input_dims(tl: Timeline, links: Links, window: Window) -> dict[int, int]:
    if not window.steps:
        return {}
    lane = int(tl.lane[window.steps[0].row])
    rows = h2d_copy_rows(tl, links, lane)
    rows = rows[tl.shape0[rows] > 0]
    starts = tl.start_ns[rows]
    out: dict[int, int] = {}
    for st in window.steps:
        i = int(np.searchsorted(starts, st.start_ns, side="left"))
        if i < rows.size and starts[i] < st.end_ns:
            out[st.number] = int(tl.shape0[rows[i]])
    return out


def rank_profile(rank: int, tl: Timeline, links: Links, window: Window, util: Utilization) -> RankProfile:
    """Extract one rank's collectives and step figures (pure)."""
    rows = np.flatnonzero(
        (tl.kind == int(Kind.COLLECTIVE)) & (tl.start_ns >= window.start_ns) & (tl.start_ns < window.end_ns)
    )
    rows = rows[np.argsort(tl.start_ns[rows], kind="stable")]
    bounds = np.array([s.start_ns for s in window.steps], dtype=np.int64)
    numbers = [s.number for s in window.steps]
    calls = []
    for r in rows.tolist():
        s = int(tl.start_ns[r])
        if numbers:
            k = int(np.searchsorted(bounds, s, side="right")) - 1
            step = numbers[max(k, 0)]
        else:
            step = -1
        calls.append(CollectiveCall(step, tl.name_of(r), s, int(tl.end_ns[r] - s)))
    dims = _step_input_dims(tl, links, window)
    steps = tuple(
        StepProfile(
            f.number,
            f.duration_ns,
            f.compute_ns,
            f.communication_ns,
            f.idle_ns,
            tuple(int(v) for v in f.idle_by_cause_ns),
            dims.get(f.number, -1),
        )
        for f in util.steps
    )
    return RankProfile(
        rank=rank,
        collectives=tuple(calls),
        steps=steps,
        communication_total_ns=util.communication_total_ns,
        communication_exposed_ns=util.communication_ns,
        compute_ns=util.compute_ns,
        has_device_activity=links.device_rows.size > 0,
    )


# -- cross-rank results -----------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveMatch:
    """One collective, matched across ranks."""

    step: int
    name: str
    occurrence: int  # k-th collective of this name in the step
    dur_ns: tuple[int, ...]  # per rank, in CrossRank.ranks order
    transfer_ns: int  # shortest duration across ranks
    last_rank: int  # the rank that arrived last (shortest duration)
    lateness_ns: int  # longest - shortest duration: how long the earliest rank waited for it


@dataclass(frozen=True)
class StragglerCause:
    key: str  # a cause key ("starvation/input_pipeline"...), COMPUTE_CAUSE or SHAPES_CAUSE
    excess_ns_per_step: float  # mean over the straggler's steps, vs the median of the others
    facts: tuple[tuple[str, float | int], ...] = ()


@dataclass(frozen=True)
class Straggler:
    rank: int
    steps: tuple[int, ...]  # steps in which this rank was the last to arrive
    collectives_last: int  # collectives at which it arrived last (by more than the threshold)
    collectives_total: int
    lateness_ns: int  # summed over those collectives
    max_lateness_ns: int
    cause: StragglerCause | None  # the dominant reason, None when no reason stands out
    other_causes: tuple[StragglerCause, ...]


@dataclass(frozen=True)
class RankComm:
    rank: int
    collective_ns: int  # time in matched collective kernels
    waiting_ns: int  # of which waiting for the slowest rank
    transfer_ns: int  # of which transfer (the shortest duration of each collective)
    exposed_ns: int  # communication not overlapped by compute (the single-rank figure)
    hidden_ns: int
    overlap_fraction: float | None  # hidden / total communication


@dataclass(frozen=True)
class StepImbalance:
    step: int
    step_ns: tuple[int, ...]  # per rank
    compute_ns: tuple[int, ...]
    slowest_rank: int  # longest compute
    step_spread: float  # (max - min) / mean of step time
    compute_spread: float


@dataclass(frozen=True)
class CrossRank:
    ranks: tuple[int, ...]  # ranks compared (with device activity), sorted
    basis: str
    collectives: tuple[CollectiveMatch, ...]
    unmatched_collectives: int  # collectives seen on some ranks only
    stragglers: tuple[Straggler, ...]  # most lateness first
    comm: tuple[RankComm, ...]
    steps: tuple[StepImbalance, ...]
    mean_step_spread: float | None
    mean_compute_spread: float | None
    notes: tuple[str, ...]

    @property
    def collective_ns(self) -> int:
        return sum(c.collective_ns for c in self.comm)

    @property
    def waiting_ns(self) -> int:
        return sum(c.waiting_ns for c in self.comm)

    @property
    def transfer_ns(self) -> int:
        return sum(c.transfer_ns for c in self.comm)


_BASIS = (
    "collectives matched by step and order; transfer = shortest duration of each collective "
    "across ranks, waiting = the rest; the rank with the shortest duration arrived last "
    "(durations only: independent of clock offsets between ranks)"
)


def _match(profiles: list[RankProfile]) -> tuple[list[CollectiveMatch], int]:
    keyed: list[dict[tuple[int, str, int], CollectiveCall]] = []
    for p in profiles:
        seen: Counter[tuple[int, str]] = Counter()
        d: dict[tuple[int, str, int], CollectiveCall] = {}
        for c in p.collectives:
            k = seen[(c.step, c.name)]
            seen[(c.step, c.name)] += 1
            d[(c.step, c.name, k)] = c
        keyed.append(d)
    common = set(keyed[0])
    for d in keyed[1:]:
        common &= set(d)
    every: set[tuple[int, str, int]] = set().union(*keyed)
    unmatched = len(every - common)
    out = []
    # Order by step, then by the first rank's start time.
    for key in sorted(common, key=lambda k: (k[0], keyed[0][k].start_ns)):
        durs = tuple(d[key].dur_ns for d in keyed)
        lo = min(durs)
        last = profiles[int(np.argmin(durs))].rank
        out.append(CollectiveMatch(key[0], key[1], key[2], durs, lo, last, max(durs) - lo))
    return out, unmatched


def _median_others(values: dict[int, np.ndarray], rank: int) -> np.ndarray:
    others = [v for r, v in values.items() if r != rank]
    return np.median(np.stack(others), axis=0) if others else np.zeros_like(values[rank])


def _why(rank: int, steps: tuple[int, ...], profiles: list[RankProfile], cfg: AttributionSettings) -> tuple[StragglerCause | None, tuple[StragglerCause, ...]]:
    """The straggler's own excess over the median other rank, in the steps where it was last."""
    per_rank: dict[int, np.ndarray] = {}
    dims: dict[int, np.ndarray] = {}
    wanted = set(steps)
    for p in profiles:
        by_num = {s.number: s for s in p.steps}
        rows = [by_num[n] for n in steps if n in by_num]
        if len(rows) != len(wanted):
            continue  # this rank lacks some of the steps: left out of the comparison
        per_rank[p.rank] = np.array([[*s.idle_by_cause_ns, s.compute_ns] for s in rows], dtype=np.float64).mean(axis=0)
        dims[p.rank] = np.array([s.input_dim for s in rows], dtype=np.float64)
    if rank not in per_rank or len(per_rank) < 2:
        return None, ()
    excess = per_rank[rank] - _median_others(per_rank, rank)
    keys = [c.key for c in C.CAUSES] + [COMPUTE_CAUSE]
    found = [StragglerCause(keys[i], float(excess[i])) for i in np.argsort(-excess) if excess[i] >= cfg.straggler_min_lateness_ns]
    own = dims[rank]
    ref = _median_others(dims, rank)
    known = (own > 0) & (ref > 0)
    if known.any():
        ratio = float((own[known] / ref[known]).mean())
        if ratio >= 1.0 + cfg.uneven_input_min_ratio and found and found[0].key == COMPUTE_CAUSE:
            # More compute because the rank got a larger input: the shapes are the reason.
            first = found[0]
            shaped = StragglerCause(
                SHAPES_CAUSE,
                first.excess_ns_per_step,
                (("input_dim", int(own[known].mean())), ("others_input_dim", int(ref[known].mean())), ("ratio", ratio)),
            )
            found = [shaped, *found]
    if not found:
        return None, ()
    return found[0], tuple(found[1:4])


def _stragglers(matches: list[CollectiveMatch], profiles: list[RankProfile], cfg: AttributionSettings) -> list[Straggler]:
    thr = cfg.straggler_min_lateness_ns
    late = [m for m in matches if m.lateness_ns >= thr]
    if not late:
        return []
    # The straggler of a step: the rank that made the others wait longest in it.
    per_step: dict[int, Counter[int]] = defaultdict(Counter)
    for m in late:
        per_step[m.step][m.last_rank] += m.lateness_ns
    step_of: dict[int, list[int]] = defaultdict(list)
    for step, c in per_step.items():
        step_of[c.most_common(1)[0][0]].append(step)
    out = []
    for rank in {m.last_rank for m in late}:
        mine = [m for m in late if m.last_rank == rank]
        steps = tuple(sorted(step_of.get(rank, [])))
        cause, others = _why(rank, steps or tuple(sorted({m.step for m in mine})), profiles, cfg)
        out.append(
            Straggler(
                rank=rank,
                steps=steps,
                collectives_last=len(mine),
                collectives_total=len(matches),
                lateness_ns=sum(m.lateness_ns for m in mine),
                max_lateness_ns=max(m.lateness_ns for m in mine),
                cause=cause,
                other_causes=others,
            )
        )
    out.sort(key=lambda s: -s.lateness_ns)
    return out


def _comm(matches: list[CollectiveMatch], profiles: list[RankProfile]) -> list[RankComm]:
    out = []
    for i, p in enumerate(profiles):
        total = sum(m.dur_ns[i] for m in matches)
        transfer = sum(m.transfer_ns for m in matches)
        hidden = p.communication_total_ns - p.communication_exposed_ns
        out.append(
            RankComm(
                rank=p.rank,
                collective_ns=total,
                waiting_ns=total - transfer,
                transfer_ns=transfer,
                exposed_ns=p.communication_exposed_ns,
                hidden_ns=hidden,
                overlap_fraction=hidden / p.communication_total_ns if p.communication_total_ns else None,
            )
        )
    return out


def _spread(v: np.ndarray) -> float:
    m = float(v.mean())
    return float(v.max() - v.min()) / m if m > 0 else 0.0


def _imbalance(profiles: list[RankProfile]) -> list[StepImbalance]:
    by_rank = [{s.number: s for s in p.steps} for p in profiles]
    common = set(by_rank[0])
    for d in by_rank[1:]:
        common &= set(d)
    out = []
    for n in sorted(common):
        st = np.array([d[n].duration_ns for d in by_rank], dtype=np.int64)
        cp = np.array([d[n].compute_ns for d in by_rank], dtype=np.int64)
        out.append(
            StepImbalance(
                step=n,
                step_ns=tuple(int(x) for x in st),
                compute_ns=tuple(int(x) for x in cp),
                slowest_rank=profiles[int(np.argmax(cp))].rank,
                step_spread=_spread(st),
                compute_spread=_spread(cp),
            )
        )
    return out


def cross_rank(profiles: list[RankProfile], cfg: AttributionSettings | None = None) -> CrossRank:
    """Compare ranks step by step (pure). Ranks without device activity are left out, with a note."""
    cfg = cfg or AttributionSettings()
    notes = []
    idle_ranks = [p.rank for p in profiles if not p.has_device_activity]
    if idle_ranks:
        notes.append(f"ranks without GPU activity, left out of the comparison: {', '.join(map(str, idle_ranks))}")
    ps = sorted((p for p in profiles if p.has_device_activity), key=lambda p: p.rank)
    if len(ps) < 2:
        notes.append("fewer than two ranks with GPU activity: nothing to compare across ranks")
        return CrossRank(tuple(p.rank for p in ps), _BASIS, (), 0, (), tuple(_comm([], ps)), (), None, None, tuple(notes))
    matches, unmatched = _match(ps)
    if unmatched:
        notes.append(f"{unmatched} collectives appear on some ranks only; they were not compared")
    if not matches:
        notes.append("no collective kernel (NCCL/RCCL) matched across ranks: no straggler or waiting figures")
    steps = _imbalance(ps)
    return CrossRank(
        ranks=tuple(p.rank for p in ps),
        basis=_BASIS,
        collectives=tuple(matches),
        unmatched_collectives=unmatched,
        stragglers=tuple(_stragglers(matches, ps, cfg)),
        comm=tuple(_comm(matches, ps)),
        steps=tuple(steps),
        mean_step_spread=float(np.mean([s.step_spread for s in steps])) if steps else None,
        mean_compute_spread=float(np.mean([s.compute_spread for s in steps])) if steps else None,
        notes=tuple(notes),
    )
