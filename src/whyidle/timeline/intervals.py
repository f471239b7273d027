"""Interval algebra on sorted, disjoint, half-open integer intervals.

An :class:`Intervals` value is a normalised set: starts strictly increasing, every interval
non-empty, and no two intervals touching (``end[i] < start[i + 1]``). Every operation returns a
normalised set, so the algebra composes::

    busy   = Intervals.union_of(kernel_starts, kernel_ends)        # ███  ██████   ██
    window = Intervals.single(w0, w1)                              # [--------------]
    idle   = window - busy                                         #    ██      ███

All operations are vectorised with numpy: O(n log n) at worst, no Python loop per interval.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt


__all__ = ["Intervals"]

I64 = npt.NDArray[np.int64]


def _as_i64(a: object) -> I64:
    return np.ascontiguousarray(a, dtype=np.int64)


class Intervals(msgspec.Struct, frozen=True):
    start: I64
    end: I64

    # -- construction -----------------------------------------------------------------------
    @staticmethod
    def empty() -> Intervals:
        z = np.empty(0, dtype=np.int64)
        return Intervals(z, z.copy())

    @staticmethod
    def single(lo: int, hi: int) -> Intervals:
        if hi <= lo:
            return Intervals.empty()
        return Intervals(np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))

    @staticmethod
    def union_of(starts: object, ends: object) -> Intervals:
        """The union of arbitrary (possibly overlapping, unsorted) intervals [starts, ends)."""
        s = _as_i64(starts)
        e = _as_i64(ends)
        keep = e > s
        if not keep.all():
            s, e = s[keep], e[keep]
        if s.size == 0:
            return Intervals.empty()
        if s.size > 1 and not bool((s[1:] >= s[:-1]).all()):  # rows of a timeline come sorted by start
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        # A new merged interval begins where a start lies beyond everything before it.
        new = np.empty(s.size, dtype=np.bool_)
        new[0] = True
        new[1:] = s[1:] > reach[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, s.size - 1)
        return Intervals(s[first], reach[last])

    # -- queries ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def lengths(self) -> I64:
        return self.end - self.start

    def total(self) -> int:
        return int(self.lengths.sum())

    def contains(self, x: object) -> npt.NDArray[np.bool_]:
        """Whether each point in ``x`` lies inside the set."""
        xs = _as_i64(x)
        i = np.searchsorted(self.start, xs, side="right") - 1
        ok = i >= 0
        out = np.zeros(xs.shape, dtype=np.bool_)
        out[ok] = xs[ok] < self.end[i[ok]]
        return out

    def covered_before(self, x: object) -> I64:
        """Length of the set lying before each point in ``x`` (a non-decreasing function)."""
        xs = _as_i64(x)
        if self.start.size == 0:
            return np.zeros(xs.shape, dtype=np.int64)
        cum = np.concatenate(([0], np.cumsum(self.lengths)))
        i = np.searchsorted(self.start, xs, side="right")  # intervals starting at or before x
        prev = cum[np.maximum(i - 1, 0)]
        partial = np.clip(xs - self.start[np.maximum(i - 1, 0)], 0, self.lengths[np.maximum(i - 1, 0)])
        return np.asarray(np.where(i > 0, prev + partial, 0), dtype=np.int64)

    def overlap(self, lo: object, hi: object) -> I64:
        """Length of the set inside each query interval [lo, hi) (vectorised)."""
        lo_a, hi_a = _as_i64(lo), _as_i64(hi)
        covered = self.covered_before(np.maximum(hi_a, lo_a)) - self.covered_before(lo_a)
        return np.asarray(np.maximum(covered, 0), dtype=np.int64)

    # -- set operations ---------------------------------------------------------------------
    def clip(self, lo: int, hi: int) -> Intervals:
        """The part of the set inside [lo, hi): O(log n) to find it, O(k) to copy it."""
        if self.start.size == 0 or hi <= lo:
            return Intervals.empty()
        a = int(np.searchsorted(self.end, lo, side="right"))  # first interval ending after lo
        b = int(np.searchsorted(self.start, hi, side="left"))  # intervals starting before hi
        if b <= a:
            return Intervals.empty()
        s = np.maximum(self.start[a:b], lo)
        e = np.minimum(self.end[a:b], hi)
        keep = e > s
        return Intervals(s[keep], e[keep])

    def complement(self, lo: int, hi: int) -> Intervals:
        """[lo, hi) minus the set."""
        return Intervals.single(lo, hi) - self

    def _combine(self, other: Intervals, op: str) -> Intervals:
        """A sweep over the endpoints of both sets in order, each changing a coverage code (self
        adds 1 while open, other 2): the pieces between consecutive distinct endpoints where the
        code is 3 (and) or 1 (sub). The four endpoint arrays are sorted runs, so the stable sort
        is a merge (1M intervals minus 300k: 0.33 -> 0.14 s against finding every elementary
        piece's side by binary search)."""
        na, nb = self.start.size, other.start.size
        p = np.concatenate((self.start, self.end, other.start, other.end))
        if p.size < 2:
            return Intervals.empty()
        order = np.argsort(p, kind="stable")  # a tie keeps starts before ends of the same set
        p = p[order]
        step = np.repeat(np.array([1, -1, 2, -2], dtype=np.int8), (na, na, nb, nb))
        code = np.cumsum(step[order], dtype=np.int8)  # each set is disjoint: 0..3 throughout
        last = np.flatnonzero(np.append(p[1:] != p[:-1], True))  # the code from each distinct point on
        keep = np.flatnonzero(code[last[:-1]] == (3 if op == "and" else 1))
        return Intervals.union_of(p[last[keep]], p[last[keep + 1]])

    def __and__(self, other: Intervals) -> Intervals:
        return self._combine(other, "and")

    def __or__(self, other: Intervals) -> Intervals:
        # Both sides are sorted and disjoint: merging their intervals is the union (one sort, no
        # elementary pieces).
        return Intervals.union_of(np.concatenate((self.start, other.start)), np.concatenate((self.end, other.end)))

    def __sub__(self, other: Intervals) -> Intervals:
        if other.start.size == 0 or self.start.size == 0:
            return self
        if self.start.size == 1:  # one interval: the gaps of ``other`` inside it, O(k)
            lo, hi = int(self.start[0]), int(self.end[0])
            inside = other.clip(lo, hi)
            s = np.concatenate(([lo], inside.end))
            e = np.concatenate((inside.start, [hi]))
            keep = e > s
            return Intervals(s[keep], e[keep])
        return self._combine(other, "sub")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Intervals):
            return NotImplemented
        return np.array_equal(self.start, other.start) and np.array_equal(self.end, other.end)

    def __hash__(self) -> int:  # pragma: no cover - frozen dataclass with arrays
        return hash((self.start.tobytes(), self.end.tobytes()))
