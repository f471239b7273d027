"""What a host thread was doing, as interval sets per thread.

For every CPU thread that launched device work, the time it spent in each of these activities,
as normalised :class:`Intervals` (an instant can be in several; the attribution applies a
priority):

* ``cold``: first-call costs (context creation, module loading, stream/event creation, cuDNN
  autotuning) and launch calls that took milliseconds;
* ``dataloader``: inside ``enumerate(DataLoader)...__next__`` or a DataPipe;
* ``h2d``: inside a copy op (``aten::to``/``aten::_to_copy``/``aten::copy_``) that launched a
  host-to-device copy;
* ``sync``: blocked in a synchronising call: ``cuda*Synchronize``, a synchronous ``cudaMemcpy``
  (``hipMemcpyWithStream``, ``hipMemcpyDtoH``),
  ``cuda_sync`` records, ``aten::item``/``_local_scalar_dense``/``nonzero``... that made a
  runtime call (on a CPU tensor they wait for nothing), or a copy op that launched a
  device-to-host copy;
* ``ops``: inside any traced op or runtime call at all;
* ``context``: the thread's time outside ops, by the innermost Python frame, user range or OS
  call (:mod:`whyidle.analyses.hostwork`): waiting, MPI, first-use, data work, dispatch; and
  (Nsight Systems scheduling events) when the thread was scheduled out, blocked or preempted;
* ``jit``: inside JIT compilation or the loading of its output (``nvrtc*``, ``cuModuleLoadData``,
  ``hipModuleLoad``, Triton's and CuPy's compilers); also part of ``cold``;
* ``stream_waits``: start times of ``cudaStreamWaitEvent``-like calls, and ``launches``: start
  times of every launch call of the thread (to tell which launch a wait gated).

First use. The first call of an op or runtime call that took at least ``cold_call_min_ns`` and
``AttributionSettings.first_call_min_ratio`` times the median of its later calls is a first-use cost (lazy
module loading, cuDNN/cuBLAS heuristics, allocator growth): part of ``cold``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import msgspec.structs
import numpy as np
import numpy.typing as npt

from whyidle.analyses.calls import is_launch_call, queues_device_work
from whyidle.analyses.hostwork import ContextSets, classes_of_strings, context_sets
from whyidle.analyses.links import Links
from whyidle.timeline.arrays import median, one_of
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import OFF_CPU, Kind, Timeline

__all__ = [
    "HostSets",
    "host_sets",
    "memcpy_direction",
    "is_dataloader",
    "is_sync_call",
    "is_cold_call",
    "python_line",
    "SYNC_OPS",
    "copy_directions",
    "h2d_copy_rows",
]

I64 = npt.NDArray[np.int64]

_DATALOADER_RE = re.compile(r"enumerate\(DataLoader\)|DataLoader.*__next__|DataLoaderIter|DataPipe|IterDataPipe|_next_data")
_SYNC_CALL_RE = re.compile(
    r"^(cuda|hip|cu)(Device|Stream|Event|Ctx)Synchronize|^(cuda|hip)Memcpy(2D|3D|Peer|WithStream|DtoH|HtoD|DtoD)?(_v\d+)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$|"
    r"^(cuda|hip)MemcpyFrom|^(cuda|hip)MemcpyTo|^(cuda|hip)StreamQuery$|"
    r"BlockHostUntilReady"  # XLA/PJRT: the host waits for a buffer (jax's block_until_ready, device_get)
)
# Framework ops that block the host until the device has produced a value.
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::nonzero_static",
        "aten::is_nonzero",
        "aten::equal",
        "aten::allclose",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_consecutive",
        "aten::unique_dim",
        "aten::repeat_interleave",
        "aten::tolist",
        "cudaDeviceSynchronize",
    }
)
_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_copy_from"})
_COLD_CALL_RE = re.compile(
    r"^cu(Module|Library)(Load|GetFunction|GetGlobal)|^cuCtxCreate|^cudaStreamCreate|^cudaEventCreate|^cuStreamCreate|"
    r"^cuEventCreate|^cudaGetDeviceProperties|^cudaFuncGetAttributes|^cudnnCreate|^cublasCreate|^cublasLtCreate|"
    r"^cudnnFind|^cuDevicePrimaryCtxRetain|^cudaSetDevice$|"
    r"^hipModuleLoad|^hipStreamCreate|^hipEventCreate|^(nvrtc|hiprtc|nvJitLink|cuLink)[A-Z]"
)
# JIT compilation and loading its output: a runtime call (nvrtc, cuModuleLoadData, hipModuleLoad)
# or a frame or range of a compiler (NVRTC's, CuPy's, Triton's compile and its first load; not
# Triton's CompiledKernel.run or launch_metadata, called on every launch). Not cuLibraryLoadData:
# the CUDA runtime lazily loading a library's own kernels (cuBLAS's) on first use.
_JIT_RE = re.compile(
    r"^(cuModuleLoad|cuLink|hipModuleLoad|nvrtc|hiprtc|nvJitLink)|Nvrtc|"
    r"^(cupy/cuda/compiler\.py\(|cupyx/jit/)|^triton/(compiler|backends/\w+)/\S*\(\d+\): (compile|_init_handles|make_\w+)$"
)
# Allocator calls are cheap when warm; when one takes milliseconds the caching allocator is
# growing (warm-up) or being emptied, a first-call cost of the same kind as module loading.
_ALLOC_CALL_RE = re.compile(r"^(cuda|hip)(Malloc|Free|HostAlloc|MallocHost|FreeHost|HostRegister)|^cuMem(Alloc|Free|HostAlloc)")
_STREAM_WAIT_RE = re.compile(r"^(cuda|cu|hip)StreamWaitEvent|^(cuda|cu|hip)StreamWaitValue")
_PY_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_LIBRARY_PATH = re.compile(r"site-packages|dist-packages|/torch/|/lib/python\d|<built-in|<frozen|^torch/|^<")


def memcpy_direction(name: str) -> str:
    """'HtoD', 'DtoH', 'DtoD', 'HtoH', 'PtoP' or '' from a copy's name."""
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if d in name:
            return d
    return ""


