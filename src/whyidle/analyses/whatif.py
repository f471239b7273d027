"""What-if replay: the step time a trace would have had with one cause removed or changed.

The trace is read as a small dependency graph and replayed in one pass, in original time order::

    host   ..op..[launch]....[DataLoader.__next__]..[launch]..[cudaStreamSynchronize......]..op..
                    |  lat                             |  lat          ^ waits for everything
    device          +-->[kernel A][kernel B]           +-->[kernel C]--+ launched before it

* **host chain**: the threads that launched device work, taken together in time order (the
  training thread and autograd's device thread take turns, they do not overlap). Host time
  between the anchors below runs as recorded, scaled by the edit where it applies.
* **launch -> device work** (correlation id): the work is ready ``lat`` after its launch call
  began; ``lat`` is the recorded delay when the device was waiting for this launch, else the
  median launch latency of the trace (the work was queued behind earlier work).
* **stream order**: work on a stream starts when it is ready and the stream's previous work ended.
* **syncs** (``cuda*Synchronize``, a synchronous ``cudaMemcpy``, a blocking pageable copy): the
  host resumes when the device work launched before the call (and finished by its recorded end)
  has finished, plus the call's recorded tail after the device finished.
* **DataLoader handoff**: a ``__next__`` on the host chain costs its recorded duration.

The edits (:class:`Edit`), each a stated assumption:

* ``loader_workers=W``: the loader's time overlaps compute: ``__next__`` costs ``loader_handoff_ns``
  (taking a ready batch from a worker), and the step cannot be shorter than the recorded per-batch
  loader cost divided by ``W`` (the workers' production rate);
* ``h2d_async``: a host-to-device copy no longer blocks the host (pinned memory, ``non_blocking``):
  its call costs the trace's median launch call; the device copy keeps its recorded time;
* ``sync_removed``: synchronising calls no longer wait; their own host cost (the recorded tail)
  stays, and so does the host work that used what they fetched;
* ``host_factor`` over ``host_region``: host time (launch calls, Python and dispatch between
  them) is scaled (CUDA graphs / compile: the whole step; a fused optimizer: ``Optimizer.step``);
* ``gemm_factor``: FP32 GEMM/convolution kernel time divided by the stated tensor-core factor.

Step boundaries are the host's step markers, mapped through the replay; the last step ends when
the device work launched in it ends (the window of ``analyses.window``). With no edit the replay
gives back the recorded step times (tested within 1%).

Not modelled (the known errors, docs/metrics.md): other processes and cores (workers competing
with the training thread for CPU and memory bandwidth), clock changes (a GPU idling most of the
time may run its kernels slower), cross-stream event waits beyond their recorded delay, and
collectives, which keep their recorded time, including waiting for the slowest rank.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.hostops import h2d_copy_rows, is_dataloader, is_sync_call, memcpy_direction
from whyidle.analyses.kernels import is_fp32_math_kernel
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Edit", "Graph", "Replay", "PathSegment", "build_graph", "replay", "critical_path", "path_by_kind", "median_step", "NO_EDIT"]

I64 = npt.NDArray[np.int64]

# Anchor kinds: host intervals whose replayed length follows a rule instead of the clock.
SYNC, LOADER, H2D, D2H, H2D_SYNC = 0, 1, 2, 3, 4
_ANCHOR_NAMES = ("sync", "loader", "h2d copy", "d2h copy", "h2d copy sync")


class Edit(msgspec.Struct, frozen=True):
    """One change to replay. The default changes nothing."""

    name: str = "none"
    loader_workers: int = 0  # > 0: the DataLoader runs in this many worker processes
    loader_handoff_ns: int = 0  # host cost of taking a ready batch from a worker
    h2d_async: bool = False
    sync_removed: bool = False
    host_factor: float = 1.0  # scale of host time in host_region
    host_region: str = "step"  # "step": all host time; "optimizer": inside Optimizer.step ranges
    gemm_factor: float = 1.0  # FP32 GEMM/conv kernels run this many times faster
    pageable_copy_factor: float = 1.0  # H2D copies from pageable memory run this many times faster (pinned)
    sync_consumers_removed: bool = False  # with sync_removed: the host ops that used the value go too
    batch_factor: float = 1.0  # batch size multiplied by this (per-step host cost unchanged)
    batch_growth: str = "blocks"  # kernel time with the batch: "blocks" (once its blocks fill the SMs), "none", "all"


NO_EDIT = Edit()


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
    # anchors on the host chain, sorted by start, disjoint
    anc_start: I64
    anc_end: I64
    anc_kind: I64
    anc_dev: I64  # H2D: the device copy it launched (index into dev_*), else -1
    anc_tail: I64  # host cost after the device finished (syncs); copies: call end - copy end
    anc_awaited: I64  # SYNC: number of device ops (in launch order) it waited for
    # host
    host_lo: int
    host_hi: int
    optimizer: Intervals  # Optimizer.step ranges on the host chain
    consumers: Intervals  # host ops after a sync, before the next launch, launching nothing
    launch_cost_ns: int  # median launch call (the cost of a non-blocking copy call)
    launch_order: I64  # device ops sorted by launch start (ops without a launch last)
    event_order: I64  # the replay's order of launches, step marks, device work and anchors
    # steps: starts of the host step ranges, and the window end
    step_starts: I64
    last_host_end: int  # end of the last step's host range
    window_end: int
    loader_ns_per_step: float  # recorded DataLoader time per step on the host chain

    @property
    def n_steps(self) -> int:
        return int(self.step_starts.size)


class Replay(msgspec.Struct, frozen=True):
    """The replayed times: device work, host time at each step start, and the step durations."""

    edit: Edit
    dev_start: I64
    dev_end: I64
    dev_bound: npt.NDArray[np.int8]  # 0 launch (host), 1 stream predecessor, 2 no constraint
    dev_prev: I64  # stream predecessor index, -1 if none
    anc_start: I64  # replayed host time at each anchor's start and end
    anc_end: I64
    anc_waited_on: I64  # SYNC/H2D anchors that waited for the device: the op they waited for, else -1
    step_starts: I64
    window_end: int
    step_ns: I64  # replayed step durations
    floor_ns: float  # steady-state lower bound from the edit (workers' production rate), 0 if none

    @property
    def mean_step_ns(self) -> float:
        replayed = float(self.step_ns.mean()) if self.step_ns.size else 0.0
        return max(replayed, self.floor_ns)


def _median(a: I64, default: int) -> int:
    return int(np.median(a)) if a.size else default


def build_graph(tl: Timeline, links: Links, window: Window, boundary_ns: int = 5_000) -> Graph | None:
    """The replay graph of the window, or None without step markers or linked device work.

    ``boundary_ns``: work starting within this of its stream predecessor's end was queued behind
    it (``Config.kernel_boundary_max_ns``)."""
    if not window.steps or links.device_rows.size == 0:
        return None
    w0, w1 = window.start_ns, window.end_ns
    rows = links.device_rows
    launch = links.launch_of
    lstart = np.where(launch >= 0, tl.start_ns[np.maximum(launch, 0)], -1)
    # Work launched inside the window, or with no launch and starting inside it.
    inside = np.where(launch >= 0, (lstart >= w0) & (lstart < w1), (tl.start_ns[rows] >= w0) & (tl.start_ns[rows] < w1))
    rows, launch, lstart = rows[inside], launch[inside], lstart[inside]
    if rows.size == 0:
        return None
    host_lanes = np.unique(tl.lane[launch[launch >= 0]]) if (launch >= 0).any() else np.empty(0, dtype=np.int64)
    order = np.argsort(tl.start_ns[rows], kind="stable")
    rows, launch, lstart = rows[order], launch[order], lstart[order]
    d0, d1 = tl.start_ns[rows].astype(np.int64), tl.end_ns[rows].astype(np.int64)
    stream = tl.lane[rows].astype(np.int64)
    # Launch latency: recorded when the device waited for this launch, else the median of those.
    prev_end = np.full(rows.size, np.iinfo(np.int64).min, dtype=np.int64)
    for s in np.unique(stream):
        idx = np.flatnonzero(stream == s)
        prev_end[idx[1:]] = np.maximum.accumulate(d1[idx])[:-1]
    # Work that started within a kernel boundary of its predecessor was queued behind it: it keeps
    # that boundary (the device's own start-up cost) after the predecessor, wherever it moves.
    raw_lat = np.where(lstart >= 0, d0 - lstart, 0)
    queued = (prev_end > np.iinfo(np.int64).min) & (d0 <= prev_end + boundary_ns)
    launch_bound = (lstart >= 0) & ~queued
    med_lat = _median(raw_lat[launch_bound], 5_000)
    lat = np.where(launch_bound, raw_lat, np.minimum(np.maximum(raw_lat, 0), med_lat))
    gap = np.where(queued, np.maximum(d0 - prev_end, 0), 0)
    names = tuple(tl.names_of(rows))
    fp32 = tl.name_mask(is_fp32_math_kernel, rows) & (tl.kind[rows] == int(Kind.KERNEL))
    pageable_h2d = tl.name_mask(lambda n: memcpy_direction(n) == "HtoD" and "Pageable" in n, rows) & (tl.kind[rows] == int(Kind.MEMCPY))

    on_host = np.isin(tl.lane, host_lanes) & (tl.end_ns > w0) & (tl.start_ns < w1)
    # Syncs: runtime calls (and nsys sync records) on the host chain.
    sync_rows = np.flatnonzero(on_host & np.isin(tl.kind, (int(Kind.RUNTIME), int(Kind.SYNC))) & tl.name_mask(is_sync_call))
    loader_rows = np.flatnonzero(on_host & np.isin(tl.kind, (int(Kind.CPU_OP), int(Kind.ANNOTATION))) & tl.name_mask(is_dataloader))
    # Blocking copies (pageable memory): a memcpy launch call that lasted until its own copy ended.
    direction = np.array([memcpy_direction(n) for n in names], dtype=object)
    # (pageable memory is staged in chunks: the call returns when the last chunk is handed over,
    # so "blocking" is a call that lasted through at least half of its copy).
    call_end = tl.end_ns[np.maximum(launch, 0)]
    blocking = (tl.kind[rows] == int(Kind.MEMCPY)) & (launch >= 0) & (np.minimum(call_end, d1) - d0 >= (d1 - d0) // 2) & (d1 > d0)
    h2d_dev = np.flatnonzero(blocking & (direction == "HtoD"))
    d2h_dev = np.flatnonzero(blocking & (direction == "DtoH"))
    h2d_rows = launch[h2d_dev]
    launch_calls = np.unique(launch[launch >= 0])
    launch_cost = _median((tl.end_ns[launch_calls] - tl.start_ns[launch_calls])[~np.isin(launch_calls, launch[np.flatnonzero(blocking)])], 5_000)

    # Anchors, outermost first: loader ranges, then syncs and blocking copies outside them.
    loader = Intervals.union_of(tl.start_ns[loader_rows], tl.end_ns[loader_rows])
    a_s: list[int] = loader.start.tolist()
    a_e: list[int] = loader.end.tolist()
    a_k: list[int] = [LOADER] * len(loader)
    a_d: list[int] = [-1] * len(loader)
    taken = loader
    for kind, cand, devs in ((H2D, h2d_rows, h2d_dev), (D2H, launch[d2h_dev], d2h_dev), (SYNC, sync_rows, np.full(sync_rows.size, -1))):
        if cand.size == 0:
            continue
        o = np.argsort(tl.start_ns[cand], kind="stable")
        cand, devs = cand[o], devs[o]
        s, e = tl.start_ns[cand], tl.end_ns[cand]
        # keep the outermost of nested calls, and none inside an anchor already taken
        outer = e > np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
        free = taken.overlap(s, e) == 0
        keep = outer & free
        a_s += s[keep].tolist()
        a_e += e[keep].tolist()
        a_k += [kind] * int(keep.sum())
        a_d += devs[keep].tolist()
        taken = taken | Intervals.union_of(s[keep], e[keep])
    # A sync inside a copy op that launched a host-to-device copy is the copy's own (a blocking
    # .to() synchronises after the copy): it goes with the copy when copies become asynchronous.
    h2d_ops = np.concatenate([h2d_copy_rows(tl, links, int(ln)) for ln in host_lanes]) if host_lanes.size else np.empty(0, dtype=np.int64)
    h2d_spans = Intervals.union_of(tl.start_ns[h2d_ops], tl.end_ns[h2d_ops])
    for i, k in enumerate(a_k):
        if k == SYNC and h2d_spans.overlap(a_s[i], a_e[i]) == a_e[i] - a_s[i]:
            a_k[i] = H2D_SYNC
    o = np.argsort(np.array(a_s, dtype=np.int64), kind="stable")
    anc_start = np.array(a_s, dtype=np.int64)[o]
    anc_end = np.array(a_e, dtype=np.int64)[o]
    anc_kind = np.array(a_k, dtype=np.int64)[o]
    anc_dev = np.array(a_d, dtype=np.int64)[o]
    # What each sync waited for: work launched before it began that ended by its end (work that
    # ended later was not waited for: another stream, or an asynchronous copy).
    lorder = np.lexsort((np.arange(rows.size), np.where(lstart >= 0, lstart, np.iinfo(np.int64).max)))
    l_sorted = np.where(lstart >= 0, lstart, np.iinfo(np.int64).max)[lorder]
    awaited = np.searchsorted(l_sorted, anc_start, side="right").astype(np.int64)
    tail = np.zeros(anc_start.size, dtype=np.int64)
    end_sorted = d1[lorder]
    for i in np.flatnonzero(anc_kind != LOADER).tolist():
        if anc_kind[i] in (H2D, D2H):  # signed: the call may return just before its copy ends
            tail[i] = anc_end[i] - d1[anc_dev[i]]
            continue
        ends = end_sorted[: awaited[i]]
        ends = ends[ends <= anc_end[i] + 1_000]
        done = int(ends.max()) if ends.size else int(anc_start[i])
        tail[i] = anc_end[i] - max(int(anc_start[i]), min(done, int(anc_end[i])))
    opt_rows = np.flatnonzero(on_host & tl.name_mask(lambda n: n.startswith("Optimizer.step")))
    optimizer = Intervals.union_of(tl.start_ns[opt_rows], tl.end_ns[opt_rows])
    # The host ops that used what a sync fetched: ops starting after the sync and before the next
    # launch or anchor on the host chain, that launched no device work themselves.
    op_rows = np.flatnonzero(on_host & (tl.kind == int(Kind.CPU_OP)))
    l_pts = np.sort(lstart[lstart >= 0])
    next_stop = np.minimum(
        np.append(l_pts, np.iinfo(np.int64).max)[np.searchsorted(l_pts, anc_end, side="left")],
        np.append(anc_start[1:], np.iinfo(np.int64).max),
    )
    c_s: list[I64] = []
    c_e: list[I64] = []
    op_s, op_e = tl.start_ns[op_rows], tl.end_ns[op_rows]
    for k in np.flatnonzero((anc_kind == SYNC) | (anc_kind == H2D_SYNC)).tolist():
        sel = (op_s >= anc_end[k]) & (op_e <= next_stop[k])
        c_s.append(op_s[sel])
        c_e.append(op_e[sel])
    consumers = Intervals.union_of(np.concatenate(c_s), np.concatenate(c_e)) if c_s else Intervals.empty()
    step_starts = np.array([s.start_ns for s in window.steps], dtype=np.int64)
    # The replay's event order (the same for every edit): anchors at their end (type 0), launches
    # and step marks (1), device work at its start or its launch if later (2); a tie keeps that
    # type order (a launch at the instant a loader or sync returns comes after it, device work
    # after its launch). The last step's host end is one more step mark.
    launch_ids = np.flatnonzero(lstart >= 0)
    marks = np.append(step_starts, window.steps[-1].host_end_ns)
    keys = np.concatenate((lstart[launch_ids], marks, np.maximum(d0, lstart), anc_end))
    types = np.concatenate((np.ones(launch_ids.size + marks.size), np.full(rows.size, 2.0), np.zeros(anc_end.size)))
    event_order = np.lexsort((types, keys)).astype(np.int64)
    loader_total = int(loader.clip(w0, w1).total())
    return Graph(
        dev_start=d0,
        dev_end=d1,
        dev_stream=stream,
        dev_launch=lstart,
        dev_lat=lat.astype(np.int64),
        dev_gap=gap.astype(np.int64),
        dev_fp32=fp32,
        dev_pageable_h2d=pageable_h2d,
        dev_blocks_per_sm=tl.blocks_per_sm[rows],
        dev_in_optimizer=optimizer.contains(lstart) & (lstart >= 0),
        dev_names=names,
        anc_start=anc_start,
        anc_end=anc_end,
        anc_kind=anc_kind,
        anc_dev=anc_dev,
        anc_tail=tail,
        anc_awaited=awaited,
        host_lo=w0,
        host_hi=w1,
        optimizer=optimizer,
        consumers=consumers,
        launch_cost_ns=launch_cost,
        launch_order=lorder.astype(np.int64),
        event_order=event_order,
        step_starts=step_starts,
        last_host_end=window.steps[-1].host_end_ns,
        window_end=w1,
        loader_ns_per_step=loader_total / len(window.steps),
    )


class _Clock:
    """Replayed host time elapsed since the window start at recorded instants: the recorded
    clock with anchors at zero weight (their length follows their rule) and ``host_factor``
    applied over the edited region."""

    def __init__(self, g: Graph, edit: Edit) -> None:
        self.anchors = Intervals.union_of(g.anc_start, g.anc_end)
        if edit.sync_removed and edit.sync_consumers_removed:
            self.anchors = self.anchors | g.consumers
        self.factor = edit.host_factor
        if edit.host_factor == 1.0:
            self.scaled = Intervals.empty()
        elif edit.host_region == "optimizer":
            self.scaled = g.optimizer - self.anchors
        else:
            self.scaled = Intervals.single(g.host_lo, max(g.host_hi, int(g.dev_end.max())) + 1) - self.anchors

    def at(self, t: I64) -> npt.NDArray[np.float64]:
        c = (t - self.anchors.covered_before(t)).astype(np.float64)
        if len(self.scaled):
            c -= (1.0 - self.factor) * self.scaled.covered_before(t)
        return c


def _scaled_durations(g: Graph, edit: Edit) -> I64:
    """Device work durations under the edit: FP32 GEMM/conv sped up, or a larger batch."""
    dur = (g.dev_end - g.dev_start).astype(np.float64)
    if edit.gemm_factor != 1.0:
        dur = np.where(g.dev_fp32, dur / edit.gemm_factor, dur)
    if edit.pageable_copy_factor != 1.0:
        dur = np.where(g.dev_pageable_h2d, dur / edit.pageable_copy_factor, dur)
    if edit.batch_factor != 1.0 and edit.batch_growth != "none":
        # A kernel's time grows with the batch once its blocks fill the SMs: x k when it already
        # filled them, not at all while k x (blocks per SM) stays under one wave ("all": x k for
        # every kernel). Parameter-sized work (the optimizer's) does not grow; unknown occupancy
        # (copies) counts as filling.
        bps = np.where(np.isnan(g.dev_blocks_per_sm), 1.0, g.dev_blocks_per_sm.astype(np.float64))
        if edit.batch_growth == "all":
            bps = np.ones_like(bps)
        grow = np.maximum(1.0, edit.batch_factor * np.minimum(bps, 1.0))
        dur = np.where(g.dev_in_optimizer, dur, dur * grow)
    return np.round(dur).astype(np.int64)


def replay(g: Graph, edit: Edit = NO_EDIT) -> Replay:
    """Replay the graph with ``edit`` applied (see the module docstring for the rules)."""
    clock = _Clock(g, edit)
    n, a_n, s_n = g.dev_start.size, g.anc_start.size, g.step_starts.size
    has_launch = g.dev_launch >= 0
    dev_key = np.maximum(g.dev_start, g.dev_launch)
    launch_ids = np.flatnonzero(has_launch)
    # The last step's host end is one more "step start" (index s_n).
    marks = np.append(g.step_starts, g.last_host_end)
    order = g.event_order
    # Replayed host clock: C(t) at every recorded instant the replay reads.
    c_launch = np.zeros(n)
    c_launch[launch_ids] = clock.at(g.dev_launch[launch_ids])
    c_nolaunch = clock.at(g.dev_start)
    c_step = clock.at(marks)
    c_anc_s, c_anc_e = clock.at(g.anc_start), clock.at(g.anc_end)
    c0 = float(clock.at(np.array([g.host_lo], dtype=np.int64))[0])
    h_ref_c, h_ref_new = c0, float(g.host_lo)  # host time = h_ref_new + C(t) - h_ref_c
    # The loop reads plain Python lists: indexing numpy arrays one element at a time costs ~5x more.
    dev_key_l, dev_end_l, lat_l, gap_l = dev_key.tolist(), g.dev_end.tolist(), g.dev_lat.tolist(), g.dev_gap.tolist()
    stream_l, has_l, launch_ids_l = g.dev_stream.tolist(), has_launch.tolist(), launch_ids.tolist()
    c_launch_l, c_nolaunch_l, c_step_l = c_launch.tolist(), c_nolaunch.tolist(), c_step.tolist()
    c_anc_s_l, c_anc_e_l = c_anc_s.tolist(), c_anc_e.tolist()
    a_start_l, a_end_l, a_kind_l = g.anc_start.tolist(), g.anc_end.tolist(), g.anc_kind.tolist()
    a_tail_l, a_dev_l, a_awaited_l = g.anc_tail.tolist(), g.anc_dev.tolist(), g.anc_awaited.tolist()
    lo = g.launch_order.tolist()
    dur = _scaled_durations(g, edit).tolist()
    h_launch = [0.0] * n
    ns_l, ne_l, bound_l, prev_l = [0] * n, [0] * n, [2] * n, [-1] * n
    as_l, ae_l, waited_l = [0] * a_n, [0] * a_n, [-1] * a_n
    starts_l = [0] * (s_n + 1)
    last_on: dict[int, int] = {}
    done_max = float(np.iinfo(np.int64).min)  # latest replayed end among work a sync waited for
    done_j = -1
    pending: list[int] = []  # work launched before the last sync but not waited for by it
    folded = 0
    n_l = launch_ids.size
    loader_cost = edit.loader_handoff_ns if edit.loader_workers > 0 else -1
    for ev in order.tolist():
        if ev < n_l:  # a launch call
            i = launch_ids_l[ev]
            h_launch[i] = h_ref_new + c_launch_l[i] - h_ref_c
            continue
        ev -= n_l
        if ev <= s_n:  # a step start (or the last step's host end)
            starts_l[ev] = int(round(h_ref_new + c_step_l[ev] - h_ref_c))
            continue
        ev -= s_n + 1
        if ev < n:  # device work
            i = ev
            if has_l[i]:
                start, bound_l[i] = h_launch[i] + lat_l[i], 0
            else:
                start = h_ref_new + c_nolaunch_l[i] - h_ref_c
            p = last_on.get(stream_l[i], -1)
            if p >= 0 and ne_l[p] + gap_l[i] > start:
                start, bound_l[i] = float(ne_l[p] + gap_l[i]), 1
            prev_l[i] = p
            ns_l[i] = int(round(start))
            ne_l[i] = ns_l[i] + dur[i]
            last_on[stream_l[i]] = i
            continue
        k = ev - n
        s_new = h_ref_new + c_anc_s_l[k] - h_ref_c
        kind = a_kind_l[k]
        tail = a_tail_l[k]
        if kind == LOADER:
            e_new = s_new + (loader_cost if loader_cost >= 0 else a_end_l[k] - a_start_l[k])
        elif kind == H2D or kind == D2H:
            j = a_dev_l[k]
            if (edit.h2d_async and kind == H2D) or (edit.sync_removed and kind == D2H):
                e_new = s_new + g.launch_cost_ns
            else:
                e_new = max(s_new, float(ne_l[j] + tail))
                waited_l[k] = j if ne_l[j] + tail > s_new else -1
        elif edit.sync_removed or (edit.h2d_async and kind == H2D_SYNC):
            e_new = s_new + tail
        else:
            # The work launched before this sync began that had finished by its recorded end.
            upto = a_awaited_l[k]
            cand = pending + lo[folded:upto] if upto > folded else pending
            folded = max(folded, upto)
            pending = []
            a_end = a_end_l[k]
            for j in cand:
                if dev_end_l[j] <= a_end + 1_000 and dev_key_l[j] < a_end:
                    if ne_l[j] > done_max:
                        done_max, done_j = float(ne_l[j]), j
                else:
                    pending.append(j)
            e_new = max(s_new, done_max) + tail
            waited_l[k] = done_j if done_max > s_new else -1
        as_l[k], ae_l[k] = int(round(s_new)), int(round(e_new))
        h_ref_c, h_ref_new = c_anc_e_l[k], e_new
    ns, ne = np.array(ns_l, dtype=np.int64), np.array(ne_l, dtype=np.int64)
    bound, prev = np.array(bound_l, dtype=np.int8), np.array(prev_l, dtype=np.int64)
    as_new, ae_new = np.array(as_l, dtype=np.int64), np.array(ae_l, dtype=np.int64)
    waited_on = np.array(waited_l, dtype=np.int64)
    starts = np.array(starts_l, dtype=np.int64)
    last_step = int(g.step_starts[-1])
    in_last = (g.dev_launch >= last_step) | (~has_launch & (g.dev_start >= last_step))
    host_end = int(starts[-1])
    starts = starts[:-1]
    # The window's end (analyses/window.py): the end of the device work launched in the last step,
    # or its host range's end when it launched nothing.
    end_new = max(int(ne[in_last].max()), int(starts[-1]) + 1) if in_last.any() else max(host_end, int(starts[-1]))
    step_ns = np.diff(np.append(starts, end_new))
    floor = g.loader_ns_per_step / edit.loader_workers if edit.loader_workers > 0 else 0.0
    return Replay(edit, ns, ne, bound, prev, as_new, ae_new, waited_on, starts, end_new, step_ns, floor)


class PathSegment(msgspec.Struct, frozen=True):
    kind: str  # "device", "launch latency", "host", "loader", "sync", "h2d copy"
    start_ns: int  # replayed times (with no edit: the recorded times)
    end_ns: int
    name: str = ""

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def critical_path(g: Graph, r: Replay, step: int) -> list[PathSegment]:
    """The chain of waits that decided step ``step`` (index in the window), latest first reversed.

    Walk back from the step's end: device work was started either by its launch (go to the host
    at the launch) or by the previous work on its stream (go to that); host time goes back to the
    previous anchor, and a sync or blocking copy that waited goes to the work it waited for.
    """
    lo = int(r.step_starts[step])
    hi = int(r.step_starts[step + 1]) if step + 1 < r.step_starts.size else r.window_end
    segs: list[PathSegment] = []
    # The work that ended last at the step's end, if the step ends on the device.
    ending = np.flatnonzero((r.dev_end <= hi) & (r.dev_end > lo))
    cur_dev = int(ending[np.argmax(r.dev_end[ending])]) if ending.size and int(r.dev_end[ending].max()) >= hi - 1_000 else -1
    t_host = hi  # replayed host time to walk back from, when on the host
    guard = 0
    while guard < 1_000_000:
        guard += 1
        if cur_dev >= 0:
            i = cur_dev
            segs.append(PathSegment("device", int(max(r.dev_start[i], lo)), int(r.dev_end[i]), g.dev_names[i]))
            if r.dev_start[i] <= lo:
                break
            if r.dev_bound[i] == 1:
                p = int(r.dev_prev[i])
                gap_start = int(r.dev_end[p])
                cur_dev = p
                if gap_start <= lo:
                    break
                continue
            if r.dev_bound[i] == 0:
                t_launch = int(r.dev_start[i] - g.dev_lat[i])
                segs.append(PathSegment("launch latency", max(t_launch, lo), int(r.dev_start[i])))
                t_host, cur_dev = t_launch, -1
                if t_host <= lo:
                    break
                continue
            break
        # On the host at replayed time t_host: back to the latest anchor ending by then.
        k = int(np.searchsorted(r.anc_end, t_host, side="right")) - 1
        a_end = int(r.anc_end[k]) if k >= 0 else lo
        if a_end < t_host:
            segs.append(PathSegment("host", max(a_end, lo), t_host))
        if k < 0 or a_end <= lo:
            break
        kind = _ANCHOR_NAMES[int(g.anc_kind[k])]
        j = int(r.anc_waited_on[k])
        if j >= 0 and r.dev_end[j] > r.anc_start[k]:
            segs.append(PathSegment(kind, max(int(r.dev_end[j]), lo), a_end))
            cur_dev = j
            continue
        segs.append(PathSegment(kind, max(int(r.anc_start[k]), lo), a_end))
        t_host = int(r.anc_start[k])
        if t_host <= lo:
            break
    segs.reverse()
    return [s for s in segs if s.end_ns > s.start_ns]


def path_by_kind(segs: list[PathSegment]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in segs:
        out[s.kind] = out.get(s.kind, 0) + s.dur_ns
    return out


def median_step(r: Replay) -> int:
    """Index of the step with the median replayed duration."""
    if r.step_ns.size == 0:
        return 0
    order = np.argsort(r.step_ns, kind="stable")
    return int(order[(order.size - 1) // 2])
