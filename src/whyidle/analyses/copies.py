"""Exposed host-to-device copies: time a device only moved input data while no kernel ran.

A synchronous copy from pageable memory keeps the device's copy engine busy, so the device is not
*idle* in whyidle's sense (no stream busy); its compute is. On the H200 lab run of 2026-11-30 a
50 MB pageable copy ran at 7 GB/s for 7 ms of each 13 ms step with no kernel running: busy 82 %,
kernels only 31 %, and not one idle gap long enough to tell. This analysis measures that time::

    kernels   ███      ███████            ███
    H2D copy       ██████████    ████████
    exposed        ████          ████████            (copy time with no kernel on the device)

per device, inside the window, split by the copy's source memory (pageable vs pinned, from the
name Kineto and whyidle's nsys reader give a copy: ``Memcpy HtoD (Pageable -> Device)``).
"""

from __future__ import annotations

import msgspec
import numpy as np

from whyidle.analyses.hostops import memcpy_direction
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Kind, Timeline

__all__ = ["ExposedCopies", "exposed_h2d_copies"]


class ExposedCopies(msgspec.Struct, frozen=True):
    exposed_ns: int  # H2D copy time with no kernel running on that device, summed over devices
    pageable_ns: int  # the part of it spent in copies from pageable memory
    copy_ns: int  # all H2D copy time (union per device) in the window
    copies: int  # H2D copies that overlap the window
    nbytes: int  # their bytes, where the trace gives them (-1 rows left out)
    per_step_ns: tuple[int, ...]  # exposed time inside each step


def exposed_h2d_copies(tl: Timeline, lo: int, hi: int, steps: tuple[tuple[int, int], ...] = ()) -> ExposedCopies:
    """Exposed H2D copy time in ``[lo, hi)``; ``steps`` are (start, end) ranges to split it by."""
    if len(tl) == 0 or hi <= lo:
        return ExposedCopies(0, 0, 0, 0, 0, tuple(0 for _ in steps))
    h2d_name = np.fromiter((memcpy_direction(s) == "HtoD" for s in tl.strings), dtype=np.bool_, count=len(tl.strings))
    pageable_name = np.fromiter(("Pageable" in s for s in tl.strings), dtype=np.bool_, count=len(tl.strings))
    # Row numbers rather than masks over the whole timeline: 2 GB trace, 3M rows.
    inside = (tl.end_ns > lo) & (tl.start_ns < hi)
    h2d = np.flatnonzero(inside & (tl.kind == int(Kind.MEMCPY)))
    h2d = h2d[h2d_name[tl.name[h2d]]]
    kernels = np.flatnonzero(inside & tl.mask(Kind.KERNEL, Kind.COLLECTIVE))
    dev_h2d, dev_kernels = tl.device_of(h2d), tl.device_of(kernels)
    exposed: list[Intervals] = []  # per device: devices overlap in time, so they are summed, not united
    pageable_ns = copy_ns = 0
    for d in unique_sorted(dev_h2d):
        rows = h2d[dev_h2d == d]
        copies = tl.union(rows).clip(lo, hi)
        bare = copies - tl.union(kernels[dev_kernels == d])
        prow = rows[pageable_name[tl.name[rows]]]
        pageable_ns += (tl.union(prow).clip(lo, hi) & bare).total()
        copy_ns += copies.total()
        exposed.append(bare)
    nb = tl.nbytes[h2d]
    starts = np.array([a for a, _ in steps], dtype=np.int64)
    ends = np.array([b for _, b in steps], dtype=np.int64)
    per_step = sum((iv.overlap(starts, ends) for iv in exposed), np.zeros(len(steps), dtype=np.int64))
    return ExposedCopies(
        exposed_ns=sum(iv.total() for iv in exposed),
        pageable_ns=int(pageable_ns),
        copy_ns=int(copy_ns),
        copies=int(h2d.size),
        nbytes=int(nb[nb >= 0].sum()),
        per_step_ns=tuple(int(x) for x in per_step),
    )
