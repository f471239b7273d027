"""The Timeline: parallel numpy arrays of equal length, one row per event.

Every source (a Kineto trace, an Nsight Systems export, a live capture) produces this, and every
analysis reads only this. Times are integer nanoseconds on the trace's own clock, converted once
at the source.

Columns
    start_ns, end_ns  int64   interval [start, end)
    lane              int32   index into ``lanes`` (a GPU stream, a CPU thread, a counter)
    kind              int8    :class:`Kind`
    name              int32   index into ``strings``
    corr              int64   launch <-> device-work correlation id, -1 if none
    stack             int32   index into ``strings`` of the Python call stack, -1 if none
    shape0            int64   leading dimension of the op's first input, -1 if unknown
    blocks_per_sm     float32 kernels: blocks per SM (NaN if unknown)
    occupancy         float32 kernels: estimated achieved occupancy in % (NaN if unknown)
    nbytes            int64   copies and memsets: bytes moved, -1 if unknown
    grid              int64   kernels: blocks in the grid (x * y * z), -1 if unknown
    block             int32   kernels: threads per block (x * y * z), -1 if unknown
    inputs            int32   cpu ops: index into ``strings`` of the op's recorded inputs, -1 if none:
                              the JSON list [dims, types, concrete inputs, flops, strides] (``record_shapes``;
                              strides where recorded)
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.timeline.arrays import one_of
from whyidle.timeline.counters import CounterLog
from whyidle.timeline.intervals import Intervals

__all__ = ["Kind", "LaneKind", "Lane", "TimelineMeta", "Timeline", "OFF_CPU"]

I64 = npt.NDArray[np.int64]


class Kind(enum.IntEnum):
    """What an event is. Device kinds are < 16, host kinds >= 16."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    COLLECTIVE = 3  # a communication kernel (NCCL/RCCL/...): device work, but communication
    GPU_ANNOTATION = 4  # gpu_user_annotation: a range drawn on a stream; not work
    CPU_OP = 16
    RUNTIME = 17  # CUDA/HIP runtime or driver API call on the host
    SYNC = 18  # a host-side synchronisation record (cuda_sync, or a synchronize API call)
    STEP = 19  # ProfilerStep#N or another step range
    ANNOTATION = 20  # user_annotation / NVTX range
    PYTHON = 21  # python_function frame


DEVICE_WORK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COLLECTIVE)
# Name of the annotation a source writes for a stretch its thread spent scheduled out (not
# running): nsys SCHED_EVENTS. The attribution reads it as a blocked thread.
OFF_CPU = "thread off CPU (scheduled out)"


class LaneKind(str, enum.Enum):
    GPU_STREAM = "gpu_stream"
    CPU_THREAD = "cpu_thread"
    COUNTER = "counter"


class Lane(msgspec.Struct, frozen=True):
    """A row of the timeline: one GPU stream or one CPU thread of one process."""

    kind: LaneKind
    device: int  # GPU index for streams, -1 for CPU threads
    pid: str
    tid: str  # stream id for GPU lanes, thread id for CPU lanes
    name: str = ""

    @property
    def label(self) -> str:
        if self.kind is LaneKind.GPU_STREAM:
            return f"GPU {self.device} stream {self.tid}"
        return self.name or f"thread {self.tid} (pid {self.pid})"


def _small_number(v: object) -> bool:
    """A number a compute capability can be (not a bool, a string, inf or NaN)."""
    return type(v) in (int, float) and 0 <= v < 1000  # type: ignore[operator]


class TimelineMeta(msgspec.Struct):
    """What a source knows about the capture besides the events."""

    source_format: str
    source_version: str = ""
    path: str = ""
    devices: list[dict[str, Any]] = msgspec.field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    rank_basis: str = ""  # where the rank came from: "distributedInfo", "file name", ""
    quality: list[str] = msgspec.field(default_factory=list)  # notes the source made while reading
    # The counters track: GPU counter samples on their own clock (timeline/counters.py). A counter
    # log's Timeline has this track and no events.
    counters: CounterLog | None = None

    @property
    def vendor(self) -> str:
        """"amd", "nvidia" or "" (unknown), from ``deviceProperties``.

        ROCm's Kineto fills the same fields as CUDA's, so an AMD device also has a
        ``computeMajor`` (9 on an MI250: its GFX architecture, not an NVIDIA compute capability).
        It is told apart by its name or by its 64-lane wavefront (``warpSize``; NVIDIA's warp is 32).
        """
        amd = nvidia = False
        for d in self.devices:
            name = str(d.get("name", "")).lower()
            if any(w in name for w in ("amd", "radeon", "instinct")) or d.get("warpSize") == 64 or "gcnArchName" in d:
                amd = True
            elif "computeMajor" in d or "nvidia" in name:
                nvidia = True
        return "amd" if amd and not nvidia else "nvidia" if nvidia and not amd else ""

    @property
    def min_compute_capability(self) -> tuple[int, int] | None:
        """The lowest NVIDIA compute capability among the devices; None when unknown or not NVIDIA."""
        if self.vendor != "nvidia":
            return None
        caps = [
            (int(d["computeMajor"]), int(minor))
            for d in self.devices
            for minor in (d.get("computeMinor", 0),)
            if _small_number(d.get("computeMajor")) and _small_number(minor)
        ]
        return min(caps) if caps else None


