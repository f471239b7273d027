"""The sampler behind ``whyidle watch -- python train.py``.

It starts the command, samples a few times a second until it exits, writes a counter file and
summarises the burst/pause pattern. Two probes, both optional and imported lazily:

* :class:`NvmlProbe` (``nvidia-ml-py``, extra ``nvml``): per GPU, GPU-Util, memory activity,
  memory used, SM clock, power and PCIe throughput;
* :class:`ProcessTreeProbe` (``psutil``): CPU and resident memory of the command and all its
  children (DataLoader workers included), so a CPU-saturated input pipeline shows even without
  a GPU.

It writes the whyidle counter file that :mod:`whyidle.sources.counters` reads (format defined
in :mod:`whyidle.timeline.counters`): ``# whyidle counters v1``, a ``# gpu <index>: name=...``
line per GPU, then CSV rows ``time_unix_ns,gpu,<metrics>``; the process tree's rows have
``gpu`` = ``host``.

The runner (``popen``), clock and sleep are injectable, so tests run with fakes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "COLUMNS",
    "GPU_METRICS",
    "HOST_METRICS",
    "Sample",
    "Probe",
    "NvmlProbe",
    "ProcessTreeProbe",
    "WatchResult",
    "default_probes",
    "watch",
    "to_counter_file",
    "Row",
    "summarize",
    "runs",
]

# The metrics written, in the counter file's column order (names from timeline.counters.METRICS).
GPU_METRICS = (
    "gpu_util_pct",  # NVML utilization.gpu: share of the last sample period a kernel was running
    "mem_util_pct",  # NVML utilization.memory: share of time device memory was read or written
    "mem_used_mib",
    "sm_clock_mhz",
    "power_w",
    "pcie_tx_bytes_per_s",  # device -> host
    "pcie_rx_bytes_per_s",  # host -> device
)
HOST_METRICS = ("host_cpu_pct", "host_rss_mib")  # the command's process tree, 100% = one core
COLUMNS = GPU_METRICS + HOST_METRICS
HOST = "host"  # timeline.counters.HOST_SERIES (not imported here: it would import numpy)

# A GPU-Util sample at or above this counts as "busy" in the burst/pause summary. NVML's
# GPU-Util is the share of its sample period (1/6 s to 1 s) with any kernel running; 50% splits
# a burst (near 100%) from a pause (near 0%) whatever the period.
BUSY_UTIL_PCT = 50.0
# The process tree is CPU-saturated when it uses at least this share of the machine's cores.
CPU_SATURATED_SHARE = 0.9


# (series id: the NVML index or "host", {metric: value}); values may hold extra keys
# (proc_count) that the summary reads and the counter file does not carry.
Sample = tuple[str, dict[str, float]]


class Probe(Protocol):
    name: str

    def sample(self) -> list[Sample]:
        """One reading: an entry per GPU (GPU probes) or one ``("host", ...)`` entry."""


class NvmlProbe:
    """NVML readings for every GPU. Construction raises if NVML cannot be initialised."""

    name = "nvml"

    def __init__(self, pcie: bool = True) -> None:
        import pynvml

        self._nv = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self._pcie = pcie
        names = [pynvml.nvmlDeviceGetName(h) for h in self._handles]
        self.devices = [n.decode() if isinstance(n, bytes) else str(n) for n in names]

    def info(self) -> dict[str, dict[str, str]]:
        """The ``# gpu`` lines of the counter file: name, uuid and PCI bus id per NVML index."""
        out: dict[str, dict[str, str]] = {}
        for i, h in enumerate(self._handles):
            d = {"name": self.devices[i]}
            for key, read in (("uuid", self._nv.nvmlDeviceGetUUID), ("pci_bus_id", lambda x: self._nv.nvmlDeviceGetPciInfo(x).busId)):
                try:
                    v = read(h)
                    d[key] = v.decode() if isinstance(v, bytes) else str(v)
                except Exception:
                    pass
            out[str(i)] = d
        return out

    def sample(self) -> list[Sample]:
        nv = self._nv
        out: list[Sample] = []
        for i, h in enumerate(self._handles):
            row: dict[str, float] = {}
            readers: list[tuple[str, Callable[[], Any]]] = [
                ("util", lambda: nv.nvmlDeviceGetUtilizationRates(h)),
                ("mem_used_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20),
                ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ]
            for key, read in readers:
                try:
                    v = read()
                except nv.NVMLError:
                    continue  # a counter this GPU does not support: leave it empty
                if key == "util":
                    row["gpu_util_pct"] = float(v.gpu)
                    row["mem_util_pct"] = float(v.memory)
                else:
                    row[key] = float(v)
            if self._pcie:
                try:  # KB/s, each call samples over ~20 ms
                    row["pcie_tx_bytes_per_s"] = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) * 1024.0
                    row["pcie_rx_bytes_per_s"] = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) * 1024.0
                except nv.NVMLError:
                    pass
            out.append((str(i), row))
        return out

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass


