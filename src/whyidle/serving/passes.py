"""Timing a model's passes per batch size: until steady, outliers dropped, the curve monotone.

A latency curve from 20 passes per size on a busy CPU is noise: one pass preempted for 3 ms among
passes of 0.05 ms is 5% of the draws the batching simulator makes, and the capacity table then
jumps up and down with the batch size. So, per batch size::

    warm-up | window 1 | window 2 | window 3 | ...   each window: ``iters`` passes, its median
              stop when the last 3 windows' medians agree within 10% (the sweep's steady rule,
              analyses/steady.py), after ServingSettings.latency_max_windows windows, or once three
              windows are in and ServingSettings.latency_budget_ns of passes were timed

* the passes of the steady windows are kept (all of them when it never settled, with a note that
  the spread is too large to decide between close settings);
* a pass beyond Tukey's far-out fence (Q3 + 3 x IQR) and over
  ``ServingSettings.latency_outlier_min_factor`` x the median is dropped and counted in a note;
* latency does not fall as the batch grows (the larger batch does the smaller one's work and
  more), so a size measured faster than a smaller one is raised to it; a raise beyond the steady
  tolerance is noted.

The pass timer is injected (``time_pass(batch_size) -> ns``): ``perf_counter_ns`` around a call on
the CPU, CUDA events on a GPU, a fake clock in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from whyidle.analyses.steady import is_steady, median
from whyidle.config import Config, SweepConfig
from whyidle.units import MS2, format_ns

__all__ = ["Row", "row_of", "SizeTiming", "time_size", "drop_outliers", "monotone_rows", "measure_curve"]

# batch size, median ns, p90 ns (None: unknown), every pass kept (None: not kept)
Row = tuple[int, float, float | None, tuple[float, ...] | None]
TimePass = Callable[[int], float]


def row_of(bs: int, times: Sequence[float]) -> Row:
    """A curve row from the passes of one batch size: median, p90 and the passes, sorted."""
    s = sorted(times)
    return (bs, s[len(s) // 2], s[min(int(len(s) * 0.9), len(s) - 1)], tuple(s))


@dataclass(frozen=True)
class SizeTiming:
    batch_size: int
    kept_ns: tuple[float, ...]
    dropped_ns: tuple[float, ...]  # outliers
    windows: int
    spread: float  # (max - min) / median of the last steady_windows windows' medians
    steady: bool


def drop_outliers(times: Sequence[float], cfg: Config) -> tuple[list[float], list[float]]:
    """(kept, dropped): a pass is dropped beyond Q3 + k x IQR and over min_factor x the median."""
    a = np.asarray(times, dtype=np.float64)
    q1, q3 = np.percentile(a, [25, 75])
    fence = max(q3 + cfg.serving.latency_outlier_iqrs * (q3 - q1), cfg.serving.latency_outlier_min_factor * float(np.median(a)))
    return [t for t in times if t <= fence], [t for t in times if t > fence]


def time_size(time_pass: TimePass, bs: int, iters: int, cfg: Config, sweep: SweepConfig) -> SizeTiming:
    """Windows of ``iters`` passes of batch ``bs`` until steady or out of windows or time."""
    windows: list[list[float]] = []
    medians: list[float] = []
    elapsed = 0.0
    n = sweep.steady_windows
    while True:
        w = [time_pass(bs) for _ in range(iters)]
        windows.append(w)
        medians.append(median(w))
        elapsed += sum(w)
        steady = is_steady([1e9 / m if m > 0 else 0.0 for m in medians], sweep)
        if steady or len(windows) >= cfg.serving.latency_max_windows or (len(windows) >= n and elapsed >= cfg.serving.latency_budget_ns):
            break
    used = windows[-n:] if steady else windows
    kept, dropped = drop_outliers([t for w in used for t in w], cfg)
    last = medians[-n:]
    mid = median(last)
    spread = (max(last) - min(last)) / mid if mid > 0 else 0.0
    return SizeTiming(bs, tuple(kept), tuple(dropped), len(windows), spread, steady)


def monotone_rows(rows: list[Row], tolerance: float) -> tuple[list[Row], list[str]]:
    """Raise a size measured faster than a smaller one to that one (its passes scaled alike)."""
    out: list[Row] = []
    notes: list[str] = []
    for bs, med, q90, smp in sorted(rows):
        if out and med < out[-1][1]:
            prev_bs, prev_med = out[-1][0], out[-1][1]
            f = prev_med / med
            if f - 1 > tolerance:
                notes.append(
                    f"batch {bs} measured faster ({format_ns(med, MS2)}) than batch {prev_bs} ({format_ns(prev_med, MS2)}); "
                    f"latency does not fall as the batch grows, so it is taken as {format_ns(prev_med, MS2)} (the difference is noise)"
                )
            med, q90 = prev_med, None if q90 is None else q90 * f
            smp = None if smp is None else tuple(t * f for t in smp)
        out.append((bs, med, q90, smp))
    return out, notes


def _size_notes(t: SizeTiming, iters: int, sweep: SweepConfig) -> list[str]:
    notes = []
    if t.dropped_ns:
        total = len(t.kept_ns) + len(t.dropped_ns)
        notes.append(
            f"batch {t.batch_size}: {len(t.dropped_ns)} of {total} passes dropped as outliers (slowest "
            f"{format_ns(max(t.dropped_ns), MS2)} against a median {format_ns(median(list(t.kept_ns)), MS2)}): "
            "pauses of the host, not the model"
        )
    if not t.steady:
        notes.append(
            f"batch {t.batch_size}: the pass times did not settle in {t.windows} windows of {iters} passes (the last "
            f"{sweep.steady_windows} windows' medians spread {t.spread:.0%}, more than {sweep.steady_tolerance:.0%}): "
            "too noisy to decide between settings closer than that; measure on a quiet machine"
        )
    return notes


def measure_curve(
    time_pass: TimePass, batch_sizes: Sequence[int], *, warmup: int, iters: int, cfg: Config | None = None, sweep: SweepConfig | None = None
) -> tuple[list[Row], list[str]]:
    """The curve's rows (sizes ascending, monotone) and the notes on what was dropped or unsteady."""
    cfg, sweep = cfg or Config(), sweep or SweepConfig()
    rows: list[Row] = []
    notes: list[str] = []
    for bs in sorted(set(batch_sizes)):
        for _ in range(warmup):
            time_pass(bs)
        t = time_size(time_pass, bs, iters, cfg, sweep)
        rows.append(row_of(bs, t.kept_ns))
        notes += _size_notes(t, iters, sweep)
    rows, raised = monotone_rows(rows, sweep.steady_tolerance)
    return rows, notes + raised
