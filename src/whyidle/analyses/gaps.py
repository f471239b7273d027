"""Device-idle gaps and their attribution to causes.

Device idle is the complement, inside the window, of the union of device work over *all*
streams of a device (per-stream idle is not device idle). Each idle interval is a gap::

    device  ████████|.................gap..................|██████ next work
    host    ..sync..][  DataLoader.__next__  ][ to() ][launch]
                    gs                               L  Le    ge

The device became idle at ``gs`` and resumed at ``ge`` with the next work, which the host
launched by a call ``[L, Le)`` from some thread (found by correlation id). What the device and
that thread were doing decides the cause:

1. **Queued** (``Le <= gs``: the launch had returned before the device went idle): not the host.
   Up to ``AttributionSettings.kernel_boundary_max_ns`` it is the device's own start-up cost between kernels
   (kernel boundaries); a pageable host-to-device copy is staging (h2d copy); work that waited on
   a dependency the trace shows (a stream-wait call issued before it, a collective) is a
   dependency wait; work launched before the capture began is a capture artifact; anything else
   is a device-side wait the trace cannot name.
2. **In flight** (``L <= gs < Le``: the launch call was still running when the device went idle):
   launch latency, or cold start when the call itself is a first-use cost (milliseconds), or a
   host sync when the call blocks the thread (a synchronous copy: ``cudaMemcpy``,
   ``hipMemcpyWithStream``).
3. **Waiting for the host** (``L > gs``): ``[gs, L]`` is split by what the launching thread was
   doing (``analyses/hostops.py``, ``analyses/hostwork.py``), in this priority: JIT compilation
   and module loading recurring through the window (compile on first use); a cold-start call or
   first use; the input pipeline (DataLoader); a host-to-device copy op; a synchronising call;
   an MPI call (dependency wait); any other op (host overhead); then the innermost Python frame
   or range: data work (host preprocessing), framework code (host overhead), blocked waiting
   (waiting for requests in a serving workload, else untraced); and nothing traced at all (short:
   the interpreter between ops, host overhead; long: untraced host work). Host time with nothing
   traced is never demand.

A gap that begins while the launching thread is blocked in a synchronising call was drained by
that sync: the host waited for the device to finish instead of queueing work ahead, so
everything up to the next launch (the host work the sync serialised and the relaunch) is
charged to the sync, except first-use costs and the input pipeline, which keep their causes.
``[L, ge]`` (the launch and the device's start) follows the gap's dominant host-side cause, or
cold start when the launch call was slow. When the launch call itself blocks the thread (a
synchronous copy entered a little after the device went idle, lasting hundreds of milliseconds
while queued work waits), ``[L, ge]`` is that call's: the host's state over the whole gap, not at
its start, names it (staging a pageable host-to-device copy, else a host sync).

Every nanosecond of idle is attributed to exactly one cause; nothing is forced: what the trace
cannot explain is ``unattributed``.

The causes of 1-3 are the detectors registered in ``analyses/detectors.py``, each with its cause
key, in the order above; this module finds the gaps and their launches, runs the detectors, and
applies what holds for every cause (the drained sync, the tail after the launch, nothing traced).
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.calls import is_launch_call
from whyidle.analyses.detectors import DeviceView, HostView, Phase, device_detectors, host_detectors
from whyidle.analyses.hostops import HostSets, host_sets, is_sync_call, memcpy_direction
from whyidle.analyses.hostwork import ContextSets
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.analyses.workload import Workload, workload_kind
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Gaps", "find_gaps", "is_training"]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_UNKNOWN = Workload("unknown", ())


def primary_causes(slices: I64) -> I64:
    """Per gap (a row of ns per cause, in CAUSES order): the index of the cause holding most of it."""
    if slices.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    return np.asarray(np.argmax(slices, axis=1), dtype=np.int64)


class Gaps(msgspec.Struct, frozen=True):
    """Every device-idle interval in the window, one row each, sorted by device then start."""

    start_ns: I64
    end_ns: I64
    device: I64
    next_row: I64  # timeline row of the work that ended the gap (-1: none before window end)
    launch_row: I64  # row of its launch call (-1: unknown)
    thread_lane: I64  # lane of the launching thread (-1: unknown)
    host_end_ns: I64  # end of the host-side part [gs, host_end) (= launch time, clipped)
    drained_by_sync: npt.NDArray[np.bool_]
    slices: I64  # shape (n, len(CAUSES)): ns of each gap attributed to each cause
    training: bool
    has_host_events: bool
    workload: Workload = _UNKNOWN
    # What each launching thread did outside ops (innermost frames, ranges, OS calls), by lane.
    contexts: dict[int, ContextSets] = msgspec.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    @property
    def primary(self) -> I64:
        """Index into CAUSES of the cause that holds most of each gap."""
        return primary_causes(self.slices)

    def total_by_cause(self) -> I64:
        if self.slices.shape[0] == 0:
            return np.zeros(len(C.CAUSES), dtype=np.int64)
        return np.asarray(self.slices.sum(axis=0), dtype=np.int64)


def is_training(tl: Timeline) -> bool:
    """A trace is training when it shows a backward pass or an optimizer step."""
    return workload_kind(tl).training


def _empty(workload: Workload, has_host: bool) -> Gaps:
    z = np.empty(0, dtype=np.int64)
    return Gaps(z, z, z, z, z, z, z, np.empty(0, dtype=np.bool_), np.zeros((0, len(C.CAUSES)), dtype=np.int64), workload.training, has_host, workload)


def _idle_intervals(tl: Timeline, links: Links, window: Window) -> tuple[I64, I64, I64, I64, I64]:
    """(gs, ge, device, next_row, launch_row) of every gap, device by device."""
    rows = links.device_rows
    devices = tl.device_of(rows)
    parts = []
    for dev in unique_sorted(devices):
        sel = devices == dev
        d_rows = rows[sel]
        d_launch = links.launch_of[sel]
        order = np.argsort(tl.start_ns[d_rows], kind="stable")
        d_rows, d_launch = d_rows[order], d_launch[order]
        busy = tl.union(d_rows).clip(window.start_ns, window.end_ns)
        idle = busy.complement(window.start_ns, window.end_ns)
        if len(idle) == 0:
            continue
        gs, ge = idle.start, idle.end
        starts = tl.start_ns[d_rows]
        j = np.searchsorted(starts, ge, side="left")
        has_next = j < d_rows.size
        jc = np.minimum(j, d_rows.size - 1)
        next_row = np.where(has_next, d_rows[jc], -1)
        launch_row = np.where(has_next, d_launch[jc], -1)
        parts.append((gs, ge, np.full(gs.size, int(dev), dtype=np.int64), next_row, launch_row))
    if not parts:
        z = np.empty(0, dtype=np.int64)
        return z, z, z, z, z
    cat = [np.concatenate([p[k] for p in parts]) for k in range(5)]
    return cat[0], cat[1], cat[2], cat[3], cat[4]


class _Launch:
    """Per gap: the launching thread and call ``[L, Le)`` of the work that ended it (see 1-2 in
    the module docstring)."""

    def __init__(self, tl: Timeline, links: Links, window: Window, ge: I64, next_row: I64, launch_row: I64, cfg: AttributionSettings) -> None:
        n = ge.size
        self.has_launch = launch_row >= 0
        lr = np.maximum(launch_row, 0)
        self.thread = np.where(self.has_launch, tl.lane[lr], -1).astype(np.int64)
        launch_t = np.where(self.has_launch, tl.start_ns[lr], ge)
        self.launch_e = np.where(self.has_launch, tl.end_ns[lr], ge)
        # A trailing gap (no next work) belongs to the thread that drives the steps, or else the
        # one that launched most work.
        main = _main_thread(tl, links, window)
        self.trailing = next_row < 0
        if main >= 0:
            self.thread[self.trailing] = main
        self.launch_t = np.where(self.trailing, ge, launch_t)
        # A kernel launch taking milliseconds is a first-use cost (module loading, JIT); a copy
        # call that long is staging a pageable copy.
        is_kernel_launch = np.zeros(n, dtype=np.bool_)
        is_kernel_launch[self.has_launch] = tl.name_mask(is_launch_call, launch_row[self.has_launch])
        self.cold = is_kernel_launch & ((self.launch_e - self.launch_t) >= cfg.cold_call_min_ns)
        # A launch call that blocks the thread until its work is done (a synchronous copy).
        self.blocking = np.zeros(n, dtype=np.bool_)
        self.blocking[self.has_launch] = tl.name_mask(is_sync_call, launch_row[self.has_launch])


def find_gaps(tl: Timeline, links: Links, window: Window, cfg: AttributionSettings) -> Gaps:
    workload = workload_kind(tl)
    has_host = bool((tl.kind == int(Kind.RUNTIME)).any())
    if links.device_rows.size == 0 or window.duration_ns <= 0:
        return _empty(workload, has_host)
    gs, ge, dev, next_row, launch_row = _idle_intervals(tl, links, window)
    n = gs.size
    if n == 0:
        return _empty(workload, has_host)
    la = _Launch(tl, links, window, ge, next_row, launch_row, cfg)
    host_end = np.clip(la.launch_t, gs, ge)
    queued = la.has_launch & (la.launch_e <= gs)
    in_flight = la.has_launch & (la.launch_t <= gs) & ~queued

    # Waiting for the host: [gs, L] split by what the launching thread was doing.
    drained = np.zeros(n, dtype=np.bool_)
    lanes_used = unique_sorted(la.thread[la.thread >= 0])
    sets = host_sets(tl, links, lanes_used, cfg.cold_call_min_ns, cfg.python_overhead_max_ns, cfg.first_call_min_ratio)
    pre = np.zeros((n, len(C.CAUSES)), dtype=np.int64)  # host-side part, before the post-launch tail
    serving = workload.kind == "serving"
    dep_wait = np.zeros(n, dtype=np.bool_)
    for lane in lanes_used:
        hs = sets[int(lane)]
        g = np.flatnonzero((la.thread == lane) & ~queued & ~in_flight)
        if g.size:
            part, dr = _split_host_time(HostView(tl, int(lane), hs, gs[g], host_end[g], serving, cfg), window)
            pre[g] = part
            drained[g] = dr
        q = np.flatnonzero((la.thread == lane) & queued)
        if q.size:
            dep_wait[q] = _gated_by_stream_wait(hs, la.launch_t[q])

    # Gaps whose next work has no known launch: work launched before the capture began is a
    # capture artifact; otherwise the host side is unknown.
    unknown = ~la.has_launch & ~la.trailing
    if not has_host:
        unknown |= la.trailing
    dur = ge - gs
    pre_capture = unknown & _launched_before_capture(tl, links, next_row) if has_host else np.zeros(n, dtype=np.bool_)
    pre[unknown] = 0
    pre[unknown & ~pre_capture, C.cause_index(C.NO_LAUNCH_INFO)] = dur[unknown & ~pre_capture]
    h2d_next = _is_h2d(tl, next_row)
    _device_side(pre, dur, queued | pre_capture, pre_capture, in_flight, h2d_next, dep_wait, la, tl, next_row, cfg)
    tail = np.where(queued | in_flight | unknown, 0, ge - host_end)
    slices = _with_tail(pre, tail, h2d_next, la)
    contexts = {lane: hs.context for lane, hs in sets.items()}
    return Gaps(gs, ge, dev, next_row, launch_row, la.thread, host_end, drained, slices, workload.training, has_host, workload, contexts)


def _device_side(
    pre: I64, dur: I64, queued_any: B, pre_capture: B, in_flight: B, h2d_next: B, dep_wait: B, la: _Launch, tl: Timeline, next_row: I64, cfg: AttributionSettings
) -> None:
    """Fill ``pre`` for gaps whose launch had returned (queued, or launched before the capture)
    or was still running (in flight) when the device went idle: each gap goes whole to the first
    device detector of its phase that claims it (``analyses/detectors.py``)."""
    coll_next = (next_row >= 0) & (tl.kind[np.maximum(next_row, 0)] == int(Kind.COLLECTIVE))
    phases: tuple[tuple[Phase, B], ...] = (("queued", queued_any), ("in_flight", in_flight))
    for phase, mask in phases:
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            continue
        view = DeviceView(tl, next_row[idx], dur[idx], pre_capture[idx], h2d_next[idx], dep_wait[idx], coll_next[idx], la.blocking[idx], la.cold[idx], cfg)
        open_ = np.ones(idx.size, dtype=np.bool_)
        for d in device_detectors(phase):
            claim = open_ & np.asarray(d.claims(view), dtype=np.bool_)
            pre[idx[claim], C.cause_index(C.cause(d.key))] = dur[idx[claim]]
            open_ &= ~claim


def _with_tail(pre: I64, tail: I64, h2d_next: B, la: _Launch) -> I64:
    """Post-launch tail [L, ge]: a slow launch call is a cold start, staging a pageable copy is the
    copy's cost, a launch call that blocks the thread (a synchronous copy) is a host sync;
    otherwise it follows the gap's dominant host-side cause. Added into ``pre`` (the caller's
    last use of it: a copy of the gaps-by-causes table took 150 ms at 555k gaps), and returned."""
    slices = pre
    has_tail = tail > 0
    if has_tail.any():
        dominant = np.argmax(pre, axis=1)
        dominant[pre.sum(axis=1) == 0] = C.cause_index(C.HOST_OVERHEAD)
        dominant[la.blocking] = C.cause_index(C.HOST_SYNC)
        dominant[h2d_next] = C.cause_index(C.H2D_COPY)
        dominant[la.cold] = C.cause_index(C.COLD_START)
        idx = np.flatnonzero(has_tail)
        slices[idx, dominant[idx]] += tail[idx]
    return slices


def _main_thread(tl: Timeline, links: Links, window: Window) -> int:
    if window.steps:
        return int(tl.lane[window.steps[0].row])
    launched = links.launch_of[links.launch_of >= 0]
    if launched.size == 0:
        return -1
    lanes, counts = np.unique(tl.lane[launched], return_counts=True)
    return int(lanes[np.argmax(counts)])


def _is_h2d(tl: Timeline, rows: I64) -> npt.NDArray[np.bool_]:
    """Whether each row (-1: none) is a host-to-device copy."""
    h2d_name = np.fromiter((memcpy_direction(s) == "HtoD" for s in tl.strings), dtype=np.bool_, count=len(tl.strings))
    ok = rows >= 0
    r = np.maximum(rows, 0)
    return ok & (tl.kind[r] == int(Kind.MEMCPY)) & h2d_name[tl.name[r]] if len(tl) else np.zeros(rows.size, dtype=np.bool_)


def _launched_before_capture(tl: Timeline, links: Links, rows: I64) -> npt.NDArray[np.bool_]:
    """Whether each device row (-1: none) carries a correlation id older than every launch in the trace.

    Correlation ids grow with every runtime call, so device work whose id is below the first
    traced launch's was launched before the capture began: the trace shows it running but not
    what the device was doing before it (its own earlier work, not captured).
    """
    launched = links.launch_of[links.launch_of >= 0]
    ok = rows >= 0
    if launched.size == 0:
        return np.zeros(rows.size, dtype=np.bool_)
    first_corr = int(tl.corr[launched].min())
    corr = tl.corr[np.maximum(rows, 0)]
    return ok & (corr >= 0) & (corr < first_corr)


def _gated_by_stream_wait(hs: HostSets, launch_t: I64) -> npt.NDArray[np.bool_]:
    """Whether the thread issued a stream-wait call after its previous launch and before this one."""
    if hs.stream_waits.size == 0:
        return np.zeros(launch_t.size, dtype=np.bool_)
    k = np.searchsorted(hs.launches, launch_t, side="left")  # launches strictly before this one
    prev = np.where(k > 0, hs.launches[np.maximum(k - 1, 0)], np.iinfo(np.int64).min)
    w = np.searchsorted(hs.stream_waits, launch_t, side="left")
    last_wait = np.where(w > 0, hs.stream_waits[np.maximum(w - 1, 0)], np.iinfo(np.int64).min)
    return np.asarray(last_wait > prev, dtype=np.bool_)


def _split_host_time(v: HostView, window: Window) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Split each host interval [a, b) of one thread into causes (see the module docstring), by
    the host detectors in their order (``analyses/detectors.py``).

    When the gap was drained by a sync, the layers marked ``serialised`` (host work the sync
    kept from overlapping the device) go to the sync instead; named work keeps its cause: first
    use, the input pipeline, copies, MPI, data preparation and a blocked thread have their own
    fix, which removes the wait whole.
    """
    hs, a, b, cfg = v.sets, v.a, v.b, v.cfg
    # Inside the sync when the device went idle (woken up to sync_wake_tolerance_ns before it):
    # a sync that began after the gap opened found the queue already empty.
    tol = cfg.sync_wake_tolerance_ns
    drained = hs.sync.overlap(a - tol, a + 1) > 0
    drained_h2d = drained & (hs.h2d.overlap(a - tol, a + 1) > 0)
    sync_col = np.where(drained_h2d, C.cause_index(C.H2D_COPY), C.cause_index(C.HOST_SYNC))
    rows = np.arange(a.size)
    out = np.zeros((a.size, len(C.CAUSES)), dtype=np.int64)

    def add(cause: C.Cause, ns: I64, serialised: bool) -> None:
        col = np.where(drained & serialised, sync_col, C.cause_index(cause))
        np.add.at(out, (rows, col), ns)

    covered = Intervals.empty()
    done = np.zeros(a.size, dtype=np.int64)
    for d in host_detectors():
        layer = d.covers(v)
        if len(layer) == 0:
            continue
        covered = covered | layer
        now = covered.overlap(a, b)
        add(C.cause(d.key), now - done, d.serialised)
        done = now
    # Nothing traced: short stretches are the interpreter between ops, long ones untraced work.
    uncovered = np.maximum(b - a, 0) - done
    nothing = covered.complement(window.start_ns, window.end_ns)
    long = nothing.lengths >= cfg.python_overhead_max_ns
    long_unc = np.minimum(Intervals(nothing.start[long], nothing.end[long]).overlap(a, b), uncovered)
    add(C.UNTRACED_HOST, long_unc, True)
    add(C.HOST_OVERHEAD, uncovered - long_unc, True)
    return out, drained
