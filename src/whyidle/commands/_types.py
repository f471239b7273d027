"""Option value types: a number the command line takes is checked here, once, as argparse reads it.

``type=number(lo, hi)`` refuses what is not a finite number within ``[lo, hi]`` (``inf``, ``nan``,
``1e20`` milliseconds, a negative interval) with one line and exit 2, the way argparse reports a
value that is not a number at all; no option value reaches the library unchecked. ``numbers(...)``
is the same for a comma-separated list (``--delays-ms 0,1,2``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

__all__ = ["number", "integer", "numbers", "integers", "WIDTH", "MS", "FRACTION"]

_T = TypeVar("_T")
_N = TypeVar("_N", int, float)


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _bounds(lo: float | None, hi: float | None, lo_open: bool) -> str:
    low = "" if lo is None else f"{'above' if lo_open else 'at least'} {lo:,.10g}"
    high = "" if hi is None else f"at most {hi:,.10g}"
    return " and ".join(x for x in (low, high) if x)


def _check(x: float, text: str, lo: float | None, hi: float | None, lo_open: bool, what: str) -> None:
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{_show(text)} is not a finite {what}")
    if (lo is not None and (x <= lo if lo_open else x < lo)) or (hi is not None and x > hi):
        raise argparse.ArgumentTypeError(f"{_show(text)}: expected a {what} {_bounds(lo, hi, lo_open)}")


def _typed(convert: Callable[[str], _N], not_one: str, kind: str, lo: float | None, hi: float | None, lo_open: bool) -> Callable[[str], _N]:
    """``convert(text)``, then finite and within the bounds; ``not_one`` and ``kind`` name it in the messages."""

    def parse(text: str) -> _N:
        try:
            x = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_show(text)} is not {not_one}") from None
        _check(x, text, lo, hi, lo_open, kind)
        return x

    parse.__name__ = kind.replace(" ", "_")
    return parse


def _int(text: str) -> int:
    if len(text) > 40:  # Python parses 4,300 digits; no option needs more than 40
        raise ValueError(text)
    return int(text)


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> Callable[[str], float]:
    """A finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    return _typed(float, "a number", "number", lo, hi, lo_open)


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An integer in ``[lo, hi]``."""
    return _typed(_int, "an integer", "whole number", lo, hi, False)


def _listed(one: Callable[[str], _T], what: str) -> Callable[[str], list[_T]]:
    """Comma-separated values, each parsed by ``one``."""

    def parse(text: str) -> list[_T]:
        out = [one(x.strip()) for x in text.split(",") if x.strip()]
        if not out:
            raise argparse.ArgumentTypeError(f"{_show(text)}: expected comma-separated {what}")
        return out

    parse.__name__ = what.replace(" ", "_")
    return parse


def numbers(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> Callable[[str], list[float]]:
    """Comma-separated finite floats, each in ``[lo, hi]``."""
    return _listed(number(lo, hi, lo_open=lo_open), "numbers")


def integers(lo: int | None = None, hi: int | None = None) -> Callable[[str], list[int]]:
    """Comma-separated integers, each in ``[lo, hi]``."""
    return _listed(integer(lo, hi), "whole numbers")


# Terminal widths: below 20 columns no table fits (a width of -3 printed nothing and exited 0).
WIDTH = integer(20, 10_000)
# A duration in milliseconds: above 0, at most a day (an SLO or an interval past that is a typo).
MS = number(0, 86_400_000, lo_open=True)
FRACTION = number(0, 1)
