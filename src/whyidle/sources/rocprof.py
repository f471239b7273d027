"""rocprofv3 JSON output (``rocprofv3 --runtime-trace --output-format json``) -> Timeline.

::

    kernel_dispatch  -> Kind.KERNEL (Kind.COLLECTIVE for RCCL kernels) on a GPU-stream lane per
                        (agent, HIP stream; the HSA queue where the record has no stream);
                        name from kernel_symbols; grid in workgroups, block = workgroup size
    memory_copy      -> Kind.MEMCPY named as the other readers name copies ("Memcpy HtoD (Host ->
                        Device)"; rocprofv3 does not say pinned or pageable), on the GPU side's
                        agent, bytes moved
    hip_api          -> Kind.RUNTIME on the calling thread ("hipLaunchKernel"): the launch that
                        shares the device work's correlation id
    hsa_api          -> Kind.RUNTIME only when no HIP call was traced (an HSA program); under
                        HIP they are the runtime's own calls inside the HIP calls, dropped with a note
    rccl_api         -> Kind.CPU_OP on the calling thread ("ncclAllReduce"): the op whose launch
                        enqueued a collective
    marker_api       -> ROCTx ranges by their text: Kind.STEP when it matches the step pattern,
                        Kind.CPU_OP for a PyTorch op emitted as a range, else Kind.ANNOTATION

Devices are the GPU agents in ``gpu_index`` order: ``name`` is the product ("AMD Instinct
MI350X"), ``gcnArchName`` the GFX target ("gfx950"), ``cuCount`` the compute units; so the
advice context sees an AMD device and its generation. Times are the tool's nanoseconds, kept.
A file may hold several processes: correlation ids are then keyed by process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.errors import TraceFormatError
from whyidle.sources.ranges import COLLECTIVE_KERNEL, DEFAULT_STEP_PATTERN, range_kind
from whyidle.sources.rocprof_schema import Agent, ApiCall, Copy, Dim3, Dispatch, Document, Process, looks_like_rocprof
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["load_rocprof", "parse_rocprof", "looks_like_rocprof"]

_CORR_BITS = 40  # correlation ids of process i are i << 40 | id (ids are counters from 1)
_GPU = 2
_COPY_NAMES = {
    "MEMORY_COPY_HOST_TO_DEVICE": "Memcpy HtoD (Host -> Device)",
    "MEMORY_COPY_DEVICE_TO_HOST": "Memcpy DtoH (Device -> Host)",
    "MEMORY_COPY_DEVICE_TO_DEVICE": "Memcpy DtoD (Device -> Device)",
    "MEMORY_COPY_HOST_TO_HOST": "Memcpy HtoH (Host -> Host)",
}
_MARKER_RANGES = ("MARKER_CORE_API", "MARKER_CORE_RANGE_API")  # not MARKER_CONTROL_API / MARKER_NAME_API

R = TypeVar("R")


class _Reader:
    """One file being read: the builder, the device table, and what was dropped."""

    def __init__(self, path: Path, doc: Document, step_re: re.Pattern[str]) -> None:
        self.path = path
        self.procs = doc.tool if isinstance(doc.tool, list) else [doc.tool]
        self.step_re = step_re
        self.meta = TimelineMeta(source_format="rocprofv3", source_version="rocprofiler-sdk tool JSON", path=str(path))
        self.b = TimelineBuilder(self.meta)
        self.device_of: dict[int, int] = {}  # GPU agent handle -> device index
        self.gpu_agents: set[int] = set()
        self.used: set[int] = set()  # devices with device work
        self.notes: list[str] = []

    def decode(self, raw: msgspec.Raw, typ: type[R], what: str) -> list[R]:
        try:
            return msgspec.json.decode(raw, type=list[typ])  # type: ignore[valid-type]
        except msgspec.ValidationError as exc:
            raise TraceFormatError(self.path, f"has a damaged {what} record ({_where(exc, what)}); expected rocprofv3's JSON output") from None

    def devices(self) -> None:
        """The device table from every process's GPU agents, in gpu_index order."""
        agents: dict[int, Agent] = {}
        for p in self.procs:
            for a in p.agents:
                if a.type == _GPU:
                    agents.setdefault(a.id.handle, a)
        order = sorted(agents.values(), key=lambda a: (a.gpu_index < 0, a.gpu_index, a.node_id))
        for i, a in enumerate(order):
            self.device_of[a.id.handle] = i
            d: dict[str, Any] = {"id": i, "name": a.product_name or a.name, "gcnArchName": a.name, "agent_handle": a.id.handle}
            if a.cu_count > 0:
                d["cuCount"] = a.cu_count  # compute units: what an SM is on NVIDIA
            if a.wave_front_size > 0:
                d["warpSize"] = a.wave_front_size
            self.meta.devices.append(d)
        self.gpu_agents = set(agents)

    def device(self, handle: int, what: str, i: int) -> int:
        dev = self.device_of.get(handle)
        if dev is None:
            raise TraceFormatError(self.path, f"has a {what} record (#{i}) on agent {handle}, which its agents table does not list as a GPU; the file is damaged or incomplete")
        self.used.add(dev)
        return dev

    def read(self) -> Timeline:
        self.devices()
        counts = dict.fromkeys(("kernels", "hip", "hsa"), 0)
        for k, p in enumerate(self.procs):
            base = k << _CORR_BITS
            pid = str(p.metadata.pid)
            names = [kn.operations for kn in p.strings.buffer_records]
            kinds = [kn.kind for kn in p.strings.buffer_records]
            counts["kernels"] += self.kernels(p, pid, base)
            self.copies(p, pid, base, names)
            hip = self.decode(p.buffer_records.hip_api, ApiCall, "hip_api")
            hsa = self.decode(p.buffer_records.hsa_api, ApiCall, "hsa_api")
            counts["hip"] += self.calls(hip, pid, base, names, Kind.RUNTIME)
            if hsa and not hip:
                counts["hsa"] += self.calls(hsa, pid, base, names, Kind.RUNTIME)
            elif hsa:
                self.notes.append(
                    f"{len(hsa):,} HSA API calls of process {pid} were not read: they run inside the HIP calls "
                    "the capture also traced, which are the launches whyidle joins to device work"
                )
            del hip, hsa
            self.calls(self.decode(p.buffer_records.rccl_api, ApiCall, "rccl_api"), pid, base, names, Kind.CPU_OP)
            self.markers(p, pid, kinds)
        self.quality(counts)
        return self.b.build(consume=True)

    def kernels(self, p: Process, pid: str, base: int) -> int:
        rows = self.decode(p.buffer_records.kernel_dispatch, Dispatch, "kernel_dispatch")
        if not rows:
            return 0
        symbols = {s.kernel_id: s.formatted_kernel_name or s.demangled_kernel_name or s.kernel_name for s in p.kernel_symbols}
        n = len(rows)
        a = np.fromiter(
            (
                v
                for r in rows
                for v in (r.start_timestamp, r.end_timestamp, r.correlation_id.internal, r.dispatch_info.kernel_id, r.thread_id)
            ),
            dtype=np.int64,
            count=5 * n,
        ).reshape(n, 5)
        lanes = np.empty(n, dtype=np.int32)
        grid = np.empty(n, dtype=np.int64)
        block = np.empty(n, dtype=np.int32)
        devs: list[int] = []
        for i, r in enumerate(rows):
            info = r.dispatch_info
            dev = self.device(info.agent_id.handle, "kernel_dispatch", i)
            devs.append(dev)
            stream = str(r.stream_id.handle) if r.stream_id is not None else f"queue {info.queue_id.handle}"
            lanes[i] = self.b.lane_id(LaneKind.GPU_STREAM, dev, pid, stream)
            block[i], grid[i] = _launch_shape(info.workgroup_size, info.grid_size)
        del rows
        ids, inv = np.unique(a[:, 3], return_inverse=True)
        texts = [symbols.get(int(k)) or f"<kernel {int(k)}>" for k in ids.tolist()]
        name = self.b.intern_many(texts)[inv.reshape(-1)]
        coll = np.array([bool(COLLECTIVE_KERNEL.search(t)) for t in texts], dtype=np.bool_)[inv.reshape(-1)]
        sm_count = [int(d.get("cuCount", 0)) for d in self.meta.devices]
        sms = np.array([sm_count[d] for d in devs], dtype=np.float64)
        self._check_order(a[:, 0], a[:, 1], "kernel_dispatch")
        self.b.add_columns(
            start_ns=a[:, 0],
            end_ns=a[:, 1],
            lane=lanes,
            kind=np.where(coll, int(Kind.COLLECTIVE), int(Kind.KERNEL)).astype(np.int8),
            name=name,
            corr=np.where(a[:, 2] > 0, base | a[:, 2], -1),
            blocks_per_sm=np.where((grid > 0) & (sms > 0), grid / np.where(sms > 0, sms, 1), np.nan).astype(np.float32),
            grid=grid,
            block=block,
        )
        return n

    def copies(self, p: Process, pid: str, base: int, names: list[list[str]]) -> int:
        rows = self.decode(p.buffer_records.memory_copy, Copy, "memory_copy")
        if not rows:
            return 0
        n = len(rows)
        a = np.empty((n, 4), dtype=np.int64)
        lanes = np.empty(n, dtype=np.int32)
        texts: list[str] = []
        for i, r in enumerate(rows):
            gpu = r.dst_agent_id.handle if r.dst_agent_id.handle in self.gpu_agents else r.src_agent_id.handle
            dev = self.device(gpu, "memory_copy", i)
            lane = str(r.stream_id.handle) if r.stream_id is not None else "copies"
            lanes[i] = self.b.lane_id(LaneKind.GPU_STREAM, dev, pid, lane)
            op = _op_name(names, r.kind, r.operation)
            texts.append(_COPY_NAMES.get(op, f"Memcpy ({op or 'unknown direction'})"))
            a[i] = (r.start_timestamp, r.end_timestamp, r.correlation_id.internal, r.bytes)
        del rows
        self._check_order(a[:, 0], a[:, 1], "memory_copy")
        self.b.add_columns(
            start_ns=a[:, 0],
            end_ns=a[:, 1],
            lane=lanes,
            kind=np.full(n, int(Kind.MEMCPY), dtype=np.int8),
            name=self.b.intern_many(texts),
            corr=np.where(a[:, 2] > 0, base | a[:, 2], -1),
            nbytes=a[:, 3],
        )
        return n

    def calls(self, rows: list[ApiCall], pid: str, base: int, names: list[list[str]], kind: Kind) -> int:
        """API calls (HIP, HSA, RCCL) on their threads, named by their operation."""
        if not rows:
            return 0
        n = len(rows)
        a = np.fromiter((v for r in rows for v in (r.start_timestamp, r.end_timestamp, r.correlation_id.internal)), dtype=np.int64, count=3 * n).reshape(n, 3)
        lanes = self._thread_lanes(pid, [r.thread_id for r in rows])
        texts = [_op_name(names, r.kind, r.operation) or f"<API call {r.kind}.{r.operation}>" for r in rows]
        self._check_order(a[:, 0], a[:, 1], "API call")
        self.b.add_columns(
            start_ns=a[:, 0],
            end_ns=a[:, 1],
            lane=lanes,
            kind=np.full(n, int(kind), dtype=np.int8),
            name=self.b.intern_many(texts),
            corr=np.where((a[:, 2] > 0) & (kind == Kind.RUNTIME), base | a[:, 2], -1),
        )
        return n

    def markers(self, p: Process, pid: str, kinds: list[str]) -> int:
        """ROCTx ranges: their text is in strings.marker_api under the record's correlation id."""
        rows = [r for r in self.decode(p.buffer_records.marker_api, ApiCall, "marker_api") if _at(kinds, r.kind) in _MARKER_RANGES]
        if not rows:
            return 0
        text = {m.key: m.value for m in p.strings.marker_api}
        classes: dict[str, tuple[int, int]] = {}
        out = np.empty((len(rows), 4), dtype=np.int64)
        for i, r in enumerate(rows):
            t = text.get(r.correlation_id.internal, "") or "<unnamed ROCTx range>"
            c = classes.get(t)
            if c is None:
                kind, name = range_kind(t, self.step_re)
                c = classes[t] = (int(kind), self.b.intern(name))
            out[i] = (r.start_timestamp, r.end_timestamp, c[0], c[1])
        self._check_order(out[:, 0], out[:, 1], "marker_api")
        self.b.add_columns(
            start_ns=out[:, 0],
            end_ns=out[:, 1],
            lane=self._thread_lanes(pid, [r.thread_id for r in rows]),
            kind=out[:, 2].astype(np.int8),
            name=out[:, 3].astype(np.int32),
        )
        return len(rows)

    def _thread_lanes(self, pid: str, tids: list[int]) -> npt.NDArray[np.int32]:
        lane_of: dict[int, int] = {}
        out = np.empty(len(tids), dtype=np.int32)
        for i, t in enumerate(tids):
            ln = lane_of.get(t)
            if ln is None:
                ln = lane_of[t] = self.b.lane_id(LaneKind.CPU_THREAD, -1, pid, str(t), "main thread" if str(t) == pid else "")
            out[i] = ln
        return out

    def _check_order(self, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64], what: str) -> None:
        bad = np.flatnonzero(end < start)
        if bad.size:
            i = int(bad[0])
            raise TraceFormatError(self.path, f"has a {what} record (#{i}) that ends ({int(end[i])} ns) before it starts ({int(start[i])} ns); the file is damaged")

    def quality(self, counts: dict[str, int]) -> None:
        q = self.meta.quality
        if counts["kernels"] == 0:
            q.append("this capture has no kernel dispatches: record with rocprofv3 --kernel-trace (or --runtime-trace)")
        if counts["hip"] == 0 and counts["hsa"] == 0 and counts["kernels"]:
            q.append(
                "no HIP API calls in this capture (recorded without --hip-trace): device work cannot be joined to "
                "its launch; record with rocprofv3 --runtime-trace to attribute idle time"
            )
        used = self.used
        if len(self.meta.devices) > 1 and len(used) < len(self.meta.devices):
            q.append(
                f"the {'process' if len(self.procs) == 1 else 'processes'} used {len(used)} of the node's {len(self.meta.devices)} GPUs "
                f"(GPU {', '.join(str(d) for d in sorted(used))}); rocprofv3 writes one file per process, so each rank of a job is its own file"
            )
        q.extend(self.notes)


