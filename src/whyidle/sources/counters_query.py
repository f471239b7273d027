"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` logs -> CounterLog.

A header of field names (``utilization.gpu [%]``, or plain names with ``nounits``); values may
carry units (``61.2 W``); ``[N/A]``/``[Not Supported]`` are missing. With ``noheader`` the file
cannot say which column is which: pass ``fields=`` (the ``--query-gpu`` list) or put that list as
the file's first line. Identity fields (``index``, ``uuid``, ``pci.bus_id``, ``name``) name the GPU
of each row. ``timestamp`` is local wall-clock time without a zone, read in the given zone;
without it, rows are placed 1 s apart per GPU on a relative clock.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from datetime import datetime

from whyidle.errors import TraceFormatError
from whyidle.sources.counters_common import DEFAULT_INTERVAL_NS, Rejects, SeriesBuilder, epoch_ns, log_interval, num, zone
from whyidle.timeline.counters import CounterLog

__all__ = ["QUERY_GPU_FIELDS", "QUERY_TS", "parse_query"]

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
QUERY_TS = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")


def parse_query(path: str, text: str, utc_offset_min: int | None, fields: Sequence[str] | None) -> CounterLog:
    reader = csv.reader(io.StringIO(text, newline=""))  # a stray CR ends a row (then rejected), as in a file
    try:
        numbered = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except csv.Error as exc:  # a NUL, a field past the csv module's limit
        raise TraceFormatError(path, f"line {reader.line_num + 1}: not a CSV row ({exc}); expected nvidia-smi --query-gpu CSV rows") from None
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
    tz, zone_text = zone(utc_offset_min)
    b = SeriesBuilder()
    gpus: dict[str, dict[str, str]] = {}
    times: dict[str, list[int]] = {}
    unknown = sorted({n for n in names if n not in QUERY_GPU_FIELDS and n not in _QUERY_ID_FIELDS and n != "timestamp"})
    has_time = "timestamp" in names
    counts: dict[str, int] = {}
    bad = Rejects()
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
                if not QUERY_TS.match(ts):  # strptime reads a time cut short ("01:17:3") as another time
                    raise ValueError(ts)
                dt = datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f") if "." in ts else datetime.strptime(ts, "%Y/%m/%d %H:%M:%S")
            except ValueError:
                bad.reject(lineno, f"has timestamp {ts[:40]!r}; expected YYYY/MM/DD HH:MM:SS.mmm as nvidia-smi writes it")
                continue
            try:
                t = epoch_ns(dt, tz)
            except ValueError:
                bad.reject(lineno, f"has timestamp {ts[:40]!r}, outside 1970-2262")
                continue
        else:
            t = counts.get(gpu, 0) * DEFAULT_INTERVAL_NS
        counts[gpu] = counts.get(gpu, 0) + 1
        info = gpus.setdefault(gpu, {})
        for n, key in _QUERY_ID_FIELDS.items():
            if n in rec and rec[n] and key != "index":
                info.setdefault(key, rec[n])
        times.setdefault(gpu, []).append(t)
        for n, metric in QUERY_GPU_FIELDS.items():
            if n in rec:
                b.add(gpu, metric, t, num(rec[n]))
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
    interval = log_interval(times)
    return CounterLog(
        "nvidia-smi --query-gpu", path, "epoch" if has_time else "relative", interval or DEFAULT_INTERVAL_NS, b.series(), gpus, tuple(quality)
    )
