"""Request logs of an inference server: when each request arrived, started and finished.

Read formats (detected from the content):

* **JSON lines** or a **JSON list** of objects, one per request, and **CSV** with a header. Field
  names are matched case-insensitively after removing a unit suffix; the suffix gives the unit
  (``_ns``, ``_us``, ``_ms``, ``_s``; none: seconds). ISO 8601 strings are read as wall-clock times.

  =========  ===============================================================================
  arrival    arrival, arrival_time, arrived, received, enqueued, queued, submitted, request_start
  start      start, start_time, started, compute_start, first_scheduled_time, scheduled, dispatched
  finish     finish, finish_time, finished, finished_time, end, end_time, completed, done, request_end
  batch      batch, batch_id, batch_index (optional)
  =========  ===============================================================================

  vLLM's per-request ``RequestMetrics`` (``arrival_time``, ``first_scheduled_time``,
  ``finished_time``, Unix seconds) are read by these names.
* **Triton Inference Server traces** (``--trace-config level=TIMESTAMPS``): a JSON list of
  ``{"id", "model_name", "timestamps": [{"name", "ns"}]}``; entries of one id are merged. Arrival is
  ``REQUEST_START`` (``QUEUE_START`` if absent), start ``COMPUTE_START``, finish ``REQUEST_END``
  (``COMPUTE_END`` if absent).

Without a batch column, requests whose start and finish are identical are taken to have run in
one batch, which is what a dynamic batcher records. A request without a start (a log of arrival and
finish only) has start = -1, and the analyses that need it say so.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from whyidle.errors import InputError
from whyidle.sources import read_bytes

__all__ = ["RequestLog", "load_requests", "from_records"]

_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_FIELDS = {
    "arrival": ("arrival", "arrival_time", "arrived", "received", "enqueued", "queued", "submitted", "request_start", "arrival_ts"),
    "start": ("start", "start_time", "started", "compute_start", "first_scheduled_time", "scheduled", "dispatched", "start_ts"),
    "finish": ("finish", "finish_time", "finished", "finished_time", "end", "end_time", "completed", "done", "request_end", "finish_ts"),
    "batch": ("batch", "batch_id", "batch_index"),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SUFFIX = re.compile(r"^(.*?)(?:_(ns|us|ms|s))?$")


class RequestLog(msgspec.Struct, frozen=True):
    """Per-request times (int64 ns, sorted by arrival); start -1 where the log has none."""

    arrival_ns: np.ndarray
    start_ns: np.ndarray
    finish_ns: np.ndarray
    batch: np.ndarray  # batch number per request (int64), -1 where unknown
    source: str
    format: str

    @property
    def requests(self) -> int:
        return int(self.arrival_ns.size)

    @property
    def has_start(self) -> bool:
        return bool(self.start_ns.size) and bool((self.start_ns >= 0).all())


def _field_of(key: str) -> tuple[str, int] | None:
    k = key.strip().lower().replace("-", "_").replace(" ", "_")
    for name, aliases in _FIELDS.items():
        if k in aliases:
            return name, _UNIT_NS["s"]
    m = _SUFFIX.match(k)
    if m and m.group(2):
        base = m.group(1)
        for name, aliases in _FIELDS.items():
            if base in aliases:
                return name, _UNIT_NS[m.group(2)]
    return None


# Times and batch numbers are int64 in the log's arrays; a value past this (1e300, inf, a
# 30-digit integer) is refused where it is read, not left to overflow in numpy.
_INT64_MAX = 2**63 - 1


def _in_range(n: int) -> int:
    if not -_INT64_MAX <= n <= _INT64_MAX:
        raise ValueError(f"{n:.3g} is out of range" if abs(n) < 10**300 else "out of range")
    return n


def _finite_int(x: float) -> int:
    if not math.isfinite(x):
        raise ValueError(f"{x} is not a finite number")
    if abs(x) > _INT64_MAX:
        raise ValueError(f"{x:.3g} is out of range")
    return int(round(x))


def _time_ns(value: Any, unit_ns: int) -> int:
    """A time in int64 ns; ValueError for anything else (empty, non-finite, out of range)."""
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError("empty")
    if isinstance(value, int):
        return _in_range(value * unit_ns)
    if isinstance(value, float):
        return _finite_int(value * unit_ns)
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__}")
    text = value.strip()
    if len(text) > 64:
        raise ValueError("too long for a time")
    try:
        return _in_range(int(text) * unit_ns)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        pass
    else:
        return _finite_int(x * unit_ns)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError() from None  # the message says what was expected
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)  # a log without a zone: its times are compared only with each other
    d = dt - _EPOCH
    return _in_range((d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1_000)  # year 9999 is past int64 ns


def _batch_number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("not a number")
    if isinstance(value, int):
        return _in_range(value)
    if isinstance(value, str) and len(value) > 64:
        raise ValueError("too long for a number")
    return _finite_int(float(value))


def _ints(values: list[Any], kinds: set[type]) -> np.ndarray | None:
    try:
        return np.asarray(values, dtype=np.int64) if kinds == {int} else np.asarray(values).astype(np.int64)
    except (ValueError, TypeError, OverflowError):
        return None


def _vector(values: list[Any], unit: int) -> np.ndarray | None:
    """A column converted at once: all ints, all floats or all numeric strings, finite and within
    int64 once in ns; None when any value needs :func:`_time_ns` (an ISO time, an empty cell, a
    value out of range: that path then names it)."""
    kinds = {type(v) for v in values}
    if not kinds <= {int, float, str}:
        return None
    ints = _ints(values, kinds) if kinds in ({int}, {str}) else None
    if ints is not None:
        return None if bool((np.abs(ints) > _INT64_MAX // unit).any()) else ints * unit
    try:
        x = np.asarray(values, dtype=np.float64) if str not in kinds else np.asarray(values).astype(np.float64)
    except (ValueError, TypeError, OverflowError):
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # 1e300 ms: inf, refused below
        x = x * unit
    if not bool(np.isfinite(x).all()) or bool((np.abs(x) >= 2.0**63).any()):
        return None
    return np.rint(x).astype(np.int64)


def _columns_at_once(records: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    """The columns of a log whose records share one shape and hold plain numbers (a million rows
    in a fraction of a second); None sends the log to the row-by-row path."""
    keys = tuple(records[0]) if records else ()
    if not keys or any(tuple(r) != keys for r in records):
        return None
    mapping = {k: f for k in keys if (f := _field_of(k)) is not None}
    if not {"arrival", "finish"} <= {f for f, _ in mapping.values()}:
        return None
    n = len(records)
    cols = {"start": np.full(n, -1, dtype=np.int64), "batch": np.full(n, -1, dtype=np.int64)}
    for key, (name, unit) in mapping.items():
        col = _vector([r[key] for r in records], 1 if name == "batch" else unit)  # a batch id has no unit
        if col is None:
            return None
        cols[name] = col
    return cols


def from_records(records: list[dict[str, Any]], source: str = "<records>", fmt: str = "records") -> RequestLog:
    """Build a RequestLog from one mapping per request (the generic field names above)."""
    fast = _columns_at_once(records)
    arr = fast if fast is not None else _columns_by_row(records, source)
    return _log(arr, source, fmt)


def _columns_by_row(records: list[dict[str, Any]], source: str) -> dict[str, np.ndarray]:
    """The columns, record by record: any value, and an error naming the request and field."""
    cols: dict[str, list[int]] = {"arrival": [], "start": [], "finish": [], "batch": []}
    mapping: dict[str, tuple[str, int]] = {}
    found: set[str] = set()
    keys: tuple[str, ...] | None = None
    for i, rec in enumerate(records):
        if tuple(rec) != keys:  # logs repeat one shape: map its keys once
            keys = tuple(rec)
            mapping = {k: f for k in rec if (f := _field_of(k)) is not None}
            found = {f for f, _ in mapping.values()}
        if not {"arrival", "finish"} <= found:
            raise InputError(source, f"request {i + 1} has no {'arrival' if 'arrival' not in found else 'finish'} time; expected fields such as arrival, start, finish (with a unit suffix like _ms, or seconds) and optionally batch_id; found {sorted(rec)[:8]}")
        row: dict[str, int] = {"start": -1, "batch": -1}
        for key, (name, unit) in mapping.items():
            if key not in rec or rec[key] in (None, ""):
                continue
            try:
                row[name] = _batch_number(rec[key]) if name == "batch" else _time_ns(rec[key], unit)
            except (TypeError, ValueError, OverflowError) as exc:
                what = "an integer batch number" if name == "batch" else "a number or an ISO 8601 time"
                why = f" ({exc})" if str(exc) else ""
                raise InputError(source, f"request {i + 1}: {key}={_shown(rec[key])} is not {what}{why}") from None
        if "arrival" not in row or "finish" not in row:
            raise InputError(source, f"request {i + 1} has no arrival or no finish time")
        for name in cols:
            cols[name].append(row[name])
    if not cols["arrival"]:
        raise InputError(source, "holds no requests")
    return {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}


def _log(arr: dict[str, np.ndarray], source: str, fmt: str) -> RequestLog:
    """The log from its columns (int64 ns), sorted by arrival and checked."""
    order = np.argsort(arr["arrival"], kind="stable")
    arr = {k: v[order] for k, v in arr.items()}
    a, s, fin = arr["arrival"], arr["start"], arr["finish"]
    if bool((fin < a).any()):
        i = int(np.flatnonzero(fin < a)[0])
        raise InputError(source, f"a request finishes before it arrives (arrival {a[i]} ns, finish {fin[i]} ns); expected arrival <= start <= finish")
    has = s >= 0
    if bool(((s < a) & has).any()) or bool(((s > fin) & has).any()):
        raise InputError(source, "a request starts before it arrives or after it finishes; expected arrival <= start <= finish")
    batch = arr["batch"]
    if bool((batch < 0).all()) and bool(has.all()):
        batch = _infer_batches(s, fin)
    return RequestLog(a, s, fin, batch, source, fmt)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _infer_batches(start: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Requests with the same (start, finish) ran in one batch: number the distinct pairs in time order."""
    pairs = np.stack([start, finish], axis=1)
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    out: np.ndarray = inverse.reshape(-1).astype(np.int64)
    return out