def is_dataloader(name: str) -> bool:
    return bool(_DATALOADER_RE.search(name))


def is_sync_call(name: str) -> bool:
    return bool(_SYNC_CALL_RE.search(name)) or name in SYNC_OPS


def is_cold_call(name: str) -> bool:
    return bool(_COLD_CALL_RE.search(name))


def python_line(stack: str) -> str:
    """The innermost user frame ("train.py:42 in step") of a Kineto call stack, or ''.

    Kineto writes ``Call stack`` innermost first: ``"a.py(3): f;b.py(9): g"``; python_function
    event names have the same ``file(line): func`` form.
    """
    for frame in stack.split(";"):
        m = _PY_FRAME.match(frame.strip())
        if not m:
            continue
        path, line, func = m.groups()
        if _LIBRARY_PATH.search(path):
            continue
        return f"{path.rsplit('/', 1)[-1]}:{line} in {func}"
    return ""


class HostSets(msgspec.Struct, frozen=True):
    lane: int
    cold: Intervals
    dataloader: Intervals
    h2d: Intervals
    sync: Intervals
    ops: Intervals
    # For evidence: the rows of this thread's ops, sorted by start.
    rows: I64
    context: ContextSets
    stream_waits: I64  # sorted start times of stream-wait calls
    launches: I64  # sorted start times of launch calls
    jit: Intervals = msgspec.field(default_factory=Intervals.empty)


_HOST_WORK = (int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.SYNC))


def copy_directions(tl: Timeline, links: Links) -> npt.NDArray[np.object_]:
    """For each of ``links.device_rows``: 'HtoD', 'DtoH'... for copies, '' otherwise."""
    labels = [""]  # the directions seen; a string's code indexes them
    code = np.zeros(len(tl.strings), dtype=np.int64)
    for i, s in enumerate(tl.strings):
        if "emcpy" in s:
            d = memcpy_direction(s)
            if d not in labels:
                labels.append(d)
            code[i] = labels.index(d)
    rows = links.device_rows
    return np.array(labels, dtype=object)[np.where(tl.kind[rows] == int(Kind.MEMCPY), code[tl.name[rows]], 0)]


