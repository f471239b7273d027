"""GPU counter logs -> CounterLog (and a Timeline without events that carries it).

The only module that knows counter-log formats. Columns are always found by their header names,
never by position, since every tool lets the user pick and order them:

``nvidia-smi dmon`` (any ``-s`` selection, ``-o D``/``-o T``, ``--format csv``)::

    #Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
    #YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
     20250301   12:00:01      0     61     34      -     97     40      0      0      0      0   1593   1410

  ``-`` is a missing value; newer drivers add columns (``jpg``, ``ofa``); the header repeats.
  Without ``-o DT`` rows carry no date (``-o T``) or no time at all.

``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``: a header of field names
(``utilization.gpu [%]``, or plain names with ``nounits``); values may carry units (``61.2 W``);
``[N/A]``/``[Not Supported]`` are missing. With ``noheader`` the file cannot say which column is
which: pass ``fields=`` (the ``--query-gpu`` list) or put that list as the file's first line.

``dcgmi dmon -e <field ids>``: a header of DCGM short names (``GRACT SMACT ... POWER TOTEC``) or
field ids, a units line, and rows ``GPU 0  0.512  ...``; ``N/A`` is missing. DCGM's activity
fields are ratios 0..1 and become percentages.

The whyidle counter file (see :mod:`whyidle.timeline.counters`).

Time. dcgmi dmon rows have no timestamps: their spacing is inferred from the energy counter and
power (``TOTEC`` / ``POWER``: the energy used between two samples divided by the power is the time
between them) when both are logged, else the tool's default interval (or ``interval_ms``), and the
log is on a relative clock. nvidia-smi writes local wall-clock times without a zone: they are read
in ``utc_offset_min`` (default: this machine's zone), and the report says so.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.sources._io import read_bytes
from whyidle.timeline.counters import (
    COUNTER_FILE_MAGIC,
    on_epoch_clock,
    METRICS,
    CounterLog,
    CounterSeries,
)
from whyidle.timeline.model import Timeline, TimelineMeta

__all__ = [
    "load_counters",
    "parse_counters",
    "counter_timeline",
    "looks_like_counter_log",
    "DCGM_FIELDS",
    "DMON_COLUMNS",
    "QUERY_GPU_FIELDS",
]

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

# DCGM field id -> (short name, metric, scale). Ids and short names from DCGM's dcgm_fields.h.
DCGM_FIELDS: dict[int, tuple[str, str, float]] = {
    100: ("SMCLK", "sm_clock_mhz", 1.0),
    101: ("MMCLK", "mem_clock_mhz", 1.0),
    110: ("SACLK", "app_sm_clock_mhz", 1.0),
    140: ("MMTMP", "mem_temp_c", 1.0),
    150: ("TMPTR", "gpu_temp_c", 1.0),
    155: ("POWER", "power_w", 1.0),
    156: ("TOTEC", "energy_mj", 1.0),
    203: ("GPUTL", "gpu_util_pct", 1.0),
    204: ("MCUTL", "mem_util_pct", 1.0),
    206: ("ECUTL", "enc_util_pct", 1.0),
    207: ("DCUTL", "dec_util_pct", 1.0),
    252: ("FBUSD", "mem_used_mib", 1.0),
    1001: ("GRACT", "gr_engine_active_pct", 100.0),
    1002: ("SMACT", "sm_active_pct", 100.0),
    1003: ("SMOCC", "sm_occupancy_pct", 100.0),
    1004: ("TENSO", "tensor_active_pct", 100.0),
    1005: ("DRAMA", "dram_active_pct", 100.0),
    1006: ("FP64A", "fp64_active_pct", 100.0),
    1007: ("FP32A", "fp32_active_pct", 100.0),
    1008: ("FP16A", "fp16_active_pct", 100.0),
    1009: ("PCITX", "pcie_tx_bytes_per_s", 1.0),
    1010: ("PCIRX", "pcie_rx_bytes_per_s", 1.0),
    1011: ("NVLTX", "nvlink_tx_bytes_per_s", 1.0),
    1012: ("NVLRX", "nvlink_rx_bytes_per_s", 1.0),
}
_DCGM_BY_NAME = {short: (metric, scale) for short, metric, scale in DCGM_FIELDS.values()}

# nvidia-smi --query-gpu field -> metric (values already in the metric's unit)
QUERY_GPU_FIELDS: dict[str, str] = {
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
    "utilization.encoder": "enc_util_pct",
    "utilization.decoder": "dec_util_pct",
    "utilization.jpeg": "jpg_util_pct",
    "utilization.ofa": "ofa_util_pct",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "power.draw.average": "power_w",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz",
    "clocks.applications.graphics": "app_sm_clock_mhz",
    "temperature.gpu": "gpu_temp_c",
    "temperature.memory": "mem_temp_c",
    "memory.used": "mem_used_mib",
}
_QUERY_ID_FIELDS = {"index": "index", "uuid": "uuid", "gpu_uuid": "uuid", "pci.bus_id": "pci_bus_id", "gpu_bus_id": "pci_bus_id", "name": "name", "gpu_name": "name"}

# Defaults when a log does not say how often it sampled: dcgmi dmon -d and nvidia-smi dmon -d
# both default to 1 s (their man pages).
_DCGMI_DEFAULT_INTERVAL_NS = 1_000_000_000
_DMON_DEFAULT_INTERVAL_NS = 1_000_000_000
_MISSING = {"", "-", "N/A", "[N/A]", "NA", "n/a", "[Not Supported]", "Not Supported", "[Unknown Error]", "ERR!", "[ERR!]"}
_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_QUERY_TS = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")
_DMON_DATE = re.compile(r"^\d{8}$")
_DMON_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_DCGM_HEADER = re.compile(r"^#\s*Entity\b", re.IGNORECASE)


def _is_dmon_header(line: str) -> bool:
    """'# gpu pwr sm ...' (or '#Date Time gpu ...'): a comment naming 'gpu' and dmon columns."""
    if not line.startswith("#"):
        return False
    names = [n.lower() for n in _split(line.lstrip("#").strip())]
    return "gpu" in names and any(n in DMON_COLUMNS for n in names)


def _num(text: str) -> float:
    t = text.strip()
    if t in _MISSING:
        return float("nan")
    m = _NUM.match(t)
    return float(m.group(0)) if m else float("nan")


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
    if first.startswith(COUNTER_FILE_MAGIC) or _DCGM_HEADER.match(first) or _is_dmon_header(first):
        return True
    fields = [f.strip().split(" [")[0].lower() for f in first.split(",")]
    if len(fields) >= 2 and any(f in QUERY_GPU_FIELDS or f == "timestamp" for f in fields):
        return True
    return len(fields) >= 3 and bool(_QUERY_TS.match(fields[0].replace("-", "/")))


@dataclass
class _Builder:
    """Samples per (gpu, metric) as lists, frozen into CounterSeries."""

    def __post_init__(self) -> None:
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


class _Rejects:
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


def _zone(utc_offset_min: int | None) -> tuple[timezone | None, str]:
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


def _epoch_ns(dt: datetime, tz: timezone | None) -> int:
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
    d = np.diff(np.unique(np.asarray(times, dtype=np.int64)))
    return int(np.median(d)) if d.size else 0


def _log_interval(times: dict[str, list[int]]) -> int:
    """The typical sample spacing over GPUs (GPUs with a single sample say nothing)."""
    per_gpu = [d for d in (_median_interval(v) for v in times.values()) if d > 0]
    return int(np.median(per_gpu)) if per_gpu else 0


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
    b = _Builder()
    times: dict[str, list[int]] = {}
    bad = _Rejects()
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
                b.add(gpu, h, t, _num(r[j]))
    bad.check(path, "whyidle counters")
    interval = _log_interval(times)
    return CounterLog("whyidle counters", path, "epoch", interval, b.series(), gpus, tuple(quality) + bad.note())


# -- nvidia-smi dmon ------------------------------------------------------------------------------


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")] if "," in line else line.split()


def _parse_dmon(path: str, text: str, utc_offset_min: int | None, interval_ms: float | None) -> CounterLog:
    header: list[str] | None = None
    b = _Builder()
    tz, zone_text = _zone(utc_offset_min)
    quality: list[str] = []
    unknown: set[str] = set()
    rows_per_gpu: dict[str, int] = {}
    clock = "relative"
    times: dict[str, list[int]] = {}
    t0_day: int | None = None
    last_tod = -1
    day_offset = 0
    bad = _Rejects()
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            names = [n.lower() for n in _split(s.lstrip("#").strip())]
            if "gpu" in names or "idx" in names:
                if names and names[0] not in ("yyyymmdd", "hh:mm:ss", "idx") and not (len(names) > 1 and names[1] == "idx"):
                    header = names
            continue
        if header is None:
            raise TraceFormatError(path, "has nvidia-smi dmon rows before any '# gpu ...' header line; was the header cut off?")
        cells = _split(s)
        bad.seen()
        if len(cells) != len(header):
            bad.reject(lineno, f"has {len(cells)} cells; expected {len(header)} as in the header")  # cut while writing
            continue
        rec = dict(zip(header, cells))
        gpu = rec.get("gpu", rec.get("idx", "0"))
        if "date" in rec and "time" in rec:
            try:
                if not _DMON_DATE.match(rec["date"]) or not _DMON_TIME.match(rec["time"]):  # cut short
                    raise ValueError(rec["date"])
                t = _epoch_ns(datetime.strptime(rec["date"] + " " + rec["time"], "%Y%m%d %H:%M:%S"), tz)
                clock = "epoch"
            except ValueError:
                bad.reject(lineno, f"has date {rec['date']!r} time {rec['time']!r}; expected YYYYMMDD HH:MM:SS")
                continue
        elif "time" in rec:
            try:
                if not _DMON_TIME.match(rec["time"]):
                    raise ValueError(rec["time"])
                hh, mm, ss = (int(x) for x in rec["time"].split(":"))
            except ValueError:
                bad.reject(lineno, f"has time {rec['time']!r}; expected HH:MM:SS")
                continue
            tod = (hh * 3600 + mm * 60 + ss) * 1_000_000_000
            if t0_day is None:
                t0_day = tod
            if tod < last_tod - 3600 * 1_000_000_000:
                day_offset += 86_400 * 1_000_000_000  # past midnight
            last_tod = tod
            t = tod + day_offset - t0_day
        else:
            step = int((interval_ms or _DMON_DEFAULT_INTERVAL_NS / 1e6) * 1e6)
            t = rows_per_gpu.get(gpu, 0) * step
        rows_per_gpu[gpu] = rows_per_gpu.get(gpu, 0) + 1
        times.setdefault(gpu, []).append(t)
        for col, val in rec.items():
            m = DMON_COLUMNS.get(col)
            if m is None:
                if col not in _DMON_KNOWN:
                    unknown.add(col)
                continue
            v = _num(val)
            b.add(gpu, m[0], t, v * m[1] if v == v else v)
    if header is None:
        raise TraceFormatError(path, "has no '# gpu ...' header line; expected nvidia-smi dmon output")
    bad.check(path, "nvidia-smi dmon")
    if clock == "epoch":
        quality.append(f"nvidia-smi dmon times carry no time zone; they were read in {zone_text}")
    elif "time" in header:
        quality.append("nvidia-smi dmon rows have a time but no date (-o T): times are relative to the first sample and cannot be joined with a trace (use -o DT)")
    else:
        quality.append(
            "nvidia-smi dmon rows have no timestamps: samples were placed "
            f"{(interval_ms or _DMON_DEFAULT_INTERVAL_NS / 1e6):g} ms apart (dmon's default -d 1 s) and cannot be joined with a trace (use -o DT)"
        )
    if unknown:
        quality.append(f"dmon columns whyidle does not use were ignored: {', '.join(sorted(unknown))}")
    interval = _log_interval(times)
    quality.extend(bad.note())
    return CounterLog("nvidia-smi dmon", path, clock, interval or _DMON_DEFAULT_INTERVAL_NS, b.series(), {g: {} for g in times}, tuple(quality))


# -- nvidia-smi --query-gpu -----------------------------------------------------------------------


def _parse_query(path: str, text: str, utc_offset_min: int | None, fields: Sequence[str] | None) -> CounterLog:
    reader = csv.reader(io.StringIO(text))
    numbered = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    rows = [r for _, r in numbered]
    if not rows:
        raise TraceFormatError(path, "is empty; expected nvidia-smi --query-gpu CSV rows")
    first = [c.strip() for c in rows[0]]
    names0 = [c.split(" [")[0].strip().lower() for c in first]
    has_header = any(n in QUERY_GPU_FIELDS or n in _QUERY_ID_FIELDS or n == "timestamp" for n in names0)
    if has_header:
        names, data = names0, numbered[1:]
    elif fields:
        names, data = [f.strip().lower() for f in fields], numbered
    else:
        raise TraceFormatError(
            path,
            "holds nvidia-smi --query-gpu rows without a header (noheader): it cannot say which column is which; "
            "put the --query-gpu field list as its first line (e.g. timestamp,index,utilization.gpu,power.draw)",
        )
    tz, zone_text = _zone(utc_offset_min)
    b = _Builder()
    gpus: dict[str, dict[str, str]] = {}
    times: dict[str, list[int]] = {}
    unknown = sorted({n for n in names if n not in QUERY_GPU_FIELDS and n not in _QUERY_ID_FIELDS and n != "timestamp"})
    has_time = "timestamp" in names
    counts: dict[str, int] = {}
    bad = _Rejects()
    for lineno, r in data:
        bad.seen()
        if len(r) != len(names):
            bad.reject(lineno, f"has {len(r)} cells; expected {len(names)} ({', '.join(names)})")
            continue
        rec = {n: c.strip() for n, c in zip(names, r)}
        gpu = rec.get("index") or rec.get("pci.bus_id") or rec.get("uuid") or "0"
        if has_time:
            ts = rec["timestamp"]
            try:
                if not _QUERY_TS.match(ts):  # strptime reads a time cut short ("01:17:3") as another time
                    raise ValueError(ts)
                dt = datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f") if "." in ts else datetime.strptime(ts, "%Y/%m/%d %H:%M:%S")
            except ValueError:
                bad.reject(lineno, f"has timestamp {ts[:40]!r}; expected YYYY/MM/DD HH:MM:SS.mmm as nvidia-smi writes it")
                continue
            try:
                t = _epoch_ns(dt, tz)
            except ValueError:
                bad.reject(lineno, f"has timestamp {ts[:40]!r}, outside 1970-2262")
                continue
        else:
            t = counts.get(gpu, 0) * _DMON_DEFAULT_INTERVAL_NS
        counts[gpu] = counts.get(gpu, 0) + 1
        info = gpus.setdefault(gpu, {})
        for n, key in _QUERY_ID_FIELDS.items():
            if n in rec and rec[n] and key != "index":
                info.setdefault(key, rec[n])
        times.setdefault(gpu, []).append(t)
        for n, metric in QUERY_GPU_FIELDS.items():
            if n in rec:
                b.add(gpu, metric, t, _num(rec[n]))
    quality: list[str] = []
    if has_time:
        quality.append(f"nvidia-smi timestamps carry no time zone; they were read in {zone_text}")
    else:
        quality.append("the --query-gpu rows have no timestamp column: samples were placed 1 s apart and cannot be joined with a trace")
    if unknown:
        quality.append(f"--query-gpu fields whyidle does not use were ignored: {', '.join(unknown)}")
    if not any(n in QUERY_GPU_FIELDS for n in names):
        raise TraceFormatError(path, "has no --query-gpu field whyidle reads (utilization.gpu, utilization.memory, power.draw, clocks.sm...)")
    bad.check(path, "nvidia-smi --query-gpu")
    quality.extend(bad.note())
    interval = _log_interval(times)
    return CounterLog(
        "nvidia-smi --query-gpu", path, "epoch" if has_time else "relative", interval or _DMON_DEFAULT_INTERVAL_NS, b.series(), gpus, tuple(quality)
    )


# -- dcgmi dmon ------------------------------------------------------------------------------------


def _dcgm_column(name: str) -> tuple[str, float] | None:
    if name.isdigit():
        f = DCGM_FIELDS.get(int(name))
        return (f[1], f[2]) if f else None
    return _DCGM_BY_NAME.get(name.upper())


def _parse_dcgmi(path: str, text: str, interval_ms: float | None) -> CounterLog:
    header: list[str] | None = None
    changed_header = False
    rows: list[tuple[str, list[str]]] = []
    bad = _Rejects()
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if _DCGM_HEADER.match(s):
            fields = s.lstrip("#").split()[1:]  # drop "Entity"
            if header is None:
                header = fields
            elif fields != header:  # dcgmi restarted with other fields: its rows do not fit the columns
                changed_header = True
            continue
        toks = s.split()
        if header is None or changed_header or toks[0].lower() in ("id", "#id"):
            continue  # units line
        if len(toks) < 2 or not toks[1].isdigit():
            continue  # not an entity row (e.g. a dcgmi error line)
        vals = toks[2:]
        bad.seen()
        if len(vals) != len(header):
            bad.reject(lineno, f"has {len(vals)} values; expected {len(header)} as in the header")  # cut while writing
            continue
        rows.append((f"{toks[0]} {toks[1]}" if toks[0].upper() != "GPU" else toks[1], vals))
    if header is None:
        raise TraceFormatError(path, "has no '#Entity ...' header line; expected dcgmi dmon output")
    bad.check(path, "dcgmi dmon")
    if not rows:
        raise TraceFormatError(path, "is a dcgmi dmon log with a header but no sample rows")
    cols = [_dcgm_column(h) for h in header]
    unknown = [h for h, c in zip(header, cols) if c is None]
    values = np.array([[_num(v) for v in vals] for _, vals in rows], dtype=np.float64)
    gpu_of_row = [g for g, _ in rows]
    quality: list[str] = []
    # Sample spacing: dcgmi prints no timestamps. Energy (mJ) used between samples / power (W) is
    # the time between them; over the whole log that is robust to the counters' coarse updates.
    interval_ns = 0
    names = [c[0] if c else "" for c in cols]
    first_gpu = gpu_of_row[0]
    mine = np.array([g == first_gpu for g in gpu_of_row])
    if interval_ms:
        interval_ns = int(interval_ms * 1e6)
        quality.append(f"dcgmi dmon rows carry no timestamps: samples were placed {interval_ms:g} ms apart (as given)")
    elif "energy_mj" in names and "power_w" in names and mine.sum() >= 10:
        e = values[mine, names.index("energy_mj")]
        p = values[mine, names.index("power_w")]
        ok = np.isfinite(e) & np.isfinite(p)
        if ok.sum() >= 10 and e[ok][-1] > e[ok][0] and np.nanmean(p[ok]) > 0:
            idx = np.flatnonzero(ok)
            joules = (e[ok][-1] - e[ok][0]) / 1000.0
            seconds = joules / float(np.mean(p[idx[0] : idx[-1] + 1][np.isfinite(p[idx[0] : idx[-1] + 1])]))
            est = seconds / (idx[-1] - idx[0]) * 1e9
            step = 10_000_000 if est >= 20_000_000 else 1_000_000
            interval_ns = int(max(round(est / step), 1) * step)
            quality.append(
                f"dcgmi dmon rows carry no timestamps: the sampling interval was inferred as {interval_ns / 1e6:g} ms "
                "from the energy counter (TOTEC) and power; times are relative to the first sample and cannot be joined with a trace"
            )
    if not interval_ns:
        interval_ns = _DCGMI_DEFAULT_INTERVAL_NS
        quality.append(
            "dcgmi dmon rows carry no timestamps and the log has no energy and power fields to infer their spacing: "
            "samples were placed 1 s apart (dcgmi's default -d 1000); times cannot be joined with a trace"
        )
    if unknown:
        quality.append(f"DCGM fields whyidle does not use were ignored: {', '.join(unknown)}")
    quality.extend(bad.note())
    if changed_header:
        quality.append("a second '#Entity' header with other fields appears in the log; the rows after it were ignored")
    b = _Builder()
    counts: dict[str, int] = {}
    for r, gpu in enumerate(gpu_of_row):
        k = counts.get(gpu, 0)
        counts[gpu] = k + 1
        t = k * interval_ns
        for j, c in enumerate(cols):
            if c is None:
                continue
            v = values[r, j]
            b.add(gpu, c[0], t, v * c[1] if v == v else v)
    return CounterLog("dcgmi dmon", path, "relative", interval_ns, b.series(), {g: {} for g in counts}, tuple(quality))


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
    elif _DCGM_HEADER.match(first):
        log = _parse_dcgmi(path, text, interval_ms)
    elif _is_dmon_header(first):
        log = _parse_dmon(path, text, utc_offset_min, interval_ms)
    elif fields is not None or looks_like_counter_log(raw[:8192]):
        log = _parse_query(path, text, utc_offset_min, fields)
    else:
        raise TraceFormatError(
            path, "is not a GPU counter log; expected nvidia-smi dmon, nvidia-smi --query-gpu CSV, dcgmi dmon or a whyidle counter file"
        )
    if not any(len(s) for s in log.series):
        raise TraceFormatError(path, f"is a {log.source_format} log with no samples")
    return log


def load_counters(
    path: str | Path, *, utc_offset_min: int | None = None, interval_ms: float | None = None, fields: Sequence[str] | None = None
) -> CounterLog:
    p = Path(path)
    return parse_counters(read_bytes(p), str(p), utc_offset_min=utc_offset_min, interval_ms=interval_ms, fields=fields)


def counter_timeline(path: Path, raw: bytes) -> Timeline:
    """A Timeline without events whose ``meta.counters`` is the parsed log."""
    from whyidle.timeline.build import TimelineBuilder

    log = parse_counters(raw, str(path))
    meta = TimelineMeta(source_format=log.source_format, path=str(path), quality=list(log.quality))
    meta.devices = [{"name": info.get("name", ""), "gpu": gid, **info} for gid, info in log.gpus.items()]
    meta.counters = log
    return TimelineBuilder(meta).build()
