"""The replay graph of a window (analyses/whatif.py replays it): device work, anchors, host chain.

Built once per report and replayed once per edit. Columns, all in the trace's nanoseconds:

* device work launched in the window, sorted by start: its stream, launch call, the latency from
  launch to start (recorded when the device waited for this launch, else the trace's median), the
  start-up gap behind its stream predecessor when it was queued;
* anchors, host intervals whose replayed length follows a rule: DataLoader ``__next__`` ranges,
  blocking copies, synchronising calls (and the sync a blocking ``.to()`` makes after its copy);
* the host chain's other facts: ``Optimizer.step`` ranges, the host ops that used what a sync
  fetched, the profiler's own host time (analyses/profcost.py), the step marks.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.hostops import h2d_copy_rows, is_dataloader, is_sync_call, memcpy_direction
from whyidle.analyses.kernels import is_fp32_math_kernel
from whyidle.analyses.links import Links
from whyidle.analyses.profcost import estimate_profiler_cost
from whyidle.analyses.window import Window
from whyidle.timeline.arrays import median, one_of, unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Graph", "Schedule", "build_graph", "SYNC", "LOADER", "H2D", "D2H", "H2D_SYNC", "ANCHOR_NAMES"]

I64 = npt.NDArray[np.int64]
_NEVER = np.iinfo(np.int64).max

# Anchor kinds: host intervals whose replayed length follows a rule instead of the clock.
SYNC, LOADER, H2D, D2H, H2D_SYNC = 0, 1, 2, 3, 4
ANCHOR_NAMES = ("sync", "loader", "h2d copy", "d2h copy", "h2d copy sync")


class Schedule(msgspec.Struct, frozen=True):
    """The replay's event order cut at its anchors (the same for every edit).

    Segment ``k`` holds the events after anchor ``seg_anchor[k - 1]`` up to anchor
    ``seg_anchor[k]`` (-1: the open segment after the last anchor). Inside a segment the host
    clock has one reference, so its launches, step marks and device work are replayed together:
    its device work is listed by stream, each stream's work in event order (a run). Lists are
    CSR: segment ``k``'s items are ``ids[ptr[k]:ptr[k + 1]]``."""

    seg_anchor: I64
    launch_ptr: I64
    launch_ids: I64  # device ops whose launch call is in the segment
    mark_ptr: I64
    mark_ids: I64  # step marks (index into step_starts + last host end)
    dev_ptr: I64
    dev_ids: I64  # device ops, by stream then event order
    run_ptr: I64  # per segment: its runs, index into run_start
    run_start: I64  # per run: its first position in dev_ids (one past the last: the next run's)
    prev: I64  # per device op: the previous device op on its stream in event order, -1 if none
    stream_order: I64  # device ops by stream, then event order
    # The same per-op facts as lists, for the replay's scalar path (a list index is ~5x cheaper
    # than a numpy one): prev, has a launch, latency, start-up gap, stream; launch order; end and
    # start (or launch if later) from the window start.
    prev_list: list[int]
    has_list: list[bool]
    lat_list: list[int]
    gap_list: list[int]
    stream_list: list[int]
    launch_order_list: list[int]
    end_list: list[int]
    key_list: list[int]
    launch_list: list[int]  # launch_ids and dev_ids as lists
    dev_list: list[int]


