"""What GPU counter samples say: distributions, the burst/pause rhythm, underfilled work.

Each sample stands for the time until the next one (the last for the log's usual interval), so
every figure is time-weighted; missing samples (``N/A``, ``-``) carry no weight.

Burst/pause pattern. A job that starves or synchronises leaves a rhythm in GPU-Util::

    GPU-Util  ▇▇▇▇▁▁▁▇▇▇▇▁▁▁▇▇▇▇▁▁▁     busy when GPU-Util >= counter_busy_min_pct
              |<--period-->|           duty cycle = busy time / all time

The signal is resampled on the log's interval, made binary (busy / pause), and its
autocorrelation's highest peak after lag 0 gives the dominant period; the peak's height says how
regular the rhythm is (1.0: perfectly periodic). With SM activity logged (DCGM), time with GPU-Util
high but SM activity low is *underfilled* work: a kernel was running, but on few SMs.

Pure: (CounterLog, AttributionSettings) -> CounterAnalysis; no printing, no prose beyond metric names.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.config import AttributionSettings
from whyidle.errors import UsageError
from whyidle.timeline.counters import HOST_SERIES, METRICS, CounterLog, CounterSeries, on_epoch_clock

__all__ = [
    "Distribution",
    "BurstPattern",
    "GpuCounters",
    "CounterAnalysis",
    "analyse_counters",
    "time_weights",
    "weighted_quantiles",
    "burst_pattern",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# Metrics summarised as distributions, in report order.
DISTRIBUTION_METRICS = (
    "gpu_util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "mem_util_pct",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
)
HOST_METRICS = ("host_cpu_pct", "host_rss_mib")


class Distribution(msgspec.Struct, frozen=True):
    metric: str
    unit: str
    samples: int  # samples with a value
    covered_ns: int  # time those samples stand for
    mean: float  # time-weighted
    p5: float
    p50: float
    p95: float
    min: float
    max: float


class BurstPattern(msgspec.Struct, frozen=True):
    basis: str  # the metric the rhythm was read from
    busy_min_pct: float
    duty_cycle: float  # share of time busy
    period_ns: int | None  # dominant period; None without a regular rhythm
    regularity: float  # autocorrelation at the period (0..1)
    pauses: int  # number of busy -> pause transitions
    mean_pause_ns: float  # mean length of a pause
    regular: bool  # regularity >= the config threshold and a period was found


class GpuCounters(msgspec.Struct, frozen=True):
    gpu: str
    name: str
    start_ns: int
    end_ns: int
    interval_ns: int
    distributions: tuple[Distribution, ...]
    pattern: BurstPattern | None
    underfilled_ns: int  # time with GPU-Util busy (>= counter_busy_min_pct) and SM activity low (0 without SM activity)
    busy_ns: float  # time-weighted GPU-Util x time: time a kernel ran, per the driver
    busy_basis: str  # "gpu_util_pct", or "sm_active_pct" when the log has no GPU-Util
    has_sm_active: bool
    pcie_rx_pause_ratio: float | None  # mean PCIe RX during pauses / during bursts
    pause_idle_ns: int = 0  # the part of idle_ns in pause samples (basis below the busy threshold)
    host_cpu_pause_pct: float | None = None  # mean host CPU of the process tree during pauses (100 = one core)
    host_cpu_burst_pct: float | None = None  # ... and during bursts

    @property
    def idle_ns(self) -> int:
        """The span less the busy time: time without a kernel (GPU-Util basis) or unused SM time (SM activity)."""
        return max(self.span_ns - int(self.busy_ns), 0)

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    def dist(self, metric: str) -> Distribution | None:
        for d in self.distributions:
            if d.metric == metric:
                return d
        return None


class CounterAnalysis(msgspec.Struct, frozen=True):
    source_format: str
    path: str
    clock: str
    interval_ns: int
    gpus: tuple[GpuCounters, ...]
    joined: bool  # clipped to a trace's window on a shared clock
    notes: tuple[str, ...]
    host: tuple[Distribution, ...] = ()  # the watched command's process tree (host CPU, memory), when logged


def time_weights(t: I64, interval_ns: int) -> F64:
    """Each sample stands for the time until the next one; the last for ``interval_ns``.

    A hole longer than three intervals (the sampler stopped) counts for one interval only.
    """
    if t.size == 0:
        return np.empty(0, dtype=np.float64)
    w = np.empty(t.size, dtype=np.float64)
    w[:-1] = np.diff(t)
    w[-1] = interval_ns
    if interval_ns > 0:
        w = np.where(w > 3 * interval_ns, interval_ns, w)
    return np.maximum(w, 0.0)


def weighted_quantiles(v: F64, w: F64, qs: tuple[float, ...]) -> tuple[float, ...]:
    """Quantiles (0..1) of values ``v`` with weights ``w`` (the lower value at each step)."""
    if v.size == 0 or w.sum() <= 0:
        return tuple(float("nan") for _ in qs)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w) / w.sum()
    # a tolerance so that a quantile falling exactly on a cumulative step is not lost to rounding
    return tuple(float(v[min(int(np.searchsorted(cum, q - 1e-9, side="left")), v.size - 1)]) for q in qs)


def _distribution(s: CounterSeries, interval_ns: int) -> Distribution | None:
    w = time_weights(s.time_ns, interval_ns)
    ok = np.isfinite(s.value)
    if not ok.any() or w[ok].sum() <= 0:
        return None
    v, ww = s.value[ok], w[ok]
    p5, p50, p95 = weighted_quantiles(v, ww, (0.05, 0.5, 0.95))
    m = METRICS.get(s.metric)
    return Distribution(
        metric=s.metric,
        unit=m.unit if m else "",
        samples=int(ok.sum()),
        covered_ns=int(ww.sum()),
        mean=float(np.average(v, weights=ww)),
        p5=p5,
        p50=p50,
        p95=p95,
        min=float(v.min()),
        max=float(v.max()),
    )


def _resample(s: CounterSeries, start: int, interval_ns: int, n: int) -> F64:
    """Values on a regular grid (sample-and-hold; NaN where no sample has been seen yet)."""
    grid = start + np.arange(n, dtype=np.int64) * interval_ns
    j = np.searchsorted(s.time_ns, grid, side="right") - 1
    out = np.full(n, np.nan)
    ok = j >= 0
    out[ok] = s.value[j[ok]]
    # carry the last finite value over missing samples
    idx = np.where(np.isfinite(out), np.arange(n), -1)
    idx = np.maximum.accumulate(idx)
    filled = np.where(idx >= 0, out[np.maximum(idx, 0)], np.nan)
    return filled


def burst_pattern(busy: npt.NDArray[np.bool_], interval_ns: int, basis: str, threshold: float, cfg: AttributionSettings) -> BurstPattern:
    """Duty cycle, dominant period and pauses of a regularly sampled busy/pause signal."""
    n = busy.size
    duty = float(busy.mean()) if n else 0.0
    x = busy.astype(np.float64) - duty
    period: int | None = None
    regularity = 0.0
    if n >= 8 and x.std() > 0:
        size = 1 << int(np.ceil(np.log2(2 * n)))
        f = np.fft.rfft(x, size)
        ac = np.fft.irfft(f * np.conj(f), size)[:n]
        ac = ac / ac[0]
        # ignore lags too long to repeat at least twice in the log
        max_lag = n // 2
        lo = 2
        if max_lag > lo:
            seg = ac[lo:max_lag]
            # the first local maximum that is at least 90% of the highest peak: the fundamental,
            # not one of its multiples
            peaks = np.flatnonzero((seg[1:-1] >= seg[:-2]) & (seg[1:-1] >= seg[2:])) + 1 if seg.size >= 3 else np.empty(0, dtype=np.int64)
            peaks = peaks[seg[peaks] > 0] if peaks.size else peaks
            if peaks.size:
                best = float(seg[peaks].max())
                first = peaks[np.flatnonzero(seg[peaks] >= 0.9 * best)[0]]
                regularity = max(float(seg[first]), 0.0)
                period = int((first + lo) * interval_ns)
    edges = np.flatnonzero(busy[:-1] & ~busy[1:]) if n > 1 else np.empty(0, dtype=np.int64)
    pauses = int(edges.size)
    pause_samples = int((~busy).sum())
    mean_pause = pause_samples * interval_ns / pauses if pauses else 0.0
    regular = period is not None and regularity >= cfg.counter_rhythm_min_autocorr and pauses >= cfg.counter_rhythm_min_pauses
    return BurstPattern(basis, threshold, duty, period, regularity, pauses, mean_pause, regular)


class _Grid(msgspec.Struct, frozen=True):
    """The regular grid one GPU's series are resampled on: n points ``interval_ns`` apart."""

    start: int
    end: int
    interval: int
    n: int

    def values(self, s: CounterSeries) -> F64:
        return _resample(s, self.start, self.interval, self.n)


