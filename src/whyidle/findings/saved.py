"""Saved JSON reports read back into diagnosis data: the file, the schema check and errors that
name the field around the codec's reader (:func:`whyidle.findings.codec.decode`).

``whyidle diagnose trace -o report.json`` saves a report; ``load_report("report.json")`` gives
the diagnosis back, every gap, the device activity and the lanes included, so a saved run can be
compared or rendered again (HTML, Perfetto) without its trace: the loaded diagnosis renders to
the same JSON, terminal and HTML reports as the original, counter figures included. Older
reports lack some fields and load without them: before the gap columns (no timeline strip in
their HTML), before the per-name times (compare lists no kernels), before the exact tensor-core
and FP32 times (taken back from their shares). A report of another kind (``"kind"``: a
multi-rank run's, a comparison, a sweep, a batching or serving result) loads through
:func:`load_saved` with the reader its package registers (:func:`register_reader`;
:mod:`whyidle.ranks.model`), which reads it through its field table with :func:`read_saved`.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

import msgspec

from whyidle.errors import TraceFormatError
from whyidle.findings.checked import Malformed, Trail, check_struct
from whyidle.findings.codec import SCHEMA_VERSION, decode
from whyidle.findings.fields import Table
from whyidle.findings.model import DiagnosisData
from whyidle.output import one_line

__all__ = ["looks_like_report", "report_from_dict", "load_report", "load_saved", "check_schema", "check_version", "read_saved", "register_reader", "kind_of"]

# Readers of the reports of other kinds (the JSON's "kind"), registered by the package whose
# result it is when it is imported: reader(dict, where) -> the result.
_READERS: dict[str, Callable[[dict[str, Any], str], object]] = {}


def register_reader(kind: str, read: Callable[[dict[str, Any], str], object]) -> None:
    """Read saved reports whose ``"kind"`` is ``kind`` with ``read(d, where)``."""
    _READERS[kind] = read


def looks_like_report(head: bytes) -> bool:
    """Whether the first bytes of a (decompressed) file are a whyidle JSON report."""
    h = head.lstrip()
    return h.startswith(b"{") and b'"schema_version"' in h[:200] and b'"traceEvents"' not in h[:200]


def check_schema(d: dict[str, Any], where: str) -> None:
    """Raise TraceFormatError naming ``where`` unless ``d`` is a whyidle report of a schema read here."""
    version = str(d.get("schema_version", ""))
    if not version:
        raise TraceFormatError(where, "is JSON but not a whyidle report (no 'schema_version')")
    check_version(version, SCHEMA_VERSION, where)


def check_version(found: str, supported: str, where: str, what: str = "report") -> None:
    """Raise TraceFormatError naming ``where`` unless the schema ``found`` has ``supported``'s major version."""
    major = supported.split(".", 1)[0]
    if not found:
        raise TraceFormatError(where, f"is JSON but not a whyidle {what} (no schema version)")
    if found.split(".", 1)[0] != major:
        raise TraceFormatError(where, f"is a whyidle {what} of schema {one_line(found, 20)}; this whyidle reads schema {major}.x")


def kind_of(d: dict[str, Any]) -> str | None:
    """The kind of result a saved JSON holds: its ``"kind"``, or the kind its ``"schema"`` names
    (``"whyidle.sweep/1.0"``: a sweep); None for one trace's report."""
    kind = d.get("kind")
    if kind is not None:
        return str(kind)
    schema = d.get("schema")
    if isinstance(schema, str) and schema.startswith("whyidle.") and "/" in schema:
        return schema[len("whyidle.") :].split("/", 1)[0]
    return None


