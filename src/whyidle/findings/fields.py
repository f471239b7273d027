"""Field tables: a saved result's JSON declared once, field by field, for writer, reader and doc.

A :class:`Table` lists the fields of one JSON object in the order they are written: each
:class:`Field` has its JSON name, a value codec (how one value is written and read back), the
sentence the schema doc prints, the schema version that added it, and, for fields that older
reports lack, the value they load with. ``table.write(obj)`` is the object's JSON dict,
``table.read(d)`` the object again, ``table.words()`` its fields as the doc lists them::

    FIX = Table(Fix, Field("summary", STR, "the lever, one sentence"), Field("steps", Tup(STR), "what to change"))
    FIX.read(FIX.write(fix)) == fix

A field the reader does not take back (``derived=True``) is written from a property or a
``get`` function of the object and the whole result (``root``): a figure derived from the rest.
A ``flat`` field's value is an object whose keys are written into the parent's (a trial's result
beside the sweep's decision on it) and read back from the parent.
Readers take their values through :class:`whyidle.findings.checked.Trail`, so a missing or
malformed field is named by its path (``findings[2].evidence.idle_ns``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

__all__ = ["Field", "Table", "Value", "INT", "FLOAT", "NAN_FLOAT", "STR", "BOOL", "ANY", "Opt", "Tup", "Lst", "Rec", "Rows", "Pairs", "Dict", "Struct"]

_REQUIRED: Any = object()


class Value:
    """How one value is written (``enc``) and read back (``dec``; ValueError when it is not one);
    ``words`` is what the doc calls it."""

    words = ""

    def enc(self, v: Any) -> Any:
        return v

    def dec(self, v: Any) -> Any:
        return v


class _Int(Value):
    def dec(self, v: Any) -> int:
        """An integer within +-2**62 (146 years of nanoseconds), so that sums and differences still
        fit int64: larger numbers (or inf) are malformed, not a crash later."""
        i = int(v)
        if not -(2**62) <= i < 2**62:
            raise ValueError(f"{str(v)[:40]} is out of range")
        return i


class _Float(Value):
    def dec(self, v: Any) -> float:
        return v if type(v) in (int, float) else float(v)  # an int stays one: written back as it was


class _NanFloat(_Float):
    """A figure that may be undefined (NaN: a rate over a window of no length): written null, which
    JSON can hold, and read back as NaN."""

    def enc(self, v: Any) -> Any:
        return None if isinstance(v, float) and math.isnan(v) else v

    def dec(self, v: Any) -> float:
        return math.nan if v is None else super().dec(v)


class _Bool(Value):
    def dec(self, v: Any) -> bool:
        return bool(v)


INT, FLOAT, NAN_FLOAT, STR, BOOL, ANY = _Int(), _Float(), _NanFloat(), Value(), _Bool(), Value()  # strings: checked by type after the read


class Opt(Value):
    """None or the inner value."""

    def __init__(self, inner: Value) -> None:
        self.inner = inner
        self.words = inner.words

    def enc(self, v: Any) -> Any:
        return None if v is None else self.inner.enc(v)

    def dec(self, v: Any) -> Any:
        return None if v is None else self.inner.dec(v)


class Tup(Value):
    """A tuple of the inner value, saved as a list."""

    def __init__(self, inner: Value) -> None:
        self.inner = inner
        self.words = inner.words

    def enc(self, v: Any) -> Any:
        return [self.inner.enc(x) for x in v]

    def dec(self, v: Any) -> Any:
        if not isinstance(v, list):
            raise ValueError(f"expected a list, found {type(v).__name__}")
        return tuple(self.inner.dec(x) for x in v)


class Lst(Tup):
    """A list of the inner value (the result's field is a list, not a tuple)."""

    def dec(self, v: Any) -> Any:
        return list(super().dec(v))


class Rec(Value):
    """An object with its own table."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.words = "{" + table.words() + "}"

    def enc(self, v: Any) -> Any:
        return self.table.write(v)

    def dec(self, v: Any) -> Any:
        return self.table.read(v)


class Rows(Value):
    """A tuple of tuples saved as a list of objects with the names ``keys``."""

    def __init__(self, *cols: tuple[str, Value]) -> None:
        self.cols = cols
        self.words = "[{" + ", ".join(f"`{k}`" for k, _ in cols) + "}]"

    def enc(self, v: Any) -> Any:
        return [{k: c.enc(x) for (k, c), x in zip(self.cols, row)} for row in v]

    def dec(self, v: Any) -> Any:
        if not isinstance(v, list):
            raise ValueError(f"expected a list, found {type(v).__name__}")
        return tuple(tuple(c.dec(row[k]) for k, c in self.cols) for row in v)


class Pairs(Value):
    """A tuple of (name, value) pairs saved as an object."""

    def __init__(self, inner: Value) -> None:
        self.inner = inner

    def enc(self, v: Any) -> Any:
        return {k: self.inner.enc(x) for k, x in v}

    def dec(self, v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise ValueError(f"expected an object, found {type(v).__name__}")
        return tuple((k, self.inner.dec(v[k])) for k in v)


class Dict(Value):
    """A mapping of names to the inner value (``order``: written sorted by name)."""

    def __init__(self, inner: Value, order: bool = False) -> None:
        self.inner, self.order = inner, order

    def enc(self, v: Any) -> Any:
        return {k: self.inner.enc(x) for k, x in (sorted(v.items()) if self.order else v.items())}

    def dec(self, v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise ValueError(f"expected an object, found {type(v).__name__}")
        return {str(k): self.inner.dec(v[k]) for k in v}


class Struct(Value):
    """A msgspec Struct saved as its builtins and converted back (validated by msgspec).

    ``whole``: every field written, defaults included (nested Structs too; the JSON's keys then do
    not depend on the values), and the doc lists them."""

    def __init__(self, cls: type[msgspec.Struct], *, whole: bool = False) -> None:
        self.cls, self.whole = cls, whole
        if whole:
            self.words = "{" + ", ".join(f"`{k}`" for k in cls.__struct_fields__) + "}"

    def enc(self, v: Any) -> Any:
        return _every_field(v) if self.whole else msgspec.to_builtins(v)

    def dec(self, v: Any) -> Any:
        return msgspec.convert(dict(v) if isinstance(v, Mapping) else v, self.cls)


def _every_field(v: Any) -> Any:
    if isinstance(v, msgspec.Struct):
        return {k: _every_field(getattr(v, k)) for k in v.__struct_fields__}
    if isinstance(v, (list, tuple)):
        return [_every_field(x) for x in v]
    return msgspec.to_builtins(v)


class Field:
    """One field of a JSON object: ``key`` its name, ``value`` its codec, ``doc`` its meaning;
    ``attr`` the attribute it is written from and read back into (default ``key``); ``since`` the
    schema version that added it; ``default`` what a report without it loads with (required when
    not given); ``get(obj)``: written from this instead of the attribute; ``derived``: written,
    not read back (a figure derived from the rest); ``when(obj)``: written only when true;
    ``flat``: the value (an object) written into the parent's keys and read back from the parent."""

    def __init__(
        self, key: str, value: Value, doc: str = "", *, attr: str | None = None, since: str = "1.0", default: Any = _REQUIRED,
        derived: bool = False, get: Callable[[Any], Any] | None = None, when: Callable[[Any], bool] | None = None, flat: bool = False,
    ) -> None:  # fmt: skip
        self.key, self.value, self.doc, self.attr, self.since = key, value, doc, attr or key, since
        self.default, self.derived, self.get, self.when, self.flat = default, derived, get, when, flat

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def words(self) -> str:
        """``key`` (doc) {its fields}, as the schema doc lists it."""
        since = f"; since {self.since}" if self.since != "1.0" else ""
        doc = f" ({self.doc}{since})" if self.doc or since else ""
        return f"`{self.key}`{doc}" + (f" {self.value.words}" if self.value.words else "")


class Table:
    """The fields of one JSON object, in the order they are written, and what they build:
    ``cls(**fields)``, or ``build(fields)`` when that needs more. ``path``: the attribute of the
    written object that the fields' attributes are on (``get`` takes the object itself)."""

    def __init__(self, cls: Callable[..., Any], *fields: Field, build: Callable[[dict[str, Any]], Any] | None = None, path: str = "") -> None:
        self.cls, self.fields, self.build, self.path = cls, fields, build, path

    def write(self, obj: Any) -> dict[str, Any]:
        src = getattr(obj, self.path) if self.path else obj
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.when is None or f.when(obj):
                v = f.value.enc(f.get(obj) if f.get is not None else getattr(src, f.attr))
                if f.flat:
                    out.update(v)
                else:
                    out[f.key] = v
        return out

    def values(self, d: Any) -> dict[str, Any]:
        """The fields read back from ``d``, by attribute (KeyError: a required field is missing)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"expected an object, found {type(d).__name__}")
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.derived:
                continue
            if f.flat:
                out[f.attr] = f.value.dec(d)
            elif f.key in d or f.required:
                out[f.attr] = f.value.dec(d[f.key])  # a required field missing: KeyError, its path in the trail
            else:
                out[f.attr] = f.default
        return out

    def read(self, d: Any) -> Any:
        v = self.values(d)
        return self.build(v) if self.build is not None else self.cls(**v)

    def words(self) -> str:
        return ", ".join(f.value.words[1:-1] if f.flat else f.words() for f in self.fields)

    def rows(self, prefix: str = "") -> list[tuple[str, str]]:
        """(field, meaning) for each field, as the schema doc's table lists them (``prefix``: the
        path of the object, ``cross_rank.``)."""
        out = []
        for f in self.fields:
            if f.flat and isinstance(f.value, Rec):
                out += f.value.table.rows(prefix)
                continue
            if f.flat:  # its keys are the parent's: the row names them
                out.append((", ".join(f"`{prefix}{k.strip('`')}`" for k in f.value.words[1:-1].split(", ")), f.doc))
                continue
            since = f" (since {f.since})" if f.since != "1.0" else ""
            out.append((f"`{prefix}{f.key}`", "; ".join(x for x in (f.doc, f.value.words) if x) + since))
        return out
