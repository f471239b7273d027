"""The evidence computed for all gaps at once equals a per-gap reference, on random nested ops.

``analyses/context.py`` answers "which ops were open when the gap began, which had a Python line,
which top-level op overlapped it most" for every gap together (``analyses/nesting.py``). The
reference below is the per-gap scan it replaced: for each gap, the ops of its thread around the
gap start, walked innermost first. Hypothesis draws op trees (nested as call frames are, with
some ranges that are not nested), Python frames, call stacks, and gaps; both must agree exactly.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from whyidle.analyses import causes as C
from whyidle.analyses.context import ThreadIndex, cause_evidence, gap_context
from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import python_line
from whyidle.analyses.nesting import OpenIndex, previous_greater
from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

NAMES = ["aten::mm", "aten::add", "aten::mm", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "aten::copy_"]
STACKS = [None, None, "train.py(12): step;site-packages/torch/nn.py(3): f", "/usr/lib/python3.11/x.py(1): g", "model.py(40): forward"]
FRAMES = ["train.py(7): main", "site-packages/torch/autograd.py(9): backward", "model.py(40): forward", "<built-in method mm>"]


# -- the primitives against brute force ---------------------------------------------------------


@given(st.lists(st.integers(0, 20), max_size=60))
def test_previous_greater(values: list[int]) -> None:
    e = np.array(values, dtype=np.int64)
    want = [max((q for q in range(p) if values[q] > values[p]), default=-1) for p in range(len(values))]
    assert previous_greater(e).tolist() == want


@st.composite
def intervals(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(0, 40))
    s = np.sort(np.array(draw(st.lists(st.integers(0, 100), min_size=n, max_size=n)), dtype=np.int64))
    e = s + np.array(draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)), dtype=np.int64)
    subset = np.flatnonzero(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=np.bool_))
    t = np.array(draw(st.lists(st.integers(-5, 170), min_size=1, max_size=20)), dtype=np.int64)
    return s, e, subset, t


@given(intervals(), st.booleans(), st.integers(0, 3))
def test_last_spanning(case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], every: bool, walk: int) -> None:
    """Against brute force, over a subset or every record, with chains followed one jump at a
    time for ``walk`` jumps and by the lifting tables after (the index's WALK is 24: a small one
    sends most queries of these shallow drawings down the lifting path too)."""
    s, e, subset, t = case
    index = OpenIndex(s, e, None if every else subset)
    index.WALK = walk
    got = index.last_spanning_at(t)
    pool = range(s.size) if every else subset.tolist()
    want = [max((int(p) for p in pool if s[p] <= q < e[p]), default=-1) for q in t.tolist()]
    assert got.tolist() == want
    assert got.dtype == np.int64


def test_deep_nesting_is_answered_past_the_walk() -> None:
    """A thread nested 5000 deep (a recursion): queries past ``WALK`` jumps climb the lifting tables."""
    n = 5000
    s = np.arange(n, dtype=np.int64)
    e = 2 * n - s  # each record inside the one before
    index = OpenIndex(s, e)
    t = np.array([n, 2 * n - 1, 2 * n, n + 10], dtype=np.int64)
    before = np.full(t.size, n, dtype=np.int64)
    assert index.last_spanning(before, t).tolist() == [n - 1, 0, -1, n - 11]


# -- random threads and gaps ----------------------------------------------------------------------


@st.composite
def threads(draw: Any) -> tuple[Timeline, Gaps]:
    """One or two threads of nested ops (a stack machine), a few unnested ranges, and gaps."""
    b = TimelineBuilder(TimelineMeta(source_format="test"))
    lanes = [b.lane_id(LaneKind.CPU_THREAD, -1, "1", str(k), f"t{k}") for k in range(draw(st.integers(1, 2)))]
    b.add(0, 1, b.lane_id(LaneKind.GPU_STREAM, 0, "0", "7"), Kind.KERNEL, "k")
    for lane in lanes:
        t, open_ = 0, []
        for action in draw(st.lists(st.sampled_from(["open", "open", "close", "wait", "frame"]), max_size=40)):
            t += draw(st.integers(0, 3))
            if action == "open":
                kind = draw(st.sampled_from([Kind.CPU_OP, Kind.CPU_OP, Kind.RUNTIME, Kind.SYNC, Kind.ANNOTATION]))
                open_.append((t, kind, draw(st.integers(0, len(NAMES) - 1)), draw(st.sampled_from(STACKS))))
            elif action == "close" and open_:
                s0, kind, name, stack = open_.pop()
                b.add(s0, t, lane, kind, NAMES[name], stack=stack)
            elif action == "frame":
                s0 = draw(st.integers(0, t))
                b.add(s0, s0 + draw(st.integers(0, 30)), lane, Kind.PYTHON, draw(st.sampled_from(FRAMES)))
        for s0, kind, name, stack in reversed(open_):
            t += draw(st.integers(0, 2))
            b.add(s0, t, lane, kind, NAMES[name], stack=stack)
        for _ in range(draw(st.integers(0, 2))):  # a range that is not nested in the frames around it
            s0 = draw(st.integers(0, t + 1))
            b.add(s0, s0 + draw(st.integers(0, 15)), lane, Kind.CPU_OP, "unnested", stack=draw(st.sampled_from(STACKS)))
    tl = b.build()
    n = draw(st.integers(1, 12))
    start = np.array(draw(st.lists(st.integers(-2, 90), min_size=n, max_size=n)), dtype=np.int64)
    host_end = start + np.array(draw(st.lists(st.integers(-3, 25), min_size=n, max_size=n)), dtype=np.int64)
    lane_of = np.array(draw(st.lists(st.sampled_from([-1, *lanes]), min_size=n, max_size=n)), dtype=np.int64)
    slices = np.zeros((n, len(C.CAUSES)), dtype=np.int64)
    slices[:, :3] = np.array(draw(st.lists(st.integers(0, 4), min_size=3 * n, max_size=3 * n)), dtype=np.int64).reshape(n, 3)
    z = np.zeros(n, dtype=np.int64)
    gaps = Gaps(start, start + 30, z, z - 1, z - 1, lane_of, host_end, np.zeros(n, dtype=np.bool_), slices, True, True)
    return tl, gaps


@settings(max_examples=300, deadline=None)
@given(threads(), st.sampled_from([None, lambda s: "DataLoader" not in s, lambda s: "mm" in s]))
def test_evidence_equals_the_per_gap_reference(case: tuple[Timeline, Gaps], op_filter: Any) -> None:
    tl, gaps = case
    index = ThreadIndex(tl)
    ref = _RefIndex(tl)
    for i in range(len(gaps)):
        assert gap_context(tl, gaps, i, index) == _ref_gap_context(tl, gaps, i, ref)
    for ci in range(3):
        got = cause_evidence(tl, gaps, ci, index, limit_gaps=7, limit_lines=4, op_filter=op_filter)
        assert got == _ref_cause_evidence(tl, gaps, ci, ref, limit_gaps=7, limit_lines=4, op_filter=op_filter)


# -- the reference: one gap at a time, scanning the thread's ops ----------------------------------


class _RefIndex:
    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.index = ThreadIndex(tl)  # only its per-thread tables (rows, top-level ops)

    def thread(self, lane: int) -> Any:
        return self.index.thread(lane)


def _line_of_rows(tl: Timeline, rows: np.ndarray) -> str:
    for r in rows[::-1]:  # innermost first
        st_ = tl.stack_of(int(r))
        if st_ and (line := python_line(st_)):
            return line
    return ""


def _python_frames_at(tl: Timeline, py: np.ndarray, t: int) -> str:
    open_ = py[(tl.start_ns[py] <= t) & (tl.end_ns[py] > t)]
    return python_line(";".join(tl.name_of(int(r)) for r in open_[::-1])) if py.size else ""


def _ref_gap_context(tl: Timeline, gaps: Gaps, i: int, ref: _RefIndex) -> Any:
    from whyidle.analyses.context import GapContext

    lane = int(gaps.thread_lane[i])
    if lane < 0:
        return GapContext("", "", "", "", "", "", 0, "")
    th = ref.thread(lane)
    gs, he = int(gaps.start_ns[i]), int(max(gaps.host_end_ns[i], gaps.start_ns[i] + 1))
    lo, hi = th.tops_overlapping(gs, he)
    before = tl.name_of(int(th.rows[th.top[lo - 1]])) if lo > 0 else ""
    open_at = np.empty(0, dtype=np.int64)
    k = int(np.searchsorted(th.top_s, gs, side="right")) - 1
    if k >= 0 and th.top_e[k] > gs:
        pos = np.arange(int(th.top[k]), int(np.searchsorted(th.s, gs, side="right")))
        open_at = th.rows[pos[th.e[pos] > gs]]
    rt = open_at[tl.kind[open_at] != int(Kind.CPU_OP)]
    during, during_ns, j = "", 0, -1
    if hi > lo:
        ov = np.minimum(th.top_e[lo:hi], he) - np.maximum(th.top_s[lo:hi], gs)
        j = lo + int(np.argmax(ov))
        during, during_ns = tl.name_of(int(th.rows[th.top[j]])), int(ov[j - lo])
    line = _line_of_rows(tl, open_at) or _python_frames_at(tl, th.py, gs)
    if not line and j >= 0:
        a = int(th.top[j])
        b = int(th.top[j + 1]) if j + 1 < th.top.size else th.rows.size
        line = _line_of_rows(tl, th.rows[a:b]) or _python_frames_at(tl, th.py, int(th.top_s[j]))
    if not line:  # no op holds one: the frames open halfway through the host part
        line = _python_frames_at(tl, th.py, gs + (he - gs) // 2)
    name = tl.name_of
    return GapContext(
        tl.lanes[lane].label,
        before,
        name(int(open_at[0])) if open_at.size else "",
        name(int(open_at[-1])) if open_at.size else "",
        name(int(rt[-1])) if rt.size else "",
        during,
        during_ns,
        line,
    )


def _ref_cause_evidence(tl: Timeline, gaps: Gaps, ci: int, ref: _RefIndex, limit_gaps: int, limit_lines: int, op_filter: Any) -> Any:
    from whyidle.analyses.context import CauseEvidence

    part = gaps.slices[:, ci]
    idx = np.flatnonzero(part > 0)
    if idx.size == 0:
        return CauseEvidence((), (), 0, ())
    order = idx[np.argsort(-part[idx], kind="stable")]
    ops_ns: Counter[str] = Counter()
    ops_gaps: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for n_seen, i in enumerate(order[:limit_gaps]):
        lane = int(gaps.thread_lane[i])
        if lane < 0:
            continue
        th = ref.thread(lane)
        gs = int(gaps.start_ns[i])
        he = int(max(gaps.host_end_ns[i], gs + 1))
        lo, hi = th.tops_overlapping(gs, he)
        seen: set[str] = set()
        for j in range(lo, hi):
            name = tl.name_of(int(th.rows[th.top[j]]))
            if op_filter is not None and not op_filter(name):
                continue
            ops_ns[name] += int(min(th.top_e[j], he) - max(th.top_s[j], gs))
            if name not in seen:
                ops_gaps[name] += 1
                seen.add(name)
        if n_seen < limit_lines and (line := _ref_gap_context(tl, gaps, int(i), ref).python_line):
            lines[line] += 1
    top_ops = tuple((n, ns, ops_gaps[n]) for n, ns in ops_ns.most_common(5))
    ex = tuple((int(gaps.start_ns[i]), int(gaps.end_ns[i]), int(part[i])) for i in order[:5])
    return CauseEvidence(top_ops, tuple(lines.most_common(5)), int(idx.size), ex)


# -- first calls that were first-use costs ---------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=50))
@settings(max_examples=200, deadline=None)
def test_first_use_rows_against_their_definition(calls: list[tuple[int, int, int]]) -> None:
    """A name's first call (earliest start) counts when it took at least ``min_ns`` and ``ratio``
    times the median of at least two later calls; by brute force over every name."""
    from statistics import median

    from whyidle.analyses.hostops import first_use_rows

    b = TimelineBuilder(TimelineMeta(source_format="test"))
    lane = b.lane_id(LaneKind.CPU_THREAD, -1, "1", "1", "main")
    for s0, d, k in calls:
        b.add(s0, s0 + d, lane, Kind.CPU_OP, f"op{k}")
    tl = b.build()
    rows = np.flatnonzero(tl.lane == lane)
    min_ns, ratio = 10, 3.0
    want = []
    for name in {tl.name_of(int(r)) for r in rows}:
        mine = [int(r) for r in rows if tl.name_of(int(r)) == name]  # timeline order: by start
        durs = [int(tl.end_ns[r] - tl.start_ns[r]) for r in mine]
        if durs[0] >= min_ns and len(durs) >= 3 and durs[0] >= ratio * median(durs[1:]):
            want.append(mine[0])
    assert first_use_rows(tl, rows, min_ns, ratio).tolist() == sorted(want)
