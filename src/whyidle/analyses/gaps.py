"""Device-idle gaps and their attribution to causes.

Device idle is the complement, inside the window, of the union of device work over *all*
streams of a device (per-stream idle is not device idle). Each idle interval is a gap::

    device  ████████|.................gap..................|██████ next work
    host    ..sync..][  DataLoader.__next__  ][ to() ][launch]
                    gs                               L        ge

The device became idle at ``gs`` and resumed at ``ge`` with the next work, which the host
launched at ``L`` from some thread (found by correlation id). Two questions decide the cause:

1. Was the next work already queued when the device went idle (``L <= gs``)? Then the host is
   not to blame: short waits are the device's own start-up cost between back-to-back kernels
   (kernel boundaries); longer ones are a device-side dependency the trace cannot name.
2. Otherwise the device waited for the host, and ``[gs, L]`` is split by what the launching
   thread was doing, in this priority: a cold-start call, the input pipeline (DataLoader), a
   host-to-device copy op, a synchronising call, any other op (host overhead), or nothing
   traced (the Python interpreter between ops when short; untraced work when long; an idle
   server when the trace is inference).

A gap that begins while the launching thread is blocked in a synchronising call was drained by
that sync: the host waited for the device to finish instead of queueing work ahead, so the host
time that follows (ops, Python) is charged to the sync. ``[L, ge]`` (launch latency, or staging a
pageable copy) follows the gap's dominant host-side cause.

Every nanosecond of idle is attributed to exactly one cause; nothing is forced: what the trace
cannot explain is ``unattributed``.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.hostops import HostSets, host_sets, memcpy_direction
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.config import Config
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Gaps", "find_gaps", "device_busy", "is_training"]

I64 = npt.NDArray[np.int64]


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

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    @property
    def primary(self) -> I64:
        """Index into CAUSES of the cause that holds most of each gap."""
        if self.slices.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        return np.asarray(np.argmax(self.slices, axis=1), dtype=np.int64)

    def total_by_cause(self) -> I64:
        if self.slices.shape[0] == 0:
            return np.zeros(len(C.CAUSES), dtype=np.int64)
        return np.asarray(self.slices.sum(axis=0), dtype=np.int64)


_TRAINING_MARKERS = ("Backward", "backward", "Optimizer.", "AccumulateGrad", "autograd::engine")


def is_training(tl: Timeline) -> bool:
    """A trace is training when it shows a backward pass or an optimizer step."""
    return bool(tl.name_mask(lambda s: any(m in s for m in _TRAINING_MARKERS)).any())


def device_busy(tl: Timeline, rows: I64, lo: int, hi: int) -> Intervals:
    return Intervals.union_of(tl.start_ns[rows], tl.end_ns[rows]).clip(lo, hi)


def _device_of_rows(tl: Timeline, rows: I64) -> I64:
    dev_of_lane = np.array([ln.device for ln in tl.lanes], dtype=np.int64) if tl.lanes else np.zeros(0, dtype=np.int64)
    return dev_of_lane[tl.lane[rows]] if rows.size else np.empty(0, dtype=np.int64)


def _empty(training: bool, has_host: bool) -> Gaps:
    z = np.empty(0, dtype=np.int64)
    return Gaps(z, z, z, z, z, z, z, np.empty(0, dtype=np.bool_), np.zeros((0, len(C.CAUSES)), dtype=np.int64), training, has_host)


def find_gaps(tl: Timeline, links: Links, window: Window, cfg: Config) -> Gaps:
    training = is_training(tl)
    has_host = bool((tl.kind == int(Kind.RUNTIME)).any())
    rows = links.device_rows
    if rows.size == 0 or window.duration_ns <= 0:
        return _empty(training, has_host)
    devices = _device_of_rows(tl, rows)
    parts = []
    for dev in unique_sorted(devices):
        sel = devices == dev
        d_rows = rows[sel]
        d_launch = links.launch_of[sel]
        order = np.argsort(tl.start_ns[d_rows], kind="stable")
        d_rows, d_launch = d_rows[order], d_launch[order]
        busy = device_busy(tl, d_rows, window.start_ns, window.end_ns)
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
        return _empty(training, has_host)
    gs = np.concatenate([p[0] for p in parts])
    ge = np.concatenate([p[1] for p in parts])
    dev = np.concatenate([p[2] for p in parts])
    next_row = np.concatenate([p[3] for p in parts])
    launch_row = np.concatenate([p[4] for p in parts])
    n = gs.size

    # The launching thread and launch time; a trailing gap (no next work) belongs to the thread
    # that drives the steps, or else the one that launched most work.
    thread = np.where(launch_row >= 0, tl.lane[np.maximum(launch_row, 0)], -1).astype(np.int64)
    launch_t = np.where(launch_row >= 0, tl.start_ns[np.maximum(launch_row, 0)], ge)
    main = _main_thread(tl, links, window)
    trailing = next_row < 0
    if main >= 0:
        thread[trailing] = main
    launch_t = np.where(trailing, ge, launch_t)
    host_end = np.clip(launch_t, gs, ge)
    queued = (launch_row >= 0) & (launch_t <= gs)

    slices = np.zeros((n, len(C.CAUSES)), dtype=np.int64)
    drained = np.zeros(n, dtype=np.bool_)
    lanes_used = unique_sorted(thread[thread >= 0])
    sets = host_sets(tl, links, lanes_used, cfg.cold_call_min_ns)
    pre = np.zeros((n, len(C.CAUSES)), dtype=np.int64)  # host-side part, before the post-launch tail
    for lane in lanes_used:
        g = np.flatnonzero((thread == lane) & ~queued)
        if g.size == 0:
            continue
        hs = sets[int(lane)]
        a, b = gs[g], host_end[g]
        part, dr = _split_host_time(hs, a, b, training, window, cfg)
        pre[g] = part
        drained[g] = dr

    # Gaps whose next work has no known launch.
    unknown = (launch_row < 0) & ~trailing
    if not has_host:
        unknown |= trailing
    pre[unknown] = 0
    pre[unknown, C.cause_index(C.NO_LAUNCH_INFO)] = (ge - gs)[unknown]

    # Queued work: kernel boundaries when short, else an unexplained device-side wait.
    dur = ge - gs
    h2d_next = _is_h2d(tl, next_row)
    kb = queued & (dur <= cfg.kernel_boundary_max_ns)
    pre[kb, C.cause_index(C.KERNEL_BOUNDARIES)] = dur[kb]
    waiting = queued & ~kb
    pre[waiting & h2d_next, C.cause_index(C.H2D_COPY)] = dur[waiting & h2d_next]
    pre[waiting & ~h2d_next, C.cause_index(C.QUEUED_WAITING)] = dur[waiting & ~h2d_next]

    # Post-launch tail [L, ge]: staging a pageable copy is the copy's cost; otherwise the launch
    # latency follows the gap's dominant host-side cause.
    tail = np.where(queued | unknown, 0, ge - host_end)
    slices[:] = pre
    has_tail = tail > 0
    if has_tail.any():
        dominant = np.argmax(pre, axis=1)
        no_pre = pre.sum(axis=1) == 0
        dominant[no_pre] = C.cause_index(C.HOST_OVERHEAD)
        dominant[h2d_next] = C.cause_index(C.H2D_COPY)
        idx = np.flatnonzero(has_tail)
        slices[idx, dominant[idx]] += tail[idx]
    return Gaps(gs, ge, dev, next_row, launch_row, thread, host_end, drained, slices, training, has_host)


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


def _split_host_time(
    hs: HostSets, a: I64, b: I64, training: bool, window: Window, cfg: Config
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Split each host interval [a, b) of one thread into causes (see the module docstring)."""
    length = np.maximum(b - a, 0)
    p1 = hs.cold
    p2 = p1 | hs.dataloader
    p3 = p2 | hs.h2d
    p4 = p3 | hs.sync
    p5 = p4 | hs.ops
    o1, o2, o3, o4, o5 = (p.overlap(a, b) for p in (p1, p2, p3, p4, p5))
    cold, dl, h2d, sync, busy = o1, o2 - o1, o3 - o2, o4 - o3, o5 - o4
    uncovered = length - o5
    nothing = p5.complement(window.start_ns, window.end_ns)
    long_set = Intervals(nothing.start[nothing.lengths >= cfg.python_overhead_max_ns], nothing.end[nothing.lengths >= cfg.python_overhead_max_ns])
    long_unc = np.minimum(long_set.overlap(a, b), uncovered)
    short_unc = uncovered - long_unc

    tol = cfg.sync_wake_tolerance_ns
    drained = hs.sync.overlap(a - tol, a + tol) > 0
    drained_h2d = drained & (hs.h2d.overlap(a - tol, a + tol) > 0)

    out = np.zeros((a.size, len(C.CAUSES)), dtype=np.int64)
    out[:, C.cause_index(C.COLD_START)] = cold
    out[:, C.cause_index(C.INPUT_PIPELINE)] = dl
    out[:, C.cause_index(C.H2D_COPY)] = h2d
    out[:, C.cause_index(C.HOST_SYNC)] = sync
    host_time = busy + short_unc
    if training:
        out[:, C.cause_index(C.UNTRACED_HOST)] = long_unc
    else:
        # Inference: a host with nothing traced is waiting for requests.
        out[:, C.cause_index(C.IDLE_HOST)] = long_unc + short_unc
        host_time = busy
    drain_col = np.where(drained_h2d, C.cause_index(C.H2D_COPY), C.cause_index(C.HOST_SYNC))
    rows = np.arange(a.size)
    out[rows[drained], drain_col[drained]] += host_time[drained]
    out[rows[~drained], C.cause_index(C.HOST_OVERHEAD)] += host_time[~drained]
    return out, drained
