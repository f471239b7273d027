"""What the launching thread was doing before and during a gap: the evidence behind a cause.

For one gap (see :mod:`whyidle.analyses.gaps`)::

    device  ██████|..............gap...............|████
    host    [op A]   [ top-level op B ............ ][launch]
             ^ before        ^ during (most overlap)

* ``before``: the last top-level op that ended before the gap began;
* ``open_at_start``: the ops open when the gap began, outermost and innermost;
* ``during``: the top-level op that overlaps the host part of the gap the most;
* ``python_line``: the innermost user frame of the first of those ops that carries a stack, or
  of the ``python_function`` frames open at that moment.

Top-level ops are those not nested in another traced op of the same thread (step markers and
user annotations that wrap whole phases are skipped, DataLoader ranges are kept).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import is_dataloader, python_line
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["GapContext", "CauseEvidence", "ThreadIndex", "gap_context", "cause_evidence", "explaining_ops", "brief_context"]

I64 = npt.NDArray[np.int64]
_WORK = (int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.SYNC))


class GapContext(msgspec.Struct, frozen=True):
    thread: str
    before: str
    outermost: str
    innermost: str
    runtime_call: str
    during: str
    during_ns: int
    python_line: str


class CauseEvidence(msgspec.Struct, frozen=True):
    top_ops: tuple[tuple[str, int, int], ...]  # (name, ns overlapping the gaps, number of gaps)
    python_lines: tuple[tuple[str, int], ...]  # (line, number of gaps)
    gap_count: int
    examples: tuple[tuple[int, int, int], ...]  # (start_ns, end_ns, ns of this cause)


class _Thread(msgspec.Struct, frozen=True):
    """One thread's ops sorted by start (nested ones after their parent), and its top-level ops.

    Top-level ops are disjoint and sorted, so the ones overlapping an interval are a contiguous
    range found by binary search; the ops nested in a top-level op follow it contiguously.
    """

    rows: I64
    s: I64
    e: I64
    top: I64  # positions in ``rows`` of the top-level ops
    top_s: I64
    top_e: I64
    py: I64  # python_function rows

    def tops_overlapping(self, lo: int, hi: int) -> tuple[int, int]:
        return int(np.searchsorted(self.top_e, lo, side="right")), int(np.searchsorted(self.top_s, hi, side="left"))

    def nested_span(self, k: int) -> tuple[int, int]:
        """Positions in ``rows`` of top-level op ``k`` and everything nested in it."""
        end = int(self.top[k + 1]) if k + 1 < self.top.size else self.rows.size
        return int(self.top[k]), end


class _ThreadLists(NamedTuple):
    """A thread's op tables (see :class:`_Thread`) as lists; ``name``, ``stack`` and ``is_op``
    are per position in ``rows``."""

    rows: list[int]
    s: list[int]
    e: list[int]
    top: list[int]
    top_s: list[int]
    top_e: list[int]
    name: list[int]
    stack: list[int]
    is_op: list[bool]


class ThreadIndex:
    """Per-thread op tables, built lazily per thread."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self._cache: dict[int, _Thread] = {}
        self._dl = tl.name_mask(is_dataloader)
        self._lines: dict[int, str] = {}
        self._lists: dict[int, _ThreadLists] = {}

    def line_of_stack(self, stack: int) -> str:
        """The innermost user frame of call stack ``stack`` (a string index; -1: none), parsed once."""
        if stack < 0:
            return ""
        line = self._lines.get(stack)
        if line is None:
            line = self._lines[stack] = python_line(self.tl.strings[stack])
        return line

    def thread(self, lane: int) -> _Thread:
        got = self._cache.get(lane)
        if got is not None:
            return got
        tl = self.tl
        on = tl.lane == lane
        work = on & (np.isin(tl.kind, _WORK) | ((tl.kind == int(Kind.ANNOTATION)) & self._dl))
        rows = np.flatnonzero(work)  # timeline rows are sorted by start, longest first on ties
        s, e = tl.start_ns[rows], tl.end_ns[rows]
        reach = np.maximum.accumulate(e) if rows.size else e
        is_top = np.ones(rows.size, dtype=np.bool_)
        if rows.size > 1:
            is_top[1:] = s[1:] >= reach[:-1]
        top = np.flatnonzero(is_top)
        py = np.flatnonzero(on & (tl.kind == int(Kind.PYTHON)))
        th = _Thread(rows, s, e, top, s[top], e[top], py)
        self._cache[lane] = th
        return th

    def lists(self, lane: int) -> _ThreadLists:
        """The thread's tables as Python lists, for per-gap lookups (bisect on a list is several
        times faster than a numpy call on one value)."""
        got = self._lists.get(lane)
        if got is None:
            th = self.thread(lane)
            tl = self.tl
            got = self._lists[lane] = _ThreadLists(
                rows=th.rows.tolist(),
                s=th.s.tolist(),
                e=th.e.tolist(),
                top=th.top.tolist(),
                top_s=th.top_s.tolist(),
                top_e=th.top_e.tolist(),
                name=tl.name[th.rows].tolist(),
                stack=tl.stack[th.rows].tolist(),
                is_op=(tl.kind[th.rows] == int(Kind.CPU_OP)).tolist(),
            )
        return got

    def rows(self, lane: int) -> tuple[I64, npt.NDArray[np.bool_], I64]:
        """(rows, top-level mask over rows, python_function rows) of one thread."""
        th = self.thread(lane)
        is_top = np.zeros(th.rows.size, dtype=np.bool_)
        is_top[th.top] = True
        return th.rows, is_top, th.py


