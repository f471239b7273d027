"""GPU counter logs -> CounterLog, and the Timeline that carries it as its counters track.

The counter-log source. The format is sniffed from the first lines; each format has its reader,
the only code that knows it:

    counters_dmon.py    ``nvidia-smi dmon`` (any ``-s`` selection, ``-o D``/``-o T``, csv)
    counters_query.py   ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``
    counters_dcgmi.py   ``dcgmi dmon -e <field ids>``
    (here)              the whyidle counter file (format in :mod:`whyidle.timeline.counters`)
    counters_common.py  what they share: sample columns, skipped rows, zones, spacing

Columns are always found by their header names, never by position, since every tool lets the
user pick and order them.

Time. dcgmi dmon rows have no timestamps: their spacing is inferred from the energy counter and
power when both are logged, else the tool's default interval (or ``interval_ms``), and the log is
on a relative clock. nvidia-smi writes local wall-clock times without a zone: they are read in
``utc_offset_min`` (default: this machine's zone), and the report says so.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from whyidle.errors import TraceFormatError
from whyidle.sources._io import read_bytes
from whyidle.sources.counters_common import Rejects, SeriesBuilder, log_interval, num
from whyidle.sources.counters_dcgmi import DCGM_FIELDS, DCGM_HEADER, parse_dcgmi
from whyidle.sources.counters_dmon import DMON_COLUMNS, is_dmon_header, parse_dmon
from whyidle.sources.counters_query import QUERY_GPU_FIELDS, QUERY_TS, parse_query
from whyidle.timeline.counters import COUNTER_FILE_MAGIC, METRICS, CounterLog, on_epoch_clock
from whyidle.timeline.model import Timeline, TimelineMeta

if TYPE_CHECKING:
    from whyidle.config import ReadSettings

__all__ = [
    "load_counters",
    "parse_counters",
    "counter_timeline",
    "looks_like_counter_log",
    "DCGM_FIELDS",
    "DMON_COLUMNS",
    "QUERY_GPU_FIELDS",
]


def looks_like_counter_log(head: bytes) -> bool:
    """Whether the first bytes of a file look like one of the counter-log formats."""
    try:
        text = head.decode("utf-8", errors="replace")
    except Exception:  # pragma: no cover - decode with errors="replace" does not raise
        return False
    lines = [ln for ln in text.splitlines() if ln.strip()][:5]
    if not lines:
        return False
    first = lines[0].strip()
    if first.startswith(COUNTER_FILE_MAGIC) or DCGM_HEADER.match(first) or is_dmon_header(first):
        return True
    fields = [f.strip().split(" [")[0].lower() for f in first.split(",")]
    if len(fields) >= 2 and any(f in QUERY_GPU_FIELDS or f == "timestamp" for f in fields):
        return True
    return len(fields) >= 3 and bool(QUERY_TS.match(fields[0].replace("-", "/")))

# -- whyidle counter file -----------------------------------------------------------------------


def _parse_whyidle(path: str, text: str) -> CounterLog:
    gpus: dict[str, dict[str, str]] = {}
    body: list[tuple[int, str]] = []  # (line number, text)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            m = re.match(r"^#\s*gpu\s+(\S+?):\s*(.*)$", line)
            if m:
                info = {}
                for part in m.group(2).split(";"):
                    if "=" in part:
                        k, v = part.split("=", 1)
                        info[k.strip()] = v.strip()
                gpus[m.group(1)] = info
            continue
        if line.strip():
            body.append((lineno, line))
    if not body:
        raise TraceFormatError(path, "is a whyidle counter file with no header line; expected 'time_unix_ns,gpu,<metrics>'")
    header = [h.strip() for h in next(csv.reader([body[0][1]]))]
    if header[:2] != ["time_unix_ns", "gpu"]:
        raise TraceFormatError(path, f"is a whyidle counter file whose header starts with {header[:2]}; expected time_unix_ns,gpu")
    quality: list[str] = []
    unknown = [h for h in header[2:] if h not in METRICS]
    if unknown:
        quality.append(f"columns whyidle does not know were ignored: {', '.join(unknown)}")
    b = SeriesBuilder()
    times: dict[str, list[int]] = {}
    bad = Rejects()
    rows = list(zip((n for n, _ in body[1:]), csv.reader(line for _, line in body[1:])))
    stamps = [int(r[0]) if r and r[0].strip().isdigit() else -1 for _, r in rows]
    # Times are UTC epoch nanoseconds; when most rows are, a row that is not had its time cut short
    # (it would read as a date in 1970). Tests with a fake clock write small times throughout.
    epoch = sum(map(on_epoch_clock, stamps)) * 2 > len(stamps)
    for (lineno, r), t in zip(rows, stamps):
        bad.seen()
        if len(r) != len(header):
            bad.reject(lineno, f"has {len(r)} cells; expected {len(header)} as in the header")
            continue
        if t < 0 or (epoch and not on_epoch_clock(t)):
            bad.reject(lineno, f"has time {r[0]!r}; expected integer UTC epoch nanoseconds" + (" (19 digits)" if epoch else ""))
            continue
        if t >= 2**62:  # past 2116: int64 nanoseconds would overflow in the analysis
            bad.reject(lineno, f"has time {r[0][:40]!r}, after the year 2116")
            continue
        gpu = r[1].strip()
        times.setdefault(gpu, []).append(t)
        for j, h in enumerate(header[2:], start=2):
            if h in METRICS:
                b.add(gpu, h, t, num(r[j]))
    bad.check(path, "whyidle counters")
    interval = log_interval(times)
    return CounterLog("whyidle counters", path, "epoch", interval, b.series(), gpus, tuple(quality) + bad.note())


# -- entry points ----------------------------------------------------------------------------------


def parse_counters(
    raw: bytes,
    path: str = "<memory>",
    *,
    utc_offset_min: int | None = None,
    interval_ms: float | None = None,
    fields: Sequence[str] | None = None,
) -> CounterLog:
    """Parse a counter log's bytes (format sniffed from its first lines)."""
    text = raw.decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise TraceFormatError(path, "is empty; expected a GPU counter log")
    first = lines[0].strip()
    if first.startswith(COUNTER_FILE_MAGIC):
        log = _parse_whyidle(path, text)
    elif DCGM_HEADER.match(first):
        log = parse_dcgmi(path, text, interval_ms)
    elif is_dmon_header(first):
        log = parse_dmon(path, text, utc_offset_min, interval_ms)
    elif fields is not None or looks_like_counter_log(raw[:8192]):
        log = parse_query(path, text, utc_offset_min, fields)
    else:
        raise TraceFormatError(
            path, "is not a GPU counter log; expected nvidia-smi dmon, nvidia-smi --query-gpu CSV, dcgmi dmon or a whyidle counter file"
        )
    if not any(len(s) for s in log.series):
        raise TraceFormatError(path, f"is a {log.source_format} log with no samples")
    return log


