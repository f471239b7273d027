"""Launch <-> device-work links by correlation id.

Kineto and Nsight both give every runtime launch (``cudaLaunchKernel``, ``cudaMemcpyAsync``...)
and the device work it queued the same correlation id. Flow arrows are often unpaired in real
traces, so whyidle joins on the id itself.

Correlation ids are unique per process; the join is done per (host process, id) when the device
lanes carry a process id that matches a host process, otherwise on the id alone.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.calls import queues_device_work
from whyidle.timeline.arrays import setdiff_sorted, unique_sorted
from whyidle.timeline.model import DEVICE_WORK_KINDS, Kind, Timeline

__all__ = ["Links", "link_launches", "uncorrelated_by_design"]

I64 = npt.NDArray[np.int64]


def uncorrelated_by_design(name: str) -> bool:
    """Device work that carries no correlation id in any capture: MTIA DMA requests (the Kineto
    reader names them ``Memcpy ... (MTIA DMA)``). Re-capturing cannot link them to a launch."""
    return name.endswith("(MTIA DMA)")


class Links(msgspec.Struct, frozen=True):
    device_rows: I64  # rows of device work (kernels, copies, memsets, collectives), by start time
    launch_of: I64  # for each of device_rows: the row of its launch call, -1 if none was found
    launched: I64  # runtime rows whose correlation matched device work
    unmatched_launch_rows: I64  # launch-like runtime calls with a correlation but no device work

    @property
    def n_device_without_launch(self) -> int:
        return int((self.launch_of < 0).sum())


def link_launches(tl: Timeline) -> Links:
    device_rows = np.flatnonzero(tl.mask(*DEVICE_WORK_KINDS))
    runtime_rows = np.flatnonzero((tl.kind == int(Kind.RUNTIME)) & (tl.corr >= 0))
    launch_of = np.full(device_rows.size, -1, dtype=np.int64)
    if runtime_rows.size and device_rows.size:
        rc = tl.corr[runtime_rows]
        order = np.argsort(rc, kind="stable")
        rc_sorted = rc[order]
        dc = tl.corr[device_rows]
        pos = np.searchsorted(rc_sorted, dc)
        pos_c = np.minimum(pos, rc_sorted.size - 1)
        hit = (dc >= 0) & (pos < rc_sorted.size) & (rc_sorted[pos_c] == dc)
        launch_of[hit] = runtime_rows[order[pos_c[hit]]]
    launched = unique_sorted(launch_of[launch_of >= 0])
    # Launch calls whose work never appeared: dropped device events (buffer overflow, a
    # capture that ended before the work ran).
    queues_work = tl.kind_name_mask(queues_device_work, Kind.RUNTIME)
    launch_rows = np.flatnonzero(queues_work & (tl.corr > 0))
    unmatched = setdiff_sorted(launch_rows, launched)
    return Links(device_rows=device_rows, launch_of=launch_of, launched=launched, unmatched_launch_rows=unmatched)
