"""Time per name inside the window: device work (kernels, copies, memsets) and host ops.

For comparing two runs of the same job ("which kernels and ops changed"). Device work is summed
per kernel/copy name over all streams (so concurrent kernels each count: this is work, not
device-busy time). Host ops are CPU ops and user annotations, inclusive of what they call (a
parent and its children both count), excluding step markers. Every interval is clipped to the
window, so a figure is the time inside the analysed steps.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.timeline.model import Kind, Timeline

__all__ = ["NameTimes", "name_times"]

I64 = npt.NDArray[np.int64]


class NameTimes(msgspec.Struct, frozen=True):
    kernels_ns: dict[str, int]  # device work per name
    ops_ns: dict[str, int]  # host ops per name (inclusive)
    steps: int  # steps in the window (0: no step markers)
    window_ns: int


def _per_name(tl: Timeline, rows: I64, lo: int, hi: int) -> dict[str, int]:
    if rows.size == 0:
        return {}
    ov = np.minimum(tl.end_ns[rows], hi) - np.maximum(tl.start_ns[rows], lo)
    keep = ov > 0
    rows, ov = rows[keep], ov[keep]
    if rows.size == 0:
        return {}
    totals = np.bincount(tl.name[rows], weights=ov.astype(np.float64), minlength=len(tl.strings))
    ids = np.flatnonzero(totals > 0)
    return {tl.strings[int(i)]: int(totals[i]) for i in ids}


def name_times(tl: Timeline, links: Links, window: Window) -> NameTimes:
    lo, hi = window.start_ns, window.end_ns
    host = np.flatnonzero((tl.kind == int(Kind.CPU_OP)) | (tl.kind == int(Kind.ANNOTATION)))
    return NameTimes(
        kernels_ns=_per_name(tl, links.device_rows, lo, hi),
        ops_ns=_per_name(tl, host, lo, hi),
        steps=len(window.steps),
        window_ns=window.duration_ns,
    )
