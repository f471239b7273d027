"""The normalised Timeline as one Parquet file: parse once, analyse many times.

``whyidle convert trace.json.gz -o trace.parquet`` writes it; ``whyidle diagnose trace.parquet``
reads it back without parsing the trace again; DuckDB, Polars or pandas can query it directly.
Needs the optional extra ``parquet`` (pyarrow), imported only when a Parquet file is used.

Columns (one row per event, sorted by start time; see docs/scale.md)
    start_ns, end_ns  int64    interval [start, end) in ns on the trace's clock
    lane              int32    index into the lanes table (metadata)
    kind              int8     whyidle.timeline.Kind value
    name              int32    index into the strings table (metadata)
    corr              int64    launch <-> device-work correlation id, -1 if none
    stack             int32    strings index of the Python call stack, -1 if none
    shape0            int64    leading dimension of the op's first input, -1 if unknown
    blocks_per_sm     float32  kernels: blocks per SM (NaN if unknown)
    occupancy         float32  kernels: estimated achieved occupancy % (NaN if unknown)
    nbytes            int64    copies and memsets: bytes moved, -1 if unknown
    grid              int64    kernels: blocks in the grid, -1 if unknown (absent from files of whyidle
                               before it: read as unknown)
    block             int32    kernels: threads per block, -1 if unknown (likewise)
    inputs            int32    cpu ops: strings index of the recorded inputs, -1 if none (likewise)
    kind_name         dictionary<string>  the kind in words ("kernel", "cpu_op", ...)
    name_text         dictionary<string>  the name resolved ("ncclKernel_AllReduce...")
    lane_label        dictionary<string>  the lane resolved ("GPU 0 stream 7")

The small tables travel in the file's key-value metadata under ``whyidle.timeline`` (JSON):
``format_version``, ``strings`` (list), ``lanes`` (kind, device, pid, tid, name) and ``meta``
(the TimelineMeta fields).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec.structs import asdict

from whyidle.errors import InputError, MissingExtraError, TraceFormatError
from whyidle.output import write_atomic
from whyidle.sources._io import check_regular
from whyidle.timeline.model import Kind, Lane, LaneKind, Timeline, TimelineMeta
from whyidle.timeline.arrays import one_of

__all__ = ["write_parquet", "load_parquet", "require_pyarrow", "PARQUET_MAGIC", "METADATA_KEY", "FORMAT_VERSION"]

PARQUET_MAGIC = b"PAR1"
METADATA_KEY = b"whyidle.timeline"
FORMAT_VERSION = 1
_KIND_NAMES = {int(k): k.name.lower() for k in Kind}
# Columns added after format version 1 was first written: absent from older files, read as unknown.
_ADDED_COLUMNS: dict[str, tuple[int, type]] = {"grid": (-1, np.int64), "block": (-1, np.int32), "inputs": (-1, np.int32)}


def require_pyarrow() -> None:
    """Raise :class:`~whyidle.errors.MissingExtraError` (with the install command) unless pyarrow is installed."""
    _pa()


def _pa() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtraError("reading and writing Parquet timelines", "parquet", "pyarrow") from exc
    return pa, pq


def _dict_column(pa: Any, indices: np.ndarray, values: list[str]) -> Any:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32, copy=False)), pa.array(values, type=pa.string()))


def write_parquet(tl: Timeline, path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Write ``tl`` to ``path`` atomically, never over one of ``inputs`` (see :mod:`whyidle.output`)."""
    pa, pq = _pa()
    kind_codes = sorted(_KIND_NAMES)
    kind_pos = np.zeros(256, dtype=np.int32)
    kind_pos[np.array(kind_codes) & 0xFF] = np.arange(len(kind_codes), dtype=np.int32)
    cols: dict[str, Any] = {c: pa.array(getattr(tl, c)) for c in Timeline.COLUMNS}
    cols["kind_name"] = _dict_column(pa, kind_pos[tl.kind.astype(np.int64) & 0xFF], [_KIND_NAMES[k] for k in kind_codes])
    cols["name_text"] = _dict_column(pa, tl.name, tl.strings)
    cols["lane_label"] = _dict_column(pa, tl.lane, [ln.label for ln in tl.lanes])
    side = {
        "format_version": FORMAT_VERSION,
        "strings": tl.strings,
        "lanes": [[ln.kind.value, ln.device, ln.pid, ln.tid, ln.name] for ln in tl.lanes],
        "meta": asdict(tl.meta),
    }
    table = pa.table(cols).replace_schema_metadata({METADATA_KEY: msgspec.json.encode(side)})
    sink = pa.BufferOutputStream()  # compressed: a fraction of the columns already in memory
    pq.write_table(table, sink, compression="zstd")
    write_atomic(path, sink.getvalue().to_pybytes(), inputs=inputs)


