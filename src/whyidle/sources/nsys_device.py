"""Nsight Systems device work -> Timeline rows: kernels, copies, memsets, whole-graph runs.

::

    CUPTI_ACTIVITY_KIND_KERNEL       -> Kind.KERNEL (Kind.COLLECTIVE for NCCL kernels) on a
                                        GPU-stream lane; blocks per SM = grid / TARGET_INFO_GPU.smCount;
                                        grid and block sizes from gridX..Z, blockX..Z
    CUPTI_ACTIVITY_KIND_MEMCPY       -> Kind.MEMCPY named as Kineto names copies,
                                        "Memcpy HtoD (Pageable -> Device)", from copyKind,
                                        srcKind and dstKind, so pageable-vs-pinned logic is shared
    CUPTI_ACTIVITY_KIND_MEMSET       -> Kind.MEMSET, "Memset (Device)"
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE  -> Kind.KERNEL, one row per whole-graph execution (when
                                        the capture traced graphs as a whole)

Each reader returns the number of rows it added (0 when the table is absent or empty).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from whyidle.sources.nsys_context import Export
from whyidle.sources.nsys_schema import TID_MASK
from whyidle.sources.ranges import COLLECTIVE_KERNEL
from whyidle.timeline.model import Kind

__all__ = ["read_kernels", "read_memcpy", "read_memset", "read_graphs", "memcpy_name"]


# Fallbacks when an export lacks its ENUM tables (values from nsys 2025.1's enum tables).
_COPY_KIND = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD",
}  # fmt: skip
_MEM_KIND = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}  # fmt: skip


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """Kineto's name for a copy: ``Memcpy HtoD (Pageable -> Device)``."""
    d = _COPY_KIND.get(copy_kind, "Unknown")
    return f"Memcpy {d} ({_MEM_KIND.get(src_kind, 'Unknown')} -> {_MEM_KIND.get(dst_kind, 'Unknown')})"


def read_kernels(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not x.s.has(t, "start", "end"):
        return 0
    a = x.s.ints(
        t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    )
    if a.shape[0] == 0:
        return 0
    start, end = x.times(a[:, 0], a[:, 1])
    name_id = np.where(a[:, 6] >= 0, a[:, 6], a[:, 7])
    names = x.strings.names(x.b, name_id, missing="<unnamed kernel>")
    coll_table = np.fromiter((bool(COLLECTIVE_KERNEL.search(s)) for s in x.b._strings), dtype=np.bool_, count=len(x.b._strings))
    kind = np.where(coll_table[names], int(Kind.COLLECTIVE), int(Kind.KERNEL)).astype(np.int8)
    grid = np.where((a[:, 8] > 0) & (a[:, 9] > 0) & (a[:, 10] > 0), a[:, 8] * a[:, 9] * a[:, 10], -1)
    block = np.where((a[:, 11] > 0) & (a[:, 12] > 0) & (a[:, 13] > 0), a[:, 11] * a[:, 12] * a[:, 13], -1).astype(np.int32)
    sms = np.array([x.sm_count.get(int(d), 0) for d in a[:, 2].tolist()], dtype=np.float64) if x.sm_count else np.zeros(a.shape[0])
    bps = np.where((grid > 0) & (sms > 0), grid / np.where(sms > 0, sms, 1), np.nan).astype(np.float32)
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
        kind=kind,
        name=names,
        corr=x.corr_key(a[:, 5] & ~TID_MASK, a[:, 4]),
        blocks_per_sm=bps,
        grid=grid,
        block=block,
    )
    return int(a.shape[0])


def read_memcpy(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if not x.s.has(t, "start", "end"):
        return 0
    a = x.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind", "srcKind", "dstKind"))
    if a.shape[0] == 0:
        return 0
    combos, inv = np.unique(a[:, 7:10], axis=0, return_inverse=True)
    ids = x.b.intern_many([memcpy_name(int(c), int(s), int(d)) for c, s, d in combos.tolist()])
    return _add_transfers(x, a, Kind.MEMCPY, ids[inv.reshape(-1)])


def read_memset(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not x.s.has(t, "start", "end"):
        return 0
    a = x.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "memKind"))
    if a.shape[0] == 0:
        return 0
    kinds, inv = np.unique(a[:, 7], return_inverse=True)
    ids = x.b.intern_many([f"Memset ({_MEM_KIND.get(int(k), 'Device')})" for k in kinds.tolist()])
    return _add_transfers(x, a, Kind.MEMSET, ids[inv.reshape(-1)])


def _add_transfers(x: Export, a: npt.NDArray[np.int64], kind: Kind, names: npt.NDArray[np.int64]) -> int:
    """Copies or memsets as rows; ``a``'s first columns: start, end, deviceId, streamId,
    correlationId, globalPid, bytes."""
    start, end = x.times(a[:, 0], a[:, 1])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
        kind=np.full(a.shape[0], int(kind), dtype=np.int8),
        name=names,
        corr=x.corr_key(a[:, 5] & ~TID_MASK, a[:, 4]),
        nbytes=a[:, 6],
    )
    return int(a.shape[0])


def read_graphs(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if not x.s.has(t, "start", "end", "streamId"):
        return 0
    a = x.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"))
    if a.shape[0] == 0:
        return 0
    start, end = x.times(a[:, 0], a[:, 1])
    gids, inv = np.unique(a[:, 6], return_inverse=True)
    ids = x.b.intern_many([f"CUDA graph {g}" for g in gids.tolist()])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
        kind=np.full(a.shape[0], int(Kind.KERNEL), dtype=np.int8),
        name=ids[inv.reshape(-1)],
        corr=x.corr_key(a[:, 5] & ~TID_MASK, a[:, 4]),
    )
    return int(a.shape[0])
