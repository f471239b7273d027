"""How busy the device really was, per window and per step.

Definitions (see docs/metrics.md):

* busy fraction = |union over all streams of kernels, copies and memsets in the window| / window
* kernel busy fraction = the same with kernels only (the TensorBoard plugin's "GPU Utilization")
* per step, device time is split without double counting, in this priority: compute kernels,
  communication kernels not hidden under compute (exposed communication), copies not hidden
  under kernels, memsets not hidden under either, and idle.

With several devices in one trace, every figure is summed over devices and fractions are of
``window x devices``.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import h2d_copy_rows
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.config import WindowSettings
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["StepFigures", "Utilization", "measure_utilization"]

I64 = npt.NDArray[np.int64]


class StepFigures(msgspec.Struct, frozen=True):
    number: int
    start_ns: int
    end_ns: int
    compute_ns: int
    communication_ns: int  # exposed: not overlapped by compute
    memcpy_ns: int
    memset_ns: int
    idle_ns: int
    idle_by_cause_ns: tuple[int, ...]  # aligned with analyses.causes.CAUSES

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class Utilization(msgspec.Struct, frozen=True):
    window_ns: int
    n_devices: int
    busy_ns: int
    kernel_busy_ns: int
    compute_ns: int
    communication_ns: int
    communication_total_ns: int
    memcpy_ns: int
    memset_ns: int
    idle_ns: int
    steps: tuple[StepFigures, ...]
    batch_size: int | None
    batch_size_basis: str  # "option", "trace (leading dim of the input copied to the device)", ""

    @classmethod
    def busy_only(
        cls,
        window_ns: int,
        n_devices: int,
        busy_ns: int,
        steps: tuple[StepFigures, ...] = (),
        batch_size: int | None = None,
        batch_size_basis: str = "",
    ) -> Utilization:
        """Figures from a source that only knows busy time (a step tracker, a counter log): all
        of it counts as compute, with no copies or communication to split out."""
        return cls(
            window_ns=window_ns,
            n_devices=n_devices,
            busy_ns=busy_ns,
            kernel_busy_ns=busy_ns,
            compute_ns=busy_ns,
            communication_ns=0,
            communication_total_ns=0,
            memcpy_ns=0,
            memset_ns=0,
            idle_ns=max(window_ns * max(n_devices, 1) - busy_ns, 0),
            steps=steps,
            batch_size=batch_size,
            batch_size_basis=batch_size_basis,
        )

    @property
    def capacity_ns(self) -> int:
        return self.window_ns * max(self.n_devices, 1)

    @property
    def busy_fraction(self) -> float:
        return self.busy_ns / self.capacity_ns if self.capacity_ns else 0.0

    @property
    def kernel_busy_fraction(self) -> float:
        return self.kernel_busy_ns / self.capacity_ns if self.capacity_ns else 0.0

    @property
    def step_times_ns(self) -> I64:
        return np.array([s.duration_ns for s in self.steps], dtype=np.int64)

    @property
    def steps_per_s(self) -> float | None:
        if not self.steps or self.window_ns <= 0:
            return None
        return len(self.steps) / (self.window_ns / 1e9)

    @property
    def samples_per_s(self) -> float | None:
        sps = self.steps_per_s
        if sps is None or self.batch_size is None:
            return None
        return sps * self.batch_size


class _DeviceSets(msgspec.Struct, frozen=True):
    compute: Intervals
    comm: Intervals
    memcpy: Intervals
    memset: Intervals
    busy: Intervals


def _device_sets(tl: Timeline, links: Links, lo: int, hi: int) -> list[_DeviceSets]:
    rows = links.device_rows
    devices = tl.device_of(rows)
    out = []
    for dev in unique_sorted(devices):
        r = rows[devices == dev]
        k = tl.kind[r]
        compute = tl.union(r[k == int(Kind.KERNEL)]).clip(lo, hi)
        comm_all = tl.union(r[k == int(Kind.COLLECTIVE)]).clip(lo, hi)
        kernels = compute | comm_all
        memcpy = tl.union(r[k == int(Kind.MEMCPY)]).clip(lo, hi)
        memset = tl.union(r[k == int(Kind.MEMSET)]).clip(lo, hi)
        out.append(_DeviceSets(compute, comm_all, memcpy - kernels, memset - kernels - memcpy, kernels | memcpy | memset))
    return out


def _derive_batch_size(tl: Timeline, links: Links, window: Window) -> int | None:
    """Leading dimension of the first tensor copied to the device in each step (the batch)."""
    if not window.steps:
        return None
    lane = int(tl.lane[window.steps[0].row])
    rows = h2d_copy_rows(tl, links, lane)
    rows = rows[tl.shape0[rows] > 0]
    if rows.size == 0:
        return None
    starts = tl.start_ns[rows]
    found = []
    for st in window.steps:
        i = np.searchsorted(starts, st.start_ns, side="left")
        if i < rows.size and starts[i] < st.end_ns:
            found.append(int(tl.shape0[rows[i]]))
    if not found:
        return None
    values, counts = np.unique(np.array(found), return_counts=True)
    return int(values[np.argmax(counts)])


def _split_gaps_by_step(gaps: Gaps, lo: int, hi: int, runs: list[tuple[int, int]]) -> I64:
    """Idle ns per cause inside [lo, hi), splitting gaps that straddle the bounds pro rata
    (``runs``: :func:`_device_runs` of the gaps)."""
    if len(gaps) == 0:
        return np.zeros(gaps.slices.shape[1], dtype=np.int64)
    # Gaps are sorted by start within each device; per device, the ones overlapping [lo, hi)
    # are a contiguous run found by binary search (disjoint intervals: ends sorted too).
    cand = []
    for d_lo, d_hi in runs:
        a = d_lo + int(np.searchsorted(gaps.end_ns[d_lo:d_hi], lo, side="right"))
        b = d_lo + int(np.searchsorted(gaps.start_ns[d_lo:d_hi], hi, side="left"))
        if b > a:
            cand.append(np.arange(a, b))
    if not cand:
        return np.zeros(gaps.slices.shape[1], dtype=np.int64)
    idx = np.concatenate(cand)
    ov = np.maximum(np.minimum(gaps.end_ns[idx], hi) - np.maximum(gaps.start_ns[idx], lo), 0)
    sel = idx[ov > 0]
    ov = ov[ov > 0]
    if sel.size == 0:
        return np.zeros(gaps.slices.shape[1], dtype=np.int64)
    dur = gaps.end_ns[sel] - gaps.start_ns[sel]
    part = (gaps.slices[sel] * (ov / np.maximum(dur, 1))[:, None]).astype(np.int64)
    # Put rounding remainders on each gap's largest cause so the parts add up to the overlap.
    rem = ov - part.sum(axis=1)
    part[np.arange(part.shape[0]), np.argmax(gaps.slices[sel], axis=1)] += rem
    return np.asarray(part.sum(axis=0), dtype=np.int64)


def _device_runs(gaps: Gaps) -> list[tuple[int, int]]:
    """[start, end) row ranges of each device's gaps (find_gaps emits them device by device)."""
    if len(gaps) == 0:
        return []
    change = np.flatnonzero(gaps.device[1:] != gaps.device[:-1]) + 1
    bounds = [0, *change.tolist(), len(gaps)]
    return list(zip(bounds[:-1], bounds[1:]))