class _Side(msgspec.Struct):
    """The small tables in the file's metadata (``whyidle.timeline``), as written."""

    format_version: int
    strings: list[str]
    lanes: list[tuple[LaneKind, int, str, str, str]]
    meta: TimelineMeta


# Each column's dtype, as the Timeline declares it: a file whose columns differ was not written
# by whyidle (or was changed since), and is refused rather than cast.
_DTYPES = {c: np.dtype(t) for c, t in {
    "start_ns": np.int64, "end_ns": np.int64, "lane": np.int32, "kind": np.int8, "name": np.int32, "corr": np.int64,
    "stack": np.int32, "shape0": np.int64, "blocks_per_sm": np.float32, "occupancy": np.float32, "nbytes": np.int64,
    "grid": np.int64, "block": np.int32, "inputs": np.int32,
}.items()}  # fmt: skip


def _side(p: Path, raw: bytes) -> _Side:
    try:
        doc = msgspec.json.decode(raw)
        if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
            version = doc.get("format_version") if isinstance(doc, dict) else None
            raise TraceFormatError(p, f"is a whyidle timeline of format version {version!r:.40}; this whyidle reads version {FORMAT_VERSION}")
        return msgspec.convert(doc, _Side)
    except msgspec.ValidationError as exc:  # (a DecodeError too: first)
        raise TraceFormatError(p, f"has whyidle metadata that is not a timeline's: {str(exc)[:160]}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise TraceFormatError(p, f"has unreadable whyidle metadata ({str(exc)[:120]})") from None


def _check_columns(p: Path, cols: dict[str, np.ndarray], side: _Side) -> None:
    """Every column of its declared dtype, every index within its table, no negative duration."""
    for c, col in cols.items():
        if col.dtype != _DTYPES[c]:
            raise TraceFormatError(p, f"has column {c} of type {col.dtype}; a whyidle timeline's is {_DTYPES[c]}")
    bounds = {"lane": (0, len(side.lanes)), "name": (0, len(side.strings)), "stack": (-1, len(side.strings))}
    for c, (lo, hi) in bounds.items():
        bad = (cols[c] < lo) | (cols[c] >= hi)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceFormatError(p, f"row {i}: column {c} is {int(cols[c][i])}, outside its table (expected {lo}..{hi - 1})")
    unknown = ~one_of(cols["kind"], sorted(_KIND_NAMES))
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise TraceFormatError(p, f"row {i}: column kind is {int(cols['kind'][i])}, which is no event kind")
    for c in ("start_ns", "end_ns"):  # as every reader: within 2**62 ns, so sums and differences fit int64
        far = (cols[c] > 2**62) | (cols[c] < -(2**62))
        if far.any():
            i = int(np.flatnonzero(far)[0])
            raise TraceFormatError(p, f"row {i}: {c} {int(cols[c][i])} is beyond 2**62 ns (146 years); expected times of a capture")
    back = cols["end_ns"] < cols["start_ns"]
    if back.any():
        i = int(np.flatnonzero(back)[0])
        raise TraceFormatError(p, f"row {i}: ends before it starts (start_ns {int(cols['start_ns'][i])}, end_ns {int(cols['end_ns'][i])})")


def load_parquet(path: str | os.PathLike[str]) -> Timeline:
    """Read a timeline written by :func:`write_parquet`; a file changed since is refused with the
    field it got wrong (the metadata's tables, a column's type, an index past its table)."""
    pa, pq = _pa()
    p = Path(path)
    check_regular(p)
    try:
        schema = pq.read_schema(p)
        raw = (schema.metadata or {}).get(METADATA_KEY)
        if raw is None or any(c not in schema.names for c in Timeline.COLUMNS if c not in _ADDED_COLUMNS):
            raise TraceFormatError(p, "is a Parquet file but not a whyidle timeline; write one with: whyidle convert TRACE -o FILE.parquet")
        present = [c for c in Timeline.COLUMNS if c in schema.names]
        side = _side(p, raw)
        table = pq.read_table(p, columns=present)
        cols = {c: np.require(table.column(c).to_numpy(), requirements="W") for c in present}
        for c in present:
            if cols[c].size == 0:
                cols[c] = np.empty(0, dtype=table.schema.field(c).type.to_pandas_dtype())
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
        raise TraceFormatError(p, f"is not a readable Parquet file ({str(exc)[:160]})") from None
    for c, (value, dtype) in _ADDED_COLUMNS.items():
        if c not in cols:
            cols[c] = np.full(table.num_rows, value, dtype=dtype)
    _check_columns(p, cols, side)
    lanes = [Lane(k, d, pid, tid, name) for k, d, pid, tid, name in side.lanes]
    meta = side.meta
    meta.path = str(p)
    return Timeline(**cols, lanes=lanes, strings=side.strings, meta=meta)
