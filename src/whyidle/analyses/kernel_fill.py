"""Kernels too small to fill the device: how much of the SMs the running kernels could occupy.

GPU-Util, and a trace's busy time, count the time at least one kernel runs, however few of the
device's SMs it uses. A kernel whose grid has fewer blocks than the device has SMs leaves the rest
idle for as long as it runs::

    SMs   132 |███████                |  grid 32 blocks on 132 SMs: fill 0.24,
              |<------- kernel ------>|  76% of the SM time idle while the device reads busy

Per kernel, ``fill = min(blocks per SM, 1)``: Kineto's ``blocks per SM`` (its grid over the
device's SM count), nsys's grid over ``TARGET_INFO_GPU.smCount``, or the grid over the SM count
when only those are given. Kernels on other streams that run at the same time add up: at each
instant the device's SM share in use is ``min(1, sum of the running kernels' fills)``, computed by
one sweep over kernel starts and ends per device. Over the time kernels ran (the window's
kernel-busy time):

* ``underfilled_ns``: time the running kernels together had fewer blocks than the device has SMs
  (SM share below 1);
* ``unused_ns``: the integral of ``1 - SM share``: the SM time left idle while the device read
  busy, in whole-device nanoseconds. It is what filling the SMs could save at most: comparable to
  idle time, and an upper bound, since a small grid may be all the parallelism the work has until
  the batch grows;
* ``low_occupancy_ns``: time of kernels whose grid does fill the SMs but whose ``est. achieved
  occupancy %`` (Kineto) is above 0 and below ``AttributionSettings.small_grid_low_occupancy_pct``: few warps
  per SM to hide memory latency. Kineto writes 0 when it cannot compute the estimate (library
  GEMMs launched with dynamic shared memory or clusters read 0 on H200), so 0 is unknown, not low.

Kernels without a launch configuration count as filling the device (nothing is claimed for them);
``known_ns`` says how much kernel time had one. Communication kernels (NCCL) are left out: they use
few blocks by design.

Pure: (Timeline, Links, Window, AttributionSettings) -> KernelFill.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import median, unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["KernelConfig", "KernelFill", "kernel_fill", "device_sm_counts"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class KernelConfig(msgspec.Struct, frozen=True):
    """One kernel name with one launch configuration, among those that cannot fill the device."""

    name: str
    count: int
    total_ns: int  # kernel time in the window
    unused_ns: int  # its share of the SM time left idle: duration x (1 - fill), summed
    grid: int  # blocks in the grid, -1 if unknown
    block: int  # threads per block, -1 if unknown
    blocks_per_sm: float | None
    occupancy_pct: float | None  # Kineto's est. achieved occupancy (None when unknown or 0)


class KernelFill(msgspec.Struct, frozen=True):
    kernel_busy_ns: int  # union of compute-kernel time over the window, summed over devices
    kernel_ns: int  # compute-kernel time in the window, summed over kernels
    known_ns: int  # kernel time with a known fill (a launch configuration and the SM count)
    underfilled_ns: int  # busy time with fewer blocks running than the device has SMs
    unused_ns: int  # SM time left idle while kernels ran, in whole-device nanoseconds
    low_occupancy_ns: int  # time of full-grid kernels with a low (non-zero) est. achieved occupancy
    sm_counts: tuple[tuple[int, int], ...]  # (device, SMs) for the devices with kernels
    sm_count_origin: str  # where the SM counts came from, in words
    top: tuple[KernelConfig, ...]  # largest unused SM time first

    @property
    def unused_share(self) -> float:
        return self.unused_ns / self.kernel_busy_ns if self.kernel_busy_ns else 0.0

    @property
    def underfilled_share(self) -> float:
        return self.underfilled_ns / self.kernel_busy_ns if self.kernel_busy_ns else 0.0

    @property
    def low_occupancy_share(self) -> float:
        return self.low_occupancy_ns / self.kernel_busy_ns if self.kernel_busy_ns else 0.0


def device_sm_counts(devices: list[dict[str, object]]) -> tuple[dict[int, int], str]:
    """SM count per device id (Kineto ``deviceProperties`` ``numSms``; nsys ``smCount``; rocprofv3
    ``cuCount``, compute units), and the origin."""
    out: dict[int, int] = {}
    origins: set[str] = set()
    for d in devices:
        for key, origin in (("numSms", "Kineto deviceProperties numSms"), ("smCount", "nsys TARGET_INFO_GPU smCount"), ("cuCount", "rocprofv3 agent cu_count")):
            v = d.get(key)
            dev = d.get("nsys_id", d.get("id"))
            if isinstance(v, int) and v > 0 and isinstance(dev, int):
                out[dev] = v
                origins.add(origin)
    return out, ", ".join(sorted(origins))


def _sweep(start: I64, end: I64, fill: F64) -> tuple[int, int, int]:
    """(busy, underfilled, unused) ns of one device's kernels: SM share = min(1, sum of running fills)."""
    order = np.argsort(np.concatenate([start, end]), kind="stable")
    seg = np.diff(np.concatenate([start, end])[order]).astype(np.float64)
    level = np.cumsum(np.concatenate([fill, -fill])[order])
    running = np.cumsum(np.where(order < start.size, 1, -1).astype(np.int32))  # kernels running after each edge
    share = np.clip(level[:-1], 0.0, 1.0)
    on = running[:-1] > 0
    # Sums of fills drift by ~1e-16; a share within 1e-9 of full is full.
    under = on & (share < 1.0 - 1e-9)
    return int(seg[on].sum()), int(seg[under].sum()), int(round(float((seg * (1.0 - share))[under].sum())))


