"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> Timeline.

The only module that knows Nsight Systems' export schema. It reads every schema from 2022.2 to
2025.5: tables appear only when the capture used them and columns differ by version, so every
table and column is probed (``sqlite_master``, ``PRAGMA table_info``) before it is read; nothing
is assumed. The file is opened read-only (SQLite URI ``mode=ro``): whyidle never modifies an input.

What is read, and into what::

    CUPTI_ACTIVITY_KIND_KERNEL          -> Kind.KERNEL (Kind.COLLECTIVE for NCCL kernels) on a
                                           GPU-stream lane; blocks per SM = grid / TARGET_INFO_GPU.smCount;
                                           grid and block sizes from gridX..Z, blockX..Z
    CUPTI_ACTIVITY_KIND_MEMCPY          -> Kind.MEMCPY named as Kineto names copies,
                                           "Memcpy HtoD (Pageable -> Device)", from copyKind,
                                           srcKind and dstKind, so pageable-vs-pinned logic is shared
    CUPTI_ACTIVITY_KIND_MEMSET          -> Kind.MEMSET, "Memset (Device)"
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE     -> Kind.KERNEL, one row per whole-graph execution (when
                                           the capture traced graphs as a whole)
    CUPTI_ACTIVITY_KIND_RUNTIME         -> Kind.RUNTIME on the calling thread; names via StringIds
                                           with the ``_vNNNN`` API-version suffix stripped
                                           (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``);
                                           the duplicate backtrace rows (event class 67-69) are dropped
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION -> Kind.SYNC on the thread whose runtime call it belongs to
                                           (stream/context/event sync; stream-wait-event is a
                                           device-side wait and is skipped)
    NVTX_EVENTS                         -> push/pop and start/end ranges on their thread:
                                           Kind.STEP when the name matches the step pattern,
                                           Kind.CPU_OP for ``torch.autograd.profiler.emit_nvtx``
                                           op ranges ("aten::mm, seq = 4, ..." -> "aten::mm"),
                                           Kind.ANNOTATION otherwise
    OSRT_API                            -> Kind.ANNOTATION on their thread (see below)
    SCHED_EVENTS                        -> Kind.ANNOTATION named OFF_CPU on the thread, from each
                                           switch out to its next switch in (the thread was
                                           blocked or preempted, not running)
    TARGET_INFO_GPU                     -> meta.devices: name, PCI bus id, UUID, SM count,
                                           compute capability (and the CUDA ordinal from
                                           TARGET_INFO_CUDA_DEVICE when present)
    TARGET_INFO_SESSION_START_TIME      -> every time is shifted by utcEpochNs, so timestamps
                                           are UTC epoch nanoseconds (nsys stores nanoseconds
                                           since the session start)

Identities. ``globalTid`` packs ``(hw/vm id << 48) | (pid << 24) | tid``; ``globalPid`` is the
same with the tid bits zero. Correlation ids restart in every process, so the source joins
runtime -> device work on (process, correlationId): the timeline's ``corr`` is
``(process index << 32) | correlationId``, which makes the shared launch linker process-aware
without knowing nsys. nsys device ids are not CUDA ordinals; lanes carry the nsys id and
``meta.devices`` says which physical GPU (bus id, UUID) it is.

OS-runtime calls. ``poll``, ``read``, ``futex``, ``sem_wait``, ``pthread_cond_wait``... on the
launching thread mean the host is *blocked*, not busy. The gap attribution (analyses/gaps.py)
splits the host side of a gap by what the launching thread was doing; a traced op or runtime call
counts as host work (host overhead). A blocked thread is not doing host work, so OS-runtime calls
are stored as ``Kind.ANNOTATION`` (context, not work): time inside them stays "nothing traced",
which the attribution reports as untraced host time (training) or an idle host (inference) -- the
starvation / insufficient-demand evidence -- instead of host overhead. The nsys findings
(``whyidle.findings.nsys_rules``) then name the blocking calls that cover those gaps.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from whyidle.errors import InputError, TraceFormatError, UnsupportedInputError
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import OFF_CPU, Kind, LaneKind, Timeline, TimelineMeta

