"""``--config FILE``: the settings of :class:`whyidle.Config` from a TOML file, for every command
that builds one or reads a trace (diagnose, compare, batching, serving, run, convert, scaling).

The file holds the forms ``Config(...)`` takes: its sections as tables, each field under the
section that holds it, and/or the flat names at the top level::

    max_gzip_ratio = 200                      # a flat name: set on the section that holds it

    [findings]
    min_finding_share_of_window = 0.02

    [attribution]
    fusion_max_kernel_ns = 50_000

The values are checked where every Config is checked (``fieldcheck.py``: names, types, ranges);
this module reads the file through the one input boundary (``sources.read_bytes``: a regular file
only, at most :data:`MAX_BYTES`) and says in each refusal which file and which table it was
(an InputError: one line, exit 2). Flags given on the command line are applied over the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from whyidle.config import Config
from whyidle.errors import ArgumentError, InputError
from whyidle.fieldcheck import flat_names

__all__ = ["MAX_BYTES", "add_config_option", "config_from", "load_config"]

# A settings file is tens of lines (every field of Config with a comment is about 9 KB); 1 MiB
# refuses a wrong file (a trace passed by mistake) before it is decoded.
MAX_BYTES = 1 << 20
EXPECTED = "a TOML settings file (tables named like whyidle.Config's sections: [read], [findings], ...)"


def add_config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="settings from a TOML file: whyidle.Config's sections as tables ([read], [attribution], [findings], ...) "
        "or their fields' flat names; options given here override it (docs/settings.md)",
    )


def config_from(args: argparse.Namespace, **flags: object) -> Config:
    """The Config of ``args.config`` (defaults without one), with the ``flags`` that were given
    (not None) over it: a flag on the command line beats the file."""
    path = getattr(args, "config", None)
    base = load_config(path) if path is not None else Config()
    given = {k: v for k, v in flags.items() if v is not None}
    return base.with_overrides(**given) if given else base


def load_config(path: str | os.PathLike[str]) -> Config:
    """The Config a TOML settings file describes; InputError naming the file and the key when it
    cannot be read, is not TOML, or holds a name, type or value Config refuses."""
    p = Path(path)
    doc = _document(p)
    defaults = Config()
    sections: dict[str, msgspec.Struct] = {}
    flat: dict[str, object] = {}
    for key, value in doc.items():
        if key in Config.__struct_fields__:
            if not isinstance(value, dict):
                raise InputError(p, f"{key} is a section of the settings: expected a table [{key}] of its fields, found {_kind(value)}")
            section = getattr(defaults, key)
            try:
                sections[key] = type(section)(**{k: _plain(section, k, v) for k, v in value.items()})
            except ArgumentError as exc:
                raise InputError(p, f"in [{key}]: {exc}") from None
        elif isinstance(value, dict) and key not in flat_names(Config):
            raise InputError(p, f"[{key}] is not a section of the settings; expected one of {', '.join(f'[{s}]' for s in Config.__struct_fields__)}")
        else:
            flat[key] = _plain(defaults, key, value)
    for key in flat:
        table = next((s for s in sections if key in doc[s]), None)
        if table is not None:
            raise InputError(p, f"{key} is set twice, at the top level and in [{table}]: expected it once")
    try:
        given: dict[str, Any] = {**sections, **flat}
        cfg = Config(**given)
    except ArgumentError as exc:
        raise InputError(p, str(exc)) from None
    _check_groups(p, cfg)
    return cfg


def _document(p: Path) -> dict[str, Any]:
    """The file's TOML document, read through the input boundary."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: the same parser, released as tomli
        import tomli as tomllib
    from whyidle.sources import TooLargeForMemory, read_bytes

    try:
        raw = read_bytes(p, max_bytes=MAX_BYTES, expected=EXPECTED)
    except TooLargeForMemory:
        raise InputError(p, f"is larger than {MAX_BYTES:,} bytes; expected {EXPECTED}, a few lines long") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(p, f"is not UTF-8 text (byte {exc.start} cannot be decoded); expected {EXPECTED}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(p, f"is not TOML ({' '.join(str(exc).split())}); expected {EXPECTED}") from None
    except RecursionError:
        raise InputError(p, f"nests arrays or tables too deeply to be read; expected {EXPECTED}") from None


def _plain(owner: msgspec.Struct, key: str, value: object) -> object:
    """A TOML value in the form the field's annotation takes: an array as a tuple, a whole number
    as a float where the field is a float (``max_gzip_ratio = 200``). Anything else unchanged,
    for the field's own check to refuse."""
    annotation = _annotation(owner, key)
    if isinstance(value, list):
        return tuple(_as_float(x) if "float" in annotation else x for x in value)
    return _as_float(value) if annotation.startswith("float") else value


def _annotation(owner: msgspec.Struct, key: str) -> str:
    """The annotation of field ``key`` of ``owner`` or of the section of ``owner`` that holds it ('' if none)."""
    for obj in (owner, *(getattr(owner, s) for s in type(owner).__struct_fields__)):
        if isinstance(obj, msgspec.Struct) and key in type(obj).__struct_fields__:
            return str(type(obj).__annotations__.get(key, ""))
    return ""


def _as_float(x: object) -> object:
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            return float(x)
        except OverflowError:
            return x  # too large for a float: the field's check says so
    return x


def _kind(value: object) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "a whole number", float: "a number"}.get(type(value), type(value).__name__)


def _check_groups(p: Path, cfg: Config) -> None:
    """fail_on_groups names the finding groups of --fail-on."""
    groups = cfg.findings.fail_on_groups
    if not groups:
        return
    from whyidle.analyses.causes import GROUPS

    bad = [g for g in groups if g not in GROUPS]
    if bad:
        raise InputError(p, f"fail_on_groups {', '.join(map(repr, bad))[:80]}: expected groups among {', '.join(GROUPS)}")
