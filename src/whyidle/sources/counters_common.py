"""What every counter-log reader shares: sample columns, skipped rows, wall-clock zones, spacing.

* :class:`SeriesBuilder` collects samples per (GPU, metric) and freezes them into
  :class:`~whyidle.timeline.counters.CounterSeries` sorted by time.
* :class:`Rejects` counts sample rows that could not be read (a log cut while being written, a
  timestamp cut short): they are skipped with one quality note, never the whole log rejected.
* :func:`zone` and :func:`epoch_ns`: nvidia-smi writes local wall-clock times without a zone;
  they are read in a given UTC offset or this machine's zone, and the report says which.
* :func:`log_interval`: the typical spacing of a log's samples (median over GPUs of each GPU's
  median spacing).
* :func:`num`: a cell as a float; the tools' spellings of a missing value (``-``, ``N/A``,
  ``[Not Supported]``...) are NaN, and a unit after the number (``61.2 W``) is dropped.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.timeline.arrays import median, unique_sorted
from whyidle.timeline.counters import CounterSeries

__all__ = ["SeriesBuilder", "Rejects", "zone", "epoch_ns", "log_interval", "num", "split_cells", "DEFAULT_INTERVAL_NS"]

# When a log does not say how often it sampled: dcgmi dmon -d and nvidia-smi dmon -d both default
# to 1 s (their man pages).
DEFAULT_INTERVAL_NS = 1_000_000_000
_MISSING = {"", "-", "N/A", "[N/A]", "NA", "n/a", "[Not Supported]", "Not Supported", "[Unknown Error]", "ERR!", "[ERR!]"}
_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def num(text: str) -> float:
    t = text.strip()
    if t in _MISSING:
        return float("nan")
    m = _NUM.match(t)
    return float(m.group(0)) if m else float("nan")


def split_cells(line: str) -> list[str]:
    """A row's cells: comma-separated (``--format csv``) or whitespace-separated."""
    return [c.strip() for c in line.split(",")] if "," in line else line.split()


class SeriesBuilder:
    """Samples per (gpu, metric) as lists, frozen into CounterSeries."""

    def __init__(self) -> None:
        self.cols: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def add(self, gpu: str, metric: str, t: int, v: float) -> None:
        col = self.cols.get((gpu, metric))
        if col is None:
            col = ([], [])
            self.cols[(gpu, metric)] = col
        col[0].append(t)
        col[1].append(v)

    def series(self) -> tuple[CounterSeries, ...]:
        out = []
        for (gpu, metric), (ts, vs) in self.cols.items():
            t = np.asarray(ts, dtype=np.int64)
            v = np.asarray(vs, dtype=np.float64)
            order = np.argsort(t, kind="stable")
            out.append(CounterSeries(gpu, metric, t[order], v[order]))
        return tuple(out)


class Rejects:
    """Sample rows that could not be read: skipped and counted, never the whole log rejected.

    Logs pasted into notes or cut while being written carry truncated timestamps and partial
    lines; one bad row must not cost the other samples. The report gets one quality note with the
    count and the first example; a log whose every row is unreadable is an error.
    """

    def __init__(self) -> None:
        self.rows = 0  # sample rows seen (read or skipped)
        self.bad = 0
        self.first = ""

    def seen(self) -> None:
        self.rows += 1

    def reject(self, line: int, why: str) -> None:
        self.bad += 1
        if not self.first:
            self.first = f"line {line} {why}"

    def note(self) -> tuple[str, ...]:
        if not self.bad:
            return ()
        return (f"{self.bad} of {self.rows} sample rows could not be read and were skipped (first: {self.first})",)

    def check(self, path: str, fmt: str) -> None:
        if self.rows and self.bad == self.rows:
            raise TraceFormatError(path, f"is a {fmt} log none of whose {self.rows} sample rows could be read (first: {self.first})")


def zone(utc_offset_min: int | None) -> tuple[timezone | None, str]:
    if utc_offset_min is None:
        local = datetime.now().astimezone().tzinfo
        off = datetime.now().astimezone().utcoffset() or timedelta(0)
        return (local if isinstance(local, timezone) else None), f"this machine's zone (UTC{_fmt_offset(off)})"
    off = timedelta(minutes=utc_offset_min)
    return timezone(off), f"UTC{_fmt_offset(off)} (as given)"


def _fmt_offset(off: timedelta) -> str:
    minutes = int(off.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def epoch_ns(dt: datetime, tz: timezone | None) -> int:
    """Nanoseconds since the epoch; ValueError for a date that int64 nanoseconds cannot hold
    (before 1970 or after 2262: a damaged row, not a sample)."""
    try:
        aware = dt.replace(tzinfo=tz) if tz is not None else dt.astimezone()
        ns = int(aware.timestamp()) * 1_000_000_000 + aware.microsecond * 1000
    except (OverflowError, OSError):
        raise ValueError(f"date {dt} out of range") from None
    if not 0 <= ns < 2**63:
        raise ValueError(f"date {dt} out of range")
    return ns


def _median_interval(times: list[int]) -> int:
    if len(times) < 2:
        return 0
    d = np.diff(unique_sorted(np.asarray(times, dtype=np.int64)))
    return int(median(d)) if d.size else 0


def log_interval(times: dict[str, list[int]]) -> int:
    """The typical sample spacing over GPUs (GPUs with a single sample say nothing)."""
    per_gpu = [d for d in (_median_interval(v) for v in times.values()) if d > 0]
    return int(median(per_gpu)) if per_gpu else 0
