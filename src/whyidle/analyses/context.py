"""What the launching thread was doing before and during a gap: the evidence behind a cause.

For one gap (see :mod:`whyidle.analyses.gaps`)::

    device  ██████|..............gap...............|████
    host    [op A]   [ top-level op B ............ ][launch]
             ^ before        ^ during (most overlap)

* ``before``: the last top-level op that ended before the gap began;
* ``open_at_start``: the ops open when the gap began, outermost and innermost;
* ``during``: the top-level op that overlaps the host part of the gap the most;
* ``python_line``: the innermost user frame of the first of those ops that carries a stack, or
  of the ``python_function`` frames open at that moment; with no op during the gap, of the
  frames open halfway through its host part.

Top-level ops are those not nested in another traced op of the same thread (step markers and
user annotations that wrap whole phases are skipped, DataLoader ranges are kept).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import is_dataloader, python_line
from whyidle.analyses.nesting import OpenIndex
from whyidle.timeline.arrays import unique_inverse, unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["GapContext", "CauseEvidence", "ThreadIndex", "gap_context", "cause_evidence", "explaining_ops", "brief_context"]

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.integer[Any]]
_WORK = (Kind.CPU_OP, Kind.RUNTIME, Kind.SYNC)


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

    rows: Ints  # int32 where the timeline's rows fit, as ``top`` and ``py``: kept all through the rules
    s: I64
    e: I64
    top: Ints  # positions in ``rows`` of the top-level ops
    top_s: I64
    top_e: I64
    py: Ints  # python_function rows

    def tops_overlapping(self, lo: int, hi: int) -> tuple[int, int]:
        return int(np.searchsorted(self.top_e, lo, side="right")), int(np.searchsorted(self.top_s, hi, side="left"))

    def span_end(self, k: I64) -> I64:
        """One past the last position nested in top-level op ``k`` (per element)."""
        nxt = np.append(self.top, self.rows.size)
        return nxt[k + 1]


class ThreadIndex:
    """Per-thread op tables, built lazily per thread, and the context of every gap."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self._cache: dict[int, _Thread] = {}
        self._dl_range = tl.kind_name_mask(is_dataloader, Kind.ANNOTATION)
        self._contexts: tuple[Gaps, _Contexts] | None = None

    def thread(self, lane: int) -> _Thread:
        got = self._cache.get(lane)
        if got is not None:
            return got
        tl = self.tl
        on = tl.lane == lane
        work = on & (tl.mask(*_WORK) | self._dl_range)
        rows = np.flatnonzero(work)  # timeline rows are sorted by start, longest first on ties
        s, e = tl.start_ns[rows], tl.end_ns[rows]
        reach = np.maximum.accumulate(e) if rows.size else e
        is_top = np.ones(rows.size, dtype=np.bool_)
        if rows.size > 1:
            is_top[1:] = s[1:] >= reach[:-1]
        top = np.flatnonzero(is_top)
        py = np.flatnonzero(on & (tl.kind == int(Kind.PYTHON)))
        small = tl.row_dtype
        th = _Thread(rows.astype(small), s, e, top.astype(small), s[top], e[top], py.astype(small))
        self._cache[lane] = th
        return th

    def release(self) -> None:
        """Let go of the per-thread tables and the gaps' contexts (about 100 bytes a host op and
        a gap); a later use builds them again."""
        self._cache.clear()
        self._contexts = None

    def contexts(self, gaps: Gaps) -> _Contexts:
        """The context of every gap, computed once per ``gaps`` for all of them together."""
        if self._contexts is None or self._contexts[0] is not gaps:
            self._contexts = (gaps, _all_contexts(self, gaps))
        return self._contexts[1]


class _Contexts(msgspec.Struct, frozen=True):
    """Per gap: timeline rows (-1: none) of the context's ops, its Python line, its top-level ops.
    Rows, lines and positions are int32 where the timeline's rows fit (kept for the whole
    diagnosis: 2 GB trace, 555k gaps)."""

    before: Ints
    outermost: Ints
    innermost: Ints
    runtime: Ints
    during: Ints
    during_ns: I64
    line: Ints  # index into ``lines`` ('' at 0)
    lines: list[str]
    lo: Ints  # top-level ops overlapping the gap's host part: [lo, hi) of its thread's
    hi: Ints


