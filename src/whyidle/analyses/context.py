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

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import is_dataloader, python_line
from whyidle.timeline.model import Kind, Timeline

__all__ = ["GapContext", "CauseEvidence", "ThreadIndex", "gap_context", "cause_evidence"]

I64 = npt.NDArray[np.int64]
_WORK = (int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.SYNC))


@dataclass(frozen=True)
class GapContext:
    thread: str
    before: str
    outermost: str
    innermost: str
    runtime_call: str
    during: str
    during_ns: int
    python_line: str


@dataclass(frozen=True)
class CauseEvidence:
    top_ops: tuple[tuple[str, int, int], ...]  # (name, ns overlapping the gaps, number of gaps)
    python_lines: tuple[tuple[str, int], ...]  # (line, number of gaps)
    gap_count: int
    examples: tuple[tuple[int, int, int], ...]  # (start_ns, end_ns, ns of this cause)


class ThreadIndex:
    """Per-thread op rows, sorted by start, with top-level flags; built lazily per thread."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self._cache: dict[int, tuple[I64, npt.NDArray[np.bool_], I64]] = {}
        self._dl = tl.name_mask(is_dataloader)

    def rows(self, lane: int) -> tuple[I64, npt.NDArray[np.bool_], I64]:
        """(rows, top_level, python_rows) of one thread."""
        got = self._cache.get(lane)
        if got is not None:
            return got
        tl = self.tl
        on = tl.lane == lane
        work = on & (np.isin(tl.kind, _WORK) | ((tl.kind == int(Kind.ANNOTATION)) & self._dl))
        rows = np.flatnonzero(work)  # timeline rows are sorted by start, longest first on ties
        ends = tl.end_ns[rows]
        reach = np.maximum.accumulate(ends) if rows.size else ends
        top = np.ones(rows.size, dtype=np.bool_)
        if rows.size > 1:
            top[1:] = tl.start_ns[rows[1:]] >= reach[:-1]
        py = np.flatnonzero(on & (tl.kind == int(Kind.PYTHON)))
        self._cache[lane] = (rows, top, py)
        return rows, top, py


def _line_of_rows(tl: Timeline, rows: I64) -> str:
    for r in rows[::-1]:  # innermost first
        st = tl.stack_of(int(r))
        if st:
            line = python_line(st)
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
    rows, top, py = index.rows(lane)
    gs, he = int(gaps.start_ns[i]), int(max(gaps.host_end_ns[i], gaps.start_ns[i] + 1))
    s, e = tl.start_ns[rows], tl.end_ns[rows]
    open_at = rows[(s <= gs) & (e > gs)]
    before_rows = rows[top & (e <= gs)]
    before = tl.name_of(int(before_rows[np.argmax(tl.end_ns[before_rows])])) if before_rows.size else ""
    rt = open_at[tl.kind[open_at] != int(Kind.CPU_OP)]
    ov = np.minimum(e, he) - np.maximum(s, gs)
    cand = top & (ov > 0)
    during, during_ns = "", 0
    if cand.any():
        j = np.flatnonzero(cand)[np.argmax(ov[cand])]
        during, during_ns = tl.name_of(int(rows[j])), int(ov[j])
    line = _line_of_rows(tl, open_at) or _python_frames_at(tl, py, gs)
    if not line and cand.any():
        j = np.flatnonzero(cand)[np.argmax(ov[cand])]
        inside = rows[(s >= s[j]) & (e <= e[j])]
        line = _line_of_rows(tl, inside) or _python_frames_at(tl, py, int(s[j]))
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
        rows, top, _py = index.rows(lane)
        gs = int(gaps.start_ns[i])
        he = int(max(gaps.host_end_ns[i], gs + 1))
        s, e = tl.start_ns[rows], tl.end_ns[rows]
        ov = np.minimum(e, he) - np.maximum(s, gs)
        sel = top & (ov > 0)
        seen: set[str] = set()
        for j in np.flatnonzero(sel):
            name = tl.name_of(int(rows[j]))
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
