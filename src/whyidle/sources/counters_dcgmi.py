"""``dcgmi dmon -e <field ids>`` logs -> CounterLog.

A header of DCGM short names (``GRACT SMACT ... POWER TOTEC``) or field ids, a units line, and
rows ``GPU 0  0.512  ...``; ``N/A`` is missing. DCGM's activity fields are ratios 0..1 and become
percentages. A second ``#Entity`` header with other fields (dcgmi restarted) ends the log: its
rows would not fit the first header's columns.

Time. dcgmi dmon rows have no timestamps: their spacing is inferred from the energy counter and
power (``TOTEC`` / ``POWER``: the energy used between two samples divided by the power is the time
between them) when both are logged, else the tool's default interval (or ``interval_ms``), and the
log is on a relative clock (:func:`_interval`).
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from whyidle.errors import TraceFormatError
from whyidle.sources.counters_common import DEFAULT_INTERVAL_NS, Rejects, SeriesBuilder, num
from whyidle.timeline.counters import CounterLog

__all__ = ["DCGM_FIELDS", "DCGM_HEADER", "parse_dcgmi"]

DCGM_HEADER = re.compile(r"^#\s*Entity\b", re.IGNORECASE)

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


def _dcgm_column(name: str) -> tuple[str, float] | None:
    if name.isdigit():
        f = DCGM_FIELDS.get(int(name))
        return (f[1], f[2]) if f else None
    return _DCGM_BY_NAME.get(name.upper())


class _Rows:
    """The header and the entity rows (entity name, values) of a dcgmi dmon log."""

    def __init__(self, path: str, text: str) -> None:
        self.header: list[str] | None = None
        self.changed_header = False
        self.rows: list[tuple[str, list[str]]] = []
        self.bad = Rejects()
        for lineno, line in enumerate(text.splitlines(), start=1):
            s = line.strip()
            if s:
                self._line(lineno, s)
        if self.header is None:
            raise TraceFormatError(path, "has no '#Entity ...' header line; expected dcgmi dmon output")
        self.bad.check(path, "dcgmi dmon")
        if not self.rows:
            raise TraceFormatError(path, "is a dcgmi dmon log with a header but no sample rows")

    def _line(self, lineno: int, s: str) -> None:
        if DCGM_HEADER.match(s):
            fields = s.lstrip("#").split()[1:]  # drop "Entity"
            if self.header is None:
                self.header = fields
            elif fields != self.header:  # dcgmi restarted with other fields: its rows do not fit the columns
                self.changed_header = True
            return
        toks = s.split()
        if self.header is None or self.changed_header or toks[0].lower() in ("id", "#id"):
            return  # units line
        if len(toks) < 2 or not toks[1].isdigit():
            return  # not an entity row (e.g. a dcgmi error line)
        vals = toks[2:]
        self.bad.seen()
        if len(vals) != len(self.header):
            self.bad.reject(lineno, f"has {len(vals)} values; expected {len(self.header)} as in the header")  # cut while writing
            return
        self.rows.append((f"{toks[0]} {toks[1]}" if toks[0].upper() != "GPU" else toks[1], vals))


def _interval(values: npt.NDArray[np.float64], names: list[str], mine: npt.NDArray[np.bool_], interval_ms: float | None) -> tuple[int, str]:
    """(sample spacing in ns, the quality note saying where it came from).

    Energy (mJ) used between samples / power (W) is the time between them; over the whole log
    (the first GPU's rows, ``mine``) that is robust to the counters' coarse updates.
    """
    if interval_ms:
        return int(interval_ms * 1e6), f"dcgmi dmon rows carry no timestamps: samples were placed {interval_ms:g} ms apart (as given)"
    if "energy_mj" in names and "power_w" in names and mine.sum() >= 10:
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
            if interval_ns:
                return interval_ns, (
                    f"dcgmi dmon rows carry no timestamps: the sampling interval was inferred as {interval_ns / 1e6:g} ms "
                    "from the energy counter (TOTEC) and power; times are relative to the first sample and cannot be joined with a trace"
                )
    return DEFAULT_INTERVAL_NS, (
        "dcgmi dmon rows carry no timestamps and the log has no energy and power fields to infer their spacing: "
        "samples were placed 1 s apart (dcgmi's default -d 1000); times cannot be joined with a trace"
    )


def parse_dcgmi(path: str, text: str, interval_ms: float | None) -> CounterLog:
    log = _Rows(path, text)
    assert log.header is not None  # _Rows raised otherwise
    cols = [_dcgm_column(h) for h in log.header]
    unknown = [h for h, c in zip(log.header, cols) if c is None]
    values = np.array([[num(v) for v in vals] for _, vals in log.rows], dtype=np.float64)
    gpu_of_row = [g for g, _ in log.rows]
    names = [c[0] if c else "" for c in cols]
    mine = np.array([g == gpu_of_row[0] for g in gpu_of_row])
    interval_ns, note = _interval(values, names, mine, interval_ms)
    quality = [note]
    if unknown:
        quality.append(f"DCGM fields whyidle does not use were ignored: {', '.join(unknown)}")
    quality.extend(log.bad.note())
    if log.changed_header:
        quality.append("a second '#Entity' header with other fields appears in the log; the rows after it were ignored")
    b = SeriesBuilder()
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