def _grid(series: dict[str, CounterSeries], interval_ns: int, cfg: AttributionSettings) -> _Grid:
    interval = interval_ns or 1
    start = min(int(s.time_ns[0]) for s in series.values())
    end = max(int(s.time_ns[-1]) for s in series.values()) + interval
    n = max(int((end - start) // interval), 1)
    samples = sum(len(s) for s in series.values())
    if n > cfg.counter_grid_points_per_sample * samples + (1 << 16):  # a clock jump (one sample years away):
        n = cfg.counter_grid_points_per_sample * samples + (1 << 16)  # a coarser grid, never one sized by the span
        interval = -(-(end - start) // n)
    return _Grid(start, end, interval, n)


def _busy_basis(series: dict[str, CounterSeries]) -> tuple[CounterSeries | None, str]:
    """The series that says when the GPU was busy: GPU-Util, else SM activity (DCGM)."""
    util = series.get("gpu_util_pct")
    if util is None or not np.isfinite(util.value).any():
        return series.get("sm_active_pct"), "sm_active_pct"
    return util, "gpu_util_pct"


def _busy_threshold(u: F64, valid: npt.NDArray[np.bool_], basis: str, cfg: AttributionSettings) -> float:
    if basis == "sm_active_pct":
        # SM activity rarely reaches GPU-Util's levels: split at the midpoint of its own range
        lo_v, hi_v = np.percentile(u[valid], [5, 95])
        return float((lo_v + hi_v) / 2) if hi_v - lo_v >= cfg.counter_sm_split_min_range_pct else cfg.counter_busy_min_pct
    return cfg.counter_busy_min_pct


def _busy_time(util: CounterSeries, g: _Grid, threshold: float) -> tuple[float, int]:
    """(busy ns, idle ns inside pauses): the time-weighted mean over the samples that have a
    value, scaled to the whole span."""
    w = time_weights(util.time_ns, g.interval)
    ok = np.isfinite(util.value)
    if not w[ok].sum() > 0:
        return 0.0, 0
    frac = np.clip(util.value[ok] / 100.0, 0.0, 1.0)
    scale = (g.end - g.start) / float(w[ok].sum())
    pause = util.value[ok] < threshold
    return float((frac * w[ok]).sum() * scale), int(((1.0 - frac[pause]) * w[ok][pause]).sum() * scale)


def _burst_pause_means(s: CounterSeries | None, g: _Grid, valid: npt.NDArray[np.bool_], busy: npt.NDArray[np.bool_]) -> tuple[float | None, float | None]:
    """A series' mean during bursts and during pauses (None where it has no value there)."""
    if s is None or not np.isfinite(s.value).any():
        return None, None
    v = g.values(s)
    ok = valid & np.isfinite(v)
    on, off = ok & busy, ok & ~busy
    return (float(v[on].mean()) if on.any() else None), (float(v[off].mean()) if off.any() else None)


def _gpu(log: CounterLog, gpu: str, mine: dict[str, CounterSeries], host_cpu: CounterSeries | None, cfg: AttributionSettings) -> GpuCounters | None:
    series = {m: s for m, s in mine.items() if len(s)}
    if not any(np.isfinite(s.value).any() for s in series.values()):
        return None  # columns without a single reading (the sampler could not read this GPU)
    g = _grid(series, log.interval_ns, cfg)
    dists = [d for m in DISTRIBUTION_METRICS if m in series for d in (_distribution(series[m], log.interval_ns or 1),) if d is not None]
    pattern = None
    underfilled = pause_idle = 0
    busy_ns = 0.0
    rx_ratio = cpu_pause = cpu_burst = None
    util, basis = _busy_basis(series)
    if util is not None and np.isfinite(util.value).any():
        u = g.values(util)
        valid = np.isfinite(u)
        threshold = _busy_threshold(u, valid, basis, cfg)
        busy = np.where(valid, u >= threshold, False)
        if valid.sum() >= 2:
            pattern = burst_pattern(busy[valid], g.interval, basis, threshold, cfg)
        busy_ns, pause_idle = _busy_time(util, g, threshold)
        sm = series.get("sm_active_pct")
        if sm is not None and basis == "gpu_util_pct" and np.isfinite(sm.value).any():
            smv = g.values(sm)
            under = valid & np.isfinite(smv) & (u >= cfg.counter_busy_min_pct) & (smv < cfg.counter_sm_active_low_pct)
            underfilled = int(under.sum()) * g.interval
        rx_on, rx_off = _burst_pause_means(series.get("pcie_rx_bytes_per_s"), g, valid, busy)
        if rx_on is not None and rx_off is not None and rx_on > 0:
            rx_ratio = rx_off / rx_on
        cpu_burst, cpu_pause = _burst_pause_means(host_cpu, g, valid, busy)
    return GpuCounters(
        gpu=gpu,
        name=log.gpus.get(gpu, {}).get("name", ""),
        start_ns=g.start,
        end_ns=g.end,
        interval_ns=g.interval,
        distributions=tuple(dists),
        pattern=pattern,
        underfilled_ns=underfilled,
        busy_ns=busy_ns,
        busy_basis=basis if util is not None else "",
        has_sm_active="sm_active_pct" in series and bool(np.isfinite(series["sm_active_pct"].value).any()),
        pcie_rx_pause_ratio=rx_ratio,
        pause_idle_ns=pause_idle,
        host_cpu_pause_pct=cpu_pause,
        host_cpu_burst_pct=cpu_burst,
    )


def analyse_counters(log: CounterLog | None, cfg: AttributionSettings, window: tuple[int, int] | None = None, notes: tuple[str, ...] = ()) -> CounterAnalysis:
    """Per-GPU counter figures over the whole log, or over ``window`` (same clock as the log).

    ``log`` is a Timeline's counters track (``tl.meta.counters``); a Timeline without one (a
    trace with no counter log) is a UsageError.
    """
    if log is None:
        raise UsageError("this Timeline has no counters track: analyse_counters needs a GPU counter log (nvidia-smi, dcgmi dmon, whyidle watch)")
    if window is not None:
        log = log.clip(*window)
    index = log.by_gpu()
    host = index.pop(HOST_SERIES, {})
    gpus = tuple(g for g in (_gpu(log, gid, mine, host.get("host_cpu_pct"), cfg) for gid, mine in index.items()) if g is not None)
    host_series = (host.get(m) for m in HOST_METRICS)
    host_dists = (_distribution(s, log.interval_ns or 1) for s in host_series if s is not None and len(s))
    host_figures = tuple(d for d in host_dists if d is not None)
    return CounterAnalysis(log.source_format, log.path, log.clock, log.interval_ns, gpus, window is not None, tuple(log.quality) + notes, host_figures)


def _match_gpus(log: CounterLog, devices: list[dict[str, object]], trace_devices: list[int]) -> tuple[dict[str, str], str]:
    """Counter GPU id -> label of the trace device it is, and how they were matched."""
    ids = log.gpu_ids
    if len(ids) == 1 and len(trace_devices) <= 1:
        return {ids[0]: str(trace_devices[0]) if trace_devices else ids[0]}, "one GPU in each"
    by_key: dict[str, str] = {}
    for d in devices:
        for k in ("uuid", "pci_bus_id"):
            v = d.get(k)
            if isinstance(v, str) and v:
                by_key[v.lower().removeprefix("gpu-").lstrip("0:")] = str(d.get("nsys_id", d.get("id", "")))
    out: dict[str, str] = {}
    for gid in ids:
        info = log.gpus.get(gid, {})
        for k in ("uuid", "pci_bus_id"):
            v = info.get(k, "").lower().removeprefix("gpu-").lstrip("0:")
            if v and v in by_key:
                out[gid] = by_key[v]
    if out:
        return out, "UUID / PCI bus id"
    wanted = {str(d) for d in trace_devices}
    return {gid: gid for gid in ids if gid in wanted}, (
        "index (the counter log's GPU index taken as the trace's device number; CUDA ordinals follow nvidia-smi's "
        "order only with CUDA_DEVICE_ORDER=PCI_BUS_ID)"
    )


# How to record each counter log with wall-clock times, so it can be joined with a trace.
_TIMESTAMPED_DEFAULT = "nvidia-smi dmon -o DT -d 1 > gpu.log, or whyidle watch -o gpu.csv"
_TIMESTAMPED = {
    "dcgmi dmon": (
        "dcgmi dmon prints no times; record nvidia-smi dmon -o DT (date and time on each row) or "
        "whyidle watch -o gpu.csv beside it, or nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv -lms 100"
    ),
    "nvidia-smi dmon": "nvidia-smi dmon -o DT (date and time on each row)",
    "nvidia-smi --query-gpu": "nvidia-smi --query-gpu=timestamp,utilization.gpu,... --format=csv -lms 100 (timestamp first)",
}


def join_counters(
    log: CounterLog, window: tuple[int, int], devices: list[dict[str, object]], trace_devices: list[int], cfg: AttributionSettings
) -> CounterAnalysis:
    """The counters over a trace's window, when both are on the UTC epoch clock.

    When they cannot be aligned (a log without absolute times, a trace on its own clock, or no
    overlap), the whole log is analysed on its own and a note says why it was not joined.
    """
    lo, hi = window
    span = log.span_ns
    if log.clock != "epoch":
        note = (
            f"the counter log ({log.source_format}) has no absolute timestamps, so it could not be aligned with the trace; "
            f"it was analysed on its own. To join, record with timestamps: {_TIMESTAMPED.get(log.source_format, _TIMESTAMPED_DEFAULT)}"
        )
        return analyse_counters(log, cfg, notes=(note,))
    if not on_epoch_clock(lo):
        note = "the trace's timestamps are not on the UTC epoch clock, so the counter log could not be aligned with it; it was analysed on its own"
        return analyse_counters(log, cfg, notes=(note,))
    if span is None or span[1] <= lo or span[0] >= hi:
        note = (
            "the counter log does not overlap the trace's window on the wall clock (check the time zone of "
            "nvidia-smi timestamps: --counters-utc-offset); it was analysed on its own"
        )
        return analyse_counters(log, cfg, notes=(note,))
    mapping, basis = _match_gpus(log, devices, trace_devices)
    if not mapping:
        note = "no GPU of the counter log matches a device of the trace; the log was analysed on its own over the trace's window"
        return analyse_counters(log, cfg, window=(lo, hi), notes=(note,))
    kept = CounterLog(
        log.source_format,
        log.path,
        log.clock,
        log.interval_ns,
        tuple(s for s in log.series if s.gpu in mapping or s.gpu == HOST_SERIES),
        {g: {**log.gpus.get(g, {}), "trace_device": mapping[g]} for g in mapping},
        log.quality,
    )
    covered = (min(hi, span[1]) - max(lo, span[0])) / (hi - lo) if hi > lo else 0.0
    notes = [f"counters joined with the trace by UTC time over its window; GPUs matched by {basis}"]
    if covered < 0.99:
        notes.append(f"the counter log covers {covered:.0%} of the trace's window")
    if log.interval_ns > (hi - lo) / 4:
        notes.append(
            f"the counters were sampled every {log.interval_ns / 1e6:g} ms, coarse for a {(hi - lo) / 1e6:.0f} ms window: "
            "their figures are rough there"
        )
    return analyse_counters(kept, cfg, window=(lo, hi), notes=tuple(notes))