__all__ = [
    "load_nsys",
    "load_exported_report",
    "export_nsys_report",
    "DEFAULT_STEP_PATTERN",
    "strip_api_version",
    "decode_global_tid",
    "memcpy_name",
    "is_nsys_export",
]

I64 = npt.NDArray[np.int64]

# ProfilerStep#N (torch.profiler, also under emit_nvtx), and the range names trainers commonly
# push: "train_step", "training_step 12", "step 3", "iteration 7", "Iteration#2", "batch_5".
DEFAULT_STEP_PATTERN = (
    r"(?i)^(?:ProfilerStep#\d+"
    r"|(?:train(?:ing)?[ _-]?)(?:step|iter(?:ation)?|batch)(?:[ _#:-]*\d+)?"
    r"|(?:step|iter(?:ation)?|batch)[ _#:-]*\d+)$"
)

_API_VERSION = re.compile(r"_v\d{4,}$")
_COLLECTIVE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.IGNORECASE)
_EMIT_NVTX_OP = re.compile(r"^((?:aten|c10d|prim|torch|_c10d_functional)::[\w.]+)(?:, seq = \d+.*)?$")

# Fallbacks when an export lacks its ENUM tables (values from nsys 2025.1's enum tables).
_COPY_KIND = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD",
}  # fmt: skip
_MEM_KIND = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}  # fmt: skip
_SYNC_TYPE = {1: "Event Sync", 3: "Stream Sync", 4: "Context Sync", 0: "Sync"}
_STREAM_WAIT_EVENT = 2
_BACKTRACE_CLASSES = (67, 68, 69)  # TRACE_PROCESS_EVENT_CUDABACKTRACE(_START/_FINISH)
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70}

_TID_BITS = 24
_TID_MASK = (1 << _TID_BITS) - 1


def strip_api_version(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (driver names like ``cuMemAlloc_v2`` stay)."""
    return _API_VERSION.sub("", name)


def decode_global_tid(gtid: int) -> tuple[int, int]:
    """(pid, tid) of an nsys ``globalTid`` (or (pid, 0) of a ``globalPid``)."""
    return (gtid >> _TID_BITS) & _TID_MASK, gtid & _TID_MASK


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """Kineto's name for a copy: ``Memcpy HtoD (Pageable -> Device)``."""
    d = _COPY_KIND.get(copy_kind, "Unknown")
    return f"Memcpy {d} ({_MEM_KIND.get(src_kind, 'Unknown')} -> {_MEM_KIND.get(dst_kind, 'Unknown')})"


def is_nsys_export(tables: Sequence[str]) -> bool:
    names = set(tables)
    return "StringIds" in names and any(t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "NVTX_EVENTS", "OSRT_API")) for t in names)


# -- opening ---------------------------------------------------------------------------------


@contextmanager
def _open_ro(path: Path) -> Iterator[sqlite3.Connection]:
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


def export_nsys_report(path: Path, *, nsys: str | None = None, timeout_s: float = 600.0) -> Path:
    """Export a ``.nsys-rep`` to SQLite in a fresh temporary folder (the caller deletes it).

    Runs ``nsys export --type sqlite`` when ``nsys`` is on the PATH; otherwise raises an
    UnsupportedInputError that says exactly which command to run.
    """
    exe = nsys or shutil.which("nsys")
    if exe is None:
        raise UnsupportedInputError(
            path,
            f"is an Nsight Systems report and nsys is not on the PATH; export it first with: "
            f"nsys export --type sqlite --output {path.with_suffix('.sqlite').name} {path.name}",
        )
    out_dir = Path(tempfile.mkdtemp(prefix="whyidle-nsys-"))
    out = out_dir / (path.stem + ".sqlite")
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise InputError(path, f"nsys export failed ({exc}); run it by hand: {' '.join(cmd[:-3])} {path.name}") from None
    if proc.returncode != 0 or not out.exists():
        shutil.rmtree(out_dir, ignore_errors=True)
        last = (proc.stderr or proc.stdout or "").strip().splitlines()
        why = last[-1] if last else f"exit status {proc.returncode}"
        raise InputError(path, f"nsys export --type sqlite failed: {why}")
    return out


# -- schema probing --------------------------------------------------------------------------