def measure_utilization(tl: Timeline, links: Links, window: Window, gaps: Gaps, cfg: WindowSettings) -> Utilization:
    lo, hi = window.start_ns, window.end_ns
    sets = _device_sets(tl, links, lo, hi)
    n_dev = len(sets)
    busy = sum(s.busy.total() for s in sets)
    kernel = sum((s.compute | s.comm).total() for s in sets)
    comm_total = sum(s.comm.total() for s in sets)
    steps = []
    comm_only = [s.comm - s.compute for s in sets]  # once, not per step
    runs = _device_runs(gaps)
    for st in window.steps:
        a, b = st.start_ns, st.end_ns
        comp = sum(s.compute.clip(a, b).total() for s in sets)
        comm = sum(c.clip(a, b).total() for c in comm_only)
        mc = sum(s.memcpy.clip(a, b).total() for s in sets)
        ms = sum(s.memset.clip(a, b).total() for s in sets)
        dev_busy = sum(s.busy.clip(a, b).total() for s in sets)
        idle = (b - a) * max(n_dev, 1) - dev_busy
        by_cause = _split_gaps_by_step(gaps, a, b, runs)
        steps.append(StepFigures(st.number, a, b, comp, comm, mc, ms, idle, tuple(int(x) for x in by_cause)))
    batch: int | None
    if cfg.batch_size is not None:
        batch, basis = cfg.batch_size, "option"
    else:
        derived = _derive_batch_size(tl, links, window)
        batch, basis = derived, ("trace: leading dimension of the first tensor copied to the device each step" if derived else "")
    return Utilization(
        window_ns=window.duration_ns,
        n_devices=n_dev,
        busy_ns=int(busy),
        kernel_busy_ns=int(kernel),
        compute_ns=int(sum(s.compute.total() for s in sets)),
        communication_ns=int(sum(c.total() for c in comm_only)),
        communication_total_ns=int(comm_total),
        memcpy_ns=int(sum(s.memcpy.total() for s in sets)),
        memset_ns=int(sum(s.memset.total() for s in sets)),
        idle_ns=int(window.duration_ns * max(n_dev, 1) - busy),
        steps=tuple(steps),
        batch_size=batch,
        batch_size_basis=basis,
    )
