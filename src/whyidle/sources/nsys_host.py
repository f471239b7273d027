"""Nsight Systems host activity -> Timeline rows: CUDA API calls, syncs, NVTX, OS runtime, scheduling.

::

    CUPTI_ACTIVITY_KIND_RUNTIME         -> Kind.RUNTIME on the calling thread; names via StringIds
                                           with the ``_vNNNN`` API-version suffix stripped
                                           (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``);
                                           the duplicate backtrace rows (event class 67-69) are dropped
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION -> Kind.SYNC on the thread whose runtime call it belongs to
                                           (stream/context/event sync; stream-wait-event is a
                                           device-side wait and is skipped)
    NVTX_EVENTS                         -> push/pop and start/end ranges on their thread:
                                           Kind.STEP when the name matches the step pattern,
                                           Kind.CPU_OP for ``torch.autograd.profiler.emit_nvtx``
                                           op ranges ("aten::mm, seq = 4, ..." -> "aten::mm"),
                                           Kind.ANNOTATION otherwise
    OSRT_API                            -> Kind.ANNOTATION on their thread (see below)
    SCHED_EVENTS                        -> Kind.ANNOTATION named OFF_CPU on the thread, from each
                                           switch out to its next switch in (the thread was
                                           blocked or preempted, not running)
    ThreadNames                         -> lane names

OS-runtime calls. ``poll``, ``read``, ``futex``, ``sem_wait``, ``pthread_cond_wait``... on the
launching thread mean the host is *blocked*, not busy. The gap attribution (analyses/gaps.py)
splits the host side of a gap by what the launching thread was doing; a traced op or runtime call
counts as host work (host overhead). A blocked thread is not doing host work, so OS-runtime calls
are stored as ``Kind.ANNOTATION`` (context, not work): time inside them stays "nothing traced",
which the attribution reports as untraced host time (training) or an idle host (inference) -- the
starvation / insufficient-demand evidence -- instead of host overhead. The nsys findings
(``whyidle.findings.nsys_rules``) then name the blocking calls that cover those gaps.
"""

from __future__ import annotations

import numpy as np

from whyidle.sources.nsys_context import Export
from whyidle.sources.nsys_schema import TID_MASK, as_int, decode_global_tid
from whyidle.sources.ranges import range_kind
from whyidle.timeline.model import OFF_CPU, Kind

__all__ = ["read_runtime", "read_sync", "read_nvtx", "read_osrt", "read_sched", "name_threads"]

_SYNC_TYPE = {1: "Event Sync", 3: "Stream Sync", 4: "Context Sync", 0: "Sync"}
_STREAM_WAIT_EVENT = 2
_BACKTRACE_CLASSES = (67, 68, 69)  # TRACE_PROCESS_EVENT_CUDABACKTRACE(_START/_FINISH)
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70}


def read_runtime(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not x.s.has(t, "start", "end", "globalTid"):
        return 0
    cols = x.s.columns(t)
    where = f"eventClass NOT IN ({', '.join(str(c) for c in _BACKTRACE_CLASSES)})" if "eventClass" in cols else ""
    a = x.s.ints(t, ("start", "end", "globalTid", "correlationId", "nameId"), where)
    if a.shape[0] == 0:
        return 0
    start, end = x.times(a[:, 0], a[:, 1])
    lanes = x.thread_lanes(a[:, 2])
    key = x.corr_key(a[:, 2] & ~TID_MASK, a[:, 3])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=lanes,
        kind=np.full(a.shape[0], int(Kind.RUNTIME), dtype=np.int8),
        name=x.strings.names(x.b, a[:, 4], strip=True, missing="<unnamed call>"),
        corr=key,
    )
    if x.s.count("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        ok = key >= 0
        x.thread_of_key = dict(zip(key[ok].tolist(), lanes[ok].tolist()))
    return int(a.shape[0])


def read_sync(x: Export) -> int:
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if not x.s.has(t, "start", "end", "correlationId"):
        return 0
    cols = x.s.columns(t)
    type_col = "syncType" if "syncType" in cols else "deprecatedSyncType"
    a = x.s.ints(t, ("start", "end", "correlationId", "globalPid", type_col))
    if a.shape[0] == 0:
        return 0
    key = x.corr_key(a[:, 3] & ~TID_MASK, a[:, 2])
    lane = np.array([x.thread_of_key.get(int(k), -1) for k in key.tolist()], dtype=np.int32)
    keep = (lane >= 0) & (a[:, 4] != _STREAM_WAIT_EVENT)
    if not keep.any():
        return 0
    a, lane = a[keep], lane[keep]
    start, end = x.times(a[:, 0], a[:, 1])
    types, inv = np.unique(a[:, 4], return_inverse=True)
    ids = x.b.intern_many([_SYNC_TYPE.get(int(x), "Sync") for x in types.tolist()])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=lane,
        kind=np.full(a.shape[0], int(Kind.SYNC), dtype=np.int8),
        name=ids[inv.reshape(-1)],
    )
    return int(a.shape[0])