class _Lines:
    """Python lines by string id, each string parsed once; line ids index ``self.text``."""

    def __init__(self, strings: list[str]) -> None:
        self.strings = strings
        self.text = [""]
        self._id: dict[str, int] = {"": 0}

    def of(self, string_ids: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.int32]:
        """The line id of each string id (-1 and strings without a user frame: 0), as int32. Only
        the ids of a string are sorted (a trace recorded without stacks has none: no sort)."""
        out = np.zeros(string_ids.size, dtype=np.int32)
        has = np.flatnonzero(string_ids >= 0)
        if has.size == 0:
            return out
        uniq, inverse = unique_inverse(string_ids[has].astype(np.int64))
        ids = np.zeros(uniq.size, dtype=np.int32)
        for k, sid in enumerate(uniq.tolist()):
            line = python_line(self.strings[sid])
            ids[k] = self._id.setdefault(line, len(self._id))
            if ids[k] == len(self.text):
                self.text.append(line)
        out[has] = ids[inverse]
        return out


class _Nest:
    """One thread's nesting indexes: the last open op, runtime call, op with a line, frame."""

    def __init__(self, tl: Timeline, th: _Thread, lines: _Lines) -> None:
        self.ops = OpenIndex(th.s, th.e)
        self.runtime = OpenIndex(th.s, th.e, np.flatnonzero(tl.kind[th.rows] != int(Kind.CPU_OP)))
        # Line id per position, and 0 after the last (so position -1 reads 0).
        self.line_of = np.append(lines.of(tl.stack[th.rows]), 0)
        with_line = np.flatnonzero(self.line_of)
        self.with_line = OpenIndex(th.s, th.e, with_line)
        last = np.full(th.rows.size, -1, dtype=th.rows.dtype)  # int32 where rows fit
        last[with_line] = with_line
        self.last_line = np.maximum.accumulate(last) if last.size else last  # last position <= p with a line
        self.py_line = np.append(lines.of(tl.name[th.py]), 0)
        py_s, py_e = tl.start_ns[th.py], tl.end_ns[th.py]
        self.frames = OpenIndex(py_s, py_e, np.flatnonzero(self.py_line))

    def frame_line(self, t: I64) -> npt.NDArray[np.int32]:
        """Line of the innermost Python frame with a user line open at each ``t`` (0: none)."""
        return self.py_line[self.frames.last_spanning_at(t)]


def _segments(lo: I64, hi: I64) -> tuple[I64, I64, I64]:
    """Flatten ranges [lo, hi): (range of each element, element, start offset of each range)."""
    n = np.maximum(hi - lo, 0)
    off = np.zeros(n.size + 1, dtype=np.int64)
    np.cumsum(n, out=off[1:])
    of = np.repeat(np.arange(n.size, dtype=np.int64), n)
    return of, lo[of] + np.arange(int(off[-1]), dtype=np.int64) - off[of], off[:-1]


def _during(th: _Thread, gs: I64, he: I64, lo: I64, hi: I64) -> tuple[I64, I64]:
    """(top-level op overlapping [gs, he) the most, first on ties, -1: none; its overlap)."""
    of, k, off = _segments(lo, hi)
    j = np.full(lo.size, -1, dtype=np.int64)
    ns = np.zeros(lo.size, dtype=np.int64)
    if of.size == 0:
        return j, ns
    ov = np.minimum(th.top_e[k], he[of]) - np.maximum(th.top_s[k], gs[of])
    has = np.flatnonzero(hi > lo)
    best = np.maximum.reduceat(ov, off[has])
    at = np.arange(of.size, dtype=np.int64)
    first = np.minimum.reduceat(np.where(ov == np.repeat(best, (hi - lo)[has]), at, of.size), off[has])
    j[has], ns[has] = k[first], best
    return j, ns


