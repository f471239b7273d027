"""Hostile settings files for ``--config FILE`` (the ``config`` fuzz family and tests/test_configfile.py):
TOML documents built from whyidle.Config's own sections and field names, with values of every
type, out of range, in the wrong table or unknown, and byte damage. Each generator returns a
file's name and bytes, as in ``hostile_surfaces.py``.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from hostile_surfaces import _damage

from whyidle.config import Config

_DEFAULTS = Config()
SECTIONS: tuple[str, ...] = tuple(Config.__struct_fields__)
FIELDS: dict[str, str] = {f: s for s in SECTIONS for f in type(getattr(_DEFAULTS, s)).__struct_fields__}  # field -> its section


class Raw(str):
    """A TOML value written as is (a date, an inline table): not quoted."""


# Values a field may be given, whatever its type: the wrong type, out of range, at the edges of a
# float and of a TOML integer, empty and nested arrays, a table, a date.
ODD: list[Any] = [
    -1, 0, 1, 2, -0.0, 0.5, 1.5, 100, 1e-320, 1e308, -1e308, math.inf, -math.inf, math.nan, 2**63 - 1, -(2**63), True, False,
    "", "x", "3-6", "starvation", [], [1, 2], [0.5, 0.25], [1, "a"], [[1]], [math.nan], [True], [2**63 - 1] * 3,
    Raw("1979-05-27T07:32:00Z"), Raw("07:32:00"), Raw("{ a = 1 }"), Raw("{}"),
]  # fmt: skip


def toml_value(v: Any) -> str:
    """``v`` as a TOML value (the subset these documents use)."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def _value(rng: random.Random, field: str | None) -> Any:
    """Mostly a plausible value (the default, scaled), else an odd one."""
    default = getattr(getattr(_DEFAULTS, FIELDS[field]), field) if field in FIELDS else None
    if default is not None and rng.random() < 0.5:
        if isinstance(default, bool):
            return not default
        if isinstance(default, (int, float)):
            return type(default)(default * rng.choice([0, 0.5, 2, 10]))
        if isinstance(default, tuple):
            return list(default)
    return rng.choice(ODD)


def document(rng: random.Random) -> str:
    """A TOML settings document: flat names at the top, then tables, some names misplaced or unknown."""
    names = list(FIELDS)
    top: list[str] = []
    tables: dict[str, list[str]] = {}
    for _ in range(rng.randint(0, 6)):
        r = rng.random()
        field = rng.choice(names) if r < 0.85 else rng.choice(["bogus", "max_gzip", "read", "skip_first"])
        line = f"{field} = {toml_value(_value(rng, field))}"
        if rng.random() < 0.4:
            top.append(line)
        else:  # its own section mostly, sometimes another or one that does not exist
            s = rng.random()
            section = FIELDS.get(field, "read") if s < 0.8 else rng.choice([*SECTIONS, "bogus", "read.sub"])
            tables.setdefault(section, []).append(line)
    parts = top + [f"[{s}]\n" + "\n".join(lines) for s, lines in tables.items()]
    return "\n".join(parts) + "\n"


def config_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    """A settings file: a generated document, sometimes damaged, sometimes not text at all."""
    r = rng.random()
    if r < 0.05:
        return "config.toml", bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    data = document(rng).encode()
    return "config.toml", _damage(rng, data) if r < 0.3 else data
