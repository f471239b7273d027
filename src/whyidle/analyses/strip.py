"""A downsampled activity strip per device: what the device did in each of N equal time bins.

For drawing a timeline of any length in a fixed budget. The window is cut into ``bins`` equal
bins; in each, the device's time is split without double counting (as in
:mod:`whyidle.analyses.utilization`) into compute, exposed communication, copies (memcpy and
memset not hidden under kernels) and idle, and the idle part is further split by cause::

    window  |----bin 0----|----bin 1----|----bin 2----| ...
    device   ███ ██  ..... ..............██████ ███
             compute  idle: input_pipeline    compute

A gap that spans several bins contributes to each in proportion to its overlap (its causes are
spread evenly over the gap, the same pro-rata rule the per-step figures use). Every bin's parts
add up to the bin's length, up to rounding.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.gaps import Gaps
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["BUSY_CLASSES", "DeviceActivity", "DeviceStrip", "activity_strip", "bin_activity", "device_activity"]

I64 = npt.NDArray[np.int64]

BUSY_CLASSES = ("compute", "communication", "copies")


class DeviceStrip(msgspec.Struct, frozen=True):
    device: int
    edges_ns: I64  # bins + 1 bin edges, window start .. window end
    busy_ns: I64  # shape (bins, len(BUSY_CLASSES))
    idle_ns: I64  # shape (bins, len(CAUSES)), aligned with analyses.causes.CAUSES

    @property
    def bins(self) -> int:
        return int(self.edges_ns.size - 1)


def _spread(gs: I64, ge: I64, amount: I64, points: I64) -> I64:
    """For disjoint sorted gaps, sum of ``amount`` spread evenly over each gap, lying before each point."""
    if gs.size == 0:
        return np.zeros(points.size, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(amount)))
    k = np.searchsorted(ge, points, side="right")  # gaps wholly before the point
    full = cum[k]
    kc = np.minimum(k, gs.size - 1)
    dur = np.maximum(ge[kc] - gs[kc], 1)
    inside = (k < gs.size) & (gs[kc] < points)
    part = np.where(inside, (amount[kc] * (points - gs[kc]).astype(np.float64) / dur).astype(np.int64), 0)
    return np.asarray(full + part, dtype=np.int64)


class DeviceActivity(msgspec.Struct, frozen=True):
    """What one device did over the window, lossless: its busy time as three disjoint sets.

    ``compute`` is the union of kernels; ``communication`` the collectives not under a kernel;
    ``copies`` the memcpy and memset time under neither (the split of
    :mod:`whyidle.analyses.utilization`), each clipped to the window. The idle time is the
    window less their union, and the gaps say why.
    """

    device: int
    compute: Intervals
    communication: Intervals
    copies: Intervals

    def sets(self) -> tuple[Intervals, Intervals, Intervals]:
        """The busy sets in the order of :data:`BUSY_CLASSES`."""
        return (self.compute, self.communication, self.copies)


def device_activity(tl: Timeline, links: Links, window: Window) -> tuple[DeviceActivity, ...]:
    """One :class:`DeviceActivity` per device with work in the timeline (empty when the window is)."""
    lo, hi = window.start_ns, window.end_ns
    if hi <= lo or links.device_rows.size == 0:
        return ()
    rows = links.device_rows
    devices = tl.device_of(rows)
    out = []
    for dev in unique_sorted(devices):
        r = rows[devices == dev]
        k = tl.kind[r]
        compute = tl.union(r[k == int(Kind.KERNEL)]).clip(lo, hi)
        comm = tl.union(r[k == int(Kind.COLLECTIVE)]).clip(lo, hi)
        copies = tl.union(r[(k == int(Kind.MEMCPY)) | (k == int(Kind.MEMSET))]).clip(lo, hi)
        out.append(DeviceActivity(int(dev), compute, comm - compute, copies - (compute | comm)))
    return tuple(out)


def bin_activity(
    activity: tuple[DeviceActivity, ...], gap_start_ns: I64, gap_end_ns: I64, gap_device: I64, gap_causes_ns: I64, lo: int, hi: int, bins: int
) -> tuple[DeviceStrip, ...]:
    """The activity and the gaps (their per-cause ns, rows aligned with CAUSES' columns) in
    ``bins`` equal bins of the window [lo, hi): one :class:`DeviceStrip` per device."""
    if hi <= lo or not activity or bins <= 0:
        return ()
    n = int(min(bins, hi - lo))
    edges = lo + (np.arange(n + 1, dtype=np.int64) * (hi - lo)) // n
    out = []
    for act in activity:
        busy = np.stack([np.diff(s.covered_before(edges)) for s in act.sets()], axis=1).astype(np.int64)
        sel = gap_device == act.device
        gs, ge, sl = gap_start_ns[sel], gap_end_ns[sel], gap_causes_ns[sel]
        order = np.argsort(gs, kind="stable")
        gs, ge, sl = gs[order], ge[order], sl[order]
        idle = np.zeros((n, len(C.CAUSES)), dtype=np.int64)
        for c in range(len(C.CAUSES)):
            if sl.size and sl[:, c].any():
                idle[:, c] = np.diff(_spread(gs, ge, sl[:, c], edges))
        out.append(DeviceStrip(act.device, edges, busy, idle))
    return tuple(out)


def activity_strip(tl: Timeline, links: Links, window: Window, gaps: Gaps, bins: int) -> tuple[DeviceStrip, ...]:
    """One :class:`DeviceStrip` per device with work in the timeline (empty when the window is)."""
    act = device_activity(tl, links, window)
    return bin_activity(act, gaps.start_ns, gaps.end_ns, gaps.device, gaps.slices, window.start_ns, window.end_ns, bins)