class ProcessTreeProbe:
    """CPU % and RSS of a process and all its descendants (psutil)."""

    name = "process tree"

    def __init__(self, pid: int) -> None:
        import psutil

        self._ps = psutil
        self._root = psutil.Process(pid)
        self._procs: dict[int, Any] = {}
        self._cpus = psutil.cpu_count() or 1

    def sample(self) -> list[Sample]:
        ps = self._ps
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except ps.Error:
            return []
        cpu = rss = 0.0
        alive = {}
        for p in procs:
            known = self._procs.get(p.pid, p)
            try:
                cpu += known.cpu_percent(None)  # since the previous call (0.0 the first time)
                rss += known.memory_info().rss / 2**20
            except ps.Error:
                continue
            alive[p.pid] = known
        self._procs = alive
        return [(HOST, {"host_cpu_pct": cpu, "host_rss_mib": rss, "proc_count": float(len(alive))})]

    @property
    def cpu_count(self) -> int:
        return int(self._cpus)


@dataclass(frozen=True)
class Row:
    time_unix_ns: int
    series: str  # NVML index or "host"
    values: dict[str, float]


@dataclass
class WatchResult:
    returncode: int
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)  # index -> name, uuid, pci_bus_id
    cpu_count: int = 0
    duration_s: float = 0.0


def default_probes(pid: int, pcie: bool = True) -> tuple[list[Any], list[str], dict[str, dict[str, str]]]:
    """(probes, notes, GPUs) for a process: NVML when a driver answers, psutil when installed."""
    probes: list[Any] = []
    notes: list[str] = []
    gpus: dict[str, dict[str, str]] = {}
    try:
        nv = NvmlProbe(pcie=pcie)
        probes.append(nv)
        gpus = nv.info()
        if not gpus:
            notes.append("NVML answered but reports no GPU")
    except ImportError:
        notes.append("GPU counters need nvidia-ml-py, which is not installed; install it with: pip install 'whyidle[nvml]'")
    except Exception as exc:  # pynvml.NVMLError_LibraryNotFound, DriverNotLoaded...
        notes.append(f"no NVIDIA driver answered ({type(exc).__name__}: {exc}); sampling the process tree's CPU and memory only")
    try:
        probes.append(ProcessTreeProbe(pid))
    except ImportError:
        notes.append("process CPU and memory need psutil, which is not installed; install it with: pip install 'whyidle[watch]'")
    except Exception as exc:  # the process already exited
        notes.append(f"could not sample the process tree ({type(exc).__name__}: {exc})")
    return probes, notes, gpus


def watch(
    cmd: Sequence[str],
    interval_s: float = 0.2,
    *,
    probes: Callable[[int], tuple[list[Any], list[str], dict[str, dict[str, str]]]] | None = None,
    popen: Callable[..., Any] = subprocess.Popen,
    clock: Callable[[], float] = time.monotonic,
    wall_ns: Callable[[], int] = time.time_ns,
    sleep: Callable[[float], None] = time.sleep,
) -> WatchResult:
    """Run ``cmd``, sample every ``interval_s`` until it exits; the result holds its exit status.

    A probe that fails mid-run is dropped with a note; the command is never disturbed.
    """
    proc = popen(list(cmd))
    t0 = clock()
    found, notes, gpus = (probes or default_probes)(proc.pid)
    rows: list[Row] = []
    failed: set[str] = set()
    try:
        while True:
            done = proc.poll() is not None
            t = int(wall_ns())
            for p in found:
                if p.name in failed:
                    continue
                try:
                    rows.extend(Row(t, series, values) for series, values in p.sample())
                except Exception as exc:
                    failed.add(p.name)
                    notes.append(f"stopped sampling {p.name} ({type(exc).__name__}: {exc})")
            if done:
                break
            sleep(interval_s)
    except KeyboardInterrupt:
        notes.append("interrupted: the command received the interrupt too")
        proc.wait()
    finally:
        for p in found:
            close = getattr(p, "close", None)
            if close:
                close()
    cpus = next((int(p.cpu_count) for p in found if hasattr(p, "cpu_count")), os.cpu_count() or 0)
    return WatchResult(int(proc.wait()), rows, notes, gpus, cpus, round(clock() - t0, 4))