def _line_of_rows(tl: Timeline, rows: I64, index: ThreadIndex) -> str:
    for r in rows[::-1].tolist():  # innermost first
        line = index.line_of_stack(int(tl.stack[r]))
        if line:
            return line
    return ""


def _python_frames_at(tl: Timeline, py: I64, t: int) -> str:
    if py.size == 0:
        return ""
    open_ = py[(tl.start_ns[py] <= t) & (tl.end_ns[py] > t)]
    return python_line(";".join(tl.name_of(int(r)) for r in open_[::-1]))


def gap_context(tl: Timeline, gaps: Gaps, i: int, index: ThreadIndex) -> GapContext:
    lane = int(gaps.thread_lane[i])
    if lane < 0:
        return GapContext("", "", "", "", "", "", 0, "")
    th = index.thread(lane)
    gs, he = int(gaps.start_ns[i]), int(max(gaps.host_end_ns[i], gaps.start_ns[i] + 1))
    lo, hi = th.tops_overlapping(gs, he)
    before = tl.name_of(int(th.rows[th.top[lo - 1]])) if lo > 0 else ""
    # Ops open when the gap began: the top-level op containing gs and its nested ops around gs.
    open_at = np.empty(0, dtype=np.int64)
    k = int(np.searchsorted(th.top_s, gs, side="right")) - 1
    if k >= 0 and th.top_e[k] > gs:
        a, _ = th.nested_span(k)
        b = int(np.searchsorted(th.s, gs, side="right"))
        pos = np.arange(a, b)
        open_at = th.rows[pos[th.e[pos] > gs]]
    rt = open_at[tl.kind[open_at] != int(Kind.CPU_OP)]
    during, during_ns, j = "", 0, -1
    if hi > lo:
        ov = np.minimum(th.top_e[lo:hi], he) - np.maximum(th.top_s[lo:hi], gs)
        j = lo + int(np.argmax(ov))
        during, during_ns = tl.name_of(int(th.rows[th.top[j]])), int(ov[j - lo])
    line = _line_of_rows(tl, open_at, index) or _python_frames_at(tl, th.py, gs)
    if not line and j >= 0:
        a, b = th.nested_span(j)
        line = _line_of_rows(tl, th.rows[a:b], index) or _python_frames_at(tl, th.py, int(th.top_s[j]))
    return GapContext(
        thread=tl.lanes[lane].label,
        before=before,
        outermost=tl.name_of(int(open_at[0])) if open_at.size else "",
        innermost=tl.name_of(int(open_at[-1])) if open_at.size else "",
        runtime_call=tl.name_of(int(rt[-1])) if rt.size else "",
        during=during,
        during_ns=during_ns,
        python_line=line,
    )


def brief_context(tl: Timeline, gaps: Gaps, i: int, index: ThreadIndex) -> tuple[str, str, str]:
    """(op before, Python line, open runtime call) of gap ``i``: the same as :func:`gap_context`'s
    ``before``, ``python_line`` and ``runtime_call``, looked up with bisect on the thread's lists
    (the Perfetto track carries these for thousands of gaps; measured for the 2,000 largest gaps:
    10.5 ms against 22.8 ms on the ResNet-50 trace, 6.8 against 15.6 ms on the HTA rank-0 trace)."""
    lane = int(gaps.thread_lane[i])
    if lane < 0:
        return "", "", ""
    t = index.lists(lane)
    gs = int(gaps.start_ns[i])
    he = max(int(gaps.host_end_ns[i]), gs + 1)
    lo, hi = bisect_right(t.top_e, gs), bisect_left(t.top_s, he)
    before = tl.strings[t.name[t.top[lo - 1]]] if lo > 0 else ""
    runtime, line = "", ""
    k = bisect_right(t.top_s, gs) - 1
    if k >= 0 and t.top_e[k] > gs:
        # the ops open at gs, innermost first: the last runtime call among them, the first with
        # a Python line (scanning back from the last op begun by gs; stop once both are found)
        for p in range(bisect_right(t.s, gs) - 1, t.top[k] - 1, -1):
            if t.e[p] <= gs:
                continue
            if not runtime and not t.is_op[p]:
                runtime = tl.strings[t.name[p]]
            if not line:
                line = index.line_of_stack(t.stack[p])
            if runtime and line:
                break
    line = line or _python_frames_at(tl, index.thread(lane).py, gs)
    if not line and hi > lo:
        ov = [min(t.top_e[q], he) - max(t.top_s[q], gs) for q in range(lo, hi)]
        j = lo + ov.index(max(ov))
        end = t.top[j + 1] if j + 1 < len(t.top) else len(t.rows)
        line = _line_of_positions(t, list(range(t.top[j], end)), index) or _python_frames_at(tl, index.thread(lane).py, t.top_s[j])
    return before, line, runtime


