"""Measuring one trial: warm-up excluded, windows of steps, the steady-state rule.

::

    steps   w w w w w | 1 2 3 4 5 | 6 7 8 9 10 | 11 12 13 14 15 | ...
            warm-up   | window 1  | window 2   | window 3       |  stop when the last 3 windows'
            (compile) |  samples/s per window                   |  samples/s agree within 10%

A window closes after ``window_steps`` steps once it has lasted ``window_min_ns``. Its time runs from the end of the previous window to its own end, after ``sync()`` (on
CUDA a device synchronise, so queued work is counted in the window that queued it). The trial
stops at the first steady point, at ``max_steps`` measured steps, or when its time budget runs
out (then ``steady`` is False and the figures cover what was measured).

The step loop uses the step tracker (capture/tracker.py) for per-step times and the data wait.
The clock and the sync are injected; tests drive them with fakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from whyidle.analyses.steady import is_steady, median
from whyidle.config import SweepConfig

__all__ = ["is_steady", "median", "percentile", "Measurement", "measure_workload", "cycle"]  # is_steady, median: analyses/steady.py


def percentile(values: list[int], q: float) -> int | None:
    """The nearest-rank percentile (``q`` in 0..100) of ``values``."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


@dataclass
class Measurement:
    window_rates: list[float] = field(default_factory=list)  # samples/s per window
    step_ns: list[int] = field(default_factory=list)
    data_wait_ns: int = 0
    measured_ns: int = 0
    warmup_steps: int = 0
    warmup_ns: int = 0
    steady: bool = False
    capped: bool = False  # stopped by the step limit or the time budget, not by the steady rule
    losses: list[Any] = field(default_factory=list)  # raw step returns, first guard_steps

    @property
    def steps(self) -> int:
        return len(self.step_ns)

    def summary(self) -> dict[str, Any]:
        """The TrialResult fields this measurement fills."""
        rates = self.window_rates
        return {
            "samples_per_s": median(rates) if rates else None,
            "samples_per_s_min": min(rates) if rates else None,
            "samples_per_s_max": max(rates) if rates else None,
            "steady": self.steady,
            "warmup_steps": self.warmup_steps,
            "measured_steps": self.steps,
            "warmup_ns": self.warmup_ns,
            "measure_ns": self.measured_ns,
            "step_ns_p50": percentile(self.step_ns, 50),
            "step_ns_p95": percentile(self.step_ns, 95),
            "data_wait_share": self.data_wait_ns / self.measured_ns if self.measured_ns > 0 else None,
        }


def cycle(loader: Any) -> Iterator[Any]:
    """The loader's batches, iterating it again each time it runs out (an empty loader ends)."""
    while True:
        empty = True
        for b in loader:
            empty = False
            yield b
        if empty:
            return


def measure_workload(
    step: Callable[[Any], Any],
    batches: Iterator[Any],
    samples_per_step: int | None,
    *,
    warmup: int,
    max_steps: int,
    budget_ns: int,
    cfg: SweepConfig,
    clock: Callable[[], int],
    sync: Callable[[], None] = lambda: None,
) -> Measurement:
    """Run ``warmup`` steps, then windows of steps until steady, ``max_steps`` or ``budget_ns``."""
    from whyidle.capture.tracker import StepTracker, batch_samples

    m = Measurement()
    t_start = clock()
    tr: StepTracker[Any] = StepTracker(batches, skip_first=0, clock=clock, device_timer=None)
    it: Any = iter(tr)
    done = 0  # steps run, warm-up included
    window_t0 = 0
    window_samples = 0
    window_n = 0  # steps in the window so far
    window_first = 0  # index into the tracker's steps of the window's first step
    for batch in it:
        out = step(batch)
        if done < cfg.guard_steps:
            m.losses.append(out)
        done += 1
        if done <= warmup:
            if done == warmup:
                sync()
                window_t0 = clock()
                m.warmup_ns = window_t0 - t_start
                m.warmup_steps = warmup
                window_first = done  # the tracker closes step k when batch k+1 is asked for
            continue
        if warmup == 0 and done == 1:
            window_t0 = t_start
        n = samples_per_step if samples_per_step is not None else batch_samples(batch)
        window_samples += n or 0
        measured = done - warmup
        window_n += 1
        if window_n >= cfg.window_steps:
            if clock() - window_t0 < cfg.window_min_ns:
                continue
            sync()
            t = clock()
            window_n = 0
            if t > window_t0 and window_samples:
                m.window_rates.append(window_samples / ((t - window_t0) / 1e9))
            m.measured_ns += t - window_t0
            window_t0, window_samples = t, 0
            if is_steady(m.window_rates, cfg):
                m.steady = True
                break
            if (measured >= max_steps and len(m.window_rates) >= cfg.steady_windows) or t - t_start >= budget_ns:
                m.capped = True
                break
    it.close()  # closes the step in progress
    rows = tr.stats(wait=False).steps[window_first : window_first + max(done - warmup, 0)]
    m.step_ns = [r.duration_ns for r in rows]
    m.data_wait_ns = sum(r.data_wait_ns for r in rows)
    return m
