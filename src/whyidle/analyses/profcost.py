"""The profiler's own host cost, estimated from the trace it recorded.

``torch.profiler`` pays host time for every record it keeps: a record function's enter callback
(with ``record_shapes`` it copies the inputs' shapes, with ``with_stack`` the Python stack), the
Python tracer's callback per Python call, CUPTI's callback around every runtime call. A profiled
host-bound step is therefore slower than the same step untraced (the H200 lab: profiled steps
1.1-1.9x the step tracker's untraced ones). In torch 2.x the enter callback takes the record's
start time last, so its cost lies in the gap *before* each record::

    lane   [op A ...... ]  gap  [op B ......]            gap = A's exit callback + B's enter
                        ^ A ends  ^ B starts                   callback + the code between them

Where the code between two records is nothing (two children of one C++ op, a Python call that
calls another), the gap is the profiler's cost alone; those are the shortest gaps. The estimate
per record kind (CPU op, runtime call, Python frame, user range) is therefore a low quantile of
the gaps before records of that kind on the same thread (``PredictionSettings.whatif_profiler_gap_quantile``),
and the profiler's time is, before each record, that much of its gap (never more than the gap)::

    removed  = [s - min(floor_kind, s - previous boundary), s)   for each record start s

Not removed (so the estimate is a lower bound of the profiler's cost): costs inside the records
(torch < 2 took the start time first, then captured shapes and stack inside the record: the
ResNet-50 samples' cheapest ops last 4-26 us), CUPTI's cost inside a runtime call, and the
profiler's slower caches and allocator.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["ProfilerCost", "RECORD_KINDS", "estimate_profiler_cost", "record_gaps"]

I64 = npt.NDArray[np.int64]

# The host records the profiler pays for (step markers are one per step: left out).
RECORD_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON, Kind.ANNOTATION)


class ProfilerCost(msgspec.Struct, frozen=True):
    """The profiler's estimated host time on the given threads."""

    floor_ns: dict[str, int]  # per record kind: the low quantile of the gap before it (0: too few to tell)
    records: int  # records in [lo, hi) whose gap was charged
    removed: Intervals  # the profiler's time: the charged part of each gap

    def total(self) -> int:
        return self.removed.total()


def record_gaps(start: I64, end: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """For records of one thread: the gap before each start back to the latest earlier boundary
    (a start or an end of another record), and whether it has one (the first record has not).

    A start that coincides with another record's boundary has a gap of 0."""
    # In place where it can be (a thread of the 2 GB trace has 2.3M records: each array is 18 MB).
    b = np.concatenate((start, end))
    b.sort()
    n_lt = np.searchsorted(b, start, side="left")
    shared = np.searchsorted(b, start, side="right") - n_lt > 1  # another record's boundary is here
    has = n_lt > 0
    np.subtract(n_lt, 1, out=n_lt)
    np.maximum(n_lt, 0, out=n_lt)
    gap = np.subtract(start, b[n_lt], dtype=np.int64)
    gap[shared] = 0
    return gap, has | shared


def linear_quantile(a: I64, q: float) -> float:
    """``np.quantile(a, q)`` (its default, linear method) of a non-empty integer array, bit for bit:
    the two order statistics by one partition and numpy's interpolation. np.quantile itself would
    import numpy.ma (through np.unique, numpy 2.4): 6 ms, in the what-if helper's critical path."""
    n = a.size
    v = (n - 1) * q
    lo = math.floor(v)
    i = min(max(lo, 0), n - 1)
    j = min(i + 1, n - 1) if 0 <= v < n - 1 else i
    part = np.partition(a, (i, j) if j != i else i)
    x, y, t = int(part[i]), int(part[j]), v - lo
    d = y - x
    return x + d * t if t < 0.5 else y - d * (1 - t)


def estimate_profiler_cost(tl: Timeline, lanes: npt.NDArray[np.int64], lo: int, hi: int, quantile: float, min_records: int = 50) -> ProfilerCost:
    """The profiler's host time on ``lanes`` within [lo, hi) (see the module docstring).

    A kind with fewer than ``min_records`` gaps in the whole trace gets no floor (nothing is
    removed for it): too few records to find the profiler's own cost among them."""
    kinds = np.array([int(k) for k in RECORD_KINDS])
    gaps_by_kind: dict[int, list[I64]] = {int(k): [] for k in RECORD_KINDS}
    # Per lane, the records that start in [lo, hi): (start, kind, gap before the next) of those
    # with a gap. The whole lane's gaps go to the quantiles; only these are kept for the cut.
    per_lane: list[tuple[I64, npt.NDArray[np.int8], I64]] = []
    is_record = tl.mask(*RECORD_KINDS)
    for ln in lanes.tolist():
        rows = np.flatnonzero((tl.lane == ln) & is_record)
        if rows.size == 0:
            continue
        s, e = tl.start_ns[rows].astype(np.int64, copy=False), tl.end_ns[rows].astype(np.int64, copy=False)
        gap, has = record_gaps(s, e)
        del e
        k = tl.kind[rows]
        for kk in gaps_by_kind:
            gaps_by_kind[kk].append(gap[has & (k == kk)])
        keep = has & (s >= lo) & (s < hi)
        per_lane.append((s[keep], k[keep], gap[keep]))
    floor: dict[int, int] = {}
    for kk, parts in gaps_by_kind.items():
        g = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        floor[kk] = int(linear_quantile(g, quantile)) if g.size >= min_records else 0
    gaps_by_kind.clear()
    starts: list[I64] = []
    ends: list[I64] = []
    records = 0
    by_kind = np.zeros(int(kinds.max()) + 1, dtype=np.int64)
    by_kind[kinds] = [floor[int(x)] for x in kinds]
    for s, k, gap in per_lane:
        f = by_kind[k]
        take = (f > 0) & (gap > 0)
        cut = np.minimum(f, gap)[take]
        starts.append(s[take] - cut)
        ends.append(s[take])
        records += int(take.sum())
    removed = Intervals.union_of(np.concatenate(starts), np.concatenate(ends)) if starts else Intervals.empty()
    return ProfilerCost({Kind(kk).name.lower(): v for kk, v in floor.items()}, records, removed)