def _line_of_positions(t: _ThreadLists, positions: list[int], index: ThreadIndex) -> str:
    for p in reversed(positions):  # innermost first
        line = index.line_of_stack(t.stack[p])
        if line:
            return line
    return ""


def cause_evidence(
    tl: Timeline,
    gaps: Gaps,
    cause_idx: int,
    index: ThreadIndex,
    limit_gaps: int = 200,
    examples: int = 5,
    limit_lines: int = 50,
    op_filter: Callable[[str], bool] | None = None,
) -> CauseEvidence:
    """Top-level ops overlapping the gaps of one cause, the Python lines seen, and examples.

    ``op_filter`` keeps only the ops relevant to the cause (the DataLoader's ranges for input
    starvation; everything but them for host-side causes), so a gap shared by two causes does not
    lend one cause the other's evidence.
    """
    part = gaps.slices[:, cause_idx] if len(gaps) else np.empty(0, dtype=np.int64)
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
        th = index.thread(lane)
        gs = int(gaps.start_ns[i])
        he = int(max(gaps.host_end_ns[i], gs + 1))
        lo, hi = th.tops_overlapping(gs, he)
        ov = np.minimum(th.top_e[lo:hi], he) - np.maximum(th.top_s[lo:hi], gs)
        seen: set[str] = set()
        for j in range(hi - lo):
            name = tl.name_of(int(th.rows[th.top[lo + j]]))
            if op_filter is not None and not op_filter(name):
                continue
            ops_ns[name] += int(ov[j])
            if name not in seen:
                ops_gaps[name] += 1
                seen.add(name)
        if n_seen < limit_lines:  # Python lines of the largest gaps; enough to name the culprits
            ctx = gap_context(tl, gaps, int(i), index)
            if ctx.python_line:
                lines[ctx.python_line] += 1
    top_ops = tuple((n, ns, ops_gaps[n]) for n, ns in ops_ns.most_common(5))
    ex = tuple((int(gaps.start_ns[i]), int(gaps.end_ns[i]), int(part[i])) for i in order[:examples])
    return CauseEvidence(top_ops, tuple(lines.most_common(5)), int(idx.size), ex)


def explaining_ops(tl: Timeline, gaps: Gaps, index: ThreadIndex) -> I64:
    """For each gap, the timeline row of the top-level CPU op on its launching thread that
    overlaps its host part ``[start, host_end)`` most (-1: none): the op that explains the wait.

    Per thread, the top-level ops are disjoint and sorted, so the candidates of a gap are the
    contiguous run between two binary searches (the first op ending after the gap's start, the
    first starting after its host end)."""
    out = np.full(len(gaps), -1, dtype=np.int64)
    lanes = gaps.thread_lane[gaps.thread_lane >= 0]
    starts, host_ends = gaps.start_ns.tolist(), gaps.host_end_ns.tolist()
    for lane in unique_sorted(lanes):
        rows, top, _py = index.rows(int(lane))
        trow = rows[top]
        if trow.size == 0:
            continue
        ts_a, te_a = tl.start_ns[trow], tl.end_ns[trow]
        ts, te, te_reach, trows = ts_a.tolist(), te_a.tolist(), np.maximum.accumulate(te_a).tolist(), trow.tolist()
        for i in np.flatnonzero(gaps.thread_lane == lane).tolist():
            gs, he = starts[i], host_ends[i]
            if he <= gs:
                continue
            best, where = 0, -1  # the first op of largest overlap, as np.argmax picks it
            for q in range(bisect_right(te_reach, gs), bisect_left(ts, he)):
                ov = min(te[q], he) - max(ts[q], gs)
                if ov > best:
                    best, where = ov, q
            if where >= 0:
                out[i] = trows[where]
    return out