def read_saved(table: Table, d: dict[str, Any], where: str, what: str, *, finite: bool = True) -> Any:
    """A saved result read back through its field table; raises TraceFormatError naming ``where``
    and the field (its path) when one is missing or malformed, or the result does not hold what
    its types declare (``what``: the result in words, ``comparison``; ``finite=False``: its
    floats may be NaN, written null)."""
    trail = Trail()
    try:
        out = table.read(trail.wrap(d))
        check_struct(out, finite=finite)
    except Malformed as exc:
        raise TraceFormatError(where, f"is a whyidle {what} whose field {exc.field} is malformed: {exc.problem}") from None
    except RecursionError:
        raise TraceFormatError(where, f"is a whyidle {what} nested too deeply to be one") from None
    except KeyError as exc:
        raise TraceFormatError(where, f"is a whyidle {what} without the field {trail.path or exc}") from None
    except (TypeError, ValueError, AttributeError, OverflowError, msgspec.ValidationError) as exc:
        detail = str(exc) if len(str(exc)) <= 120 else str(exc)[:117] + "..."
        raise TraceFormatError(where, f"is a whyidle {what} whose field {trail.path} is malformed ({detail})") from None
    return out


def report_from_dict(d: dict[str, Any], where: str = "<dict>") -> DiagnosisData:
    """Diagnosis data from the JSON report's dict; raises TraceFormatError naming ``where`` when it is not one."""
    check_schema(d, where)
    kind = kind_of(d)
    if kind == "multi_rank":
        n = len(d["ranks"]) if isinstance(d.get("ranks"), list) else "several"
        raise TraceFormatError(
            where,
            f"is a multi-rank report ({n} ranks) where one trace's report was expected; compare runs rank by rank "
            "(each rank's trace, or whyidle.load_report(path).ranks[i].report)",
        )
    if kind is not None:
        raise TraceFormatError(where, f"is a whyidle {one_line(kind, 40)} result (whyidle.load_report reads it back), not one trace's report, which was expected here")
    trail = Trail()  # which field each read took: what a failure names
    try:
        data = decode(trail.wrap(d))
        check_struct(data)  # every field as its type declares: nothing malformed reaches a renderer
    except Malformed as exc:
        raise TraceFormatError(where, f"is a whyidle report whose field {exc.field} is malformed: {exc.problem}") from None
    except RecursionError:
        raise TraceFormatError(where, "is a whyidle report nested too deeply to be one") from None
    except KeyError as exc:
        raise TraceFormatError(where, f"is a whyidle report without the field {trail.path or exc}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        detail = str(exc) if len(str(exc)) <= 120 else str(exc)[:117] + "..."
        raise TraceFormatError(where, f"is a whyidle report whose field {trail.path} is malformed ({detail})") from None
    return data


def load_report(path: str | os.PathLike[str]) -> DiagnosisData:
    """Read a JSON report saved by ``whyidle diagnose -o report.json`` (plain or gzipped)."""
    p, d = _decode(path)
    return report_from_dict(d, str(p))


def load_saved(path: str | os.PathLike[str]) -> object:
    """A saved JSON report: one trace's (DiagnosisData), or another kind's by its registered
    reader (a multi-rank run's, ``whyidle diagnose RUN_DIR -o run.json``: a MultiRankReport)."""
    p, d = _decode(path)
    kind = kind_of(d)
    if kind is None:
        return report_from_dict(d, str(p))
    read = _READERS.get(kind)
    if read is None:
        if "schema_version" not in d and "schema" not in d:
            raise TraceFormatError(p, f"is JSON but not a whyidle report (kind {kind!r}, no 'schema_version')")
        raise TraceFormatError(p, f"is a whyidle report of kind {kind!r}, which no imported package reads (whyidle.load_report reads every kind)")
    return read(d, str(p))


def _decode(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    from whyidle.sources import read_bytes

    p = Path(path)
    raw = read_bytes(p)
    try:
        d = msgspec.json.decode(raw)
    except RecursionError:
        raise TraceFormatError(p, "has JSON nested too deeply to be a whyidle report") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(p, f"is not valid JSON ({exc}); expected a whyidle JSON report") from None
    if not isinstance(d, dict):
        raise TraceFormatError(p, "is JSON but not a whyidle report (expected an object)")
    return p, d
