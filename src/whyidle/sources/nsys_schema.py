"""Nsight Systems SQLite exports: opening read-only, probing the schema, the string table.

Tables appear in an export only when the capture used them, and their columns differ between
nsys versions (2022.2 to 2025.5 are read), so nothing is assumed: :class:`Schema` lists the tables
from ``sqlite_master`` and a table's columns from ``PRAGMA table_info`` before a query names them;
an absent column reads as -1. Integer columns come back as one int64 array per query; a value that
is NULL, text, a BLOB or out of the int64 range reads as -1 rather than failing the whole read.

``StringIds`` (every name in the export is an id into it) is fetched once (:class:`Strings`).

Identities. ``globalTid`` packs ``(hw/vm id << 48) | (pid << 24) | tid``; ``globalPid`` is the
same with the tid bits zero (:func:`decode_global_tid`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from whyidle.errors import InputError
from whyidle.timeline.build import TimelineBuilder

__all__ = ["Schema", "Strings", "open_ro", "factorize", "as_int", "strip_api_version", "decode_global_tid", "is_nsys_export", "sidecar_notes", "TID_MASK"]

I64 = npt.NDArray[np.int64]

_API_VERSION = re.compile(r"_v\d{4,}$")
_TID_BITS = 24
TID_MASK = (1 << _TID_BITS) - 1


def strip_api_version(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (driver names like ``cuMemAlloc_v2`` stay)."""
    return _API_VERSION.sub("", name)


def decode_global_tid(gtid: int) -> tuple[int, int]:
    """(pid, tid) of an nsys ``globalTid`` (or (pid, 0) of a ``globalPid``)."""
    return (gtid >> _TID_BITS) & TID_MASK, gtid & TID_MASK


def is_nsys_export(tables: Sequence[str]) -> bool:
    names = set(tables)
    return "StringIds" in names and any(t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "NVTX_EVENTS", "OSRT_API")) for t in names)


@contextmanager
def open_ro(path: Path) -> Iterator[sqlite3.Connection]:
    # immutable=1: SQLite neither takes locks nor creates -wal/-shm files beside the input (a
    # WAL-mode export would otherwise get them, and fail to open in a read-only folder).
    uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise InputError(path, f"cannot be opened as an SQLite database ({exc})") from None
    con.text_factory = lambda b: b.decode("utf-8", "replace")  # a damaged string is not a crash
    try:
        yield con
    finally:
        con.close()


def sidecar_notes(path: Path) -> list[str]:
    """What the files SQLite keeps beside a WAL-mode database say about the export.

    ``open_ro`` opens the export immutably, so SQLite reads the main file alone: changes still in
    an un-checkpointed ``-wal`` log are not read (replaying the log would write to the input). A
    non-empty ``-wal`` means the export read may be stale; a ``-shm`` alone, that another process
    has it open.
    """
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    try:
        wal_bytes = wal.stat().st_size if wal.exists() else -1
        has_shm = shm.exists()
    except OSError:
        return []
    if wal_bytes > 0:
        return [
            f"{wal.name} ({wal_bytes:,} bytes) lies beside the export: SQLite changes not yet checkpointed into {path.name} "
            "were not read (whyidle never writes to an input); if a process is still writing the export, wait for it, "
            f"else fold the log in with: sqlite3 {path.name} 'PRAGMA wal_checkpoint(TRUNCATE)'"
        ]
    if wal_bytes == 0 or has_shm:
        return [f"{(wal if wal_bytes == 0 else shm).name} lies beside the export: another process may have it open; if it is still writing, the export read may be incomplete"]
    return []


class Schema:
    """The tables of one export and the columns of each, as probed."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tables: dict[str, list[str]] = {}
        self.notnull: dict[str, set[str]] = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            self.tables[str(name)] = []

    def columns(self, table: str) -> list[str]:
        if table not in self.tables:
            return []
        cols = self.tables[table]
        if not cols:
            info = list(self.con.execute(f'PRAGMA table_info("{table}")'))
            cols = [str(r[1]) for r in info]
            self.tables[table] = cols
            self.notnull[table] = {str(r[1]) for r in info if r[3]}
        return cols

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns(table)
        return bool(have) and all(c in have for c in cols)

    def ints(self, table: str, cols: Sequence[str], where: str = "") -> I64:
        """Integer columns (NULL -> -1; absent columns -> -1) as an (n, len(cols)) array."""
        have = set(self.columns(table))
        nn = self.notnull.get(table, set())
        exprs = [(f'"{c}"' if c in nn else f'COALESCE("{c}", -1)') if c in have else "-1" for c in cols]
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"' + (f" WHERE {where}" if where else "")
        rows = self.con.execute(sql).fetchall()
        if not rows:
            return np.empty((0, len(cols)), dtype=np.int64)
        try:
            return np.array(rows, dtype=np.int64).reshape(len(rows), len(cols))
        except (TypeError, ValueError, OverflowError):
            return np.array([[as_int(v) for v in r] for r in rows], dtype=np.int64).reshape(len(rows), len(cols))

    def count(self, table: str, where: str = "") -> int:
        if table not in self.tables:
            return 0
        sql = f'SELECT COUNT(*) FROM "{table}"' + (f" WHERE {where}" if where else "")
        return int(self.con.execute(sql).fetchone()[0])

    def key_values(self, table: str) -> dict[str, str]:
        if not self.has(table, "name", "value"):
            return {}
        return {str(k): str(v) for k, v in self.con.execute(f'SELECT name, value FROM "{table}"')}


def factorize(x: I64) -> tuple[I64, I64]:
    """(distinct values, index of each row's value); fast when the column is constant."""
    if x.size == 0:
        return x[:0], np.empty(0, dtype=np.int64)
    if (x == x[0]).all():
        return x[:1], np.zeros(x.size, dtype=np.int64)
    uniq, inv = np.unique(x, return_inverse=True)
    return uniq, inv.reshape(-1).astype(np.int64, copy=False)


def as_int(v: Any) -> int:
    """An int64 from an SQLite value; -1 for NULL, text, BLOBs, non-finite or out-of-range numbers."""
    if isinstance(v, (bytes, bytearray, memoryview, str)):
        return -1
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return i if -(2**63) <= i < 2**63 else -1


class Strings:
    """StringIds, fetched once, with API-version suffixes stripped on demand."""

    def __init__(self, schema: Schema) -> None:
        self.values: dict[int, str] = {}
        if schema.has("StringIds", "id", "value"):
            self.values = {int(i): str(v) for i, v in schema.con.execute("SELECT id, value FROM StringIds")}

    def names(self, b: TimelineBuilder, ids: I64, strip: bool = False, missing: str = "") -> npt.NDArray[np.int32]:
        """Timeline string-table ids for StringIds ids (one lookup per distinct id)."""
        if ids.size == 0:
            return np.empty(0, dtype=np.int32)
        uniq, inv = factorize(ids)
        texts = []
        for u in uniq.tolist():
            s = self.values.get(int(u), missing or f"<string {u}>")
            texts.append(strip_api_version(s) if strip else s)
        return b.intern_many(texts)[inv.reshape(-1)]