def h2d_copy_rows(tl: Timeline, links: Links, lane: int) -> I64:
    """Copy ops (``aten::to``...) on ``lane`` that launched a host-to-device copy, by start."""
    dirs = copy_directions(tl, links)
    sel = (links.launch_of >= 0) & (dirs == "HtoD")
    pts = tl.start_ns[links.launch_of[sel]]
    pts = np.sort(pts[tl.lane[links.launch_of[sel]] == lane])
    copy_name = tl.name_mask(lambda s: s in _COPY_OPS)
    rows = np.flatnonzero((tl.lane == lane) & (tl.kind == int(Kind.CPU_OP)) & copy_name)
    return rows[_rows_containing(tl, rows, pts)]


def _rows_containing(tl: Timeline, candidates: I64, points: I64) -> npt.NDArray[np.bool_]:
    """Which candidate rows contain at least one of ``points`` (sorted) in [start, end]."""
    if candidates.size == 0 or points.size == 0:
        return np.zeros(candidates.size, dtype=np.bool_)
    lo = np.searchsorted(points, tl.start_ns[candidates], side="left")
    hi = np.searchsorted(points, tl.end_ns[candidates], side="right")
    return hi > lo


def first_use_rows(tl: Timeline, rows: I64, min_ns: int, min_ratio: float) -> I64:
    """Of ``rows`` (one thread's ops, by start), the first calls of a name that were first-use costs.

    A first call counts when it took at least ``min_ns`` and ``min_ratio`` times the median of
    the name's later calls (at least two of them: a name called once says nothing). Only the
    names whose first call took ``min_ns`` are sorted (a thread of 1.4M ops: 100 -> 20 ms).
    """
    if rows.size == 0:
        return rows
    start = tl.start_ns[rows]
    dur = tl.end_ns[rows] - start
    names = tl.name[rows]
    if rows.size > 1 and not bool((start[1:] >= start[:-1]).all()):  # not by start: sort them all
        return _first_use(rows, names, start, dur, np.arange(rows.size, dtype=np.int64), min_ns, min_ratio)
    first = np.full(len(tl.strings), rows.size, dtype=np.int64)  # each name's first position
    np.minimum.at(first, names, np.arange(rows.size, dtype=np.int64))
    firsts = first[first < rows.size]
    slow = firsts[dur[firsts] >= min_ns]
    if slow.size == 0:
        return np.zeros(0, dtype=np.int64)
    return _first_use(rows, names, start, dur, np.flatnonzero(np.isin(names, names[slow])), min_ns, min_ratio)


def _first_use(rows: I64, names: npt.NDArray[np.integer[Any]], start: I64, dur: I64, among: I64, min_ns: int, min_ratio: float) -> I64:
    """:func:`first_use_rows` over the positions ``among``."""
    order = among[np.lexsort((start[among], names[among]))]
    sn = names[order]
    first = np.ones(sn.size, dtype=np.bool_)
    first[1:] = sn[1:] != sn[:-1]
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], sn.size)  # one past each name's last call
    slow = dur[order[starts]] >= min_ns
    out = []
    for k, j in zip(starts[slow].tolist(), ends[slow].tolist(), strict=True):
        later = dur[order[k + 1 : j]]
        if later.size >= 2 and dur[order[k]] >= min_ratio * median(later):
            out.append(int(rows[order[k]]))
    return np.array(sorted(out), dtype=np.int64)