def _lane_contexts(tl: Timeline, th: _Thread, nest: _Nest, gs: I64, he: I64) -> dict[str, I64]:
    """The context columns of one thread's gaps (gap starts ``gs``, host ends ``he``)."""
    lo = np.searchsorted(th.top_e, gs, side="right")
    hi = np.searchsorted(th.top_s, he, side="left")
    k = np.searchsorted(th.top_s, gs, side="right") - 1
    # Ops open when the gap began: only inside a top-level op that contains gs.
    # Index -1 reads the appended sentinels: no top-level op, no row.
    inside = np.append(th.top_e, np.iinfo(np.int64).min)[k] > gs
    b = np.searchsorted(th.s, gs, side="right")
    rows, top = np.append(th.rows, -1), np.append(th.top, -1)

    def gated(pos: I64) -> I64:
        return np.where(inside, pos, -1)

    inner = gated(nest.ops.last_spanning(b, gs))
    with_line = gated(nest.with_line.last_spanning(b, gs))
    line = nest.line_of[with_line]
    line = np.where(line > 0, line, nest.frame_line(gs))
    j, during_ns = _during(th, gs, he, lo, hi)
    # No line yet: the innermost op with a line nested in the op during the gap, or the frames open at its start.
    retry = (line == 0) & (j >= 0)
    if retry.any():
        jj = j[retry]
        a = th.top[jj]
        q = nest.last_line[th.span_end(jj) - 1]
        fallback = np.where(q >= a, nest.line_of[q], nest.frame_line(th.top_s[jj]))
        line[retry] = fallback
    # Still none (a thread running Python with no op open, as JAX's between steps): the frames
    # open halfway through the host part of the gap.
    alone = (line == 0) & (he > gs)
    if alone.any():
        line[alone] = nest.frame_line(gs[alone] + (he[alone] - gs[alone]) // 2)
    return {
        "before": rows[top[lo - 1]],
        "outermost": np.where(inside, rows[top[k]], -1),
        "innermost": rows[inner],
        "runtime": rows[gated(nest.runtime.last_spanning(b, gs))],
        "during": rows[top[j]],
        "during_ns": during_ns,
        "line": line,
        "lo": lo,
        "hi": hi,
    }


def _all_contexts(index: ThreadIndex, gaps: Gaps) -> _Contexts:
    tl = index.tl
    n = len(gaps)
    small = tl.row_dtype
    cols: dict[str, Ints] = {c: np.full(n, -1, dtype=small) for c in ("before", "outermost", "innermost", "runtime", "during")}
    cols |= {c: np.zeros(n, dtype=small) for c in ("line", "lo", "hi")}
    during_ns = np.zeros(n, dtype=np.int64)
    lines = _Lines(tl.strings)
    for lane in unique_sorted(gaps.thread_lane[gaps.thread_lane >= 0]).tolist():
        at = np.flatnonzero(gaps.thread_lane == lane)
        th = index.thread(int(lane))
        gs = gaps.start_ns[at]
        he = np.maximum(gaps.host_end_ns[at], gs + 1)
        for c, v in _lane_contexts(tl, th, _Nest(tl, th, lines), gs, he).items():
            (during_ns if c == "during_ns" else cols[c])[at] = v
    return _Contexts(**cols, during_ns=during_ns, lines=lines.text)


def gap_context(tl: Timeline, gaps: Gaps, i: int, index: ThreadIndex) -> GapContext:
    """What the launching thread was doing around gap ``i`` (see the module's docstring)."""
    c = index.contexts(gaps)
    lane = int(gaps.thread_lane[i])
    if lane < 0:
        return GapContext("", "", "", "", "", "", 0, "")

    def name(row: int) -> str:
        return tl.name_of(row) if row >= 0 else ""

    return GapContext(
        thread=tl.lanes[lane].label,
        before=name(int(c.before[i])),
        outermost=name(int(c.outermost[i])),
        innermost=name(int(c.innermost[i])),
        runtime_call=name(int(c.runtime[i])),
        during=name(int(c.during[i])),
        during_ns=int(c.during_ns[i]),
        python_line=c.lines[int(c.line[i])],
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
    chosen = order[:limit_gaps]
    ctx = index.contexts(gaps)
    top_ops = _top_ops(tl, gaps, chosen, index, ctx, op_filter)
    lines: Counter[str] = Counter()
    for i in chosen[:limit_lines]:  # Python lines of the largest gaps; enough to name the culprits
        line = ctx.lines[int(ctx.line[i])] if gaps.thread_lane[i] >= 0 else ""
        if line:
            lines[line] += 1
    ex = tuple((int(gaps.start_ns[i]), int(gaps.end_ns[i]), int(part[i])) for i in order[:examples])
    return CauseEvidence(top_ops, tuple(lines.most_common(5)), int(idx.size), ex)


def _top_ops(
    tl: Timeline, gaps: Gaps, chosen: I64, index: ThreadIndex, ctx: _Contexts, op_filter: Callable[[str], bool] | None
) -> tuple[tuple[str, int, int], ...]:
    """The five names with the most overlap with the gaps ``chosen`` (in rank order), ties first seen.

    (name, ns, gaps): every top-level op overlapping a gap's host part adds its overlap to its
    name; a name counts once per gap. Computed over all (gap, op) pairs at once.
    """
    rank_parts, name_parts, ns_parts, top_parts = [], [], [], []
    lanes = gaps.thread_lane[chosen]
    for lane in unique_sorted(lanes[lanes >= 0]).tolist():
        rank = np.flatnonzero(lanes == lane)
        i = chosen[rank]
        th = index.thread(int(lane))
        of, k, _ = _segments(ctx.lo[i].astype(np.int64), ctx.hi[i].astype(np.int64))
        gs = gaps.start_ns[i][of]
        he = np.maximum(gaps.host_end_ns[i][of], gs + 1)
        rank_parts.append(rank[of])
        top_parts.append(k)
        name_parts.append(tl.name[th.rows[th.top[k]]].astype(np.int64))
        ns_parts.append(np.minimum(th.top_e[k], he) - np.maximum(th.top_s[k], gs))
    if not rank_parts:
        return ()
    rank, top, name, ns = (np.concatenate(x) for x in (rank_parts, top_parts, name_parts, ns_parts))
    order = np.lexsort((top, rank))  # the order a loop over the gaps, then their ops, sees them
    rank, name, ns = rank[order], name[order], ns[order]
    uniq, inverse = unique_inverse(name)
    texts = [tl.strings[n] for n in uniq.tolist()]
    canon = {t: k for k, t in reversed(list(enumerate(texts)))}  # equal strings: one name
    keep = np.array([op_filter is None or op_filter(t) for t in texts], dtype=np.bool_)
    key = np.array([canon[t] for t in texts], dtype=np.int64)[inverse] if uniq.size else inverse
    sel = keep[inverse] if uniq.size else np.zeros(0, dtype=np.bool_)
    rank, key, ns = rank[sel], key[sel], ns[sel]
    if key.size == 0:
        return ()
    total = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(total, key, ns)
    first = np.full(uniq.size, key.size, dtype=np.int64)
    np.minimum.at(first, key, np.arange(key.size, dtype=np.int64))
    pair = unique_sorted(rank * uniq.size + key)
    n_gaps = np.bincount(pair % uniq.size, minlength=uniq.size)
    present = np.flatnonzero(first < key.size)
    best = present[np.lexsort((first[present], -total[present]))][:5]
    return tuple((texts[k], int(total[k]), int(n_gaps[k])) for k in best.tolist())


def brief_context(tl: Timeline, gaps: Gaps, i: int, index: ThreadIndex) -> tuple[str, str, str]:
    """(op before, Python line, open runtime call) of gap ``i``: :func:`gap_context`'s ``before``,
    ``python_line`` and ``runtime_call``, read from the contexts computed for all gaps at once."""
    if int(gaps.thread_lane[i]) < 0:
        return "", "", ""
    c = index.contexts(gaps)
    before, runtime = int(c.before[i]), int(c.runtime[i])
    return (tl.name_of(before) if before >= 0 else "", c.lines[int(c.line[i])], tl.name_of(runtime) if runtime >= 0 else "")


def explaining_ops(tl: Timeline, gaps: Gaps, index: ThreadIndex) -> I64:
    """For each gap, the timeline row of the top-level op on its launching thread that overlaps
    its host part ``[start, host_end)`` most, first on ties (-1: none, or no host part): the op
    that explains the wait. Read from the contexts computed for all gaps at once (``during``)."""
    c = index.contexts(gaps)
    return np.where((gaps.host_end_ns > gaps.start_ns) & (gaps.thread_lane >= 0), c.during, -1).astype(np.int64)