def load_counters(
    path: str | Path,
    *,
    utc_offset_min: int | None = None,
    interval_ms: float | None = None,
    fields: Sequence[str] | None = None,
    settings: ReadSettings | None = None,
) -> CounterLog:
    """A counter log file, parsed (``settings``: a Config's ``read``, whose gzip limits apply)."""
    p = Path(path)
    return parse_counters(read_bytes(p, expected="a GPU counter log", settings=settings), str(p), utc_offset_min=utc_offset_min, interval_ms=interval_ms, fields=fields)


def counter_timeline(path: Path, raw: bytes, *, utc_offset_min: int | None = None, interval_ms: float | None = None) -> Timeline:
    """A Timeline whose counters track (``meta.counters``) is the parsed log, and no events.

    ``utc_offset_min`` and ``interval_ms`` are :func:`parse_counters`' (the
    ``counters_utc_offset_min`` / ``counters_interval_ms`` of a Config).
    """
    from whyidle.timeline.build import TimelineBuilder

    log = parse_counters(raw, str(path), utc_offset_min=utc_offset_min, interval_ms=interval_ms)
    meta = TimelineMeta(source_format=log.source_format, path=str(path), quality=list(log.quality))
    meta.devices = [{"name": info.get("name", ""), "gpu": gid, **info} for gid, info in log.gpus.items()]
    meta.counters = log
    return TimelineBuilder(meta).build()