def _schedule(order: I64, n_launch: int, n_marks: int, launch_ids: I64, stream: I64, has: npt.NDArray[np.bool_], lat: I64, gap: I64, lorder: I64, end: I64, key: I64) -> Schedule:
    """Cut ``order`` (the replay's event order, see _event_order: launches, marks, device work,
    anchors by id range) at its anchors."""
    d0, n_dev = n_launch + n_marks, stream.size
    is_anchor = order >= d0 + n_dev
    seg = np.concatenate(([0], np.cumsum(is_anchor)[:-1]))  # an anchor closes its segment
    n_seg = int(is_anchor.sum()) + 1
    seg_anchor = np.full(n_seg, -1, dtype=np.int64)
    seg_anchor[: n_seg - 1] = order[is_anchor] - d0 - n_dev

    def csr(sel: npt.NDArray[np.bool_], ids: I64, key: I64 | None = None) -> tuple[I64, I64]:
        s_of = seg[sel]
        o = np.lexsort((np.arange(s_of.size), key[sel], s_of)) if key is not None else np.arange(s_of.size)
        ptr = np.searchsorted(s_of[o], np.arange(n_seg + 1), side="left").astype(np.int64)
        return ptr, ids[o].astype(np.int64)

    is_launch, is_mark = order < n_launch, (order >= n_launch) & (order < d0)
    is_dev = (order >= d0) & ~is_anchor
    dev = order[is_dev] - d0
    launch_ptr, launch = csr(is_launch, launch_ids[order[is_launch]])
    mark_ptr, marks = csr(is_mark, order[is_mark] - n_launch)
    dev_stream = np.full(order.size, -1, dtype=np.int64)
    dev_stream[is_dev] = stream[dev]
    dev_ptr, dev_ids = csr(is_dev, dev, dev_stream)
    # Runs: a new run where the stream or the segment changes.
    s_ids = stream[dev_ids]
    new = np.ones(dev_ids.size, dtype=bool)
    new[1:] = s_ids[1:] != s_ids[:-1]
    new[dev_ptr[:-1][dev_ptr[:-1] < dev_ids.size]] = True
    run_start = np.append(np.flatnonzero(new), dev_ids.size).astype(np.int64)
    run_ptr = np.searchsorted(run_start[:-1], dev_ptr, side="left").astype(np.int64)
    # Stream predecessors in event order.
    stream_order = dev[np.lexsort((np.arange(dev.size), stream[dev]))].astype(np.int64)
    prev = np.full(n_dev, -1, dtype=np.int64)
    same = stream[stream_order[1:]] == stream[stream_order[:-1]]
    prev[stream_order[1:][same]] = stream_order[:-1][same]
    return Schedule(
        seg_anchor, launch_ptr, launch, mark_ptr, marks, dev_ptr, dev_ids, run_ptr, run_start, prev, stream_order,
        prev.tolist(), has.tolist(), lat.tolist(), gap.tolist(), stream.tolist(), lorder.tolist(), end.tolist(), key.tolist(),
        launch.tolist(), dev_ids.tolist(),
    )


class Graph(msgspec.Struct, frozen=True):
    """The window's events as the replay reads them (all times in the trace's nanoseconds)."""

    # device work, sorted by start
    dev_start: I64
    dev_end: I64
    dev_stream: I64
    dev_launch: I64  # start of the launch call, -1 if none on the host chain
    dev_lat: I64  # ready this long after the launch call began
    dev_gap: I64  # queued work: its recorded start-up gap after the stream predecessor, else 0
    dev_fp32: npt.NDArray[np.bool_]
    dev_pageable_h2d: npt.NDArray[np.bool_]  # host-to-device copies from pageable memory
    dev_blocks_per_sm: npt.NDArray[np.float32]  # NaN if unknown
    dev_in_optimizer: npt.NDArray[np.bool_]  # launched inside Optimizer.step (parameter-sized work)
    dev_names: tuple[str, ...]
    main_stream: int  # the stream with the most device time
    pinned_speedup: float  # host-to-device bandwidth, pinned over pageable copies of the trace (0: not both seen)
    # anchors on the host chain, sorted by start, disjoint
    anc_start: I64
    anc_end: I64
    anc_kind: I64
    anc_dev: I64  # H2D: the device copy it launched (index into dev_*), else -1
    anc_tail: I64  # host cost after the device finished (syncs); copies: call end - copy end
    anc_awaited: I64  # SYNC: number of device ops (in launch order) it waited for
    anc_profiler: I64  # the profiler's own host time inside each anchor
    # host
    host_lo: int
    host_hi: int
    optimizer: Intervals  # Optimizer.step ranges on the host chain
    consumers: Intervals  # host ops after a sync, before the next launch, launching nothing
    profiler: Intervals  # the profiler's own host time on the host chain (analyses/profcost.py)
    anchor_spans: Intervals  # the anchors as a set (the replay's clock stops in them)
    anchor_profiler_spans: Intervals  # the anchors and the profiler's time (the clock without the profiler)
    profiler_floor_ns: dict[str, int]  # its estimate per record kind
    launch_cost_ns: int  # median launch call (the cost of a non-blocking copy call)
    launch_order: I64  # device ops sorted by launch start (ops without a launch last)
    schedule: Schedule  # the replay's order of launches, step marks, device work and anchors, cut at its anchors
    # steps: starts of the host step ranges, and the window end
    step_starts: I64
    last_host_end: int  # end of the last step's host range
    window_end: int
    loader_ns_per_step: float  # recorded DataLoader time per step on the host chain
    # The replay's clock before any scaling, at the instants it reads (see whatif._Clock), per
    # set of anchors: the same for every edit that keeps them, so made once per graph.
    clock_bases: dict[tuple[bool, bool], npt.NDArray[np.float64]] = msgspec.field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return int(self.step_starts.size)


