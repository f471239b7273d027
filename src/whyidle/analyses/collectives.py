"""Bytes and bus bandwidth of the NCCL/RCCL collectives in a trace.

Each communication kernel (``Kind.COLLECTIVE``) is given the record of the collective whose host
range its launch ran in, on the launching thread:

- PyTorch 2.1+: ``record_param_comms`` carries ``Collective name``, ``In msg nelems``, ``Out msg
  nelems``, ``Group size`` and ``dtype`` (the Kineto reader keeps them as the sixth part of the
  op's inputs text);
- older traces: the ``nccl:all_reduce`` range and the ``c10d::`` op around it record only their
  tensors' dims and types; the largest tensor is the message, and the group size is the job's world
  size (``distributedInfo``), which the note says.

    thread  [c10d::allreduce_ ..................................]
              [record_param_comms  (name, nelems, group, dtype)]
                [nccl:all_reduce ...........]
                   [cudaLaunchKernel]
    stream               [ncclKernel_AllReduce_RING_LL_Sum_float ....]

The message size S is nccl-tests' (its doc/PERFORMANCE.md): the larger of the input and output
element counts times the element size, so the whole gathered array for all_gather, the whole
reduced array for reduce_scatter. Algorithm bandwidth is ``S / t`` over the kernel's time; bus
bandwidth multiplies it by nccl-tests' factor for n ranks: all_reduce ``2(n-1)/n``; all_gather,
reduce_scatter and all_to_all ``(n-1)/n``; broadcast, reduce, send and recv 1. Bus bandwidth is
compared with the GPU's link bandwidth in one direction (analyses/peaks.py ``LINKS``), as the
nccl-tests figures are unidirectional. A kernel's time includes waiting for the slowest rank to
arrive, so a rank that waits at its collectives shows a low bus bandwidth that is not the link's.
A communication kernel without a record (no launch found, no range with sizes) keeps its time as
unsized.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.flops import itemsize
from whyidle.analyses.links import Links
from whyidle.analyses.peaks import LinkPeak, link_peak
from whyidle.analyses.window import Window
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["CollectiveRate", "CommWork", "measure_collectives", "bus_factor", "collective_kind"]

I64 = npt.NDArray[np.int64]

# c10's ScalarType names, as record_param_comms writes its dtype, and their sizes in bytes.
_COMM_SIZES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "ComplexFloat": 8,
    "ComplexDouble": 16,
}  # fmt: skip

# PyTorch's record of a collective; the other ranges that size one are named after their collective
# (c10d::allreduce_, nccl:all_reduce, symm_mem::multimem_all_reduce_, vllm::all_reduce).
_RECORD = "record_param_comms"
_LOOK_BACK = 8  # recorded ranges scanned back from a launch for the ones still open at it
_MAX_ELEMENTS = 2**48  # larger counts are not a real message (a corrupt record): not sized


class CollectiveRate(msgspec.Struct, frozen=True):
    """One collective shape (name, dtype, group size, message size): its calls' rates."""

    name: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, or as recorded
    dtype: str
    group_size: int  # 0: not known
    nbytes: int  # the message size S of one call (nccl-tests' size)
    count: int
    kernel_ns: int  # the calls' kernels, summed
    algbw_gbps: float  # S x count / kernel time, GB/s (1e9 bytes/s)
    busbw_gbps: float | None  # algbw x the collective's factor; None when the factor or the group size is unknown
    fraction: float | None  # bus bandwidth / the link's bandwidth in one direction; None without a link peak
    note: str = ""


class CommWork(msgspec.Struct, frozen=True):
    """The collectives of a window: their rates, and the link they are compared with."""

    link: LinkPeak | None
    kernel_ns: int  # communication kernels that started in the window, summed over streams
    unsized_ns: int  # of which no record gave the size
    rates: tuple[CollectiveRate, ...]  # longest first
    notes: tuple[str, ...]


