"""The detectors of the causes of device idle: each registered with the cause key it fills.

``analyses/gaps.py`` finds the gaps and, for each, the launch of the work that ended it; the
detectors here say which cause holds each part of a gap. There are two kinds:

* :class:`HostDetector` - the gap waited for the host (the launch came after the device went
  idle): ``covers(view)`` returns the launching thread's time the cause explains, as intervals.
  The host part of each gap ``[a, b)`` goes to the detectors in order, each taking what it
  covers that no earlier one did (so the order is the priority); what none covers is the
  interpreter between ops (short) or untraced work (long). ``serialised``: when a sync drained
  the gap (the thread was inside it as the device went idle), this cause's share goes to the
  sync, since the sync kept that host work from overlapping the device.
* :class:`DeviceDetector` - the launch had returned (``queued``) or was still running
  (``in_flight``) when the device went idle: ``claims(view)`` is a mask over those gaps; the
  first detector of the phase that claims a gap takes it whole. The last of each phase claims
  every gap (the catch-all).

Adding a cause is its catalogue entry (``whyidle.catalogue``), its detector registered here with
:func:`register` (``before=`` a cause key places it ahead of that cause's detector), and its doc
section (``whyidle.pages``). ``tests/test_fake_cause.py`` does exactly that and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.hostops import HostSets
from whyidle.config import AttributionSettings
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Timeline

__all__ = ["Phase", "HostView", "DeviceView", "HostDetector", "DeviceDetector", "Detector", "register", "unregister", "registered", "host_detectors", "device_detectors"]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
Phase = Literal["queued", "in_flight"]


class HostView(NamedTuple):
    """One launching thread in its gaps that waited for the host: what a host detector reads."""

    tl: Timeline
    lane: int
    sets: HostSets  # the thread's activity sets (analyses/hostops.py, hostwork.py)
    a: I64  # each gap's host part [a, b): from the device going idle to the launch
    b: I64
    serving: bool  # the workload serves requests (analyses/workload.py)
    cfg: AttributionSettings


class DeviceView(NamedTuple):
    """Per gap, what the device-side detectors read (every array has one value per gap; the
    detectors of a phase see only that phase's gaps)."""

    tl: Timeline
    next_row: I64  # the work that ended the gap (-1: none)
    dur: I64
    pre_capture: B  # its work was launched before the capture began
    h2d_next: B  # it is a host-to-device copy
    dep_wait: B  # the thread issued a stream-wait call before launching it
    coll_next: B  # it is a collective
    blocking: B  # its launch call blocks the thread (a synchronous copy)
    cold: B  # its launch call is slow (a first-use cost)
    cfg: AttributionSettings


class HostDetector(NamedTuple):
    key: str  # "group/cause", in the catalogue
    covers: Callable[[HostView], Intervals]
    serialised: bool = False


class DeviceDetector(NamedTuple):
    key: str
    phase: Phase
    claims: Callable[[DeviceView], B]


Detector = HostDetector | DeviceDetector
D = TypeVar("D", HostDetector, DeviceDetector)


def _repeated_jit(v: HostView) -> Intervals:
    """The thread's JIT compilation and module loading when it recurs through the window: in
    ``AttributionSettings.jit_min_gaps`` of its gaps or more (the job compiles kernels on first use as it
    runs); in one gap it is a start-up cost (cold start)."""
    hs = v.sets
    seen = int((hs.jit.overlap(v.a, v.b) > 0).sum()) if len(hs.jit) else 0
    return hs.jit if seen >= v.cfg.jit_min_gaps else Intervals.empty()


def _waiting(serving: bool, sets: Callable[[HostSets], Intervals]) -> Callable[[HostView], Intervals]:
    """A blocked thread: waiting for requests in a serving workload, else work the trace does not show."""
    return lambda v: sets(v.sets) if v.serving == serving else Intervals.empty()


def _all(v: DeviceView) -> B:
    return np.ones(v.dur.size, dtype=np.bool_)


# In priority order (see analyses/gaps.py's docstring).
_HOST: list[HostDetector] = [
    HostDetector("underfilled/jit_compile", _repeated_jit),
    HostDetector("unattributed/cold_start", lambda v: v.sets.cold | v.sets.context.cold),
    HostDetector("starvation/input_pipeline", lambda v: v.sets.dataloader),
    HostDetector("starvation/h2d_copy", lambda v: v.sets.h2d),
    HostDetector("synchronization/host_sync", lambda v: v.sets.sync, serialised=True),
    HostDetector("synchronization/dependency_wait", lambda v: v.sets.context.ranks),
    HostDetector("underfilled/host_overhead", lambda v: v.sets.ops, serialised=True),
    HostDetector("starvation/host_preprocessing", lambda v: v.sets.context.data),
    HostDetector("underfilled/host_overhead", lambda v: v.sets.context.dispatch, serialised=True),
    HostDetector("insufficient_demand/idle_host", _waiting(True, lambda s: s.context.wait)),
    HostDetector("unattributed/untraced_host", _waiting(False, lambda s: s.context.wait)),
    # scheduled out with nothing else traced: blocked (or preempted), not running host code
    HostDetector("insufficient_demand/idle_host", _waiting(True, lambda s: s.context.off_cpu)),
    HostDetector("unattributed/untraced_host", _waiting(False, lambda s: s.context.off_cpu)),
]
_DEVICE: list[DeviceDetector] = [
    # queued: the device's own start-up between kernels, work launched before the capture,
    # staging a pageable copy, a dependency the trace shows, else a wait the trace cannot name
    DeviceDetector("underfilled/kernel_boundaries", "queued", lambda v: v.dur <= v.cfg.kernel_boundary_max_ns),
    DeviceDetector("unattributed/capture_boundary", "queued", lambda v: v.pre_capture),
    DeviceDetector("starvation/h2d_copy", "queued", lambda v: v.h2d_next),
    DeviceDetector("synchronization/dependency_wait", "queued", lambda v: v.dep_wait | v.coll_next),
    DeviceDetector("unattributed/queued_work_waiting", "queued", _all),
    # in flight: staging a pageable copy (the copy call blocks while it stages), a synchronous
    # call blocking the thread, a cold start when the call is slow, else launch latency
    DeviceDetector("starvation/h2d_copy", "in_flight", lambda v: v.h2d_next),
    DeviceDetector("synchronization/host_sync", "in_flight", lambda v: v.blocking),
    DeviceDetector("unattributed/cold_start", "in_flight", lambda v: v.cold),
    DeviceDetector("underfilled/launch_latency", "in_flight", _all),
]


def host_detectors() -> tuple[HostDetector, ...]:
    return tuple(_HOST)


def device_detectors(phase: Phase) -> tuple[DeviceDetector, ...]:
    return tuple(d for d in _DEVICE if d.phase == phase)


def register(d: Detector, *, before: str | None = None) -> None:
    """Add a detector for a cause already in the catalogue, ahead of the first detector of cause
    ``before`` (of the same phase, for a device detector); without ``before``, a host detector
    goes last and a device detector just before its phase's catch-all."""
    C.cause(d.key)  # a KeyError naming the known causes
    if isinstance(d, HostDetector):
        _insert(_HOST, d, [x.key for x in _HOST], before, len(_HOST))
    else:
        same = [i for i, x in enumerate(_DEVICE) if x.phase == d.phase]
        keys = [x.key if x.phase == d.phase else "" for x in _DEVICE]
        _insert(_DEVICE, d, keys, before, same[-1])


def _insert(table: list[D], d: D, keys: list[str], before: str | None, default: int) -> None:
    if before is None:
        table.insert(default, d)
        return
    if before not in keys:
        raise KeyError(f"no detector of cause {before!r} to go before; detectors: {', '.join(sorted(set(k for k in keys if k)))}")
    table.insert(keys.index(before), d)


def unregister(d: Detector) -> None:
    if isinstance(d, HostDetector):
        _HOST.remove(d)
    else:
        _DEVICE.remove(d)


@contextmanager
def registered(d: Detector, *, before: str | None = None) -> Iterator[Detector]:
    """The detectors with ``d`` added for the duration of the block."""
    register(d, before=before)
    try:
        yield d
    finally:
        unregister(d)