class _Schema:
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
            return np.array([[_as_int(v) for v in r] for r in rows], dtype=np.int64).reshape(len(rows), len(cols))

    def count(self, table: str, where: str = "") -> int:
        if table not in self.tables:
            return 0
        sql = f'SELECT COUNT(*) FROM "{table}"' + (f" WHERE {where}" if where else "")
        return int(self.con.execute(sql).fetchone()[0])

    def key_values(self, table: str) -> dict[str, str]:
        if not self.has(table, "name", "value"):
            return {}
        return {str(k): str(v) for k, v in self.con.execute(f'SELECT name, value FROM "{table}"')}


def _factorize(x: I64) -> tuple[I64, I64]:
    """(distinct values, index of each row's value); fast when the column is constant."""
    if x.size == 0:
        return x[:0], np.empty(0, dtype=np.int64)
    if (x == x[0]).all():
        return x[:1], np.zeros(x.size, dtype=np.int64)
    uniq, inv = np.unique(x, return_inverse=True)
    return uniq, inv.reshape(-1).astype(np.int64, copy=False)


def _as_int(v: Any) -> int:
    """An int64 from an SQLite value; -1 for NULL, text, BLOBs, non-finite or out-of-range numbers."""
    if isinstance(v, (bytes, bytearray, memoryview, str)):
        return -1
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return i if -(2**63) <= i < 2**63 else -1


# -- reading ---------------------------------------------------------------------------------


class _Strings:
    """StringIds, fetched once, with API-version suffixes stripped on demand."""

    def __init__(self, schema: _Schema) -> None:
        self.values: dict[int, str] = {}
        if schema.has("StringIds", "id", "value"):
            self.values = {int(i): str(v) for i, v in schema.con.execute("SELECT id, value FROM StringIds")}

    def names(self, b: TimelineBuilder, ids: I64, strip: bool = False, missing: str = "") -> npt.NDArray[np.int32]:
        """Timeline string-table ids for StringIds ids (one lookup per distinct id)."""
        if ids.size == 0:
            return np.empty(0, dtype=np.int32)
        uniq, inv = _factorize(ids)
        texts = []
        for u in uniq.tolist():
            s = self.values.get(int(u), missing or f"<string {u}>")
            texts.append(strip_api_version(s) if strip else s)
        return b.intern_many(texts)[inv.reshape(-1)]


