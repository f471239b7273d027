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
* ``loader_speedup=k`` (the DataLoader has workers already, and they are the bottleneck): ``__next__``
  costs ``loader_handoff_ns``, and the step cannot be shorter than the recorded step (the workers'
  production interval in a starved steady state) divided by ``k``;
* ``h2d_async``: a host-to-device copy no longer blocks the host (pinned memory, ``non_blocking``):
  its call costs the trace's median launch call; the device copy keeps its recorded time;
* ``sync_removed``: synchronising calls no longer wait; their own host cost (the recorded tail)
  stays, and so does the host work that used what they fetched;
* ``host_factor`` over ``host_region``: host time (launch calls, Python and dispatch between
  them) is scaled (CUDA graphs / compile: the whole step; a fused optimizer: ``Optimizer.step``);
* ``gemm_factor``: FP32 GEMM/convolution kernel time divided by the stated tensor-core factor;
* ``profiler_removed``: the profiler's own host time (``Graph.profiler``, analyses/profcost.py)
  runs at zero weight, inside a loader's ``__next__`` too: the run without the profiler;
* ``carried_backlog_ns``: the main stream is busy this long after the window starts (work queued
  before it) and the first sync waits for it: a profiled run's first step after a warm-up step
  that recorded no CPU ops and so ran ahead of the device (findings/predict.py decides how long).

