"""The device's busy share over a request log's period, from a trace or counter log joined by time.

``whyidle serving LOG --trace T`` compares how long the server ran batches with how long the device
was busy. The two must cover the same period: a 76 ms trace from another hour says nothing about a
30 s log. So the trace is joined by time, the way counter logs are joined with traces
(:func:`whyidle.analyses.counters.join_counters`)::

    log     |------------------------------ 30.8 s -------------------------------|
    trace                  |--- its window ---|
    busy share  = device busy in (log & trace) / (its length x devices), said with its coverage

Both must be on the wall clock (UTC epoch times: Kineto, Nsight Systems, vLLM's metrics, ISO
times). When they are not, or do not overlap, the join is refused (an InputError naming the
trace, exit 2) unless the caller asserts the trace is of the same period (``--assume-same-period``),
and then the basis says so.
"""

from __future__ import annotations

from datetime import datetime, timezone

from whyidle.errors import InputError
from whyidle.findings.model import DiagnosisData
from whyidle.serving.requestlog import RequestLog
from whyidle.timeline.counters import on_epoch_clock
from whyidle.timeline.intervals import Intervals
from whyidle.units import format_ns

__all__ = ["log_window", "device_busy_over_log"]


def log_window(log: RequestLog) -> tuple[int, int]:
    """The log's period: first arrival to last finish (ns on the log's clock)."""
    if not log.requests:
        return (0, 0)
    return int(log.arrival_ns.min()), int(log.finish_ns.max())


def _when(lo: int, hi: int) -> str:
    if on_epoch_clock(lo):
        t = datetime.fromtimestamp(lo / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        return f"{format_ns(hi - lo)} from {t} UTC"
    return f"{format_ns(hi - lo)} on its own clock (not the wall clock)"


def _busy_share_in(d: DiagnosisData, lo: int, hi: int) -> float | None:
    """Device busy time in [lo, hi) over its capacity (all devices), from the lossless activity."""
    if d.activity is None:
        return None
    busy = 0
    for dev in d.activity:
        union = Intervals.empty()
        for s in dev.sets():
            union = union | s
        busy += union.clip(lo, hi).total()
    n = max(d.utilization.n_devices, 1)
    return busy / ((hi - lo) * n) if hi > lo else 0.0


def device_busy_over_log(d: DiagnosisData, log: RequestLog, trace: str, *, assume_same_period: bool = False) -> tuple[float, str]:
    """The device's busy share over the log's period and its basis, in words.

    Raises InputError (naming the trace) when the two cannot be joined by time and the caller did
    not assume they cover the same period.
    """
    lo, hi = d.window.start_ns, d.window.end_ns
    a, b = log_window(log)
    trace_when, log_when = _when(lo, hi), _when(a, b)
    if on_epoch_clock(lo) and on_epoch_clock(a):
        o_lo, o_hi = max(lo, a), min(hi, b)
        if o_hi > o_lo:
            share = _busy_share_in(d, o_lo, o_hi)
            over = f"the {format_ns(o_hi - o_lo)} where it overlaps the log on the wall clock ({(o_hi - o_lo) / max(b - a, 1):.0%} of the log's period)"
            if share is None:  # a counter log: its figure is over its own window
                share, over = d.utilization.busy_fraction, f"its own window ({trace_when}), which overlaps the log for {format_ns(o_hi - o_lo)}"
            return share, f"{trace}: device busy over {over}"
        problem = f"does not overlap the request log on the wall clock (trace: {trace_when}; log: {log_when})"
    else:
        problem = f"cannot be joined with the request log by time: both must be on the wall clock (trace: {trace_when}; log: {log_when})"
    if not assume_same_period:
        raise InputError(trace, f"{problem}; give a trace of the log's period, or --assume-same-period to take its busy share as the log's")
    return d.utilization.busy_fraction, (
        f"{trace}: device busy over its own {format_ns(hi - lo)} window, taken as the log's {format_ns(b - a)} period "
        "(--assume-same-period; not joined by time)"
    )