def collective_kind(name: str) -> str:
    """NCCL's name for a recorded collective name (``allreduce``, ``_allgather_base``,
    ``nccl:all_reduce``, ``reduce_scatter_tensor_coalesced``); the name itself when not known.
    A multimem all-reduce (``symm_mem::multimem_all_reduce_``) reduces in the NVLink switch."""
    low = name.lower().split(":")[-1].replace("_", "")
    if "multimem" in low and "allreduce" in low:
        return "all_reduce_in_network"
    for key, kind in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all")):
        if key in low:
            return kind
    for key, kind in (("broadcast", "broadcast"), ("reduce", "reduce"), ("send", "send_recv"), ("recv", "send_recv")):
        if low.startswith(key):
            return kind
    return name


_KINDS = frozenset(("all_reduce", "all_reduce_in_network", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"))


def bus_factor(kind: str, n: int) -> float | None:
    """nccl-tests' bus bandwidth factor for ``kind`` over ``n`` ranks; None when not known."""
    if n <= 0:
        return None
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind == "all_reduce_in_network":
        return (n - 1) / (n + 1)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0 if kind in ("broadcast", "reduce", "send_recv") else None


class _Record(msgspec.Struct, frozen=True):
    kind: str
    dtype: str
    group: int
    nbytes: int
    note: str


def _decode(text: str) -> list[Any] | None:
    try:
        v = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return v if type(v) is list else None


def _tensors(parts: list[Any]) -> list[tuple[int, str]]:
    """(elements, type) of each sized tensor among recorded inputs [dims, types, ...]."""
    dims, types = (parts + [None, None])[:2]
    if type(dims) is not list or type(types) is not list:
        return []
    return [
        (math.prod(d), str(t))
        for d, t in zip(dims, types, strict=False)
        if type(d) is list and all(type(x) is int and 0 <= x < _MAX_ELEMENTS for x in d) and itemsize(str(t)) > 0 and math.prod(d) < _MAX_ELEMENTS
    ]


def _group_of(kind: str, elements: list[int], world: int | None) -> tuple[int, str]:
    """(group size, note) for a collective recorded without one: all_gather's output over its input
    (reduce_scatter's input over its output) where a range recorded both, else the world size."""
    big, small = max(elements), min(elements)
    if kind in ("all_gather", "reduce_scatter") and small > 0 and big > small and big % small == 0:
        return big // small, "group size not recorded: read from the output/input size ratio"
    return (world, "group size not recorded: the job's world size assumed") if world else (0, "group size not recorded")


def _record(names: list[str], texts: list[list[Any] | None], world: int | None) -> _Record | None:
    """The collective's record from the ranges open at its launch (innermost last)."""
    for parts in reversed(texts):
        comm = parts[5] if parts is not None and len(parts) > 5 and type(parts[5]) is list and len(parts[5]) == 5 else None
        if comm is not None:
            name, n_in, n_out, group, dtype = comm
            size = _COMM_SIZES.get(str(dtype), 0) or itemsize(str(dtype))
            elements = max(x for x in (n_in, n_out, 0) if type(x) is int and x < _MAX_ELEMENTS)
            if size and type(group) is int and 0 <= group < _MAX_ELEMENTS:
                return _Record(collective_kind(str(name)), str(dtype).removeprefix("c10::"), group, elements * size, "")
    kinds = [k for k in map(collective_kind, names) if k in _KINDS]
    tensors = [t for p in texts if p is not None for t in _tensors(p)]
    if not kinds or not tensors:
        return None
    elements, dtype = max(tensors)
    group, note = _group_of(kinds[-1], [e for e, _ in tensors], world)
    return _Record(kinds[-1], dtype.removeprefix("c10::"), group, elements * itemsize(dtype), note)


def _candidates(tl: Timeline) -> I64:
    """Host ranges that may record a collective, in start order."""
    rows = np.flatnonzero(((tl.kind == int(Kind.CPU_OP)) | (tl.kind == int(Kind.ANNOTATION))) & (tl.inputs >= 0))
    if rows.size == 0:
        return rows
    ids = unique_sorted(tl.name[rows]).tolist()
    keep = np.zeros(int(max(ids)) + 1, dtype=np.bool_)
    for i in ids:
        s = tl.strings[i]
        keep[i] = s == _RECORD or collective_kind(s) in _KINDS
    return rows[keep[tl.name[rows]]]


def _records(tl: Timeline, launches: I64) -> list[_Record | None]:
    """Each launch's collective record, None where no range around it has one. Each set of open
    ranges (by name and inputs text) is read once."""
    cands = _candidates(tl)
    out: list[_Record | None] = [None] * launches.size
    if cands.size == 0:
        return out
    done: dict[tuple[int, ...], _Record | None] = {}
    world = tl.meta.world_size
    ok = launches >= 0
    launch_lane = np.where(ok, tl.lane[np.maximum(launches, 0)], -1)
    for lane in unique_sorted(tl.lane[cands]).tolist():
        on = cands[tl.lane[cands] == lane]
        q = np.flatnonzero(launch_lane == lane)
        t = tl.start_ns[launches[q]]
        his = np.searchsorted(tl.start_ns[on], t, side="right").tolist()
        ends, names, inputs = tl.end_ns[on].tolist(), tl.name[on].tolist(), tl.inputs[on].tolist()
        for qi, ti, hi in zip(q.tolist(), t.tolist(), his, strict=True):
            open_at = [j for j in range(max(0, hi - _LOOK_BACK), hi) if ends[j] > ti]
            key = tuple(names[j] << 32 | inputs[j] for j in open_at)
            if key not in done:
                done[key] = _record([tl.strings[names[j]] for j in open_at], [_decode(tl.strings[inputs[j]]) for j in open_at], world)
            out[qi] = done[key]
    return out


def _rates(recs: list[_Record], ns: list[int], link: LinkPeak | None, top: int) -> tuple[CollectiveRate, ...]:
    groups: dict[_Record, list[int]] = {}
    for rec, t in zip(recs, ns, strict=True):
        groups.setdefault(rec, []).append(t)
    out = []
    for rec, times in groups.items():
        total = sum(times)
        algbw = rec.nbytes * len(times) / total if total > 0 else 0.0  # bytes per ns = GB/s
        factor = bus_factor(rec.kind, rec.group)
        busbw = algbw * factor if factor is not None and total > 0 else None
        fraction = busbw / link.per_direction_gbps if busbw is not None and link is not None else None
        out.append(CollectiveRate(rec.kind, rec.dtype, rec.group, rec.nbytes, len(times), total, algbw, busbw, fraction, rec.note))
    return tuple(sorted(out, key=lambda r: -r.kernel_ns)[:top])


def measure_collectives(tl: Timeline, links: Links, window: Window, top: int) -> CommWork | None:
    """The collectives whose kernels started in the window (pure); None when there are none."""
    dev = links.device_rows
    sel = tl.kind[dev] == int(Kind.COLLECTIVE)
    rows, launch = dev[sel], links.launch_of[sel]
    if window.end_ns > window.start_ns:
        inside = (tl.start_ns[rows] >= window.start_ns) & (tl.start_ns[rows] < window.end_ns)
        rows, launch = rows[inside], launch[inside]
    if rows.size == 0:
        return None
    ns = (tl.end_ns[rows] - tl.start_ns[rows]).astype(np.int64)
    recs = _records(tl, launch)
    sized = [i for i, r in enumerate(recs) if r is not None]
    devs = tl.meta.devices
    link = link_peak(devs[0]) if devs else None
    notes = []
    if link is None:
        notes.append("no link bandwidth known for this device: bus bandwidths are shown without a fraction")
    else:
        notes.append(f"bus bandwidth compared with {link.name}'s {link.per_direction_gbps:g} GB/s per direction, as if the group shared one {link.name} domain")
    if len(sized) < rows.size:
        notes.append("some communication kernels have no recorded size (no range around their launch records one): their time is counted as unsized")
    unsized = int(ns.sum()) - int(ns[sized].sum()) if sized else int(ns.sum())
    kept = [r for r in recs if r is not None]
    return CommWork(link, int(ns.sum()), unsized, _rates(kept, ns[sized].tolist(), link, top), tuple(notes))
