"""Kineto values -> column values: times to int64 nanoseconds, ids, sizes, launch dimensions.

Shared by both Kineto readers (through :mod:`whyidle.sources.kineto_columns`). Each conversion has
a fast path for the common case (every value of one Python type: one C-level pass with ``map``
and one numpy conversion) and a careful path, per value, that defines the meaning of everything
else (float texts kept exact, numeric strings, out-of-range values, booleans).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from itertools import chain, compress
from typing import Any

import numpy as np

from whyidle.errors import TraceFormatError

_NONE = type(None)


class _Num(str):
    """The source text of a JSON float (a str subclass, so it is told apart from JSON strings)."""

    __slots__ = ()


# Times in microseconds must stay within this magnitude so that nanoseconds, plus a base time and
# a duration, fit int64 (2**62 ns is 146 years: epoch microseconds today are 1.7e15 of 4.6e15).
MAX_TIME_NS = 2**62
_MAX_US = MAX_TIME_NS // 1000
# The largest world size believed: 2**24 ranks is 100x the largest training jobs reported (about
# 100k GPUs); a larger distributedInfo.world_size is a damaged or hostile file.
MAX_WORLD_SIZE = 1 << 24


def _time_range_error(path: str, what: str, v: Any) -> TraceFormatError:
    text = str(v)
    shown = text if len(text) <= 40 else text[:40] + "..."
    return TraceFormatError(path, f"has a {what} of {shown} microseconds, too large to be a time (more than {_MAX_US:.2e}); expected microseconds")


def _to_ns(values: list[Any], style: str, path: str, what: str) -> np.ndarray:
    """Microsecond values (int, float, float text) -> int64 nanoseconds.

    Values beyond :data:`MAX_TIME_NS` are refused (never wrapped into negative times)."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    # Fast path: numpy infers int64 only when every value is a Python int (the typed decoder
    # admits no bools). Anything else (floats, float texts, strings) takes the careful path.
    try:
        guess = np.asarray(values)
    except (ValueError, OverflowError):
        guess = np.empty(0)
    if guess.dtype == np.int64 and guess.shape == (n,):
        lo, hi = int(guess.min()), int(guess.max())
        if hi > _MAX_US or lo < -_MAX_US:
            raise _time_range_error(path, what, hi if hi > _MAX_US else lo)
        return guess * 1000
    types = set(map(type, values))
    if types == {float}:  # the same as the mixed path below, without its per-value tests
        fl = guess if guess.dtype == np.float64 and guess.shape == (n,) else np.asarray(values, dtype=np.float64)
        if not np.isfinite(fl).all():
            raise TraceFormatError(path, f"has a {what} that is not a finite number")
        if float(np.abs(fl).max()) > _MAX_US:
            raise _time_range_error(path, what, float(np.abs(fl).max()))
        return np.rint(fl * 1000.0).astype(np.int64)
    if types <= {int, float}:
        is_int = np.fromiter(map(int.__instancecheck__, values), dtype=np.bool_, count=n) if int in types else np.zeros(n, dtype=np.bool_)
        is_float = ~is_int
        out = np.empty(n, dtype=np.int64)
        ints = [v for v in values if type(v) is int]
        for v in ints:
            if not -_MAX_US <= v <= _MAX_US:
                raise _time_range_error(path, what, v)
        out[is_int] = np.asarray(ints, dtype=np.int64) * 1000
        fl = np.asarray([v for v in values if type(v) is float], dtype=np.float64)
        if not np.isfinite(fl).all():
            raise TraceFormatError(path, f"has a {what} that is not a finite number")
        if fl.size and float(np.abs(fl).max()) > _MAX_US:
            raise _time_range_error(path, what, float(np.abs(fl).max()))
        out[is_float] = np.rint(fl * 1000.0).astype(np.int64)
        return out
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = _one_to_ns(v, style, path, what)
    return out


def _one_to_ns(v: Any, style: str, path: str, what: str) -> int:
    """One value of any accepted kind (int, decimal text) -> ns, or the error naming what it is."""
    if type(v) is int:
        if not -_MAX_US <= v <= _MAX_US:
            raise _time_range_error(path, what, v)
        return v * 1000
    elif type(v) is _Num:
        dot = v.find(".")
        if dot >= 0 and "e" not in v and "E" not in v:
            whole = v[:dot] or "0"
            frac = v[dot + 1 :]
            neg = whole.startswith("-")
            if style == "unpadded_ns":
                ns = int(frac) if frac else 0
            else:
                digits = (frac + "000")[:3]
                ns = int(digits)
                if len(frac) > 3 and frac[3] >= "5":
                    ns += 1
            if len(whole) > 19 or not -_MAX_US <= int(whole) <= _MAX_US:
                raise _time_range_error(path, what, v)
            w = int(whole)
            return w * 1000 - ns if neg else w * 1000 + ns
        else:
            try:
                d = Decimal(v)
            except InvalidOperation:
                raise TraceFormatError(path, f"has a non-numeric {what} {v!r}") from None
            if not d.is_finite():
                raise TraceFormatError(path, f"has a {what} that is not a finite number ({v[:40]})")
            if abs(d) > _MAX_US:
                raise _time_range_error(path, what, v)
            return int((d * 1000).to_integral_value())
    elif v is None:
        raise TraceFormatError(path, f"has a complete event without a {what}; expected a number of microseconds")
    elif type(v) is bool:
        raise TraceFormatError(path, f"has a {what} that is a boolean ({v}); expected a number of microseconds")
    else:
        raise TraceFormatError(path, f"has a {what} that is a {type(v).__name__} ({str(v)[:40]!r}); expected a number of microseconds")


