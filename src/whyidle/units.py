"""Human-readable durations for text output (renderers and the sentences in findings).

One formatter, :func:`format_ns`, and the styles whyidle writes durations in (:class:`Style`)::

    DEFAULT  unit by size: '2.10 s', '352.4 ms', '4.0 us', '800 ns'      (reports, findings)
    CARD     as DEFAULT, whole milliseconds from 10 ms to 1 s: '352 ms'   (HTML headline cards)
    CHANGE   as CARD, whole microseconds below 1 ms: '352 us'             (before/after changes)
    COARSE   '1.5 s' from a second, else whole milliseconds: '250 ms'     (counter-log spans)
    MS       always milliseconds, one decimal: '352.4 ms'                 (idle per step)
    MS2      always milliseconds, two decimals: '3.52 ms'                 (latencies, delays)
    MS_CELL  a table cell under an 'ms' header: '352.4', '-' when None

The unit is chosen by the magnitude, so a negative duration reads like its positive one.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Style", "format_ns", "format_ms", "DEFAULT", "CARD", "CHANGE", "COARSE", "MS", "MS2", "MS_CELL"]


class Style(NamedTuple):
    """How :func:`format_ns` writes a duration."""

    unit: str | None = None  # a fixed unit ("ms"), or None: chosen by size
    s_digits: int = 2
    ms_digits: int = 1
    whole_ms_from_ns: float = float("inf")  # milliseconds at or above this are written whole
    below_ms: str = "us"  # under 1 ms: "us" (1 decimal, then ns), "whole_us", or "ms" (ms_digits)
    show_unit: bool = True
    missing: str = "n/a"  # for None


DEFAULT = Style()
CARD = Style(whole_ms_from_ns=1e7)
CHANGE = Style(whole_ms_from_ns=1e7, below_ms="whole_us")
COARSE = Style(s_digits=1, ms_digits=0, below_ms="ms")
MS = Style(unit="ms")
MS2 = Style(unit="ms", ms_digits=2)
MS_CELL = Style(unit="ms", show_unit=False, missing="-")


def format_ns(ns: float | None, style: Style = DEFAULT) -> str:
    """A duration given in nanoseconds, written in ``style`` (see the module docstring)."""
    if ns is None:
        return style.missing
    a = abs(ns)
    if style.unit == "ms" or (style.unit is None and (1e6 <= a < 1e9 or (a < 1e6 and style.below_ms == "ms"))):
        digits = 0 if a >= style.whole_ms_from_ns else style.ms_digits
        text, unit = f"{ns / 1e6:.{digits}f}", "ms"
    elif a >= 1e9:
        text, unit = f"{ns / 1e9:.{style.s_digits}f}", "s"
    elif style.below_ms == "whole_us":
        text, unit = f"{ns / 1e3:.0f}", "us"
    elif a >= 1e3:
        text, unit = f"{ns / 1e3:.1f}", "us"
    else:
        text, unit = f"{ns:.0f}", "ns"
    return f"{text} {unit}" if style.show_unit else text


def format_ms(ns: float) -> str:
    """A duration in milliseconds, one decimal: the unit findings state idle time in (``MS``)."""
    return format_ns(ns, MS)
