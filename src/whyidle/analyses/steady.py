"""The steady-state rule shared by every measurement whyidle takes (pure).

A measurement is taken in windows (of steps for a sweep's trial, of passes for a latency curve);
it is steady when the last ``steady_windows`` windows' figures agree: ``(max - min) <=
steady_tolerance x median`` (``SweepConfig``; Triton's perf_analyzer declares a measurement stable
when its last 3 windows agree within 10%). The sweep (``sweep/measure.py``) and the batching
tuner's latency curve (``serving/passes.py``) both stop on it.
"""

from __future__ import annotations

from whyidle.config import SweepConfig

__all__ = ["is_steady", "median"]


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def is_steady(window_rates: list[float], cfg: SweepConfig) -> bool:
    """The last ``steady_windows`` rates agree: (max - min) <= tolerance x median."""
    n = cfg.steady_windows
    if len(window_rates) < n:
        return False
    last = window_rates[-n:]
    med = median(last)
    return med > 0 and (max(last) - min(last)) <= cfg.steady_tolerance * med
