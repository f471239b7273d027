"""Human-readable durations for text output (renderers and the sentences in findings)."""

from __future__ import annotations

__all__ = ["format_ns", "format_ms"]


def format_ns(ns: float | None) -> str:
    """A duration with a unit chosen for its size: '2.10 s', '352.4 ms', '4.0 us', '800 ns'."""
    if ns is None:
        return "n/a"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def format_ms(ns: float) -> str:
    """A duration in milliseconds, one decimal: the unit findings state idle time in."""
    return f"{ns / 1e6:.1f} ms"
