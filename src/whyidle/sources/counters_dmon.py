"""``nvidia-smi dmon`` logs -> CounterLog.

Any ``-s`` selection, ``-o D``/``-o T``, ``--format csv``::

    #Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
    #YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
     20250301   12:00:01      0     61     34      -     97     40      0      0      0      0   1593   1410

Columns are found by their header names, never by position. ``-`` is a missing value; newer
drivers add columns (``jpg``, ``ofa``); the header repeats (every later copy is skipped), and the
units line (``#YYYYMMDD ... Idx``) is not a header.

Time (:class:`_Clock`). With ``-o DT`` a row's date and time are local wall-clock time, read in
the given zone: the log is on the epoch clock. With ``-o T`` (time only) times are relative to the
first sample; a time more than an hour before the previous one is the next day. Without ``-o``
rows have no time at all: they are placed ``interval_ms`` (dmon's default ``-d 1``: 1 s) apart,
counted per GPU.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from whyidle.errors import TraceFormatError
from whyidle.sources.counters_common import DEFAULT_INTERVAL_NS, Rejects, SeriesBuilder, epoch_ns, log_interval, num, split_cells, zone
from whyidle.timeline.counters import CounterLog

__all__ = ["DMON_COLUMNS", "parse_dmon", "is_dmon_header"]

# nvidia-smi dmon column -> (metric, scale to the metric's unit)
DMON_COLUMNS: dict[str, tuple[str, float]] = {
    "sm": ("gpu_util_pct", 1.0),
    "mem": ("mem_util_pct", 1.0),
    "enc": ("enc_util_pct", 1.0),
    "dec": ("dec_util_pct", 1.0),
    "jpg": ("jpg_util_pct", 1.0),
    "ofa": ("ofa_util_pct", 1.0),
    "pwr": ("power_w", 1.0),
    "gtemp": ("gpu_temp_c", 1.0),
    "mtemp": ("mem_temp_c", 1.0),
    "mclk": ("mem_clock_mhz", 1.0),
    "pclk": ("sm_clock_mhz", 1.0),
    "fb": ("mem_used_mib", 1.0),
    "rxpci": ("pcie_rx_bytes_per_s", 1e6),  # MB/s
    "txpci": ("pcie_tx_bytes_per_s", 1e6),
}
_DMON_KNOWN = set(DMON_COLUMNS) | {"gpu", "date", "time", "pviol", "tviol", "bar1", "ccpm", "sbecc", "dbecc", "pci", "idx"}
_DMON_DATE = re.compile(r"^\d{8}$")
_DMON_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}$")


def is_dmon_header(line: str) -> bool:
    """'# gpu pwr sm ...' (or '#Date Time gpu ...'): a comment naming 'gpu' and dmon columns."""
    if not line.startswith("#"):
        return False
    names = [n.lower() for n in split_cells(line.lstrip("#").strip())]
    return "gpu" in names and any(n in DMON_COLUMNS for n in names)


class _Clock:
    """The time of each row: wall clock (``-o DT``), time of day (``-o T``) or the row's count."""

    def __init__(self, tz: timezone | None, interval_ms: float | None) -> None:
        self.tz = tz
        self.step_ns = int((interval_ms or DEFAULT_INTERVAL_NS / 1e6) * 1e6)
        self.kind = "relative"  # "epoch" once a row had a date and a time
        self.rows_per_gpu: dict[str, int] = {}
        self.t0_day: int | None = None
        self.last_tod = -1
        self.day_offset = 0

    def time_of(self, rec: dict[str, str], gpu: str) -> int:
        """The row's time in ns; ValueError (the reason, for the skipped-row note) when unreadable."""
        if "date" in rec and "time" in rec:
            if not _DMON_DATE.match(rec["date"]) or not _DMON_TIME.match(rec["time"]):  # cut short
                raise ValueError(f"has date {rec['date']!r} time {rec['time']!r}; expected YYYYMMDD HH:MM:SS")
            try:
                t = epoch_ns(datetime.strptime(rec["date"] + " " + rec["time"], "%Y%m%d %H:%M:%S"), self.tz)
            except ValueError:
                raise ValueError(f"has date {rec['date']!r} time {rec['time']!r}; expected YYYYMMDD HH:MM:SS") from None
            self.kind = "epoch"
        elif "time" in rec:
            t = self._time_of_day(rec["time"])
        else:
            t = self.rows_per_gpu.get(gpu, 0) * self.step_ns
        self.rows_per_gpu[gpu] = self.rows_per_gpu.get(gpu, 0) + 1
        return t

    def _time_of_day(self, text: str) -> int:
        try:
            if not _DMON_TIME.match(text):
                raise ValueError(text)
            hh, mm, ss = (int(x) for x in text.split(":"))
        except ValueError:
            raise ValueError(f"has time {text!r}; expected HH:MM:SS") from None
        tod = (hh * 3600 + mm * 60 + ss) * 1_000_000_000
        if self.t0_day is None:
            self.t0_day = tod
        if tod < self.last_tod - 3600 * 1_000_000_000:
            self.day_offset += 86_400 * 1_000_000_000  # past midnight
        self.last_tod = tod
        return tod + self.day_offset - self.t0_day


