"""Which records are open at an instant, for many instants at once: a nesting index.

A thread's records (ops, runtime calls, Python frames) sorted by start, longest first on ties.
The records open at time ``t`` are those with ``start <= t < end``. Every start ``<= t`` is in a
prefix of the positions (one binary search: ``b`` records), so the question "which is the last
open record" is: the largest position ``p < b`` with ``end[p] > t``.

It is answered through each record's *previous greater* record: the nearest earlier position
whose end is strictly later. ::

    pos   0 [a ...................... ]          end
          1    [b ........... ]
          2       [c ]
          3              [d ]        t
                                     ^
    previous greater: b -> a, c -> b, d -> b (c ends before d)

From ``p = b - 1``, if ``end[p] <= t`` then every position between ``pg(p)`` and ``p`` ends by
``end[p] <= t`` too, so the search jumps to ``pg(p)``; ends strictly increase along the jumps,
so the first record on the chain that ends after ``t`` is the answer. For nested frames the chain
is the enclosing frames (ancestors); it holds for any intervals. The chains are followed with
binary lifting (``up[k]`` = the record ``2**k`` jumps away), so a query costs O(log depth), and
the whole index O(n log depth) to build, in numpy rounds over all records or queries at once.

``previous_greater`` itself is found by pointer jumping: each position starts from its
predecessor and, while that candidate ends no later, jumps to the candidate's own candidate
(everything skipped ends no later either), until the candidate ends later or there is none.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["previous_greater", "OpenIndex"]

I64 = npt.NDArray[np.int64]


def previous_greater(end: I64) -> I64:
    """For each position, the nearest earlier position with a strictly greater value (-1: none)."""
    n = int(end.size)
    cand = np.arange(-1, n - 1, dtype=np.int64)
    todo = np.flatnonzero(end[:-1] <= end[1:]) + 1  # the predecessor ends no later: look further
    while todo.size:
        cand[todo] = cand[cand[todo]]  # each skip keeps "everything between ends no later"
        todo = todo[cand[todo] >= 0]
        todo = todo[end[cand[todo]] <= end[todo]]
    return cand


class OpenIndex:
    """Last open record among a subset of a thread's records, for many instants at once.

    ``start``/``end``: the records sorted by start; ``subset``: positions (ascending) that may
    answer (all when None). Answers are positions in the full order, -1 when none is open.
    """

    def __init__(self, start: I64, end: I64, subset: I64 | None = None) -> None:
        self.start = start
        self.pos = np.arange(start.size, dtype=np.int64) if subset is None else subset
        self.end = end if subset is None else end[self.pos]
        pg = previous_greater(self.end)
        # The jumps as int32 where positions fit (half the memory; a thread's index is
        # O(n log depth) of them): the answers are the same int64 positions.
        self.up: list[npt.NDArray[np.integer]] = [pg.astype(np.int32) if pg.size < 2**31 else pg]
        while True:  # up[k + 1] = up[k] applied twice, until every chain has ended
            last = self.up[-1]
            live = last >= 0
            if not live.any():
                break
            nxt = np.full_like(last, -1)
            nxt[live] = last[last[live]]
            self.up.append(nxt)

    def last_spanning(self, before: I64, t: I64) -> I64:
        """Largest position ``p < before[q]`` in the subset with ``end[p] > t[q]``, per query ``q``."""
        c = np.searchsorted(self.pos, before, side="left") - 1  # last subset position < before
        if self.pos.size == 0:
            return np.full(before.size, -1, dtype=np.int64)
        end, pg = self.end, self.up[0]
        found = (c >= 0) & (end[np.maximum(c, 0)] > t)
        walk = (c >= 0) & ~found
        for up in self.up[::-1]:  # climb while the record reached still ends by t
            u = up[c]
            move = walk & (u >= 0)
            move &= end[np.maximum(u, 0)] <= t
            c = np.where(move, u, c)
        c = np.where(walk, pg[np.maximum(c, 0)], c)
        ok = (c >= 0) & (found | walk)
        return np.where(ok, self.pos[np.maximum(c, 0)], -1)

    def last_spanning_at(self, t: I64) -> I64:
        """The last record open at ``t`` (its start ``<= t``)."""
        return self.last_spanning(np.searchsorted(self.start, t, side="right"), t)
