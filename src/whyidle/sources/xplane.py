"""XPlane profiles (JAX, XLA) -> Timeline.

``jax.profiler.trace(logdir)`` (and TensorFlow's and PyTorch/XLA's profilers) write one
``plugins/profile/<run>/<host>.xplane.pb`` per host: an XSpace protocol buffer, sometimes
gzipped. It is read without the ``protobuf`` package or TensorFlow (:mod:`xplane_wire`,
:mod:`xplane_decode`).

::

    /device:GPU:N plane, a line per stream   -> device work on GPU N's stream lanes:
        a copy (memcpy/copyBuffer kernels)      Kind.MEMCPY, named "Memcpy DtoD ..." from
                                                its launch call's direction
        a fill (memset/fillBuffer kernels)      Kind.MEMSET
        a collective (nccl, rccl, all-reduce)   Kind.COLLECTIVE
        any other kernel                        Kind.KERNEL
      derived lines ("XLA Ops", "XLA Modules",
      "Steps", ...) beside stream lines      -> Kind.GPU_ANNOTATION (not work: the kernels are;
                                                a plane with only "XLA Ops", a TPU's, is work)
    /host:CPU plane, a line per thread       -> CPU-thread lanes:
        "$file.py:12 func" (the Python tracer)  Kind.PYTHON, named "file.py(12): func"; a C
                                                function "$time sleep" as "time.sleep"; a
                                                frame that waits for the device (block_until_ready,
                                                device_get, printing an array) also Kind.SYNC
        cuda*/cu*/hip* calls                    Kind.RUNTIME (launches; correlation_id links
                                                them to their kernels)
        an event with a step_num stat,
        StepMarker, train_step                  Kind.STEP
        anything else (TraceMe: PjitFunction,
        ExecuteSharded, the PjRt client)        Kind.CPU_OP
        with no GPU plane, an XLA op (hlo_op)   Kind.KERNEL on the XLA CPU device's lanes

Steps: the step markers where the capture has them; otherwise, when the Python thread calls one
jitted function (``PjitFunction(f)``) two or more times, each call up to the next one's start
is a step ("XLA module repetition": each step runs the same compiled program).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import numpy.typing as npt

from whyidle.errors import TraceFormatError
from whyidle.sources.xplane_decode import Line, Plane, Space, decode_space, walk_space
from whyidle.sources.xplane_derive import join_executors, join_runtime_threads, link_cpu_runs, name_copies, with_steps
from whyidle.sources.xplane_wire import XPLANE_SUFFIXES, WireError, looks_like_xspace
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["load_xplane", "parse_xplane", "is_xplane", "XPLANE_SUFFIXES", "devices_of"]

_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU|CUSTOM):(\d{1,6})$")
_DERIVED_LINES = frozenset(
    {"XLA Ops", "XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "TensorFlow Ops", "Source code",
     "XLA TraceMe", "Launch Stats", "Async XLA Ops", "TensorFlow Name Scope", "SparseCore Steps"}
)  # fmt: skip
_COLLECTIVE = re.compile(r"nccl|rccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|sendrecv", re.I | re.ASCII)  # ASCII case only (ranges.COLLECTIVE_KERNEL)
_COPY = re.compile(r"memcpy|copyBuffer|copy_buffer", re.I)
_FILL = re.compile(r"memset|fillBuffer|fill_buffer", re.I)
_RUNTIME = re.compile(r"^(cuda|cu|hip)[A-Z]\w*$")
_STEP_NAME = re.compile(r"^(StepMarker|train_step|TrainStep)\b")
# JAX calls that block the host until the device has produced a value: block_until_ready,
# device_get, and an array's conversion to Python or NumPy (printing it, float(x), x.item()).
_JAX_SYNC = re.compile(
    r"^(api|array)\.py\(\d+\): (block_until_ready|device_get|_value|__array__|item|tolist|__float__|__int__|__bool__|__format__|__repr__|__str__)$"
    r"|BlockHostUntilReady"
)
_PY_EVENT = re.compile(r"^\$(\S+?):(\d+) (.+)$")
# GPU models told by (vendor, compute capability, compute units) where the plane names none.
_AMD_MODELS = {(9, 4, 304): "AMD Instinct MI300X", (9, 4, 228): "AMD Instinct MI300A"}


def is_xplane(raw: bytes) -> bool:
    """Whether ``raw`` (a whole file's content, decompressed) is an XSpace message with planes."""
    if not looks_like_xspace(raw[:16]):
        return False
    try:
        return walk_space(raw) > 0
    except WireError:
        return False


def load_xplane(path: Path, raw: bytes) -> Timeline:
    """Read the XSpace in ``raw`` (the content of ``path``), or raise TraceFormatError naming it."""
    try:
        walk_space(raw)
        space = decode_space(raw)
    except (WireError, IndexError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"is not a readable XPlane profile (an XSpace protocol buffer): {exc}") from None
    if not any(p.lines for p in space.planes):
        raise TraceFormatError(path, "is an XPlane profile with no events (no plane has a line): expected a jax.profiler.trace capture")
    return parse_xplane(space, str(path), host=_host_of(path, space))


def _host_of(path: Path, space: Space) -> str:
    if space.hostnames:
        return space.hostnames[0]
    name = path.name
    for s in XPLANE_SUFFIXES:
        if name.endswith(s):
            return name[: -len(s)]
    return "host"


def devices_of(space: Space) -> list[dict[str, object]]:
    """One entry per device plane: id, name (a model where it can be told), vendor, capability."""
    out: list[dict[str, object]] = []
    for p in space.planes:
        m = _DEVICE_PLANE.match(p.name)
        if not m:
            continue
        st = p.stats
        vendor = str(st.get("device_vendor", ""))
        major, minor, cores = (st.get(k) for k in ("compute_cap_major", "compute_cap_minor", "core_count"))
        d: dict[str, object] = {"id": int(m.group(2)), "plane": p.name}
        if vendor.upper() == "AMD":
            model = _AMD_MODELS.get((major, minor, cores)) if isinstance(major, int) and isinstance(minor, int) and isinstance(cores, int) else None
            cap = f" (ISA {major}.{minor})" if isinstance(major, int) else ""
            d["name"] = f"{model or 'AMD GPU'}{cap}"
            if isinstance(cores, int):
                d["multiProcessorCount"] = cores
        else:
            d["name"] = str(st.get("device_name") or st.get("name") or (f"{vendor} GPU" if vendor else p.name))
            if isinstance(major, int) and isinstance(minor, int) and vendor.lower() in ("nvidia", ""):
                d["computeMajor"], d["computeMinor"] = major, minor
            if isinstance(cores, int):
                d["numSms"] = cores
        if vendor:
            d["vendor"] = vendor
        out.append(d)
    return out


def parse_xplane(space: Space, path: str = "", host: str = "host") -> Timeline:
    """The Timeline of a decoded XSpace (device planes, then host planes); each plane's lines are
    let go once added, so ``space`` is spent afterwards."""
    devices = devices_of(space)
    quality = [f"profiler error: {e}" for e in space.errors] + [f"profiler warning: {w}" for w in space.warnings]
    b = TimelineBuilder(TimelineMeta(source_format="xplane", source_version="XSpace", path=path, devices=devices, quality=quality))
    aggregated = 0
    cpu_device = not devices  # XLA's CPU backend: the compiled program runs on host threads
    cpu_ops = 0
    for p in space.planes:
        m = _DEVICE_PLANE.match(p.name)
        if not m and p.name.startswith("/device:"):
            b.meta.quality.append(f"a device plane named {p.name[:60]!r} (not /device:GPU:<n>) was left out")
            continue
        marks = any(ln.name not in _DERIVED_LINES for ln in p.lines if ln.metadata_id.size)
        for line in p.lines:
            aggregated += line.aggregated
            if line.metadata_id.size == 0:
                continue
            if m:
                _device_line(b, p, line, int(m.group(2)), marks)
            elif p.name != "/host:metadata":
                cpu_ops += _host_line(b, p, line, host, cpu_device)
        p.lines = []  # its columns are in the builder now: not held twice
    if cpu_ops:
        b.meta.devices.append({"id": 0, "name": "XLA CPU device (the compiled program's ops on host threads)"})
        b.meta.quality.append("no GPU planes: the XLA ops that the CPU backend ran on host threads are the device's work")
    if aggregated:
        b.meta.quality.append(f"{aggregated} aggregated events (counts without times) were left out")
    tl = join_executors(join_runtime_threads(b.build(consume=True)))
    return with_steps(name_copies(link_cpu_runs(tl) if cpu_device else tl))


def _times(line: Line) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    start = line.timestamp_ns + line.offset_ps // 1000
    end = line.timestamp_ns + (line.offset_ps + np.maximum(line.duration_ps, 0)) // 1000
    return start.astype(np.int64), np.maximum(end, start).astype(np.int64)


def _distinct(p: Plane, line: Line) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The line's distinct event names (by metadata id), and which of them each event has."""
    ids, inv = np.unique(line.metadata_id, return_inverse=True)
    return [p.event_names.get(int(i), f"<event {int(i)}>") for i in ids.tolist()], inv.reshape(-1)


def _device_line(b: TimelineBuilder, p: Plane, line: Line, device: int, derived_are_marks: bool) -> None:
    start, end = _times(line)
    names, which = _distinct(p, line)
    name_ids = b.intern_many(names)[which]
    lane = b.lane_id(LaneKind.GPU_STREAM, device, str(device), str(line.id), line.name)
    n = start.size
    if derived_are_marks and line.name in _DERIVED_LINES:
        kind = np.full(n, int(Kind.GPU_ANNOTATION), dtype=np.int8)
    else:
        kind = np.array([_device_kind(s) for s in names], dtype=np.int8)[which]
    corr = line.stats["correlation_id"]
    b.add_columns(start_ns=start, end_ns=end, lane=np.full(n, lane, dtype=np.int32), kind=kind, name=name_ids, corr=corr)


def _device_kind(name: str) -> int:
    if _COLLECTIVE.search(name):
        return int(Kind.COLLECTIVE)
    if _COPY.search(name):
        return int(Kind.MEMCPY)
    if _FILL.search(name):
        return int(Kind.MEMSET)
    return int(Kind.KERNEL)


def _host_line(b: TimelineBuilder, p: Plane, line: Line, host: str, cpu_device: bool) -> int:
    """Add one host thread's events; the number of them that are XLA ops run as the CPU device's work."""
    start, end = _times(line)
    raw, which = _distinct(p, line)
    kind = np.array([_host_kind(s) for s in raw], dtype=np.int8)[which]
    names = [_python_name(s) for s in raw]
    name_ids = b.intern_many(names)[which]
    step_num = line.stats["step_num"]
    at = np.flatnonzero(step_num >= 0)
    if at.size:  # "train 12": the number the window reads
        kind[at] = int(Kind.STEP)
        name_ids[at] = b.intern_many([f"{names[int(which[i])]} {int(step_num[i])}" for i in at.tolist()])
    corr = line.stats["correlation_id"]
    lane = np.full(start.size, b.lane_id(LaneKind.CPU_THREAD, -1, host, str(line.id), line.name), dtype=np.int32)
    op = np.zeros(start.size, dtype=np.bool_)
    if cpu_device:  # an XLA op (it names its HLO op; not its "end: op" marker): the device's work
        op = (line.stats["hlo_op"] >= 0) & ~np.array([s.startswith("end: ") for s in names], dtype=np.bool_)[which]
        if op.any():
            kind[op] = int(Kind.KERNEL)
            lane[op] = b.lane_id(LaneKind.GPU_STREAM, 0, "0", str(line.id), f"XLA CPU ops on {line.name}")
            corr = np.where(op, line.stats["run_id"], corr)  # one program run: linked to its dispatch later
    b.add_columns(start_ns=start, end_ns=end, lane=lane, kind=kind, name=name_ids, corr=corr)
    syncs = np.flatnonzero(np.array([bool(_JAX_SYNC.search(s)) for s in names], dtype=np.bool_)[which])
    if syncs.size:  # the Python frames that wait for the device: also a sync record each, named as XLA names the wait
        n = syncs.size
        sync_names = b.intern_many([f"BlockHostUntilReady ({names[int(which[i])]})" for i in syncs.tolist()])
        b.add_columns(
            start_ns=start[syncs], end_ns=end[syncs], lane=lane[syncs],
            kind=np.full(n, int(Kind.SYNC), dtype=np.int8), name=sync_names,
        )  # fmt: skip
    return int(op.sum())


def _python_name(name: str) -> str:
    """The Python tracer's "$array.py:268 sharding" in Kineto's form, "array.py(268): sharding";
    a C function, "$builtins len" or "$time sleep", as "<built-in function len>" or "time.sleep"
    (no line: never the Python line of a gap); "$<unknown> append" as "<built-in method append>"."""
    if not name.startswith("$"):
        return name
    m = _PY_EVENT.match(name)
    if m:
        return f"{m.group(1)}({m.group(2)}): {m.group(3)}"
    module, _, func = name[1:].partition(" ")
    if not func:
        return name[1:]
    if module == "<unknown>":
        return f"<built-in method {func}>"
    return f"<built-in function {func}>" if module == "builtins" else f"{module}.{func}"


def _host_kind(name: str) -> int:
    """The kind of a host event, from its name as recorded ("$..." is the Python tracer's)."""
    if name.startswith("$"):
        return int(Kind.PYTHON)
    if _RUNTIME.match(name):
        return int(Kind.RUNTIME)
    if _STEP_NAME.match(name):
        return int(Kind.STEP)
    return int(Kind.CPU_OP)


