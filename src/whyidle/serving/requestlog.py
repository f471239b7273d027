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
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from whyidle.errors import InputError

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


def _time_ns(value: Any, unit_ns: int) -> int:
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError("empty")
    if isinstance(value, (int, float)):
        return int(round(value * unit_ns)) if isinstance(value, float) else value * unit_ns
    text = str(value).strip()
    try:
        return int(text) * unit_ns
    except ValueError:
        pass
    try:
        return int(round(float(text) * unit_ns))
    except ValueError:
        pass
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)  # a log without a zone: its times are compared only with each other
    d = dt - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1_000


def from_records(records: list[dict[str, Any]], source: str = "<records>", fmt: str = "records") -> RequestLog:
    """Build a RequestLog from one mapping per request (the generic field names above)."""
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
                row[name] = int(float(rec[key])) if name == "batch" else _time_ns(rec[key], unit)
            except (TypeError, ValueError):
                raise InputError(source, f"request {i + 1}: {key}={rec[key]!r} is not a number or an ISO 8601 time") from None
        if "arrival" not in row or "finish" not in row:
            raise InputError(source, f"request {i + 1} has no arrival or no finish time")
        for name in cols:
            cols[name].append(row[name])
    if not cols["arrival"]:
        raise InputError(source, "holds no requests")
    arr = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
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


def _infer_batches(start: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Requests with the same (start, finish) ran in one batch: number the distinct pairs in time order."""
    pairs = np.stack([start, finish], axis=1)
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    out: np.ndarray = inverse.reshape(-1).astype(np.int64)
    return out


def _triton(doc: list[Any], source: str) -> RequestLog:
    by_id: dict[Any, dict[str, int]] = {}
    for entry in doc:
        if not isinstance(entry, dict) or "timestamps" not in entry:
            continue
        ts = by_id.setdefault(entry.get("id"), {})
        for t in entry["timestamps"]:
            if isinstance(t, dict) and "name" in t and "ns" in t:
                ts.setdefault(str(t["name"]).upper(), int(t["ns"]))
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
    """Read a request log (JSON lines, JSON list, CSV, or a Triton trace)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            import gzip

            raw = gzip.decompress(raw)
        text = raw.decode()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputError(p, f"cannot be read as a request log ({exc})") from None
    head = text.lstrip()[:1]
    if head == "[":
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(p, f"is not valid JSON ({exc})") from None
        if doc and all(isinstance(e, dict) for e in doc) and any("timestamps" in e for e in doc):
            return _triton(doc, str(p))
        if not all(isinstance(e, dict) for e in doc):
            raise InputError(p, "expected a JSON list of objects, one per request")
        return from_records(doc, str(p), "json")
    if head == "{":
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
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not any(_field_of(f) for f in reader.fieldnames):
        raise InputError(p, "is neither JSON nor a CSV with a header naming arrival, start and finish times")
    return from_records([{k: v for k, v in r.items() if k is not None} for r in reader], str(p), "csv")
