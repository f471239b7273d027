"""GPU counter samples: a small columnar structure beside the event Timeline.

Counter logs (``nvidia-smi dmon``, ``nvidia-smi --query-gpu``, ``dcgmi dmon``, whyidle's own
sampler) are periodic samples, not intervals, so they are not rows of the Timeline. Each metric of
each GPU is one :class:`CounterSeries` (two numpy arrays: sample time and value, NaN = missing);
a :class:`CounterLog` holds them with the clock they are on. A Timeline read from a counter log
has no events and references its log from ``meta.counters``.

Metric names are canonical, with the unit in the name (:data:`METRICS`), whatever the log called
them: ``sm`` (nvidia-smi dmon), ``utilization.gpu`` (--query-gpu) and ``GPUTL`` (DCGM) are all
``gpu_util_pct``; DCGM's 0..1 activity ratios become percentages.

Clocks:
    ``epoch``     UTC epoch nanoseconds (whyidle's sampler; wall-clock logs converted with a zone)
    ``relative``  nanoseconds since the first sample (logs without timestamps: dcgmi dmon,
                  nvidia-smi dmon without ``-o T``): cannot be joined with a trace

The counter file whyidle's sampler writes (``whyidle watch``), read by
:mod:`whyidle.sources.counters`, is CSV with a fixed first line::

    # whyidle counters v1
    # gpu 0: name=NVIDIA A100-SXM4-80GB; uuid=GPU-5c3c...; pci_bus_id=00000000:07:00.0
    time_unix_ns,gpu,gpu_util_pct,mem_util_pct,power_w,sm_clock_mhz
    1732870000000000000,0,87,41,312.5,1410
    1732870000250000000,0,0,0,95.1,1410

* line 1 is exactly ``# whyidle counters v1``; further ``#`` lines are comments, and
  ``# gpu <id>: key=value; ...`` lines name a GPU (keys: name, uuid, pci_bus_id);
* the header's first two columns are ``time_unix_ns`` (integer UTC epoch nanoseconds) and ``gpu``
  (the GPU's id as written in the ``# gpu`` lines, usually the NVML index; ``host`` for
  process-tree metrics such as ``host_cpu_pct``); every other column is a name from
  :data:`METRICS` (unknown columns are ignored with a note);
* an empty cell is a missing value.

:func:`counter_file_header` and :func:`counter_file_row` write it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.errors import ArgumentError

__all__ = [
    "METRICS",
    "Metric",
    "CounterSeries",
    "CounterLog",
    "COUNTER_FILE_MAGIC",
    "HOST_SERIES",
    "on_epoch_clock",
    "counter_file_header",
    "counter_file_row",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class Metric(msgspec.Struct, frozen=True):  # Structs, not dataclasses: cheap to define at start-up
    name: str
    unit: str
    label: str  # short human name


_M = [
    Metric("gpu_util_pct", "%", "GPU-Util"),
    Metric("mem_util_pct", "%", "memory utilisation"),
    Metric("sm_active_pct", "%", "SM activity"),
    Metric("sm_occupancy_pct", "%", "SM occupancy"),
    Metric("tensor_active_pct", "%", "tensor activity"),
    Metric("dram_active_pct", "%", "DRAM activity"),
    Metric("gr_engine_active_pct", "%", "graphics engine activity"),
    Metric("fp64_active_pct", "%", "FP64 pipe activity"),
    Metric("fp32_active_pct", "%", "FP32 pipe activity"),
    Metric("fp16_active_pct", "%", "FP16 pipe activity"),
    Metric("pcie_tx_bytes_per_s", "B/s", "PCIe TX"),
    Metric("pcie_rx_bytes_per_s", "B/s", "PCIe RX"),
    Metric("nvlink_tx_bytes_per_s", "B/s", "NVLink TX"),
    Metric("nvlink_rx_bytes_per_s", "B/s", "NVLink RX"),
    Metric("power_w", "W", "power"),
    Metric("energy_mj", "mJ", "energy since driver load"),
    Metric("sm_clock_mhz", "MHz", "SM clock"),
    Metric("mem_clock_mhz", "MHz", "memory clock"),
    Metric("app_sm_clock_mhz", "MHz", "SM application clock"),
    Metric("gpu_temp_c", "C", "GPU temperature"),
    Metric("mem_temp_c", "C", "memory temperature"),
    Metric("mem_used_mib", "MiB", "memory used"),
    Metric("enc_util_pct", "%", "encoder utilisation"),
    Metric("dec_util_pct", "%", "decoder utilisation"),
    Metric("jpg_util_pct", "%", "JPEG decoder utilisation"),
    Metric("ofa_util_pct", "%", "optical-flow utilisation"),
    Metric("host_cpu_pct", "%", "host CPU of the process tree"),
    Metric("host_rss_mib", "MiB", "host memory of the process tree"),
]
METRICS: dict[str, Metric] = {m.name: m for m in _M}

COUNTER_FILE_MAGIC = "# whyidle counters v1"
# Epoch nanoseconds between 2001-09-09 and 2100: a trace whose times fall here is on the UTC
# epoch clock (Kineto with epoch microseconds or baseTimeNanoseconds; nsys with a session start).
_EPOCH_LO_NS = 1_000_000_000 * 1_000_000_000
_EPOCH_HI_NS = 4_102_444_800 * 1_000_000_000


def on_epoch_clock(t_ns: int) -> bool:
    return _EPOCH_LO_NS <= t_ns < _EPOCH_HI_NS


HOST_SERIES = "host"  # the series id of process-tree metrics (host_cpu_pct, host_rss_mib): not a GPU


class CounterSeries(msgspec.Struct, frozen=True):
    """One metric of one GPU: sample times (sorted) and values (NaN = missing)."""

    gpu: str
    metric: str
    time_ns: I64
    value: F64

    def __len__(self) -> int:
        return int(self.time_ns.size)

    def clip(self, lo: int, hi: int) -> CounterSeries:
        sel = (self.time_ns >= lo) & (self.time_ns < hi)
        return CounterSeries(self.gpu, self.metric, self.time_ns[sel], self.value[sel])


class CounterLog(msgspec.Struct, frozen=True):
    source_format: str  # "nvidia-smi dmon", "nvidia-smi --query-gpu", "dcgmi dmon", "whyidle counters"
    path: str
    clock: str  # "epoch" or "relative"
    interval_ns: int  # the typical time between two samples of one GPU
    series: tuple[CounterSeries, ...]
    gpus: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)  # gpu -> name, uuid, pci_bus_id
    quality: tuple[str, ...] = ()

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        """The GPUs the log has samples of (the ``host`` series of process-tree metrics is not one)."""
        seen: dict[str, None] = {}
        for s in self.series:
            if s.gpu != HOST_SERIES:
                seen.setdefault(s.gpu, None)
        return tuple(seen)

    def get(self, gpu: str, metric: str) -> CounterSeries | None:
        for s in self.series:
            if s.gpu == gpu and s.metric == metric:
                return s
        return None

    def by_gpu(self) -> dict[str, dict[str, CounterSeries]]:
        """The series grouped by GPU then metric, in one pass (a lookup per GPU would be quadratic
        in the GPUs: a --query-gpu log of 5,000 GPUs took 21 s). The first series of a
        (GPU, metric) wins, as in :meth:`get`."""
        out: dict[str, dict[str, CounterSeries]] = {}
        for s in self.series:
            out.setdefault(s.gpu, {}).setdefault(s.metric, s)
        return out

    @property
    def span_ns(self) -> tuple[int, int] | None:
        starts = [int(s.time_ns[0]) for s in self.series if len(s)]
        ends = [int(s.time_ns[-1]) for s in self.series if len(s)]
        if not starts:
            return None
        return min(starts), max(ends) + self.interval_ns

    def clip(self, lo: int, hi: int) -> CounterLog:
        return CounterLog(
            self.source_format, self.path, self.clock, self.interval_ns, tuple(s.clip(lo, hi) for s in self.series), self.gpus, self.quality
        )


def counter_file_header(metrics: Sequence[str], gpus: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The first lines of a whyidle counter file, up to and including the CSV header."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ArgumentError(f"unknown counter metrics {unknown}; expected names from whyidle.timeline.counters.METRICS")
    lines = [COUNTER_FILE_MAGIC]
    for gid, info in (gpus or {}).items():
        parts = "; ".join(f"{k}={str(v).replace(';', ',')}" for k, v in info.items() if v)
        lines.append(f"# gpu {gid}: {parts}")
    lines.append(",".join(["time_unix_ns", "gpu", *metrics]))
    return "\n".join(lines) + "\n"


def counter_file_row(time_unix_ns: int, gpu: str, values: Mapping[str, float | int | None], metrics: Sequence[str]) -> str:
    """One CSV line: the values of ``metrics`` (in header order); None or NaN -> empty cell."""
    cells = [str(int(time_unix_ns)), str(gpu)]
    for m in metrics:
        v = values.get(m)
        if v is None or (isinstance(v, float) and v != v):
            cells.append("")
        elif isinstance(v, float):
            cells.append(repr(round(v, 6)))
        else:
            cells.append(str(v))
    return ",".join(cells) + "\n"
