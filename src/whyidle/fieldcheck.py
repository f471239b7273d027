"""The checks behind every settings object (:mod:`whyidle.config`): keyword arguments only, an
unknown name is a whyidle error naming the fields, a value of the wrong type or a non-finite number
is refused naming its field, and so is a number outside the range its settings class declares
(:data:`Limit`: ``max_gzip_ratio`` at least 1, a share between 0 and 1); and :class:`Sectioned`, which lets ``Config(max_gzip_ratio=50)`` set
a field of one of its sections (``Config().read.max_gzip_ratio``) by its flat name.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import msgspec

from whyidle.errors import ArgumentError, UsageError

__all__ = ["Checked", "Limit", "Sectioned", "check_fields", "flat_names"]

# The range a numeric field (or each number of a tuple field) must lie in: (low, high, low
# excluded). None: unbounded on that side. ``(0, None, True)`` is "above 0".
Limit = tuple[float | None, float | None, bool]


def _unknown_fields(owner: str, names: list[str], unknown: list[str]) -> UsageError:
    import difflib  # only for this message: not at every start

    close = difflib.get_close_matches(unknown[0], names, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else "."
    return ArgumentError(
        f"{', '.join(unknown)} {'is not a field' if len(unknown) == 1 else 'are not fields'} of whyidle.{owner}{hint} "
        f"The fields are: {', '.join(names)}",
        field=unknown[0],
    )


class Checked(msgspec.StructMeta):
    """A settings class's metaclass: an unknown keyword is a whyidle error naming the fields, not a TypeError."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        names = list(cls.__struct_fields__)
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise _unknown_fields(cls.__name__, names, unknown)
        if len(args) > len(names):
            raise ArgumentError(f"whyidle.{cls.__name__} takes keyword arguments only (got {len(args)} positional)")
        return super().__call__(*args, **kwargs)


_SECTIONS: dict[type, dict[str, str]] = {}  # a Sectioned class -> {flat field name: its section}


def _sections(cls: Any) -> dict[str, str]:
    """``{flat name: section}`` of a Sectioned class: a section is a field whose default is a settings object."""
    owner = _SECTIONS.get(cls)
    if owner is None:
        defaults = dict(zip(cls.__struct_fields__[len(cls.__struct_fields__) - len(cls.__struct_defaults__) :], cls.__struct_defaults__))
        owner = {k: s for s, d in defaults.items() if isinstance(d, msgspec.Struct) for k in d.__struct_fields__}
        _SECTIONS[cls] = owner
    return owner


def flat_names(cls: Any) -> list[str]:
    """Every name a Sectioned class's constructor takes: its sections' fields, then its own fields."""
    return [*_sections(cls), *cls.__struct_fields__]


class Sectioned(msgspec.StructMeta):
    """A settings object made of sections, each one settings object: ``Config(read=ReadSettings(...))``,
    and each section's fields by their flat names (``Config(max_gzip_ratio=50)``), set on the section
    given or on the default one. Positional arguments (pickle's) are the sections, in order."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            if len(args) > len(cls.__struct_fields__):
                raise ArgumentError(f"whyidle.{cls.__name__} takes keyword arguments only (got {len(args)} positional)")
            return super().__call__(*args)
        owner = _sections(cls)
        own = set(cls.__struct_fields__)
        unknown = sorted(set(kwargs) - own - set(owner))
        if unknown:
            raise _unknown_fields(cls.__name__, flat_names(cls), unknown)
        direct = {k: v for k, v in kwargs.items() if k in own}
        flat = {k: v for k, v in kwargs.items() if k not in own}
        for section in dict.fromkeys(owner[k] for k in flat):
            base = direct.get(section, getattr(cls(), section))
            if not isinstance(base, msgspec.Struct):
                raise ArgumentError(f"{cls.__name__} field {section}: expected a whyidle settings object, not {type(base).__name__}", field=section)
            direct[section] = msgspec.structs.replace(base, **{k: v for k, v in flat.items() if owner[k] == section})
        return super().__call__(*args, **direct)


def _scalar_ok(kind: str, v: object) -> bool:
    """Whether ``v`` is a value of the annotation ``kind`` (int, float, bool, str); numbers finite."""
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if isinstance(v, (bool, str, bytes)):
        return False
    if kind == "int":
        try:
            operator.index(v)  # type: ignore[arg-type]
        except TypeError:
            return False
        return True
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False


def _value_ok(annotation: str, v: object) -> bool:
    if annotation.endswith(" | None"):
        return v is None or _value_ok(annotation[: -len(" | None")], v)
    if annotation.startswith("tuple["):
        if not isinstance(v, (tuple, list)):
            return False
        kinds = [k.strip() for k in annotation[6:-1].split(",")]
        if kinds[-1] == "...":
            return all(_scalar_ok(kinds[0], x) for x in v)
        return len(v) == len(kinds) and all(_scalar_ok(k, x) for k, x in zip(kinds, v))
    return _scalar_ok(annotation, v)


def _within(v: object, limit: Limit) -> bool:
    lo, hi, lo_open = limit
    for x in v if isinstance(v, (tuple, list)) else (v,):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            continue  # not a number: the type check speaks for it
        if (lo is not None and (x <= lo if lo_open else x < lo)) or (hi is not None and x > hi):
            return False
    return True


def _limit_text(limit: Limit) -> str:
    """``(0, 1, False)`` -> 'at least 0 and at most 1'."""
    lo, hi, lo_open = limit
    low = "" if lo is None else f"{'above' if lo_open else 'at least'} {lo:g}"
    high = "" if hi is None else f"at most {hi:g}"
    return " and ".join(x for x in (low, high) if x)


def check_fields(cfg: msgspec.Struct, limits: Mapping[str, Limit] | None = None) -> None:
    """Refuse a field value of the wrong type, a non-finite number or a number outside its
    ``limits`` entry (ArgumentError naming the field).

    Only values that differ from the default are checked: ``Config()`` costs nothing more. A field
    whose default is a settings object (a section) must hold one of that class."""
    cls = type(cfg)
    defaults = dict(zip(cls.__struct_fields__[len(cls.__struct_fields__) - len(cls.__struct_defaults__) :], cls.__struct_defaults__))
    for name in cls.__struct_fields__:
        v = getattr(cfg, name)
        if name in defaults and v is defaults[name]:
            continue
        annotation = cls.__annotations__.get(name, "")
        if isinstance(defaults.get(name), msgspec.Struct):
            ok, expected = isinstance(v, type(defaults[name])), f"a whyidle.{type(defaults[name]).__name__}"
        else:
            ok, expected = not isinstance(annotation, str) or _value_ok(annotation, v), f"{annotation} (numbers finite)"
            limit = (limits or {}).get(name)
            if ok and limit is not None and not _within(v, limit):
                ok, expected = False, f"{'each number ' if isinstance(v, (tuple, list)) else 'a number '}{_limit_text(limit)}"
        if not ok:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise ArgumentError(f"{cls.__name__} field {name}={shown}: expected {expected}", field=name)