class _Device(NamedTuple):
    rows: I64  # timeline rows of the work, sorted by start
    launch: I64  # their launch call rows, -1 if none
    lstart: I64  # launch call starts, -1 if none
    host_lanes: I64  # the lanes of the launch calls: the host chain


class _Anchors(NamedTuple):
    start: I64
    end: I64
    kind: I64
    dev: I64
    loader: Intervals
    launch_cost: int


def _median(a: I64, default: int) -> int:
    return int(median(a)) if a.size else default


def _device_work(tl: Timeline, links: Links, w0: int, w1: int) -> _Device | None:
    """Work launched inside the window, or with no launch and starting inside it."""
    rows = links.device_rows
    launch = links.launch_of
    lstart = np.where(launch >= 0, tl.start_ns[np.maximum(launch, 0)], -1)
    inside = np.where(launch >= 0, (lstart >= w0) & (lstart < w1), (tl.start_ns[rows] >= w0) & (tl.start_ns[rows] < w1))
    rows, launch, lstart = rows[inside], launch[inside], lstart[inside]
    if rows.size == 0:
        return None
    host_lanes = unique_sorted(tl.lane[launch[launch >= 0]]).astype(np.int64) if (launch >= 0).any() else np.empty(0, dtype=np.int64)
    order = np.argsort(tl.start_ns[rows], kind="stable")
    return _Device(rows[order], launch[order], lstart[order].astype(np.int64), host_lanes)


def _latency(d0: I64, d1: I64, stream: I64, lstart: I64, boundary_ns: int) -> tuple[I64, I64]:
    """(launch-to-start latency, start-up gap behind the stream predecessor) of each device op.

    Work that started within a kernel boundary of its predecessor was queued behind it: it keeps
    that boundary (the device's own start-up cost) after the predecessor, wherever it moves, and
    its latency is at most the median of the work the device was waiting for."""
    prev_end = np.full(d0.size, np.iinfo(np.int64).min, dtype=np.int64)
    for s in unique_sorted(stream):
        idx = np.flatnonzero(stream == s)
        prev_end[idx[1:]] = np.maximum.accumulate(d1[idx])[:-1]
    raw_lat = np.where(lstart >= 0, d0 - lstart, 0)
    queued = (prev_end > np.iinfo(np.int64).min) & (d0 <= prev_end + boundary_ns)
    launch_bound = (lstart >= 0) & ~queued
    med_lat = _median(raw_lat[launch_bound], 5_000)
    lat = np.where(launch_bound, raw_lat, np.minimum(np.maximum(raw_lat, 0), med_lat))
    gap = np.where(queued, np.maximum(d0 - prev_end, 0), 0)
    return lat.astype(np.int64), gap.astype(np.int64)


