"""Check a result read back from a file against its declared types, field by field.

A saved report is an input: :mod:`whyidle.findings.saved` builds the diagnosis from its JSON, and
a renderer then trusts every field (a title that is a number, a share that is NaN, a name index
past the string table crashed ``str()`` and ``save()`` at 16 places). :func:`check_struct` walks
the built result once, against the annotations of its ``msgspec.Struct`` classes, so that nothing
malformed reaches a renderer, and names the first field that is wrong::

    findings[0].evidence.top_ops[1][0]: expected str, found int 5

Numbers must be finite, integers within +-2**62 (sums and differences still fit int64), arrays
numpy arrays of the declared dtype kind; ``Any`` is not checked.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from functools import cache
from typing import Any

import msgspec
import numpy as np

__all__ = ["check_struct", "Malformed", "Trail"]

_INT_LIMIT = 2**62


class Malformed(ValueError):
    """A field of a result does not hold what its type declares; ``field`` is its path."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


# Modules whose classes the result types name only under TYPE_CHECKING (findings/model.py), so
# that their string annotations resolve here.
_TYPE_MODULES = (
    "whyidle.analyses.advice_context", "whyidle.analyses.counters", "whyidle.analyses.kernels",
    "whyidle.analyses.names", "whyidle.analyses.strip", "whyidle.analyses.utilization", "whyidle.analyses.work",
)  # fmt: skip


@cache
def _names() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in _TYPE_MODULES:
        out.update(vars(importlib.import_module(m)))
    return out


@cache
def _hints(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls, localns=_names())
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else cls.__struct_fields__  # type: ignore[attr-defined]
    return tuple((name, hints[name]) for name in names)


def _shown(v: object) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _scalar(v: object, tp: type, where: str, finite: bool = True) -> None:
    if tp is bool:
        ok = isinstance(v, (bool, np.bool_))
    elif tp is int:
        ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) and -_INT_LIMIT <= int(v) <= _INT_LIMIT
    elif tp is float:
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and (math.isfinite(float(v)) or not finite and math.isnan(float(v)))
    else:
        ok = isinstance(v, tp)
    if not ok:
        raise Malformed(where, f"expected {'a finite ' if tp in (int, float) else ''}{tp.__name__}, found {_shown(v)}")


def _array(v: object, tp: Any, where: str) -> None:
    if not isinstance(v, np.ndarray):
        raise Malformed(where, f"expected an array, found {_shown(v)}")
    args = typing.get_args(tp)
    dtype = typing.get_args(args[1])[0] if len(args) == 2 and typing.get_args(args[1]) else None
    if isinstance(dtype, type) and issubclass(dtype, np.generic) and not np.issubdtype(v.dtype, dtype):
        raise Malformed(where, f"expected an array of {dtype.__name__}, found {v.dtype}")


def _items(v: object, tp: Any, where: str, finite: bool) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple or origin is list:
        if not isinstance(v, (tuple, list)):
            raise Malformed(where, f"expected a list, found {_shown(v)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(v) != len(args):
                raise Malformed(where, f"expected {len(args)} items, found {len(v)}")
            for i, (x, t) in enumerate(zip(v, args)):
                check_value(x, t, f"{where}[{i}]", finite)
            return
        for i, x in enumerate(v):
            check_value(x, args[0] if args else Any, f"{where}[{i}]", finite)
        return
    if not isinstance(v, dict):
        raise Malformed(where, f"expected a mapping, found {_shown(v)}")
    kt, vt = args if args else (Any, Any)
    for k, x in v.items():
        check_value(k, kt, f"{where} key", finite)
        check_value(x, vt, f"{where}[{k!r}]", finite)


def _union(v: object, tp: Any, where: str, finite: bool) -> None:
    options = typing.get_args(tp)
    if v is None and type(None) in options:
        return
    last: Malformed | None = None
    for t in options:
        if t is type(None):
            continue
        try:
            check_value(v, t, where, finite)
            return
        except Malformed as exc:
            last = exc
    assert last is not None
    raise last


def check_value(v: object, tp: Any, where: str, finite: bool = True) -> None:
    """Raise :class:`Malformed` when ``v`` is not a value of the type ``tp`` (``finite=False``: a
    float may be NaN, a figure the result leaves undefined)."""
    if tp is Any or tp is object:
        return
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        _union(v, tp, where, finite)
    elif origin is typing.Literal:
        if v not in typing.get_args(tp):
            raise Malformed(where, f"expected one of {typing.get_args(tp)}, found {_shown(v)}")
    elif origin is np.ndarray:
        _array(v, tp, where)
    elif origin in (tuple, list, dict):
        _items(v, tp, where, finite)
    elif isinstance(tp, type) and (issubclass(tp, msgspec.Struct) or dataclasses.is_dataclass(tp)):
        if not isinstance(v, tp):
            raise Malformed(where, f"expected {tp.__name__}, found {_shown(v)}")
        check_struct(v, where, finite)  # type: ignore[arg-type]
    elif isinstance(tp, type):
        _scalar(v, tp, where, finite)


def check_struct(obj: msgspec.Struct, where: str = "", finite: bool = True) -> None:
    """Check every field of ``obj`` (a msgspec Struct or a dataclass, recursively) against its
    annotation; ``where`` prefixes the field paths in the message; ``finite=False``: floats may be NaN."""
    for name, tp in _hints(type(obj)):
        check_value(getattr(obj, name), tp, f"{where}.{name}" if where else name, finite)


class Trail:
    """The path of the last field a reader took from a JSON document (``findings[2].evidence.idle_ns``):
    what a failed read names. ``Trail().wrap(doc)`` gives the document with that bookkeeping."""

    def __init__(self) -> None:
        self.path = ""

    def wrap(self, v: Any, path: str = "") -> Any:
        if isinstance(v, dict):
            return _TrackedDict(v, path, self)
        if isinstance(v, list) and v and isinstance(v[0], (dict, list)):
            return _TrackedList(v, path, self)
        return v  # scalars and lists of scalars (the gap columns) as they are: no cost per item


class _TrackedDict(dict[str, Any]):
    __slots__ = ("_path", "_trail")

    def __init__(self, d: dict[str, Any], path: str, trail: Trail) -> None:
        super().__init__(d)
        self._path, self._trail = path, trail

    def _at(self, k: object) -> str:
        return f"{self._path}.{k}" if self._path else str(k)

    def __getitem__(self, k: str) -> Any:
        self._trail.path = self._at(k)
        return self._trail.wrap(super().__getitem__(k), self._at(k))

    def get(self, k: str, default: Any = None) -> Any:
        if k not in self:
            return default
        return self[k]


class _TrackedList(list[Any]):
    __slots__ = ("_path", "_trail")

    def __init__(self, v: list[Any], path: str, trail: Trail) -> None:
        super().__init__(v)
        self._path, self._trail = path, trail

    def __iter__(self) -> Any:
        for i, x in enumerate(super().__iter__()):
            self._trail.path = f"{self._path}[{i}]"
            yield self._trail.wrap(x, self._trail.path)