def _triton(doc: list[Any], source: str) -> RequestLog:
    by_id: dict[str, dict[str, int]] = {}
    for n, entry in enumerate(doc, 1):
        if not isinstance(entry, dict) or "timestamps" not in entry:
            continue
        stamps = entry["timestamps"]
        if not isinstance(stamps, list):
            raise InputError(source, f"entry {n}: timestamps is {_shown(stamps)}; expected a list of {{\"name\", \"ns\"}}")
        ts = by_id.setdefault(repr(entry.get("id")), {})  # any JSON value as a key, lists included
        for t in stamps:
            if isinstance(t, dict) and "name" in t and "ns" in t:
                try:
                    ns = _time_ns(t["ns"], 1)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise InputError(source, f"entry {n}: timestamp {_shown(t['name'])} has ns={_shown(t['ns'])}; expected an integer time in ns ({exc})") from None
                ts.setdefault(str(t["name"]).upper(), ns)
    recs = []
    for ts in by_id.values():
        arrival = ts.get("REQUEST_START", ts.get("QUEUE_START"))
        finish = ts.get("REQUEST_END", ts.get("COMPUTE_END"))
        if arrival is None or finish is None:
            continue
        rec: dict[str, Any] = {"arrival_ns": arrival, "finish_ns": finish}
        if "COMPUTE_START" in ts:
            rec["start_ns"] = ts["COMPUTE_START"]
        recs.append(rec)
    if not recs:
        raise InputError(source, "is a Triton trace without REQUEST_START/REQUEST_END timestamps; trace with --trace-config level=TIMESTAMPS")
    return from_records(recs, source, "triton")