def _anchors(tl: Timeline, links: Links, dv: _Device, on_host: npt.NDArray[np.bool_]) -> _Anchors:
    """Loader ranges, then blocking copies and syncs outside them (the outermost of nested calls).

    A blocking copy is a memcpy whose launch call lasted through at least half of its copy
    (pageable memory is staged in chunks: the call returns when the last chunk is handed over).
    A sync inside a copy op that launched a host-to-device copy is the copy's own (a blocking
    ``.to()`` synchronises after the copy): it goes with the copy when copies become asynchronous."""
    rows, launch = dv.rows, dv.launch
    d0, d1 = tl.start_ns[rows], tl.end_ns[rows]
    sync_rows = np.flatnonzero(on_host & tl.mask(Kind.RUNTIME, Kind.SYNC) & tl.name_mask(is_sync_call))
    loader_rows = np.flatnonzero(on_host & tl.mask(Kind.CPU_OP, Kind.ANNOTATION) & tl.name_mask(is_dataloader))
    call_end = tl.end_ns[np.maximum(launch, 0)]
    blocking = (tl.kind[rows] == int(Kind.MEMCPY)) & (launch >= 0) & (np.minimum(call_end, d1) - d0 >= (d1 - d0) // 2) & (d1 > d0)
    h2d_dev = np.flatnonzero(blocking & tl.name_mask(lambda n: memcpy_direction(n) == "HtoD", rows))
    d2h_dev = np.flatnonzero(blocking & tl.name_mask(lambda n: memcpy_direction(n) == "DtoH", rows))
    launch_calls = unique_sorted(launch[launch >= 0])
    launch_cost = _median((tl.end_ns[launch_calls] - tl.start_ns[launch_calls])[~np.isin(launch_calls, launch[np.flatnonzero(blocking)])], 5_000)
    loader = Intervals.union_of(tl.start_ns[loader_rows], tl.end_ns[loader_rows])
    a_s: list[int] = loader.start.tolist()
    a_e: list[int] = loader.end.tolist()
    a_k: list[int] = [LOADER] * len(loader)
    a_d: list[int] = [-1] * len(loader)
    taken = loader
    for kind, cand, devs in ((H2D, launch[h2d_dev], h2d_dev), (D2H, launch[d2h_dev], d2h_dev), (SYNC, sync_rows, np.full(sync_rows.size, -1))):
        if cand.size == 0:
            continue
        o = np.argsort(tl.start_ns[cand], kind="stable")
        cand, devs = cand[o], devs[o]
        s, e = tl.start_ns[cand], tl.end_ns[cand]
        outer = e > np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
        keep = outer & (taken.overlap(s, e) == 0)
        a_s += s[keep].tolist()
        a_e += e[keep].tolist()
        a_k += [kind] * int(keep.sum())
        a_d += devs[keep].tolist()
        taken = taken | Intervals.union_of(s[keep], e[keep])
    h2d_ops = np.concatenate([h2d_copy_rows(tl, links, int(ln)) for ln in dv.host_lanes]) if dv.host_lanes.size else np.empty(0, dtype=np.int64)
    h2d_spans = Intervals.union_of(tl.start_ns[h2d_ops], tl.end_ns[h2d_ops])
    for i, k in enumerate(a_k):
        if k == SYNC and h2d_spans.overlap(a_s[i], a_e[i]) == a_e[i] - a_s[i]:
            a_k[i] = H2D_SYNC
    o = np.argsort(np.array(a_s, dtype=np.int64), kind="stable")
    arr = [np.array(x, dtype=np.int64)[o] for x in (a_s, a_e, a_k, a_d)]
    return _Anchors(arr[0], arr[1], arr[2], arr[3], loader, launch_cost)


def _waits(an: _Anchors, d1: I64, lstart: I64) -> tuple[I64, I64, I64]:
    """(device ops in launch order, how many each anchor waited for, each anchor's tail).

    A sync waited for the work launched before it began that ended by its end (work that ended
    later was not waited for: another stream, or an asynchronous copy); its tail is the host cost
    after the last of that work ended. A blocking copy's tail is its call's end minus its copy's
    end (signed: the call may return just before its copy ends)."""
    never = np.where(lstart >= 0, lstart, _NEVER)
    lorder = np.lexsort((np.arange(lstart.size), never)).astype(np.int64)
    awaited = np.searchsorted(never[lorder], an.start, side="right").astype(np.int64)
    tail = np.zeros(an.start.size, dtype=np.int64)
    end_sorted = d1[lorder]
    for i in np.flatnonzero(an.kind != LOADER).tolist():
        if an.kind[i] in (H2D, D2H):
            tail[i] = an.end[i] - d1[an.dev[i]]
            continue
        ends = end_sorted[: awaited[i]]
        ends = ends[ends <= an.end[i] + 1_000]
        done = int(ends.max()) if ends.size else int(an.start[i])
        tail[i] = an.end[i] - max(int(an.start[i]), min(done, int(an.end[i])))
    return lorder, awaited, tail


def _consumers(tl: Timeline, on_host: npt.NDArray[np.bool_], an: _Anchors, lstart: I64) -> Intervals:
    """The host ops that used what a sync fetched: ops starting after the sync and before the next
    launch or anchor on the host chain, that launched no device work themselves."""
    op_rows = np.flatnonzero(on_host & (tl.kind == int(Kind.CPU_OP)))
    l_pts = np.sort(lstart[lstart >= 0])
    next_stop = np.minimum(np.append(l_pts, _NEVER)[np.searchsorted(l_pts, an.end, side="left")], np.append(an.start[1:], _NEVER))
    op_s, op_e = tl.start_ns[op_rows], tl.end_ns[op_rows]
    c_s: list[I64] = []
    c_e: list[I64] = []
    for k in np.flatnonzero((an.kind == SYNC) | (an.kind == H2D_SYNC)).tolist():
        sel = (op_s >= an.end[k]) & (op_e <= next_stop[k])
        c_s.append(op_s[sel])
        c_e.append(op_e[sel])
    return Intervals.union_of(np.concatenate(c_s), np.concatenate(c_e)) if c_s else Intervals.empty()


def _event_order(lstart: I64, d0: I64, marks: I64, anc_end: I64) -> I64:
    """The replay's event order (the same for every edit): anchors at their end (type 0), launches
    and step marks (1), device work at its start or its launch if later (2); a tie keeps that type
    order (a launch at the instant a loader or sync returns comes after it, device work after its
    launch)."""
    launch_ids = np.flatnonzero(lstart >= 0)
    keys = np.concatenate((lstart[launch_ids], marks, np.maximum(d0, lstart), anc_end))
    types = np.concatenate((np.ones(launch_ids.size + marks.size), np.full(d0.size, 2.0), np.zeros(anc_end.size)))
    return np.lexsort((types, keys)).astype(np.int64)


def _pinned_speedup(tl: Timeline, rows: I64, min_bytes: int) -> float:
    """How much faster the trace's pinned host-to-device copies ran than its pageable ones, by
    bandwidth (bytes over time, each kind's copies of at least ``min_bytes`` together); 0 when the
    trace lacks either (or their sizes)."""
    size, dur = tl.nbytes[rows], tl.end_ns[rows] - tl.start_ns[rows]
    h2d = (tl.kind[rows] == int(Kind.MEMCPY)) & (size >= max(min_bytes, 1)) & (dur > 0)
    h2d &= tl.name_mask(lambda n: memcpy_direction(n) == "HtoD", rows)
    bw = []
    for mem in ("Pinned", "Pageable"):
        sel = h2d & tl.name_mask(lambda n: mem in n, rows)
        bw.append(float(size[sel].sum()) / float(dur[sel].sum()) if sel.any() else 0.0)
    return bw[0] / bw[1] if bw[0] > 0 and bw[1] > 0 else 0.0


def build_graph(tl: Timeline, links: Links, window: Window, boundary_ns: int = 5_000, profiler_quantile: float = 0.1, copy_min_bytes: int = 1 << 20) -> Graph | None:
    """The replay graph of the window, or None without step markers or linked device work.

    ``boundary_ns``: work starting within this of its stream predecessor's end was queued behind
    it (``AttributionSettings.kernel_boundary_max_ns``); ``profiler_quantile``: the gap quantile that estimates
    the profiler's cost per record (``PredictionSettings.whatif_profiler_gap_quantile``); ``copy_min_bytes``:
    the smallest copy whose bandwidth counts (``PredictionSettings.whatif_copy_bandwidth_min_bytes``)."""
    if not window.steps or links.device_rows.size == 0:
        return None
    w0, w1 = window.start_ns, window.end_ns
    dv = _device_work(tl, links, w0, w1)
    if dv is None:
        return None
    rows, lstart = dv.rows, dv.lstart
    d0, d1 = tl.start_ns[rows].astype(np.int64), tl.end_ns[rows].astype(np.int64)
    stream = tl.lane[rows].astype(np.int64)
    lat, gap = _latency(d0, d1, stream, lstart, boundary_ns)
    names = tuple(tl.names_of(rows))
    on_host = one_of(tl.lane, dv.host_lanes.tolist()) & (tl.end_ns > w0) & (tl.start_ns < w1)
    an = _anchors(tl, links, dv, on_host)
    lorder, awaited, tail = _waits(an, d1, lstart)
    opt_rows = np.flatnonzero(on_host & tl.name_mask(lambda n: n.startswith("Optimizer.step")))
    optimizer = Intervals.union_of(tl.start_ns[opt_rows], tl.end_ns[opt_rows])
    prof = estimate_profiler_cost(tl, dv.host_lanes, w0, max(w1, window.steps[-1].host_end_ns), profiler_quantile)
    step_starts = np.array([s.start_ns for s in window.steps], dtype=np.int64)
    marks = np.append(step_starts, window.steps[-1].host_end_ns)
    kernel = tl.kind[rows] == int(Kind.KERNEL)
    order = _event_order(lstart, d0, marks, an.end)
    spans = Intervals.union_of(an.start, an.end)
    pageable = tl.name_mask(lambda n: memcpy_direction(n) == "HtoD" and "Pageable" in n, rows) & (tl.kind[rows] == int(Kind.MEMCPY))
    return Graph(
        dev_start=d0,
        dev_end=d1,
        dev_stream=stream,
        dev_launch=lstart,
        dev_lat=lat,
        dev_gap=gap,
        dev_fp32=tl.name_mask(is_fp32_math_kernel, rows) & kernel,
        dev_pageable_h2d=pageable,
        dev_blocks_per_sm=tl.blocks_per_sm[rows],
        dev_in_optimizer=optimizer.contains(lstart) & (lstart >= 0),
        dev_names=names,
        pinned_speedup=_pinned_speedup(tl, rows, copy_min_bytes),
        main_stream=int(unique_sorted(stream)[np.argmax([int((d1 - d0)[stream == x].sum()) for x in unique_sorted(stream)])]),
        anc_start=an.start,
        anc_end=an.end,
        anc_kind=an.kind,
        anc_dev=an.dev,
        anc_tail=tail,
        anc_awaited=awaited,
        anc_profiler=prof.removed.overlap(an.start, an.end).astype(np.int64),
        host_lo=w0,
        host_hi=w1,
        optimizer=optimizer,
        consumers=_consumers(tl, on_host, an, lstart),
        profiler=prof.removed,
        anchor_spans=spans,
        anchor_profiler_spans=spans | prof.removed,
        profiler_floor_ns=prof.floor_ns,
        launch_cost_ns=an.launch_cost,
        launch_order=lorder,
        schedule=_schedule(order, int((lstart >= 0).sum()), marks.size, np.flatnonzero(lstart >= 0), stream, lstart >= 0, lat, gap, lorder, d1 - w0, np.maximum(d0, lstart) - w0),
        step_starts=step_starts,
        last_host_end=window.steps[-1].host_end_ns,
        window_end=w1,
        loader_ns_per_step=int(an.loader.clip(w0, w1).total()) / len(window.steps),
    )
