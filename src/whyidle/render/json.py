"""The JSON report as a file's text: a stable, versioned schema for scripts and CI
(docs/json-schema.md, generated from the codec, :mod:`whyidle.findings.codec`, which writes and
reads every field). This module lays the text out: indented, each column on one line.
"""

from __future__ import annotations

import os
import re
from typing import Any

import msgspec

from whyidle.findings.codec import SCHEMA_VERSION, encode
from whyidle.findings.model import DiagnosisData

__all__ = ["SCHEMA_VERSION", "report_to_dict", "render_json", "dumps", "to_dict"]


def report_to_dict(r: DiagnosisData, columns: bool = False) -> dict[str, Any]:
    """The JSON report of a diagnosis, as plain data: written by its codec (:mod:`whyidle.findings.codec`)."""
    return encode(r, columns)


def to_dict(r: Any, columns: bool = False) -> dict[str, Any]:
    """The JSON report of a diagnosis, as plain data (``columns``: every gap and each device's
    busy intervals too, the full form)."""
    return encode(r, columns)


# The columns (every gap, the busy intervals) are long lists of numbers: one line each, not one
# line per number, so the file stays readable and a golden diff shows a column as one line.
_COLUMN_KEYS = ("gap_columns", "activity", "lanes")


def _compact(d: Any, found: list[bytes], nonce: str) -> Any:
    """``d`` with each column list (and each lane) replaced by a placeholder string (``nonce``
    and a number: no trace string can be mistaken for one); the compact JSON of what was
    replaced is appended to ``found``."""

    def hole(v: Any) -> str:
        found.append(msgspec.json.encode(v))
        return f"{nonce}{len(found) - 1}"

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list) and (not v or not isinstance(v[0], (dict, list))):
            return hole(v)
        if isinstance(v, list) and isinstance(v[0], dict) and "pid" in v[0]:
            return [hole(x) for x in v]  # lanes: one line each
        return [walk(x) for x in v] if isinstance(v, list) else v

    if isinstance(d, dict) and "ranks" in d and isinstance(d["ranks"], list):
        return {**d, "ranks": [{**e, "report": _compact(e["report"], found, nonce)} if e.get("report") else e for e in d["ranks"]]}
    if not isinstance(d, dict):
        return d
    return {k: (walk(v) if k in _COLUMN_KEYS else v) for k, v in d.items()}


def render_json(r: DiagnosisData, columns: bool = False) -> str:
    """The JSON report: the summary, findings, steps and largest gaps by default; with ``columns``
    also every gap and the busy intervals (what a saved report needs to draw the HTML strip and
    the Perfetto trace)."""
    return dumps(to_dict(r, columns))


def dumps(report: dict[str, Any]) -> str:
    """A JSON report's dict as the file's text: indented, each column on one line (the reports
    of a ``"ranks"`` list too: a multi-rank run's)."""
    found: list[bytes] = []
    nonce = f"whyidle-column-{os.urandom(8).hex()}-"
    data = _compact(report, found, nonce)
    text = msgspec.json.format(msgspec.json.encode(data), indent=2)
    if found:
        text = re.sub(b'"' + nonce.encode() + rb'(\d+)"', lambda m: found[int(m.group(1))], text)
    return text.decode() + "\n"