def to_counter_file(result: WatchResult, cmd: Sequence[str] = ()) -> str:
    """The whyidle counter file (timeline.counters format) for a watch result."""
    from whyidle.timeline.counters import counter_file_header, counter_file_row

    present = {m for r in result.rows for m in r.values}
    metrics = [m for m in COLUMNS if m in present]
    head = counter_file_header(metrics, result.gpus)
    lines = head.split("\n")
    extra = [f"# written by whyidle watch; host: cpu_count={result.cpu_count}"]
    if cmd:
        extra.append(f"# command: {' '.join(cmd)}".replace("\n", " "))
    lines[1:1] = extra  # after the magic line, before the gpu lines and the header
    out = ["\n".join(lines)]
    out += [counter_file_row(r.time_unix_ns, r.series, r.values, metrics) for r in result.rows]
    return "".join(out)


def runs(flags: Sequence[bool], times: Sequence[float]) -> tuple[list[float], list[float]]:
    """(durations of busy runs, durations of idle runs between busy ones), in seconds.

    A run lasts from its first sample to the first sample of the next run; leading and trailing
    idle (start-up, shutdown) are not pauses.
    """
    bursts: list[float] = []
    pauses: list[float] = []
    i, n = 0, len(flags)
    while i < n:
        j = i
        while j < n and flags[j] == flags[i]:
            j += 1
        end = times[j] if j < n else times[-1]
        if flags[i]:
            bursts.append(end - times[i])
        elif i > 0 and j < n:
            pauses.append(end - times[i])
        i = j
    return bursts, pauses


def summarize(result: WatchResult, cmd: Sequence[str]) -> list[str]:
    """Sentences for the terminal."""
    n_samples = len({r.time_unix_ns for r in result.rows})
    lines = [f"whyidle watch: `{' '.join(cmd)}` exited with status {result.returncode} after {result.duration_s:.1f} s, {n_samples} samples"]
    lines += [f"  note: {n}" for n in result.notes]
    by_series: dict[str, list[Row]] = {}
    for r in result.rows:
        by_series.setdefault(r.series, []).append(r)
    t0 = min((r.time_unix_ns for r in result.rows), default=0)
    for g, rs in sorted((k, v) for k, v in by_series.items() if k != HOST):
        util = [(r.time_unix_ns, r.values["gpu_util_pct"]) for r in rs if "gpu_util_pct" in r.values]
        name = result.gpus.get(g, {}).get("name", "")
        if not util:
            lines.append(f"  GPU {g}{f' ({name})' if name else ''}: no GPU-Util readings")
            continue
        u = [v for _, v in util]
        busy = [v >= BUSY_UTIL_PCT for v in u]
        line = f"  GPU {g}{f' ({name})' if name else ''}: GPU-Util mean {statistics.fmean(u):.0f}%, busy (>= {BUSY_UTIL_PCT:.0f}%) in {sum(busy) / len(u):.0%} of samples"
        bursts, pauses = runs(busy, [(t - t0) / 1e9 for t, _ in util])
        if bursts and pauses:
            line += (
                f"; {len(bursts)} bursts (median {statistics.median(bursts):.2f} s) separated by {len(pauses)} pauses "
                f"(median {statistics.median(pauses):.2f} s): the GPU waits between bursts of work"
            )
        elif bursts and not pauses:
            line += "; busy without pauses"
        lines.append(line)
        mem = [r.values["mem_used_mib"] for r in rs if "mem_used_mib" in r.values]
        if mem:
            lines.append(f"    memory used max {max(mem):.0f} MiB")
    host = by_series.get(HOST, [])
    if host:
        cpu = [r.values["host_cpu_pct"] for r in host[1:]] or [host[0].values["host_cpu_pct"]]  # the first reading is 0 by definition
        cores = result.cpu_count or 1
        line = (
            f"  process tree: CPU mean {statistics.fmean(cpu):.0f}%, max {max(cpu):.0f}% (100% = one core, {cores} cores), "
            f"up to {max(r.values.get('proc_count', 1) for r in host):.0f} processes, "
            f"RSS max {max(r.values['host_rss_mib'] for r in host):.0f} MiB"
        )
        if statistics.fmean(cpu) >= CPU_SATURATED_SHARE * 100 * cores:
            line += "; the CPUs are saturated: an input pipeline cannot go faster here"
        lines.append(line)
    if not result.rows:
        lines.append("  nothing was sampled")
    return lines