def read_nvtx(x: Export) -> int:
    t = "NVTX_EVENTS"
    if not x.s.has(t, "start", "end", "globalTid"):
        return 0
    cols = x.s.columns(t)
    types = dict(_NVTX_RANGE_TYPES)
    if x.s.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
        for i, n in x.s.con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if n in types and as_int(i) >= 0:
                types[str(n)] = as_int(i)
    where = "end IS NOT NULL" + (f" AND eventType IN ({', '.join(str(v) for v in types.values())})" if "eventType" in cols else "")
    text_expr = "text" if "text" in cols else "NULL"
    tid_expr = "COALESCE(textId, -1)" if "textId" in cols else "-1"
    rows = x.s.con.execute(f'SELECT start, end, globalTid, {tid_expr}, {text_expr} FROM "{t}" WHERE {where}').fetchall()
    if not rows:
        return 0
    n = len(rows)
    a = np.array([(as_int(r[0]), as_int(r[1]), as_int(r[2]), as_int(r[3])) for r in rows], dtype=np.int64).reshape(n, 4)
    texts = [(r[4] if isinstance(r[4], str) else "") if r[4] is not None else x.strings.values.get(as_int(r[3]), "") for r in rows]
    keep = np.array([bool(x) for x in texts], dtype=np.bool_) & (a[:, 2] >= 0)
    if not keep.all():
        a = a[keep]
        texts = [x for x, k in zip(texts, keep.tolist()) if k]
    if a.shape[0] == 0:
        return 0
    start, end = x.times(a[:, 0], a[:, 1])
    step_re = x.step_re
    classes: dict[str, tuple[int, int]] = {}  # text -> (kind, name id), decided once per text
    for s in set(texts):
        kind, name = range_kind(s, step_re)
        classes[s] = (int(kind), x.b.intern(name))
    kn = np.array([classes[s] for s in texts], dtype=np.int64).reshape(len(texts), 2)
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.thread_lanes(a[:, 2]),
        kind=kn[:, 0].astype(np.int8),
        name=kn[:, 1].astype(np.int32),
    )
    return int(a.shape[0])


def read_osrt(x: Export) -> int:
    t = "OSRT_API"
    if not x.s.has(t, "start", "end", "globalTid", "nameId"):
        return 0
    a = x.s.ints(t, ("start", "end", "globalTid", "nameId"))
    if a.shape[0] == 0:
        return 0
    start, end = x.times(a[:, 0], a[:, 1])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.thread_lanes(a[:, 2]),
        kind=np.full(a.shape[0], int(Kind.ANNOTATION), dtype=np.int8),
        name=x.strings.names(x.b, a[:, 3], missing="<os call>"),
    )
    return int(a.shape[0])


def read_sched(x: Export) -> int:
    """Thread scheduling (SCHED_EVENTS): each stretch a thread spent scheduled out, from a
    switch out to its next switch in, as an annotation named OFF_CPU on that thread."""
    t = "SCHED_EVENTS"
    if not x.s.has(t, "start", "isSchedIn", "globalTid"):
        return 0
    a = x.s.ints(t, ("globalTid", "start", "isSchedIn"))
    a = a[a[:, 0] >= 0]
    if a.shape[0] < 2:
        return 0
    a = a[np.lexsort((a[:, 1], a[:, 0]))]
    out = (a[:-1, 2] == 0) & (a[1:, 2] != 0) & (a[:-1, 0] == a[1:, 0])  # out, then in, same thread
    if not out.any():
        return 0
    start, end = x.times(a[:-1, 1][out], a[1:, 1][out])
    x.b.add_columns(
        start_ns=start,
        end_ns=end,
        lane=x.thread_lanes(a[:-1, 0][out]),
        kind=np.full(int(out.sum()), int(Kind.ANNOTATION), dtype=np.int8),
        name=np.full(int(out.sum()), x.b.intern(OFF_CPU), dtype=np.int32),
    )
    return int(out.sum())


def name_threads(x: Export) -> None:
    if not x.s.has("ThreadNames", "nameId", "globalTid"):
        return
    for name_id, gtid in x.s.con.execute("SELECT nameId, globalTid FROM ThreadNames"):
        if gtid is None:
            continue
        pid, tid = decode_global_tid(max(as_int(gtid), 0))
        name = x.strings.values.get(as_int(name_id), "")
        if name:
            x.b.name_lane(str(pid), str(tid), name)