def _header(s: str, header: list[str] | None) -> list[str] | None:
    """The column names a '#' line sets (the units line and other comments keep ``header``)."""
    names = [n.lower() for n in split_cells(s.lstrip("#").strip())]
    if ("gpu" in names or "idx" in names) and names[0] not in ("yyyymmdd", "hh:mm:ss", "idx") and not (len(names) > 1 and names[1] == "idx"):
        return names
    return header


def parse_dmon(path: str, text: str, utc_offset_min: int | None, interval_ms: float | None) -> CounterLog:
    header: list[str] | None = None
    b = SeriesBuilder()
    tz, zone_text = zone(utc_offset_min)
    clock = _Clock(tz, interval_ms)
    unknown: set[str] = set()
    times: dict[str, list[int]] = {}
    bad = Rejects()
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            header = _header(s, header)
            continue
        if header is None:
            raise TraceFormatError(path, "has nvidia-smi dmon rows before any '# gpu ...' header line; was the header cut off?")
        cells = split_cells(s)
        bad.seen()
        if len(cells) != len(header):
            bad.reject(lineno, f"has {len(cells)} cells; expected {len(header)} as in the header")  # cut while writing
            continue
        rec = dict(zip(header, cells))
        gpu = rec.get("gpu", rec.get("idx", "0"))
        try:
            t = clock.time_of(rec, gpu)
        except ValueError as exc:
            bad.reject(lineno, str(exc))
            continue
        times.setdefault(gpu, []).append(t)
        for col, val in rec.items():
            m = DMON_COLUMNS.get(col)
            if m is None:
                if col not in _DMON_KNOWN:
                    unknown.add(col)
                continue
            v = num(val)
            b.add(gpu, m[0], t, v * m[1] if v == v else v)
    if header is None:
        raise TraceFormatError(path, "has no '# gpu ...' header line; expected nvidia-smi dmon output")
    bad.check(path, "nvidia-smi dmon")
    quality = _notes(clock.kind, header, zone_text, interval_ms, unknown) + list(bad.note())
    interval = log_interval(times)
    return CounterLog("nvidia-smi dmon", path, clock.kind, interval or DEFAULT_INTERVAL_NS, b.series(), {g: {} for g in times}, tuple(quality))


def _notes(clock: str, header: list[str], zone_text: str, interval_ms: float | None, unknown: set[str]) -> list[str]:
    if clock == "epoch":
        quality = [f"nvidia-smi dmon times carry no time zone; they were read in {zone_text}"]
    elif "time" in header:
        quality = ["nvidia-smi dmon rows have a time but no date (-o T): times are relative to the first sample and cannot be joined with a trace (use -o DT)"]
    else:
        quality = [
            "nvidia-smi dmon rows have no timestamps: samples were placed "
            f"{(interval_ms or DEFAULT_INTERVAL_NS / 1e6):g} ms apart (dmon's default -d 1 s) and cannot be joined with a trace (use -o DT)"
        ]
    if unknown:
        quality.append(f"dmon columns whyidle does not use were ignored: {', '.join(sorted(unknown))}")
    return quality
