"""The step tracker's measurements as a Timeline: the tracker as a source like any trace.

One host lane (the training loop's thread) and, with device timing, one device lane::

    host    [ProfilerStep#N ................................................)   Kind.STEP
            [enumerate(DataLoader)#whyidle.track)                               Kind.CPU_OP, shape0 = samples
                                                 [aten::to)                     Kind.CPU_OP (tracker.copy() blocks)
    device                                       [device work (whyidle.track) .....)   Kind.KERNEL

Times are the tracker's host clock. The tracker knows each step's data wait, copy time and device
time, not where inside the step the copy and the device work lay: the copy is drawn right after
the wait (where ``with tracker.copy():`` sits in a loop), the device work from the moment the batch
was delivered (the tracker's first device mark) for the device time it measured. The device row
carries no launch (the tracker records none), and steps whose device time was not read have none.

The shared pipeline reads it (``whyidle.diagnose(tracker.timeline())``) but cannot attribute the
idle time as the tracker's own report does: with no launch records, the gap attribution cannot
tell a data wait from any other host time, so :meth:`StepTracker.report` keeps its step-level
attribution (capture/tracker_report.py).
"""

from __future__ import annotations

from whyidle import __version__
from whyidle.capture.tracker_records import SOURCE_FORMAT, TrackerStats
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["tracker_timeline", "DATA_WAIT", "COPY", "DEVICE_WORK"]

DATA_WAIT = "enumerate(DataLoader)#whyidle.track"  # a DataLoader name to analyses/hostops.py
COPY = "aten::to"
DEVICE_WORK = "device work (whyidle.track)"


def tracker_timeline(st: TrackerStats) -> Timeline:
    """The tracked steps (all of them, ``skip_first`` included) as a Timeline."""
    meta = TimelineMeta(
        source_format=SOURCE_FORMAT,
        source_version=__version__,
        path="live run (whyidle.track)",
        devices=[{"name": st.device}],
        quality=list(st.notes),
    )
    b = TimelineBuilder(meta)
    host = b.lane_id(LaneKind.CPU_THREAD, -1, "0", "0", st.loop_line or "training loop")
    device = b.lane_id(LaneKind.GPU_STREAM, 0, "0", "0") if st.device_timing else -1
    for s in st.steps:
        b.add(s.start_ns, s.end_ns, host, Kind.STEP, f"ProfilerStep#{s.number}")
        t = s.start_ns + s.data_wait_ns
        b.add(s.start_ns, t, host, Kind.CPU_OP, DATA_WAIT, shape0=-1 if s.samples is None else s.samples)
        b.add(t, t + s.copy_ns, host, Kind.CPU_OP, COPY)
        if device >= 0 and s.device_ns is not None:
            b.add(t, t + s.device_ns, device, Kind.KERNEL, DEVICE_WORK)
    return b.build()