def kernel_fill(tl: Timeline, links: Links, window: Window, cfg: AttributionSettings) -> KernelFill | None:
    """How much of the device the window's compute kernels could fill; None without kernels."""
    lo, hi = window.start_ns, window.end_ns
    rows = links.device_rows
    k = rows[tl.kind[rows] == int(Kind.KERNEL)]
    k = k[(tl.end_ns[k] > lo) & (tl.start_ns[k] < hi)]
    if k.size == 0:
        return None
    start = np.maximum(tl.start_ns[k], lo)
    end = np.minimum(tl.end_ns[k], hi)
    dur = (end - start).astype(np.int64)
    device = tl.device_of(k)
    grid = tl.grid[k]
    bps = tl.blocks_per_sm[k].astype(np.float64)
    sms, origin = device_sm_counts(tl.meta.devices)
    # Without the device's SM count, Kineto's grid over its blocks per SM gives it back.
    derivable = np.isfinite(bps) & (bps > 0) & (grid > 0)
    for dev in unique_sorted(device[derivable]).tolist():
        if dev not in sms:
            on = derivable & (device == dev)
            sms[dev] = int(round(median(grid[on] / bps[on])))
            origin = ", ".join(x for x in (origin, "the grid over Kineto's blocks per SM") if x)
    devices = unique_sorted(device)
    sm_of = np.array([sms.get(d, 0) for d in devices.tolist()], dtype=np.float64)[np.searchsorted(devices, device)]
    from_grid = ~np.isfinite(bps) & (grid > 0) & (sm_of > 0)
    bps = np.where(from_grid, grid / np.where(sm_of > 0, sm_of, 1.0), bps)
    known = np.isfinite(bps) & (bps > 0)
    fill = np.where(known, np.minimum(np.where(known, bps, 1.0), 1.0), 1.0)
    occ = tl.occupancy[k].astype(np.float64)
    low_occ = (fill >= 1.0) & np.isfinite(occ) & (occ > 0) & (occ < cfg.small_grid_low_occupancy_pct)
    busy = under = unused = 0
    for dev in unique_sorted(device).tolist():
        on = device == dev
        b, u, n = _sweep(start[on], end[on], fill[on])
        busy, under, unused = busy + b, under + u, unused + n
    return KernelFill(
        kernel_busy_ns=busy,
        kernel_ns=int(dur.sum()),
        known_ns=int(dur[known].sum()),
        underfilled_ns=under,
        unused_ns=unused,
        low_occupancy_ns=int(dur[low_occ].sum()),
        sm_counts=tuple(sorted((d, sms[d]) for d in unique_sorted(device).tolist() if d in sms)),
        sm_count_origin=origin,
        top=_top(tl, k, dur, fill, bps, occ, low_occ),
    )


def _top(tl: Timeline, k: I64, dur: I64, fill: F64, bps: F64, occ: F64, low_occ: npt.NDArray[np.bool_], n: int = 5) -> tuple[KernelConfig, ...]:
    """The kernels (name, grid, block) that cannot fill the device, largest unused SM time first."""
    sel = np.flatnonzero((fill < 1.0) | low_occ)
    if sel.size == 0:
        return ()
    # Group by (name, grid, block) with one stable sort: each group's kernels stay in trace order,
    # so its sums are the same as over the kernels picked one by one.
    name, grid, block = tl.name[k[sel]], tl.grid[k[sel]], tl.block[k[sel]]
    order = np.lexsort((block, grid, name))
    name, grid, block = name[order], grid[order], block[order]
    edge = np.ones(sel.size, dtype=np.bool_)
    edge[1:] = (name[1:] != name[:-1]) | (grid[1:] != grid[:-1]) | (block[1:] != block[:-1])
    bounds = np.append(np.flatnonzero(edge), sel.size)
    d_all, o_all, b_all = dur[sel][order], occ[sel][order], bps[sel][order]
    lost_all = d_all * (1.0 - fill[sel][order])
    out = []
    firsts = []  # each group's first kernel in trace order: the order of ties below
    for a, z in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        d, o, b = d_all[a:z], o_all[a:z], b_all[a:z]
        o_ok = np.isfinite(o) & (o > 0)
        firsts.append(int(order[a]))
        out.append(
            KernelConfig(
                name=tl.strings[int(name[a])],
                count=z - a,
                total_ns=int(d.sum()),
                unused_ns=int(round(float(lost_all[a:z].sum()))),
                grid=int(grid[a]),
                block=int(block[a]),
                blocks_per_sm=float(np.average(b, weights=np.maximum(d, 1))) if np.isfinite(b).all() else None,
                occupancy_pct=float(np.average(o[o_ok], weights=np.maximum(d[o_ok], 1))) if o_ok.any() else None,
            )
        )
    out = [c for _, c in sorted(zip(firsts, out, strict=True), key=lambda fc: fc[0])]
    out.sort(key=lambda c: (-c.unused_ns, -c.total_ns))
    return tuple(out[:n])
