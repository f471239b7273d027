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
is the enclosing frames (ancestors); it holds for any intervals. The chains are followed one jump
at a time for up to ``WALK`` jumps (a thread's nesting is rarely deeper: the index is then one
parent per record), and the queries still walking after that go on by binary lifting (``up[k]`` =
the record ``2**k`` jumps away, built the first time a chain is that long), so a query costs
O(log depth) however deep the nesting, in numpy rounds over all records or queries at once.

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
    # A record ending no earlier than every record before it has none (a thread's top-level ops):
    # settled at once, they would otherwise take log2(n) rounds of jumps.
    first = np.zeros(n, dtype=np.bool_)
    if n > 1:
        first[1:] = end[1:] >= np.maximum.accumulate(end)[:-1]
    cand[first] = -1
    todo = np.flatnonzero((end[:-1] <= end[1:]) & ~first[1:]) + 1  # the predecessor ends no later: look further
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

    WALK = 24  # jumps followed one at a time before the lifting tables are built

    def __init__(self, start: I64, end: I64, subset: I64 | None = None) -> None:
        self.start = start
        # Positions, parents and jumps as int32 where they fit (half the memory; 2 GB trace: a
        # thread of 1.4M ops): the answers are the same int64 positions.
        small = start.size < 2**31
        self.pos: npt.NDArray[np.integer] | None = None if subset is None else (subset.astype(np.int32) if small else subset)
        self.end = end if subset is None else end[subset]
        pg = previous_greater(self.end)
        self.parent: npt.NDArray[np.integer] = pg.astype(np.int32) if small else pg
        self._up: list[npt.NDArray[np.integer]] | None = None

    def _lifting(self) -> list[npt.NDArray[np.integer]]:
        """``up[k]``: the record ``2**k`` jumps away (-1: the chain ended), until every chain has."""
        if self._up is None:
            up = [self.parent]
            while True:  # up[k + 1] = up[k] applied twice
                last = up[-1]
                live = last >= 0
                if not live.any():
                    break
                nxt = np.full_like(last, -1)
                nxt[live] = last[last[live]]
                up.append(nxt)
            self._up = up
        return self._up

    def last_spanning(self, before: I64, t: I64) -> I64:
        """Largest position ``p < before[q]`` in the subset with ``end[p] > t[q]``, per query ``q``."""
        if self.end.size == 0:
            return np.full(before.size, -1, dtype=np.int64)
        # last subset position < before
        c = (np.clip(before, 0, self.end.size) if self.pos is None else np.searchsorted(self.pos, before, side="left")).astype(np.int64) - 1
        end, parent = self.end, self.parent
        walk = np.flatnonzero(c >= 0)
        walk = walk[end[c[walk]] <= t[walk]]
        for _ in range(self.WALK):  # jump while the record reached still ends by t
            if walk.size == 0:
                break
            c[walk] = parent[c[walk]]
            walk = walk[c[walk] >= 0]
            walk = walk[end[c[walk]] <= t[walk]]
        if walk.size:
            c[walk] = self._climb(c[walk], t[walk])
        if self.pos is None:
            return c
        return np.where(c >= 0, self.pos[np.maximum(c, 0)], -1).astype(np.int64)

    def _climb(self, c: I64, t: I64) -> I64:
        """The rest of long chains: from records ending by ``t``, the first on the chain ending later."""
        end = self.end
        for up in self._lifting()[::-1]:  # climb while the record reached still ends by t
            u = up[c]
            move = u >= 0
            move &= end[np.maximum(u, 0)] <= t
            c = np.where(move, u, c)
        return self.parent[c].astype(np.int64)

    def last_spanning_at(self, t: I64) -> I64:
        """The last record open at ``t`` (its start ``<= t``)."""
        return self.last_spanning(np.searchsorted(self.start, t, side="right"), t)