_I64 = 2**63


def _as_int(v: Any, default: int = -1) -> int:
    """``v`` as an int64 value: ints and numeric texts; anything else (or out of range) is ``default``."""
    if type(v) is int:
        return v if -_I64 <= v < _I64 else default
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return default
        if not -_I64 <= f < _I64:  # also inf and nan
            return default
        return int(f)
    return default


def _floats(v: Any) -> Any:
    """``v`` with float texts (_Num, from a decoder's float hook) turned back into floats."""
    if type(v) is _Num:
        try:
            return float(v)
        except ValueError:  # pragma: no cover - _Num is always a JSON number
            return v
    if isinstance(v, dict):
        return {k: _floats(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_floats(x) for x in v]
    return v


def _base_ns(path: str, v: Any) -> int:
    """``baseTimeNanoseconds`` as an int, read the same by both readers whatever its JSON form
    (integer, float, float text, numeric string); 0 when absent or not a number."""
    if type(v) is bool:
        return 0
    if type(v) is int:
        n = v
    elif isinstance(v, (float, str)):  # _Num (exact float text) is a str
        try:
            d = Decimal(str(v).strip())
        except InvalidOperation:
            return 0
        if not d.is_finite():
            raise TraceFormatError(path, f"has a 'baseTimeNanoseconds' that is not a finite number ({str(v)[:40]})")
        n = int(d.to_integral_value())
    else:
        return 0
    if not -MAX_TIME_NS < n < MAX_TIME_NS:
        raise TraceFormatError(path, f"has a 'baseTimeNanoseconds' of {str(v)[:40]}, too large to be a time (more than {MAX_TIME_NS:.2e} ns)")
    return n


def _as_float(v: Any) -> float:
    if v is None:
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _dims(v: Any) -> int:
    """A launch dimension ([x, y, z] in Kineto's 'grid' and 'block') as its product; -1 if unknown
    (a product beyond int64 is no launch a GPU can run: unknown too)."""
    if type(v) is list and v and all(type(x) is int and x > 0 for x in v):
        out = 1
        for x in v:
            out *= x
        return out if out < _I64 else -1
    return -1


def _int_or(values: list[Any], default: int) -> np.ndarray:
    """int64 ids and sizes; a value that is not an int64 number counts as unknown (``default``)."""
    types = set(map(type, values))
    if types <= {int, _NONE}:
        plain = [default if v is None else v for v in values] if _NONE in types else values
        try:
            return np.array(plain, dtype=np.int64)
        except OverflowError:  # beyond int64: those values are unknown, below
            pass
    return np.array([v if type(v) is int and -_I64 <= v < _I64 else (_as_int(v, default) if v is not None else default) for v in values], dtype=np.int64)


def _dims_many(values: list[Any]) -> np.ndarray:
    """:func:`_dims` of each value, as int64; the lists of three small positive ints (kernels'
    grid and block) in one pass, the rest (copies have none) one by one."""
    three = [type(v) is list and len(v) == 3 for v in values]
    rows = np.flatnonzero(three) if values else np.empty(0, dtype=np.int64)
    if rows.size:
        flat = list(chain.from_iterable(compress(values, three)))
        if set(map(type, flat)) == {int}:
            a = np.array(flat, dtype=np.int64).reshape(rows.size, 3)
            if int(a.min()) > 0 and int(a.max()) < 1 << 21:  # the product fits int64
                if rows.size == len(values):
                    prod: np.ndarray = a.prod(axis=1)
                    return prod
                out = np.array([-1 if k else _dims(v) for v, k in zip(values, three)], dtype=np.int64)
                out[rows] = a.prod(axis=1)
                return out
    return np.array([_dims(v) for v in values], dtype=np.int64)


def _floats_or_nan(values: list[Any]) -> np.ndarray:
    """:func:`_as_float` of each value, as float64: numbers and None in one pass."""
    types = set(map(type, values))
    if types <= {float, int, _NONE}:
        plain = [np.nan if v is None else v for v in values] if _NONE in types else values
        try:
            return np.array(plain, dtype=np.float64)
        except OverflowError:  # an int beyond float64: per value, below
            pass
    return np.array([_as_float(v) for v in values], dtype=np.float64)