def load_requests(path: str | Path) -> RequestLog:
    """Read a request log (JSON lines, JSON list, CSV, or a Triton trace).

    The file is read as every input is (:func:`whyidle.sources.read_bytes`): a regular file only
    (a FIFO or ``/dev/stdin`` would block, ``/dev/zero`` never end) and gzip inflated within the
    gzip limit; every failure is an :class:`InputError` naming the file and the request or line.
    """
    p = Path(path)
    raw = read_bytes(p, expected="a request log")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(p, f"is not UTF-8 text (byte {exc.start}); expected a request log (JSON lines, JSON or CSV)") from None
    del raw
    try:
        return _parse(p, text)
    except RecursionError:
        raise InputError(p, "nests JSON too deeply; expected one flat object per request") from None


def _parse(p: Path, text: str) -> RequestLog:
    head = text.lstrip()[:1]
    if head == "[":
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(p, f"is not valid JSON ({exc})") from None
        if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
            raise InputError(p, "expected a JSON list of objects, one per request")
        if doc and any("timestamps" in e for e in doc):
            return _triton(doc, str(p))
        return from_records(doc, str(p), "json")
    if head == "{":
        try:  # at once; on any doubt line by line below, which names the line
            lines = msgspec.json.Decoder().decode_lines(text)
            if all(isinstance(x, dict) for x in lines):
                return from_records(lines, str(p), "jsonl")
        except msgspec.DecodeError:
            pass
        recs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise InputError(p, f"line {n} is not a JSON object; expected JSON lines, one request per line") from None
            if not isinstance(obj, dict):
                raise InputError(p, f"line {n} is not a JSON object; expected one request per line")
            recs.append(obj)
        return from_records(recs, str(p), "jsonl")
    return _csv_log(p, text)


def _csv_log(p: Path, text: str) -> RequestLog:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if not reader.fieldnames or not any(_field_of(f) for f in reader.fieldnames):
            raise InputError(p, "is neither JSON nor a CSV with a header naming arrival, start and finish times")
        rows = [{k: v for k, v in r.items() if k is not None} for r in reader]
    except csv.Error as exc:  # a stray CR or NUL, a field past the csv module's limit
        raise InputError(p, f"line {reader.line_num + 1}: not a CSV row ({exc}); expected one request per line") from None
    return from_records(rows, str(p), "csv")