class Timeline(msgspec.Struct):
    start_ns: I64
    end_ns: I64
    lane: npt.NDArray[np.int32]
    kind: npt.NDArray[np.int8]
    name: npt.NDArray[np.int32]
    corr: I64
    stack: npt.NDArray[np.int32]
    shape0: I64
    blocks_per_sm: npt.NDArray[np.float32]
    occupancy: npt.NDArray[np.float32]
    nbytes: I64
    grid: I64
    block: npt.NDArray[np.int32]
    inputs: npt.NDArray[np.int32]
    lanes: list[Lane]
    strings: list[str]
    meta: TimelineMeta

    COLUMNS = (
        "start_ns",
        "end_ns",
        "lane",
        "kind",
        "name",
        "corr",
        "stack",
        "shape0",
        "blocks_per_sm",
        "occupancy",
        "nbytes",
        "grid",
        "block",
        "inputs",
    )

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def row_dtype(self) -> type[np.signedinteger[Any]]:
        """The integer type that holds this timeline's row numbers: int32 where they fit (half the
        memory of the row tables an analysis keeps through the diagnosis), else int64."""
        return np.int32 if len(self) < 2**31 else np.int64

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    def mask(self, *kinds: Kind) -> npt.NDArray[np.bool_]:
        """Whether each row is of one of ``kinds`` (one comparison per kind: 1 ms on 3M rows, where
        a lookup table took 5.6 ms and np.isin 16 ms)."""
        return one_of(self.kind, [int(k) for k in kinds])

    def names_of(self, idx: npt.NDArray[np.int64] | list[int]) -> list[str]:
        s = self.strings
        return [s[i] for i in self.name[idx]]

    def name_of(self, i: int) -> str:
        return self.strings[int(self.name[i])]

    def inputs_of(self, i: int) -> str:
        """The op's recorded inputs as JSON text ([dims, types, concrete, flops, strides?]), "" if none."""
        j = int(self.inputs[i])
        return self.strings[j] if j >= 0 else ""

    def op_key(self, rows: npt.NDArray[np.integer[Any]]) -> I64:
        """One number per row for its (name, recorded inputs) pair, in the pairs' order where
        inputs >= 0: ``name * len(strings) + inputs`` (``divmod`` by ``len(strings)`` gives the
        pair back). Its range is the string table's squared, not 2**64: ``unique_inverse``
        counts it in a table instead of sorting."""
        key: I64 = self.name[rows].astype(np.int64) * len(self.strings)
        key += self.inputs[rows]
        return key

    def stack_of(self, i: int) -> str:
        j = int(self.stack[i])
        return self.strings[j] if j >= 0 else ""

    def name_mask(self, predicate: Any, rows: npt.NDArray[np.integer[Any]] | None = None) -> npt.NDArray[np.bool_]:
        """Whether each row's name satisfies ``predicate(str) -> bool``.

        The predicate runs once per distinct name of the rows (in string-table order), never on
        strings no row is named (stacks, names of other rows). With ``rows``, only those rows'
        names are tested and the mask is over ``rows``.
        """
        return self._names_satisfy(predicate, self.name if rows is None else self.name[rows])

    def kind_name_mask(self, predicate: Any, *kinds: Kind) -> npt.NDArray[np.bool_]:
        """Whether each row is of one of ``kinds`` and its name satisfies ``predicate``: the
        predicate runs on those rows' names only (a launch-call test need not scan kernel names,
        nor a range test the Python frames)."""
        # The other rows read a sentinel past the string table, whose answer is False: no row
        # numbers to gather and scatter (3M rows: 17 -> 12 ms, with the ids made intp once).
        return self._names_satisfy(predicate, np.where(self.mask(*kinds), self.name, np.intp(len(self.strings))))

    def _names_satisfy(self, predicate: Any, ids: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.bool_]:
        """``predicate`` of the string of each id (the id ``len(strings)``: False), tested once per
        distinct id: a scatter to find them, a table, and one gather. The ids are made intp once
        (numpy converts int32 indices on every scatter and gather: half their cost)."""
        strings = self.strings
        ids = ids.astype(np.intp, copy=False)
        used = np.zeros(len(strings) + 1, dtype=np.bool_)  # a scatter, not a sort: O(rows + strings)
        used[ids] = True
        table = np.zeros(len(strings) + 1, dtype=np.bool_)
        for i in np.flatnonzero(used[:-1]).tolist():
            table[i] = bool(predicate(strings[i]))
        out: npt.NDArray[np.bool_] = table[ids]
        return out

    def device_of(self, rows: npt.NDArray[np.integer[Any]] | None = None) -> I64:
        """The device of each row's lane (all rows when ``rows`` is None): the GPU index for a
        stream, -1 for a CPU thread."""
        n = len(self) if rows is None else rows.size
        if n == 0 or not self.lanes:
            return np.full(n, -1, dtype=np.int64)
        dev_of_lane = np.array([ln.device if ln.kind is LaneKind.GPU_STREAM else -1 for ln in self.lanes], dtype=np.int64)
        return dev_of_lane[self.lane if rows is None else self.lane[rows]]

    def union(self, rows: I64 | npt.NDArray[np.bool_]) -> Intervals:
        """The union of the rows' intervals (row numbers or a mask): for device work, the time the
        device was busy."""
        return Intervals.union_of(self.start_ns[rows], self.end_ns[rows])

    def take(self, rows: npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> Timeline:
        """A timeline of the selected rows (same lanes, strings and metadata)."""
        cols = {c: getattr(self, c)[rows] for c in self.COLUMNS}
        return Timeline(**cols, lanes=self.lanes, strings=self.strings, meta=self.meta)

    def to_pandas(self) -> Any:
        """A pandas DataFrame view with names and lanes resolved (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on environment
            from whyidle.errors import MissingExtraError

            raise MissingExtraError("Timeline.to_pandas()", "pandas", "pandas") from exc
        df = pd.DataFrame({c: getattr(self, c) for c in self.COLUMNS})
        df["kind"] = [Kind(k).name.lower() for k in self.kind]
        df["name"] = [self.strings[i] for i in self.name]
        df["lane"] = [self.lanes[i].label for i in self.lane]
        return df
