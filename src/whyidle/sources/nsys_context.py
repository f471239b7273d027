"""One Nsight Systems export being read: its schema, strings, Timeline builder and identities.

:class:`Export` is what the table readers (:mod:`whyidle.sources.nsys_device`,
:mod:`whyidle.sources.nsys_host`) share: how a process, a thread and a GPU stream of the export
become Timeline lanes, how correlation ids become process-aware keys, and how times are shifted.

Correlation ids restart in every process, so runtime calls are joined to device work on
(process, correlationId): the timeline's ``corr`` is ``(process index << 32) | correlationId``,
which makes the shared launch linker process-aware without knowing nsys. nsys device ids are not
CUDA ordinals; lanes carry the nsys id and ``meta.devices`` says which physical GPU (bus id, UUID)
it is (read here from TARGET_INFO_GPU, with the CUDA ordinal from TARGET_INFO_CUDA_DEVICE).

Times: nsys stores nanoseconds since the session start; every time is shifted by
TARGET_INFO_SESSION_START_TIME.utcEpochNs, so timestamps are UTC epoch nanoseconds.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from whyidle.errors import TraceFormatError, UnsupportedInputError, UsageError
from whyidle.sources.nsys_schema import Schema, Strings, as_int, decode_global_tid, factorize, is_nsys_export
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import LaneKind, TimelineMeta

__all__ = ["Export"]

I64 = npt.NDArray[np.int64]


class Export:
    """The reading state of one export (see the module docstring)."""

    def __init__(self, path: Path, con: sqlite3.Connection, step_pattern: str) -> None:
        self.path = path
        self.s = Schema(con)
        if not is_nsys_export(list(self.s.tables)):
            raise UnsupportedInputError(
                path, "is an SQLite database but not an Nsight Systems export (no StringIds and CUPTI/NVTX tables)"
            )
        try:
            self.step_re = re.compile(step_pattern)
        except re.error as exc:
            raise UsageError(f"step_range {step_pattern!r} is not a valid regular expression ({exc})", field="step_range") from None
        self.meta = TimelineMeta(source_format="nsys", path=str(path))
        self.b = TimelineBuilder(self.meta)
        self.strings = Strings(self.s)
        self.epoch_ns = 0
        self.proc_index: dict[int, int] = {}  # globalPid -> small index for correlation keys
        self.sm_count: dict[int, int] = {}
        # (process, correlationId) key -> thread lane of the runtime call (for sync records)
        self.thread_of_key: dict[int, int] = {}

    def proc_idx(self, pids: I64) -> I64:
        out = np.empty(pids.size, dtype=np.int64)
        uniq, inv = factorize(pids)
        idx = np.empty(uniq.size, dtype=np.int64)
        for j, p in enumerate(uniq.tolist()):
            i = self.proc_index.get(p)
            if i is None:
                i = len(self.proc_index)
                self.proc_index[p] = i
            idx[j] = i
        out[:] = idx[inv.reshape(-1)]
        return out

    def corr_key(self, pids: I64, corr: I64) -> I64:
        key = (self.proc_idx(pids) << 32) | (corr & 0xFFFFFFFF)
        return np.where(corr >= 0, key, -1)

    def thread_lanes(self, gtids: I64) -> npt.NDArray[np.int32]:
        uniq, inv = factorize(gtids)
        lanes = np.empty(uniq.size, dtype=np.int32)
        for j, g in enumerate(uniq.tolist()):
            pid, tid = decode_global_tid(int(g))
            lanes[j] = self.b.lane_id(LaneKind.CPU_THREAD, -1, str(pid), str(tid))
        return lanes[inv.reshape(-1)]

    def stream_lanes(self, dev: I64, gpids: I64, stream: I64) -> npt.NDArray[np.int32]:
        # one int64 key per (device, process, stream): device ids and streams fit in 16 and 32 bits
        pidx = self.proc_idx(gpids)
        key = ((dev & 0xFFFF) << 48) | ((pidx & 0xFFFF) << 32) | (stream & 0xFFFFFFFF)
        uniq, inv = factorize(key)
        first = np.zeros(uniq.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(inv.size - 1, -1, -1)  # a row of each key
        lanes = np.empty(uniq.size, dtype=np.int32)
        for j, r in enumerate(first.tolist()):
            pid, _ = decode_global_tid(int(gpids[r]))
            lanes[j] = self.b.lane_id(LaneKind.GPU_STREAM, int(dev[r]), str(pid), str(int(stream[r])))
        return lanes[inv]

    def times(self, start: I64, end: I64) -> tuple[I64, I64]:
        end = np.where(end < start, start, end)
        if start.size and (int(start.min()) < -(2**62) or int(end.max()) >= 2**62):  # would wrap past int64 with the epoch
            raise TraceFormatError(self.path, f"has an event time of {int(end.max()) if int(end.max()) >= 2**62 else int(start.min())} ns, beyond any capture (over 146 years); the export is damaged")
        return start + self.epoch_ns, end + self.epoch_ns

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
                self.epoch_ns = max(as_int(row[0]), 0)
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
            rows = self.s.con.execute("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")
            pairs = ((as_int(g), as_int(c)) for g, c in rows)  # text, NULL or a BLOB: not an id
            cuda_of = {g: c for g, c in pairs if g >= 0 and c >= 0}
        for row in self.s.con.execute(f'SELECT {", ".join(chr(34) + c + chr(34) for c in want)} FROM "{t}"'):
            d: dict[str, Any] = dict(zip(want, row))
            gid = as_int(d.get("id"))
            d["nsys_id"] = gid
            if "busLocation" in d:
                d["pci_bus_id"] = d.pop("busLocation")
            if gid in cuda_of:
                d["cuda_ordinal"] = cuda_of[gid]
            if isinstance(d.get("smCount"), int) and d["smCount"] > 0:
                self.sm_count[gid] = int(d["smCount"])
            self.meta.devices.append(d)