def _launch_shape(wg: Dim3, g: Dim3) -> tuple[int, int]:
    """(threads per block, blocks): rocprofiler's grid_size counts work-items, whyidle's grid
    counts workgroups; -1 where unknown or past what a launch can be (2**31 threads per block)."""
    threads = wg.x * max(wg.y, 1) * max(wg.z, 1)
    items = g.x * max(g.y, 1) * max(g.z, 1)
    if not 0 < threads < 1 << 31:
        return -1, -1
    blocks = -(-items // threads)
    return threads, blocks if 0 < blocks < 1 << 62 else -1


def _at(seq: list[str], i: int) -> str:
    return seq[i] if 0 <= i < len(seq) else ""


def _op_name(names: list[list[str]], kind: int, op: int) -> str:
    ops = names[kind] if 0 <= kind < len(names) else []
    return ops[op] if 0 <= op < len(ops) else ""


def _where(exc: msgspec.ValidationError, what: str) -> str:
    """msgspec's message with its path ('$[3].start_timestamp') named as the record's field."""
    msg = str(exc).splitlines()[0]
    return msg.replace("$[", f"{what}[", 1) if "$[" in msg else msg


def parse_rocprof(raw: bytes, path: str | Path = "<bytes>", step_pattern: str | None = None) -> Timeline:
    """A rocprofv3 JSON document (decompressed bytes) as a Timeline."""
    p = Path(path)
    try:
        doc = msgspec.json.decode(raw, type=Document)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(p, f"is rocprofv3 output with a damaged field ({str(exc).splitlines()[0]})") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(p, f"is not valid JSON ({str(exc).splitlines()[0]}); a truncated or damaged rocprofv3 output") from None
    return _Reader(p, doc, re.compile(step_pattern or DEFAULT_STEP_PATTERN)).read()


def load_rocprof(path: Path, raw_box: list[bytes], step_pattern: str | None = None) -> Timeline:
    """Read rocprofv3 JSON whose decompressed text is ``raw_box[0]``; the text is let go of once decoded."""
    raw = raw_box.pop()
    return parse_rocprof(raw, path, step_pattern)