Step boundaries are the host's step markers, mapped through the replay; the last step ends when
the device work launched in it ends (the window of ``analyses.window``). With no edit the replay
gives back the recorded step times (tested within 1%). Two readings of a replay: the window's
mean step (``Replay.mean_step_ns``, what a trace of the run would show) and the steady-state step
(``Replay.steady_step_ns``, what a step timer's median shows).

The graph (device work, anchors, the profiler's time) is built by ``whatif_graph.build_graph``.

Not modelled (the known errors, docs/metrics.md): other processes and cores (workers competing
with the training thread for CPU and memory bandwidth), the profiler's cost inside its records
(only the gaps before them are seen), clock changes (a GPU idling most of the
time may run its kernels slower), cross-stream event waits beyond their recorded delay, and
collectives, which keep their recorded time, including waiting for the slowest rank.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.whatif_graph import D2H, H2D, H2D_SYNC, LOADER, Graph, build_graph
from whyidle.timeline.arrays import median
from whyidle.timeline.intervals import Intervals

__all__ = ["Edit", "Graph", "Replay", "build_graph", "replay", "backlog_ns", "first_wait_excess_ns", "NO_EDIT"]

I64 = npt.NDArray[np.int64]


class Edit(msgspec.Struct, frozen=True):
    """One change to replay. The default changes nothing."""

    name: str = "none"
    loader_workers: int = 0  # > 0: the DataLoader runs in this many worker processes
    loader_handoff_ns: int = 0  # host cost of taking a ready batch from a worker
    loader_speedup: float = 0.0  # > 0: workers exist already and batches come this many times faster (see the module docstring)
    h2d_async: bool = False
    sync_removed: bool = False
    host_factor: float = 1.0  # scale of host time in host_region
    host_region: str = "step"  # "step": all host time; "optimizer": inside Optimizer.step ranges
    gemm_factor: float = 1.0  # FP32 GEMM/conv kernels run this many times faster
    pageable_copy_factor: float = 1.0  # H2D copies from pageable memory run this many times faster (pinned)
    sync_consumers_removed: bool = False  # with sync_removed: the host ops that used the value go too
    batch_factor: float = 1.0  # batch size multiplied by this (per-step host cost unchanged)
    batch_growth: str = "blocks"  # kernel time with the batch: "blocks" (once its blocks fill the SMs), "none", "all"
    profiler_removed: bool = False  # the profiler's own host time removed (the untraced run; analyses/profcost.py)
    carried_backlog_ns: int = 0  # the main stream is busy this long after the window starts (work launched before it)


NO_EDIT = Edit()


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
    done_ns: I64  # replayed end of the device work launched in each step, -1 if none

    @property
    def mean_step_ns(self) -> float:
        """The window's mean step (the basis of a step time read from a trace)."""
        replayed = float(self.step_ns.mean()) if self.step_ns.size else 0.0
        return max(replayed, self.floor_ns)

    @property
    def steady_step_ns(self) -> float:
        """The steady-state step: the median interval between the ends of consecutive steps'
        device work (the basis of a step timer's median). Unlike the window's mean it does not
        carry work queued before the window: when the device is the bottleneck, the steps' host
        marks run ahead and the window's last step absorbs the backlog, but the work of
        consecutive steps still ends one step of device time apart. The mean when fewer than two
        steps launched work."""
        done = self.done_ns[self.done_ns >= 0]
        if done.size < 2:
            return self.mean_step_ns
        return max(median(np.diff(done)), self.floor_ns)


class _Clock:
    """Replayed host time elapsed since the window start at recorded instants: the recorded
    clock with anchors at zero weight (their length follows their rule), the profiler's own time
    at zero weight when the edit removes it, and ``host_factor`` applied over the edited region."""

    def __init__(self, g: Graph, edit: Edit) -> None:
        self.g, self.key = g, (edit.profiler_removed, edit.sync_removed and edit.sync_consumers_removed)
        self.anchors = g.anchor_profiler_spans if edit.profiler_removed else g.anchor_spans
        if self.key[1]:
            self.anchors = self.anchors | g.consumers
        self.factor = edit.host_factor
        if edit.host_factor == 1.0:
            self.scaled = Intervals.empty()
        elif edit.host_region == "optimizer":
            self.scaled = g.optimizer - self.anchors
        else:
            self.scaled = Intervals.single(g.host_lo, max(g.host_hi, int(g.dev_end.max())) + 1) - self.anchors

    def at(self, t: I64, origin: int) -> npt.NDArray[np.float64]:
        """The clock at ``t`` (the graph's instants, the same for every edit: see _Run), counted
        from ``origin`` (a float64 holds whole nanoseconds exactly only below 2**53: times since
        the epoch would be rounded to 256 ns). Read-only: shared by the edits with these anchors."""
        c = self.g.clock_bases.get(self.key)
        if c is None:
            c = self.g.clock_bases[self.key] = ((t - origin) - self.anchors.covered_before(t)).astype(np.float64)
            c.setflags(write=False)
        if len(self.scaled):
            c = c - (1.0 - self.factor) * self.scaled.covered_before(t)
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


class _Run:
    """One pass of the replay, segment by segment (``Graph.schedule``: the events between two
    anchors). Inside a segment the host clock has one reference: host time at a recorded instant
    t is ``h_ref_new + C(t) - h_ref_c`` (C: the clock), so the segment's launches and step marks
    are computed at once, and its device work stream by stream with a running maximum (below).
    Segments with little device work take a scalar path (numpy's per-call cost would dominate);
    both give the same numbers (tests/test_whatif.py). Times run from the window start, whole
    nanoseconds, exact in float64."""

    def __init__(self, g: Graph, edit: Edit, min_vector: int) -> None:
        clock, o = _Clock(g, edit), g.host_lo
        self.sc, self.min_vector = g.schedule, min_vector
        has = g.dev_launch >= 0
        # The clock at: each device op's launch (its start without one), the step marks, the
        # anchors' starts and ends, the window start; in one pass.
        n, m, a_n = g.dev_start.size, g.step_starts.size + 1, g.anc_start.size
        c = clock.at(np.concatenate((np.where(has, g.dev_launch, g.dev_start), g.step_starts, [g.last_host_end], g.anc_start, g.anc_end, [o])), o)
        self.c_dev, self.c_step = c[:n], c[n : n + m]
        self.c_anc_s, self.c_anc_e = c[n + m : n + m + a_n].tolist(), c[n + m + a_n : n + m + 2 * a_n].tolist()
        self.h_ref_c, self.h_ref_new = float(c[-1]), 0.0
        self.has, self.lat, self.gap, self.stream = has, g.dev_lat, g.dev_gap, g.dev_stream
        self.dev_key, self.dev_end = np.maximum(g.dev_start, g.dev_launch) - o, g.dev_end - o
        self.a_start, self.a_end, self.a_kind = (g.anc_start - o).tolist(), (g.anc_end - o).tolist(), g.anc_kind.tolist()
        self.a_tail, self.a_dev, self.a_awaited = g.anc_tail.tolist(), g.anc_dev.tolist(), g.anc_awaited.tolist()
        self.a_prof = g.anc_profiler.tolist() if edit.profiler_removed else [0] * g.anc_start.size
        self.lo = g.launch_order
        self.dur = _scaled_durations(g, edit)
        # Q: per stream, the sum of start-up gaps and predecessors' durations up to each op (its
        # offset from the stream's first op when nothing but the stream holds it back).
        so = self.sc.stream_order
        inc = self.gap[so].copy()
        p = self.sc.prev[so]
        inc[p >= 0] += self.dur[p[p >= 0]]
        self.q = np.empty_like(inc)
        self.q[so] = np.cumsum(inc)
        self.h_launch = np.zeros(n)
        self.ns, self.ne = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.bound = np.full(n, 2, dtype=np.int8)
        self.as_, self.ae, self.waited = [0] * a_n, [0] * a_n, [-1] * a_n
        self.starts = np.zeros(g.step_starts.size + 1, dtype=np.int64)
        # Work launched before the window (a carried backlog) keeps the main stream busy until
        # free0, and the first sync waits for it.
        self.main, self.free0 = g.main_stream, edit.carried_backlog_ns
        self.done_max = float(self.free0) if edit.carried_backlog_ns > 0 else float(np.iinfo(np.int64).min)
        self.done_j = -1
        self.pending: list[int] = []  # launched before the last sync, not waited for by it
        self.folded = 0
        self.edit, self.launch_cost = edit, g.launch_cost_ns
        self.loader_cost = edit.loader_handoff_ns if edit.loader_workers > 0 or edit.loader_speedup > 0 else -1

    def host(self, c: float) -> float:
        return self.h_ref_new + c - self.h_ref_c

    def run(self) -> None:
        sc, mv = self.sc, self.min_vector
        l_ptr, m_ptr, r_ptr, r_start = sc.launch_ptr.tolist(), sc.mark_ptr.tolist(), sc.run_ptr.tolist(), sc.run_start.tolist()
        launch_list, dev_list = sc.launch_list, sc.dev_list  # list slices: the scalar path's indexes
        for k, anchor in enumerate(sc.seg_anchor.tolist()):
            l0, l1 = l_ptr[k], l_ptr[k + 1]
            if l1 - l0 >= mv:
                ids = sc.launch_ids[l0:l1]
                self.h_launch[ids] = (self.h_ref_new + self.c_dev[ids]) - self.h_ref_c
            else:
                for i in launch_list[l0:l1]:
                    self.h_launch[i] = (self.h_ref_new + self.c_dev.item(i)) - self.h_ref_c
            if m_ptr[k + 1] > m_ptr[k]:
                marks = sc.mark_ids[m_ptr[k] : m_ptr[k + 1]]
                self.starts[marks] = np.rint((self.h_ref_new + self.c_step[marks]) - self.h_ref_c)
            for r in range(r_ptr[k], r_ptr[k + 1]):
                a, b = r_start[r], r_start[r + 1]
                if b - a >= mv:
                    self.device_run(sc.dev_ids[a:b])
                else:
                    for i in dev_list[a:b]:
                        self.device_op(i)
            if anchor >= 0:
                self.anchor(anchor)

    def ready(self, ids: I64) -> npt.NDArray[np.float64]:
        """When device work becomes ready: its launch plus latency, else its clock time."""
        return np.where(self.has[ids], self.h_launch[ids] + self.lat[ids], (self.h_ref_new + self.c_dev[ids]) - self.h_ref_c)

    def chain_first(self, i: int) -> tuple[int | None, int]:
        """What holds op ``i`` back besides its launch (for a run of ops: its first): the end of
        its stream predecessor plus its start-up gap (bound 1), the carried backlog on the main
        stream (bound 2), or nothing (None)."""
        p = self.sc.prev_list[i]
        if p >= 0:
            return self.ne.item(p) + self.sc.gap_list[i], 1
        if self.sc.stream_list[i] == self.main:
            return self.free0, 2
        return None, 2

    def device_op(self, i: int) -> None:
        """One op: it starts when it is ready and what holds it back (chain_first) has passed."""
        sc = self.sc
        if sc.has_list[i]:
            start, bound = self.h_launch.item(i) + sc.lat_list[i], 0
        else:
            start, bound = (self.h_ref_new + self.c_dev.item(i)) - self.h_ref_c, 2
        chain, why = self.chain_first(i)
        if chain is not None and chain > start:
            start, bound = float(chain), why
        ns = int(round(start))
        self.ns[i], self.ne[i], self.bound[i] = ns, ns + self.dur.item(i), bound

    def device_run(self, ids: I64) -> None:
        """A stream's ops of one segment at once: op i starts at max(ready_i, end of op i-1 +
        gap_i), i.e. ns_i = Q_i + max(chain - Q_first, cummax(round(ready) - Q)_i)."""
        ready = self.ready(ids)
        q = self.q[ids]
        x = np.maximum.accumulate(np.rint(ready).astype(np.int64) - q)
        chain, why = self.chain_first(int(ids[0]))
        if chain is not None:
            x = np.maximum(x, chain - int(q[0]))
        ns = q + x
        ne = ns + self.dur[ids]
        held = np.empty(ids.size, dtype=np.int64)  # what held each op back besides its launch
        held[1:] = ne[:-1] + self.gap[ids[1:]]
        held[0] = chain if chain is not None else np.iinfo(np.int64).min
        bound = np.where(self.has[ids], 0, 2).astype(np.int8)
        bound[held > ready] = 1
        if chain is not None and chain > ready[0]:
            bound[0] = why
        self.ns[ids], self.ne[ids], self.bound[ids] = ns, ne, bound

    def sync_done(self, k: int) -> float:
        """The latest replayed end of the work launched before sync ``k`` began that had finished
        by its recorded end (the work it waited for); work left over waits for a later sync."""
        upto, folded, a_end, sc = self.a_awaited[k], self.folded, self.a_end[k], self.sc
        self.folded = max(folded, upto)
        if len(self.pending) + upto - folded < self.min_vector:  # the same, one op at a time
            keep = []
            for j in self.pending + sc.launch_order_list[folded:upto] if upto > folded else self.pending:
                if sc.end_list[j] <= a_end + 1_000 and sc.key_list[j] < a_end:
                    if self.ne.item(j) > self.done_max:
                        self.done_max, self.done_j = float(self.ne.item(j)), j
                else:
                    keep.append(j)
            self.pending = keep
            return self.done_max
        cand = np.concatenate((np.array(self.pending, dtype=np.int64), self.lo[folded:upto] if upto > folded else self.lo[:0]))
        ok = (self.dev_end[cand] <= a_end + 1_000) & (self.dev_key[cand] < a_end)
        self.pending = cand[~ok].tolist()
        done = cand[ok]
        if done.size:
            j = int(done[np.argmax(self.ne[done])])
            if self.ne[j] > self.done_max:
                self.done_max, self.done_j = float(self.ne[j]), j
        return self.done_max

    def anchor(self, k: int) -> None:
        """The anchor's replayed end, by its kind's rule; the host clock restarts from it."""
        s_new = self.host(self.c_anc_s[k])
        kind, tail, edit = self.a_kind[k], self.a_tail[k], self.edit
        if kind == LOADER:
            own = self.a_end[k] - self.a_start[k] - self.a_prof[k]
            e_new = s_new + (self.loader_cost if self.loader_cost >= 0 else own)
        elif kind == H2D or kind == D2H:
            j = self.a_dev[k]
            if (edit.h2d_async and kind == H2D) or (edit.sync_removed and kind == D2H):
                e_new = s_new + self.launch_cost
            else:
                end_j = self.ne.item(j) + tail
                e_new = max(s_new, float(end_j))
                self.waited[k] = j if end_j > s_new else -1
        elif edit.sync_removed or (edit.h2d_async and kind == H2D_SYNC):
            e_new = s_new + tail
        else:
            done = self.sync_done(k)
            e_new = max(s_new, done) + tail
            self.waited[k] = self.done_j if done > s_new else -1
        self.as_[k], self.ae[k] = int(round(s_new)), int(round(e_new))
        self.h_ref_c, self.h_ref_new = self.c_anc_e[k], e_new


def replay(g: Graph, edit: Edit = NO_EDIT, min_vector: int = 16) -> Replay:
    """Replay the graph with ``edit`` applied (see the module docstring for the rules).
    ``min_vector``: the fewest ops of one stream in a segment replayed as arrays (a speed knob:
    the numbers are the same for every value)."""
    r = _Run(g, edit, min_vector)
    r.run()
    o = g.host_lo
    ns, ne = r.ns + o, r.ne + o
    starts = r.starts + o
    last_step = int(g.step_starts[-1])
    in_last = (g.dev_launch >= last_step) | ((g.dev_launch < 0) & (g.dev_start >= last_step))
    host_end = int(starts[-1])
    starts = starts[:-1]
    # The window's end (analyses/window.py): the end of the device work launched in the last step,
    # or its host range's end when it launched nothing.
    end_new = max(int(ne[in_last].max()), int(starts[-1]) + 1) if in_last.any() else max(host_end, int(starts[-1]))
    step_ns = np.diff(np.append(starts, end_new))
    floor = g.loader_ns_per_step / edit.loader_workers if edit.loader_workers > 0 else 0.0
    if edit.loader_speedup > 0:
        # Workers starve the step already: a batch is ready every recorded step (the loader's wait
        # included); made this many times faster, the step cannot be shorter than that interval / k.
        floor = (g.window_end - int(g.step_starts[0])) / g.n_steps / edit.loader_speedup
    step_of = np.searchsorted(g.step_starts, g.dev_launch, side="right") - 1
    done = np.full(g.n_steps, -1, dtype=np.int64)
    launched = g.dev_launch >= g.step_starts[0]
    np.maximum.at(done, step_of[launched], ne[launched])
    return Replay(
        edit, ns, ne, r.bound, g.schedule.prev,
        np.array(r.as_, dtype=np.int64) + o, np.array(r.ae, dtype=np.int64) + o, np.array(r.waited, dtype=np.int64),
        starts, end_new, step_ns, floor, done,
    )


def backlog_ns(g: Graph, r: Replay) -> int:
    """The device's backlog when a step's host first waits for it, the median over the window's
    steps after the first: how long the work launched in the previous step was still running at
    the replayed start of the step's first sync or blocking copy; 0 when it had finished. A
    loader's ``__next__`` does not wait for the device: work finishing under it is no backlog.

    Only a wait in every step bounds the backlog (to about one step of device work); when a step
    has none, the host may run ahead without limit and how far the steps before the window ran
    ahead is unknown: 0 (no backlog assumed)."""
    out = []
    marks = np.append(g.step_starts, g.last_host_end)
    waits = np.flatnonzero(g.anc_kind != LOADER)
    for k in range(g.n_steps - 1):
        first = waits[(g.anc_start[waits] >= marks[k + 1]) & (g.anc_start[waits] < marks[k + 2])]
        if first.size == 0:
            return 0
        launched = (g.dev_launch >= g.step_starts[k]) & (g.dev_launch < g.step_starts[k + 1])
        if launched.any():
            out.append(max(0, int(r.dev_end[launched].max()) - int(r.anc_start[first[0]])))
    return int(median(out)) if out else 0


def first_wait_excess_ns(g: Graph) -> int:
    """How much longer the recorded first step's first sync or blocking copy took, after the work
    it waited for in the window, than the same wait of the other steps (median): work launched
    before the window that it waited for (a backlog already in the recording, kept in its tail)."""
    marks = np.append(g.step_starts, g.last_host_end)
    waits = np.flatnonzero(g.anc_kind != LOADER)
    tails = []
    for k in range(g.n_steps):
        first = waits[(g.anc_start[waits] >= marks[k]) & (g.anc_start[waits] < marks[k + 1])]
        tails.append(int(g.anc_tail[first[0]]) if first.size else None)
    rest = [t for t in tails[1:] if t is not None]
    if tails and tails[0] is not None and rest:
        return max(0, tails[0] - int(median(rest)))
    return 0
