"""The sampler behind ``whyidle watch -- python train.py``.

It starts the command, samples a few times a second until it exits, writes a counter file and
summarises the burst/pause pattern. Two probes, both optional and imported lazily:

* :class:`NvmlProbe` (``nvidia-ml-py``, extra ``nvml``): per GPU, GPU-Util, memory activity,
  memory used, SM clock, power and PCIe throughput;
* :class:`ProcessTreeProbe` (``psutil``): CPU and resident memory of the command and all its
  children (DataLoader workers included), so a CPU-saturated input pipeline shows even without
  a GPU.

The counter file is CSV with a header, one row per sample and GPU (``gpu`` is empty when no GPU
was sampled); the process-tree columns repeat on each GPU's row. Columns: see :data:`COLUMNS`.

The runner (``popen``), clock and sleep are injectable, so tests run with fakes.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "COLUMNS",
    "Probe",
    "NvmlProbe",
    "ProcessTreeProbe",
    "WatchResult",
    "default_probes",
    "watch",
    "to_csv",
    "summarize",
    "runs",
]

COLUMNS = (
    "time_s",  # seconds since the command started
    "gpu",  # NVML device index ("" when no GPU was sampled)
    "gpu_util_pct",  # NVML utilization.gpu: share of the last sample period a kernel was running
    "mem_util_pct",  # NVML utilization.memory: share of time device memory was read or written
    "mem_used_mib",
    "sm_clock_mhz",
    "power_w",
    "pcie_tx_mib_s",  # device -> host
    "pcie_rx_mib_s",  # host -> device
    "proc_cpu_pct",  # the command's process tree, 100 = one core
    "proc_rss_mib",
    "proc_count",
    "cpu_count",  # logical CPUs of the machine (for reading proc_cpu_pct)
)

# A GPU-Util sample at or above this counts as "busy" in the burst/pause summary. NVML's
# GPU-Util is the share of its sample period (1/6 s to 1 s) with any kernel running; 50% splits
# a burst (near 100%) from a pause (near 0%) whatever the period.
BUSY_UTIL_PCT = 50.0
# The process tree is CPU-saturated when it uses at least this share of the machine's cores.
CPU_SATURATED_SHARE = 0.9


class Probe(Protocol):
    name: str

    def sample(self) -> list[dict[str, float]]:
        """One reading: a dict per GPU (GPU probes) or a single dict (process probes)."""


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

    def sample(self) -> list[dict[str, float]]:
        nv = self._nv
        out = []
        for i, h in enumerate(self._handles):
            row: dict[str, float] = {"gpu": float(i)}
            for key, read in (
                ("util", lambda: nv.nvmlDeviceGetUtilizationRates(h)),
                ("mem_used_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20),
                ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ):
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
                    row["pcie_tx_mib_s"] = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) / 1024.0
                    row["pcie_rx_mib_s"] = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) / 1024.0
                except nv.NVMLError:
                    pass
            out.append(row)
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

    def sample(self) -> list[dict[str, float]]:
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
        return [{"proc_cpu_pct": cpu, "proc_rss_mib": rss, "proc_count": float(len(alive)), "cpu_count": float(self._cpus)}]


@dataclass
class WatchResult:
    returncode: int
    rows: list[dict[str, float]]
    notes: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def default_probes(pid: int, pcie: bool = True) -> tuple[list[Any], list[str], list[str]]:
    """(probes, notes, GPU names) for a process: NVML when a driver answers, psutil when installed."""
    probes: list[Any] = []
    notes: list[str] = []
    gpus: list[str] = []
    try:
        nv = NvmlProbe(pcie=pcie)
        probes.append(nv)
        gpus = nv.devices
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


def _merge(t: float, readings: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    gpu_rows = [r for probe in readings for r in probe if "gpu" in r]
    proc: dict[str, float] = {}
    for probe in readings:
        for r in probe:
            if "gpu" not in r:
                proc.update(r)
    if not gpu_rows and not proc:
        return []
    base = gpu_rows or [{}]
    return [{"time_s": t, **g, **proc} for g in base]


def watch(
    cmd: Sequence[str],
    interval_s: float = 0.2,
    *,
    probes: Callable[[int], tuple[list[Any], list[str], list[str]]] | None = None,
    popen: Callable[..., Any] = subprocess.Popen,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WatchResult:
    """Run ``cmd``, sample every ``interval_s`` until it exits; the result holds its exit status."""
    proc = popen(list(cmd))
    t0 = clock()
    found, notes, gpus = (probes or default_probes)(proc.pid)
    rows: list[dict[str, float]] = []
    failed: set[str] = set()
    try:
        while True:
            done = proc.poll() is not None
            readings = []
            for p in found:
                if p.name in failed:
                    continue
                try:
                    readings.append(p.sample())
                except Exception as exc:  # a probe that breaks mid-run stops; the command goes on
                    failed.add(p.name)
                    notes.append(f"stopped sampling {p.name} ({type(exc).__name__}: {exc})")
            rows.extend(_merge(round(clock() - t0, 4), readings))
            if done:
                break
            sleep(interval_s)
    except KeyboardInterrupt:
        notes.append("interrupted: the command was sent the interrupt too")
        proc.wait()
    finally:
        for p in found:
            close = getattr(p, "close", None)
            if close:
                close()
    return WatchResult(int(proc.wait()), rows, notes, gpus, round(clock() - t0, 4))


def to_csv(rows: list[dict[str, float]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt(k, r.get(k)) for k in COLUMNS})
    return buf.getvalue()


def _fmt(key: str, v: float | None) -> str:
    if v is None:
        return ""
    if key in ("gpu", "proc_count", "cpu_count"):
        return str(int(v))
    return f"{v:.4g}" if key != "time_s" else f"{v:.3f}"


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
    lines = [f"whyidle watch: `{' '.join(cmd)}` exited with status {result.returncode} after {result.duration_s:.1f} s, {len(result.rows)} samples"]
    lines += [f"  note: {n}" for n in result.notes]
    by_gpu: dict[int, list[dict[str, float]]] = {}
    for r in result.rows:
        if "gpu" in r and "gpu_util_pct" in r:
            by_gpu.setdefault(int(r["gpu"]), []).append(r)
    for g, rs in sorted(by_gpu.items()):
        util = [r["gpu_util_pct"] for r in rs]
        name = f" ({result.gpus[g]})" if g < len(result.gpus) else ""
        line = f"  GPU {g}{name}: GPU-Util mean {statistics.fmean(util):.0f}%, busy (>= {BUSY_UTIL_PCT:.0f}%) in {sum(u >= BUSY_UTIL_PCT for u in util) / len(util):.0%} of samples"
        bursts, pauses = runs([u >= BUSY_UTIL_PCT for u in util], [r["time_s"] for r in rs])
        if bursts and pauses:
            line += (
                f"; {len(bursts)} bursts (median {statistics.median(bursts):.2f} s) separated by pauses "
                f"(median {statistics.median(pauses):.2f} s): the GPU waits between bursts of work"
            )
        elif bursts:
            line += "; one steady burst"
        lines.append(line)
        mem = [r["mem_used_mib"] for r in rs if "mem_used_mib" in r]
        if mem:
            lines.append(f"    memory used max {max(mem):.0f} MiB")
    procs = [r for r in result.rows if "proc_cpu_pct" in r]
    if procs:
        seen: set[float] = set()
        uniq = [r for r in procs if not (r["time_s"] in seen or seen.add(r["time_s"]))]  # type: ignore[func-returns-value]
        cpu = [r["proc_cpu_pct"] for r in uniq[1:]] or [uniq[0]["proc_cpu_pct"]]  # the first reading is 0 by definition
        cores = uniq[0].get("cpu_count", float(os.cpu_count() or 1))
        line = (
            f"  process tree: CPU mean {statistics.fmean(cpu):.0f}%, max {max(cpu):.0f}% (100% = one core, {cores:.0f} cores), "
            f"up to {max(r['proc_count'] for r in uniq):.0f} processes, RSS max {max(r['proc_rss_mib'] for r in uniq):.0f} MiB"
        )
        if statistics.fmean(cpu) >= CPU_SATURATED_SHARE * 100 * cores:
            line += "; the CPUs are saturated: an input pipeline cannot go faster here"
        lines.append(line)
    if not result.rows:
        lines.append("  nothing was sampled")
    return lines
