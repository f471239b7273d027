"""Sort-based set helpers for large integer arrays.

numpy 2.x's ``np.unique`` hashes integer arrays; on millions of wide-range int64 timestamps that
took 3.5 s where sorting took 0.05 s (measured here, 3 M values). These helpers sort instead.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

_I = TypeVar("_I", bound=np.generic)

__all__ = ["unique_sorted", "unique_inverse", "setdiff_sorted"]


def unique_sorted(a: npt.NDArray[_I]) -> npt.NDArray[_I]:
    """The distinct values of ``a``, ascending (as ``np.unique(a)``)."""
    if a.size == 0:
        return np.sort(a)
    s = np.sort(a)
    keep = np.empty(s.size, dtype=np.bool_)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(a: npt.NDArray[_I]) -> tuple[npt.NDArray[_I], npt.NDArray[np.int64]]:
    """(distinct values ascending, index of each element's value): ``np.unique(a, return_inverse=True)``."""
    if a.size == 0:
        return np.sort(a), np.empty(0, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = np.empty(s.size, dtype=np.bool_)
    first[0] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    inverse = np.empty(a.size, dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse


def setdiff_sorted(a: npt.NDArray[_I], b: npt.NDArray[_I]) -> npt.NDArray[_I]:
    """Distinct values of ``a`` not in ``b``, ascending (as ``np.setdiff1d(a, b)``)."""
    ua = unique_sorted(a)
    ub = unique_sorted(b)
    if ub.size == 0 or ua.size == 0:
        return ua
    pos = np.minimum(np.searchsorted(ub, ua), ub.size - 1)
    keep: npt.NDArray[np.bool_] = ub[pos] != ua
    return ua[keep]
