"""TimelineBuilder: how sources assemble a Timeline without knowing its storage."""

from __future__ import annotations

from collections.abc import Sequence

import re

import numpy as np

from whyidle.timeline.model import Kind, Lane, LaneKind, Timeline, TimelineMeta

__all__ = ["TimelineBuilder", "start_order"]


def start_order(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Row order by start, longest first on ties, so enclosing ranges precede what they enclose.

    The same as ``np.lexsort((start - end, start))``, faster: a stable sort by start alone (its
    merge sort runs through the long sorted stretches of a trace), then only the rows that share
    a start with another are ordered by duration.
    """
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = s[1:] == s[:-1]
    if tie.any():
        in_tie = np.zeros(s.size, dtype=np.bool_)
        in_tie[1:] |= tie
        in_tie[:-1] |= tie
        at = np.flatnonzero(in_tie)
        rows = order[at]
        order[at] = rows[np.lexsort((start[rows] - end[rows], s[at]))]
    return order


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")

class TimelineBuilder:
    """Collects columns as Python lists (or whole arrays) and freezes them into a Timeline.

    Sources call :meth:`intern` and :meth:`lane_id` for the small tables, then either
    :meth:`add` per event (simple sources, tests) or :meth:`add_columns` with whole arrays
    (fast sources). :meth:`build` sorts the rows by start time.
    """

    def __init__(self, meta: TimelineMeta) -> None:
        self.meta = meta
        self._strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._lanes: list[Lane] = []
        self._lane_ids: dict[tuple[LaneKind, int, str, str], int] = {}
        self._chunks: list[dict[str, np.ndarray]] = []
        self._rows: dict[str, list[float | int]] = {c: [] for c in Timeline.COLUMNS}

    # -- tables -----------------------------------------------------------------------------
    def intern(self, s: str) -> int:
        i = self._string_ids.get(s)
        if i is None:
            # A repr's heap address ("<built-in method acquire of _thread.lock object at 0x7fa...>")
            # is left out: it is noise to a reader, and the same method at two addresses is one name.
            clean = _ADDRESS.sub("", s) if "at 0x" in s else s
            i = self._string_ids.get(clean)
            if i is None:
                i = len(self._strings)
                self._strings.append(clean)
                self._string_ids[clean] = i
            self._string_ids[s] = i
        return i

    def intern_many(self, values: Sequence[str]) -> np.ndarray:
        get = self._string_ids.get
        out = np.empty(len(values), dtype=np.int32)
        for j, s in enumerate(values):
            i = get(s)
            if i is None:
                i = self.intern(s)
            out[j] = i
        return out

    def lane_id(self, kind: LaneKind, device: int, pid: str, tid: str, name: str = "") -> int:
        key = (kind, device, pid, tid)
        i = self._lane_ids.get(key)
        if i is None:
            i = len(self._lanes)
            self._lanes.append(Lane(kind, device, pid, tid, name))
            self._lane_ids[key] = i
        elif name and not self._lanes[i].name:
            old = self._lanes[i]
            self._lanes[i] = Lane(old.kind, old.device, old.pid, old.tid, name)
        return i

    def name_lane(self, pid: str, tid: str, name: str) -> None:
        """Give a name to the CPU-thread lane (pid, tid) if it exists."""
        i = self._lane_ids.get((LaneKind.CPU_THREAD, -1, pid, tid))
        if i is not None and not self._lanes[i].name:
            ln = self._lanes[i]
            self._lanes[i] = Lane(ln.kind, ln.device, ln.pid, ln.tid, name)

    # -- rows -------------------------------------------------------------------------------
    def add(
        self,
        start_ns: int,
        end_ns: int,
        lane: int,
        kind: Kind,
        name: str,
        *,
        corr: int = -1,
        stack: str | None = None,
        shape0: int = -1,
        blocks_per_sm: float = float("nan"),
        occupancy: float = float("nan"),
        nbytes: int = -1,
        grid: int = -1,
        block: int = -1,
        inputs: str | None = None,
    ) -> None:
        r = self._rows
        r["start_ns"].append(start_ns)
        r["end_ns"].append(end_ns)
        r["lane"].append(lane)
        r["kind"].append(int(kind))
        r["name"].append(self.intern(name))
        r["corr"].append(corr)
        r["stack"].append(self.intern(stack) if stack else -1)
        r["shape0"].append(shape0)
        r["blocks_per_sm"].append(blocks_per_sm)
        r["occupancy"].append(occupancy)
        r["nbytes"].append(nbytes)
        r["grid"].append(grid)
        r["block"].append(block)
        r["inputs"].append(self.intern(inputs) if inputs else -1)

    def add_columns(self, **cols: np.ndarray) -> None:
        """Add many rows at once; missing optional columns get their 'unknown' value."""
        n = len(cols["start_ns"])
        defaults = {
            "corr": (-1, np.int64),
            "stack": (-1, np.int32),
            "shape0": (-1, np.int64),
            "blocks_per_sm": (np.nan, np.float32),
            "occupancy": (np.nan, np.float32),
            "nbytes": (-1, np.int64),
            "grid": (-1, np.int64),
            "block": (-1, np.int32),
            "inputs": (-1, np.int32),
        }
        chunk: dict[str, np.ndarray] = {}
        for c in Timeline.COLUMNS:
            if c in cols:
                chunk[c] = np.asarray(cols[c])
            else:
                value, dtype = defaults[c]
                chunk[c] = np.full(n, value, dtype=dtype)
        self._chunks.append(chunk)

    def build(self, consume: bool = False) -> Timeline:
        """The Timeline, rows sorted by start (longest first on ties).

        Memory: one column is gathered at a time. ``consume=True`` also lets go of each gathered
        column's chunks at once (the builder is empty afterwards), so the chunks and the sorted
        columns are never held whole side by side.
        """
        dtypes = {
            "start_ns": np.int64,
            "end_ns": np.int64,
            "lane": np.int32,
            "kind": np.int8,
            "name": np.int32,
            "corr": np.int64,
            "stack": np.int32,
            "shape0": np.int64,
            "blocks_per_sm": np.float32,
            "occupancy": np.float32,
            "nbytes": np.int64,
            "grid": np.int64,
            "block": np.int32,
            "inputs": np.int32,
        }
        chunks = list(self._chunks)
        if self._rows["start_ns"]:
            chunks.insert(0, {c: np.asarray(self._rows[c], dtype=dtypes[c]) for c in Timeline.COLUMNS})
        if consume:
            self._chunks, self._rows = [], {c: [] for c in Timeline.COLUMNS}

        def column(c: str) -> np.ndarray:
            parts = [(chunk.pop(c) if consume else chunk[c]).astype(dtypes[c], copy=False) for chunk in chunks]
            return np.concatenate(parts) if parts else np.empty(0, dtype=dtypes[c])

        start, end = column("start_ns"), column("end_ns")
        order = start_order(start, end)
        cols = {"start_ns": start[order], "end_ns": end[order]}
        del start, end
        for c in Timeline.COLUMNS[2:]:
            cols[c] = column(c)[order]
        return Timeline(**cols, lanes=list(self._lanes), strings=list(self._strings), meta=self.meta)