class _Reader:
    def __init__(self, path: Path, con: sqlite3.Connection, step_pattern: str) -> None:
        self.path = path
        self.s = _Schema(con)
        if not is_nsys_export(list(self.s.tables)):
            raise UnsupportedInputError(
                path, "is an SQLite database but not an Nsight Systems export (no StringIds and CUPTI/NVTX tables)"
            )
        try:
            self.step_re = re.compile(step_pattern)
        except re.error as exc:
            from whyidle.errors import UsageError

            raise UsageError(f"--step-range {step_pattern!r} is not a valid regular expression ({exc})") from None
        self.meta = TimelineMeta(source_format="nsys", path=str(path))
        self.b = TimelineBuilder(self.meta)
        self.strings = _Strings(self.s)
        self.epoch_ns = 0
        self.proc_index: dict[int, int] = {}  # globalPid -> small index for correlation keys
        self.sm_count: dict[int, int] = {}
        # (process, correlationId) key -> thread lane of the runtime call (for sync records)
        self.thread_of_key: dict[int, int] = {}
        self.dropped_backtrace = 0

    # ---- helpers ----
    def _proc_idx(self, pids: I64) -> I64:
        out = np.empty(pids.size, dtype=np.int64)
        uniq, inv = _factorize(pids)
        idx = np.empty(uniq.size, dtype=np.int64)
        for j, p in enumerate(uniq.tolist()):
            i = self.proc_index.get(p)
            if i is None:
                i = len(self.proc_index)
                self.proc_index[p] = i
            idx[j] = i
        out[:] = idx[inv.reshape(-1)]
        return out

    def _corr_key(self, pids: I64, corr: I64) -> I64:
        key = (self._proc_idx(pids) << 32) | (corr & 0xFFFFFFFF)
        return np.where(corr >= 0, key, -1)

    def _thread_lanes(self, gtids: I64) -> npt.NDArray[np.int32]:
        uniq, inv = _factorize(gtids)
        lanes = np.empty(uniq.size, dtype=np.int32)
        for j, g in enumerate(uniq.tolist()):
            pid, tid = decode_global_tid(int(g))
            lanes[j] = self.b.lane_id(LaneKind.CPU_THREAD, -1, str(pid), str(tid))
        return lanes[inv.reshape(-1)]

    def _stream_lanes(self, dev: I64, gpids: I64, stream: I64) -> npt.NDArray[np.int32]:
        # one int64 key per (device, process, stream): device ids and streams fit in 16 and 32 bits
        pidx = self._proc_idx(gpids)
        key = ((dev & 0xFFFF) << 48) | ((pidx & 0xFFFF) << 32) | (stream & 0xFFFFFFFF)
        uniq, inv = _factorize(key)
        first = np.zeros(uniq.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(inv.size - 1, -1, -1)  # a row of each key
        lanes = np.empty(uniq.size, dtype=np.int32)
        for j, r in enumerate(first.tolist()):
            pid, _ = decode_global_tid(int(gpids[r]))
            lanes[j] = self.b.lane_id(LaneKind.GPU_STREAM, int(dev[r]), str(pid), str(int(stream[r])))
        return lanes[inv]

    def _times(self, start: I64, end: I64) -> tuple[I64, I64]:
        end = np.where(end < start, start, end)
        if start.size and (int(start.min()) < -(2**62) or int(end.max()) >= 2**62):  # would wrap past int64 with the epoch
            raise TraceFormatError(self.path, f"has an event time of {int(end.max()) if int(end.max()) >= 2**62 else int(start.min())} ns, beyond any capture (over 146 years); the export is damaged")
        return start + self.epoch_ns, end + self.epoch_ns

    # ---- metadata ----
    def read_meta(self) -> None:
        kv = self.s.key_values("META_DATA_EXPORT") or self.s.key_values("EXPORT_META_DATA")
        version = kv.get("EXPORT_PRODUCT_VERSION", "")
        schema = kv.get("EXPORT_SCHEMA_VERSION", "")
        self.meta.source_version = (
            f"Nsight Systems {version}" + (f" (export schema {schema})" if schema else "") if version else "Nsight Systems (version not recorded)"
        )
        if self.s.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            row = self.s.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            if row and row[0] is not None:
                self.epoch_ns = max(_as_int(row[0]), 0)
                if self.epoch_ns >= 2**62:
                    raise TraceFormatError(self.path, f"has a session start time (TARGET_INFO_SESSION_START_TIME.utcEpochNs) of {self.epoch_ns} ns, after the year 2116; the export is damaged")
        if not self.epoch_ns:
            self.meta.quality.append(
                "the export has no session start time (TARGET_INFO_SESSION_START_TIME): times are relative to the "
                "capture start and cannot be joined with other logs by wall-clock time"
            )
        self._read_gpus()

    def _read_gpus(self) -> None:
        t = "TARGET_INFO_GPU"
        cols = self.s.columns(t)
        if not cols:
            return
        want = [c for c in ("id", "name", "busLocation", "uuid", "smCount", "computeMajor", "computeMinor", "totalMemory", "chipName", "cuDevice") if c in cols]
        cuda_of: dict[int, int] = {}
        if self.s.has("TARGET_INFO_CUDA_DEVICE", "gpuId", "cudaId"):
            cuda_of = {int(g): int(c) for g, c in self.s.con.execute("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")}
        for row in self.s.con.execute(f'SELECT {", ".join(chr(34) + c + chr(34) for c in want)} FROM "{t}"'):
            d: dict[str, Any] = dict(zip(want, row))
            gid = _as_int(d.get("id"))
            d["nsys_id"] = gid
            if "busLocation" in d:
                d["pci_bus_id"] = d.pop("busLocation")
            if gid in cuda_of:
                d["cuda_ordinal"] = cuda_of[gid]
            if isinstance(d.get("smCount"), int) and d["smCount"] > 0:
                self.sm_count[gid] = int(d["smCount"])
            self.meta.devices.append(d)

    # ---- device work ----
    def read_kernels(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        if not self.s.has(t, "start", "end"):
            return 0
        a = self.s.ints(
            t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
        )
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        name_id = np.where(a[:, 6] >= 0, a[:, 6], a[:, 7])
        names = self.strings.names(self.b, name_id, missing="<unnamed kernel>")
        coll_table = np.fromiter((bool(_COLLECTIVE.search(s)) for s in self.b._strings), dtype=np.bool_, count=len(self.b._strings))
        kind = np.where(coll_table[names], int(Kind.COLLECTIVE), int(Kind.KERNEL)).astype(np.int8)
        grid = np.where((a[:, 8] > 0) & (a[:, 9] > 0) & (a[:, 10] > 0), a[:, 8] * a[:, 9] * a[:, 10], -1)
        block = np.where((a[:, 11] > 0) & (a[:, 12] > 0) & (a[:, 13] > 0), a[:, 11] * a[:, 12] * a[:, 13], -1).astype(np.int32)
        sms = np.array([self.sm_count.get(int(d), 0) for d in a[:, 2].tolist()], dtype=np.float64) if self.sm_count else np.zeros(a.shape[0])
        bps = np.where((grid > 0) & (sms > 0), grid / np.where(sms > 0, sms, 1), np.nan).astype(np.float32)
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
            kind=kind,
            name=names,
            corr=self._corr_key(a[:, 5] & ~_TID_MASK, a[:, 4]),
            blocks_per_sm=bps,
            grid=grid,
            block=block,
        )
        return int(a.shape[0])

    def read_memcpy(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if not self.s.has(t, "start", "end"):
            return 0
        a = self.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind", "srcKind", "dstKind"))
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        combos, inv = np.unique(a[:, 7:10], axis=0, return_inverse=True)
        ids = self.b.intern_many([memcpy_name(int(c), int(s), int(d)) for c, s, d in combos.tolist()])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
            kind=np.full(a.shape[0], int(Kind.MEMCPY), dtype=np.int8),
            name=ids[inv.reshape(-1)],
            corr=self._corr_key(a[:, 5] & ~_TID_MASK, a[:, 4]),
            nbytes=a[:, 6],
        )
        return int(a.shape[0])

    def read_memset(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_MEMSET"
        if not self.s.has(t, "start", "end"):
            return 0
        a = self.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "memKind"))
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        kinds, inv = np.unique(a[:, 7], return_inverse=True)
        ids = self.b.intern_many([f"Memset ({_MEM_KIND.get(int(k), 'Device')})" for k in kinds.tolist()])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
            kind=np.full(a.shape[0], int(Kind.MEMSET), dtype=np.int8),
            name=ids[inv.reshape(-1)],
            corr=self._corr_key(a[:, 5] & ~_TID_MASK, a[:, 4]),
            nbytes=a[:, 6],
        )
        return int(a.shape[0])

    def read_graphs(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        if not self.s.has(t, "start", "end", "streamId"):
            return 0
        a = self.s.ints(t, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"))
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        gids, inv = np.unique(a[:, 6], return_inverse=True)
        ids = self.b.intern_many([f"CUDA graph {g}" for g in gids.tolist()])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._stream_lanes(a[:, 2], a[:, 5], a[:, 3]),
            kind=np.full(a.shape[0], int(Kind.KERNEL), dtype=np.int8),
            name=ids[inv.reshape(-1)],
            corr=self._corr_key(a[:, 5] & ~_TID_MASK, a[:, 4]),
        )
        return int(a.shape[0])

    # ---- host ----
    def read_runtime(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if not self.s.has(t, "start", "end", "globalTid"):
            return 0
        cols = self.s.columns(t)
        where = f"eventClass NOT IN ({', '.join(str(c) for c in _BACKTRACE_CLASSES)})" if "eventClass" in cols else ""
        dropped = self.s.count(t, where.replace("NOT IN", "IN")) if where else 0
        a = self.s.ints(t, ("start", "end", "globalTid", "correlationId", "nameId"), where)
        if dropped:
            self.dropped_backtrace = dropped
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        lanes = self._thread_lanes(a[:, 2])
        key = self._corr_key(a[:, 2] & ~_TID_MASK, a[:, 3])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=lanes,
            kind=np.full(a.shape[0], int(Kind.RUNTIME), dtype=np.int8),
            name=self.strings.names(self.b, a[:, 4], strip=True, missing="<unnamed call>"),
            corr=key,
        )
        if self.s.count("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
            ok = key >= 0
            self.thread_of_key = dict(zip(key[ok].tolist(), lanes[ok].tolist()))
        return int(a.shape[0])

    def read_sync(self) -> int:
        t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if not self.s.has(t, "start", "end", "correlationId"):
            return 0
        cols = self.s.columns(t)
        type_col = "syncType" if "syncType" in cols else "deprecatedSyncType"
        a = self.s.ints(t, ("start", "end", "correlationId", "globalPid", type_col))
        if a.shape[0] == 0:
            return 0
        key = self._corr_key(a[:, 3] & ~_TID_MASK, a[:, 2])
        lane = np.array([self.thread_of_key.get(int(k), -1) for k in key.tolist()], dtype=np.int32)
        keep = (lane >= 0) & (a[:, 4] != _STREAM_WAIT_EVENT)
        if not keep.any():
            return 0
        a, lane = a[keep], lane[keep]
        start, end = self._times(a[:, 0], a[:, 1])
        types, inv = np.unique(a[:, 4], return_inverse=True)
        ids = self.b.intern_many([_SYNC_TYPE.get(int(x), "Sync") for x in types.tolist()])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=lane,
            kind=np.full(a.shape[0], int(Kind.SYNC), dtype=np.int8),
            name=ids[inv.reshape(-1)],
        )
        return int(a.shape[0])

    def read_nvtx(self) -> int:
        t = "NVTX_EVENTS"
        if not self.s.has(t, "start", "end", "globalTid"):
            return 0
        cols = self.s.columns(t)
        types = dict(_NVTX_RANGE_TYPES)
        if self.s.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
            for i, n in self.s.con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
                if n in types and _as_int(i) >= 0:
                    types[str(n)] = _as_int(i)
        where = "end IS NOT NULL" + (f" AND eventType IN ({', '.join(str(v) for v in types.values())})" if "eventType" in cols else "")
        text_expr = "text" if "text" in cols else "NULL"
        tid_expr = "COALESCE(textId, -1)" if "textId" in cols else "-1"
        rows = self.s.con.execute(f'SELECT start, end, globalTid, {tid_expr}, {text_expr} FROM "{t}" WHERE {where}').fetchall()
        if not rows:
            return 0
        n = len(rows)
        a = np.array([(_as_int(r[0]), _as_int(r[1]), _as_int(r[2]), _as_int(r[3])) for r in rows], dtype=np.int64).reshape(n, 4)
        texts = [(r[4] if isinstance(r[4], str) else "") if r[4] is not None else self.strings.values.get(_as_int(r[3]), "") for r in rows]
        keep = np.array([bool(x) for x in texts], dtype=np.bool_) & (a[:, 2] >= 0)
        if not keep.all():
            a = a[keep]
            texts = [x for x, k in zip(texts, keep.tolist()) if k]
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        step_re = self.step_re
        classes: dict[str, tuple[int, int]] = {}  # text -> (kind, name id), decided once per text
        for s in set(texts):
            m = _EMIT_NVTX_OP.match(s)
            if step_re.search(s):
                classes[s] = (int(Kind.STEP), self.b.intern(s))
            elif m:
                classes[s] = (int(Kind.CPU_OP), self.b.intern(m.group(1)))
            else:
                classes[s] = (int(Kind.ANNOTATION), self.b.intern(s))
        kn = np.array([classes[s] for s in texts], dtype=np.int64).reshape(len(texts), 2)
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._thread_lanes(a[:, 2]),
            kind=kn[:, 0].astype(np.int8),
            name=kn[:, 1].astype(np.int32),
        )
        return int(a.shape[0])

    def read_osrt(self) -> int:
        t = "OSRT_API"
        if not self.s.has(t, "start", "end", "globalTid", "nameId"):
            return 0
        a = self.s.ints(t, ("start", "end", "globalTid", "nameId"))
        if a.shape[0] == 0:
            return 0
        start, end = self._times(a[:, 0], a[:, 1])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._thread_lanes(a[:, 2]),
            kind=np.full(a.shape[0], int(Kind.ANNOTATION), dtype=np.int8),
            name=self.strings.names(self.b, a[:, 3], missing="<os call>"),
        )
        return int(a.shape[0])

    def read_sched(self) -> int:
        """Thread scheduling (SCHED_EVENTS): each stretch a thread spent scheduled out, from a
        switch out to its next switch in, as an annotation named OFF_CPU on that thread."""
        t = "SCHED_EVENTS"
        if not self.s.has(t, "start", "isSchedIn", "globalTid"):
            return 0
        a = self.s.ints(t, ("globalTid", "start", "isSchedIn"))
        a = a[a[:, 0] >= 0]
        if a.shape[0] < 2:
            return 0
        a = a[np.lexsort((a[:, 1], a[:, 0]))]
        out = (a[:-1, 2] == 0) & (a[1:, 2] != 0) & (a[:-1, 0] == a[1:, 0])  # out, then in, same thread
        if not out.any():
            return 0
        start, end = self._times(a[:-1, 1][out], a[1:, 1][out])
        self.b.add_columns(
            start_ns=start,
            end_ns=end,
            lane=self._thread_lanes(a[:-1, 0][out]),
            kind=np.full(int(out.sum()), int(Kind.ANNOTATION), dtype=np.int8),
            name=np.full(int(out.sum()), self.b.intern(OFF_CPU), dtype=np.int32),
        )
        return int(out.sum())

    def name_threads(self) -> None:
        if not self.s.has("ThreadNames", "nameId", "globalTid"):
            return
        for name_id, gtid in self.s.con.execute("SELECT nameId, globalTid FROM ThreadNames"):
            if gtid is None:
                continue
            pid, tid = decode_global_tid(max(_as_int(gtid), 0))
            name = self.strings.values.get(_as_int(name_id), "")
            if name:
                self.b.name_lane(str(pid), str(tid), name)

    # ---- all ----
    def read(self) -> Timeline:
        self.read_meta()
        n_kernels = self.read_kernels()
        n_copies = self.read_memcpy()
        n_sets = self.read_memset()
        n_graphs = self.read_graphs()
        n_runtime = self.read_runtime()
        self.read_sync()
        self.read_nvtx()
        self.read_osrt()
        self.read_sched()
        self.name_threads()
        if n_kernels == 0 and n_graphs == 0:
            other = []
            for count, one, many in ((n_copies, "copy", "copies"), (n_sets, "memset", "memsets"), (n_runtime, "CUDA API call", "CUDA API calls")):
                if count:
                    other.append(f"{count} {one if count == 1 else many}")
            held = ", ".join(other) if other else "no device work"
            self.meta.quality.append(
                f"this capture has no kernels (it holds {held}): the capture ended before any kernel ran, "
                "or CUDA tracing was off (nsys profile --trace=cuda); re-capture a stretch where the job is training"
            )
        pids = len(self.proc_index)
        if pids > 1:
            self.meta.quality.append(
                f"device work and CUDA calls come from {pids} processes; correlation ids repeat across processes, "
                "so launches were joined to device work per (process, correlation id)"
            )
        return self.b.build()


def load_nsys(path: Path, step_pattern: str | None = None) -> Timeline:
    """Read an Nsight Systems SQLite export (opened read-only) into a Timeline.

    ``step_pattern`` is the regular expression that makes an NVTX range a step
    (default :data:`DEFAULT_STEP_PATTERN`).
    """
    with _open_ro(path) as con:
        try:
            return _Reader(path, con, step_pattern or DEFAULT_STEP_PATTERN).read()
        except sqlite3.DatabaseError as exc:
            raise TraceFormatError(path, f"is a damaged or unreadable SQLite database ({exc}); re-export it with nsys export --type sqlite") from None


def load_exported_report(path: Path, step_pattern: str | None = None, *, nsys: str | None = None) -> Timeline:
    """Read a ``.nsys-rep`` by exporting it to SQLite in a temporary folder (deleted afterwards)."""
    if not path.is_file():
        raise InputError(path, "no such file")
    out = export_nsys_report(path, nsys=nsys)
    try:
        tl = load_nsys(out, step_pattern)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    tl.meta.path = str(path)
    return tl