def host_sets(
    tl: Timeline,
    links: Links,
    lanes: npt.NDArray[np.int64] | list[int],
    cfg_cold_call_min_ns: int,
    python_overhead_max_ns: int = 1_000_000,
    first_call_min_ratio: float = 10.0,
) -> dict[int, HostSets]:
    """Activity sets for each of ``lanes`` (CPU-thread lanes that launched device work)."""
    classes = classes_of_strings(tl)
    off_name = tl.name_mask(lambda s: s == OFF_CPU)
    # Runtime-call name tests, on runtime rows only (kernel names are long and many).
    rt_all = np.flatnonzero(tl.kind == int(Kind.RUNTIME))
    wait_name = np.zeros(len(tl), dtype=np.bool_)
    wait_name[rt_all] = tl.name_mask(lambda s: bool(_STREAM_WAIT_RE.match(s)), rt_all)
    launch_only = np.zeros(len(tl), dtype=np.bool_)
    launch_only[rt_all] = tl.name_mask(queues_device_work, rt_all)
    dl_name = tl.name_mask(is_dataloader)
    # Tested only where they are read: on host work (sync, copy ops) and runtime calls (cold, launch).
    sync_name = tl.kind_name_mask(is_sync_call, *map(Kind, _HOST_WORK))
    cold_name = tl.kind_name_mask(is_cold_call, Kind.RUNTIME)
    launch_name = tl.kind_name_mask(lambda s: is_launch_call(s) or bool(_ALLOC_CALL_RE.match(s)), Kind.RUNTIME)
    copy_name = tl.kind_name_mask(lambda s: s in _COPY_OPS, *map(Kind, _HOST_WORK))
    jit_name = tl.kind_name_mask(lambda s: bool(_JIT_RE.search(s)), Kind.RUNTIME, Kind.PYTHON, Kind.ANNOTATION)
    dirs = copy_directions(tl, links)
    has_launch = links.launch_of >= 0
    # Made once for every lane: which rows are host records, and off-CPU ranges; each launch's thread.
    host_kind = one_of(tl.kind, (*_HOST_WORK, int(Kind.ANNOTATION), int(Kind.PYTHON)))
    off_cpu = (tl.kind == int(Kind.ANNOTATION)) & off_name
    launch_lane = np.where(has_launch, tl.lane[np.maximum(links.launch_of, 0)], -1)
    result: dict[int, HostSets] = {}
    for lane in lanes:
        lane = int(lane)
        on_lane = tl.lane == lane
        rows = np.flatnonzero(on_lane & host_kind)
        work = rows[one_of(tl.kind[rows], _HOST_WORK)]
        s, e = tl.start_ns, tl.end_ns
        ops = Intervals.union_of(s[work], e[work])
        dl_rows = rows[dl_name[rows]]
        dataloader = Intervals.union_of(s[dl_rows], e[dl_rows])
        # Copy ops that launched an HtoD / DtoH copy from this thread.
        launches_here = launch_lane == lane
        h2d_pts = np.sort(s[links.launch_of[launches_here & (dirs == "HtoD")]])
        d2h_pts = np.sort(s[links.launch_of[launches_here & (dirs == "DtoH")]])
        copy_rows = work[copy_name[work]]
        h2d_rows = copy_rows[_rows_containing(tl, copy_rows, h2d_pts)]
        d2h_rows = copy_rows[_rows_containing(tl, copy_rows, d2h_pts)]
        h2d = Intervals.union_of(s[h2d_rows], e[h2d_rows])
        # A framework op that reads a value back (aten::item...) synchronises only when it ran
        # device work: on a CPU tensor (Adam's step count) it launches nothing and waits for nothing.
        is_sync = sync_name[work] | (tl.kind[work] == int(Kind.SYNC))
        op_sync = work[is_sync & (tl.kind[work] == int(Kind.CPU_OP))]
        rt_starts = np.sort(s[work[tl.kind[work] == int(Kind.RUNTIME)]])
        if rt_starts.size:
            op_sync = op_sync[_rows_containing(tl, op_sync, rt_starts)]
        sync_rows = np.concatenate((work[is_sync & (tl.kind[work] != int(Kind.CPU_OP))], op_sync, d2h_rows))
        sync = Intervals.union_of(s[sync_rows], e[sync_rows])
        runtime = work[tl.kind[work] == int(Kind.RUNTIME)]
        slow_launch = runtime[launch_name[runtime] & ((e[runtime] - s[runtime]) >= cfg_cold_call_min_ns)]
        first = first_use_rows(tl, work, cfg_cold_call_min_ns, first_call_min_ratio)
        cold_rows = np.concatenate((runtime[cold_name[runtime]], slow_launch, first))
        cold = Intervals.union_of(s[cold_rows], e[cold_rows])
        ctx = context_sets(tl, lane, classes, python_overhead_max_ns, ops)
        waits = np.sort(s[runtime[wait_name[runtime]]])
        launches = np.sort(s[runtime[launch_only[runtime]]])
        off_rows = np.flatnonzero(on_lane & off_cpu)
        if off_rows.size:
            ctx = msgspec.structs.replace(ctx, off_cpu=Intervals.union_of(s[off_rows], e[off_rows]), has_sched=True)
        jit_rows = rows[jit_name[rows]]
        jit = Intervals.union_of(s[jit_rows], e[jit_rows])
        result[lane] = HostSets(lane, cold | jit, dataloader, h2d, sync, ops, rows, ctx, waits, launches, jit)
    return result
