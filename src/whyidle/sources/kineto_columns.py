"""Decoded Kineto events -> Timeline columns: the one implementation both readers use.

:mod:`whyidle.sources.kineto` decodes a trace held in memory and :mod:`whyidle.sources.kineto_stream`
decodes one in chunks; both hand batches of decoded events to :func:`_local_columns`, which turns
a batch into columns with batch-local tables (small to pickle between processes), and
:class:`_Columns` merges batches, in file order, into one TimelineBuilder.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import compress, count, filterfalse, repeat
from operator import attrgetter, eq
from typing import Any

import msgspec
import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.sources.kineto_values import (
    MAX_TIME_NS,
    MAX_WORLD_SIZE,
    _as_int,
    _base_ns,
    _dims_many,
    _floats,
    _floats_or_nan,
    _int_or,
    _to_ns,
)
from whyidle.sources.kineto_values import _Num as _Num  # kineto.py imports it from here
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta
from whyidle.timeline.arrays import one_of


# Category (case-insensitive) -> Kind. "step" is resolved by name.
_CATEGORIES: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "cuda_profiler_range": Kind.KERNEL,  # CUPTI range profiler: one range per kernel
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "cuda_sync": Kind.SYNC,
    "python_function": Kind.PYTHON,
    "mtia_ccp_events": Kind.KERNEL,  # MTIA device events: refined by name in _mtia_device_events
}
# MTIA device events (category mtia_ccp_events) that are not work: an event record marks a point
# on a stream, an event wait is the stream waiting on another one (a device-side dependency).
_MTIA_NOT_WORK = {"event_record", "event_wait"}
_MTIA_DMA = "dma_request"  # a DMA transfer, its direction in args: a copy
# Categories Kineto writes that carry no interval whyidle uses (flows, counters, the trace span).
_IGNORED = {"ac2g", "async", "async_gpu", "fwdbwd", "trace", "overhead", "cpu_instant_event", "gpu_instant_event"}
_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
# Case is ignored for ASCII letters only (re.ASCII): unicode folding would make a foreign name a
# collective (a long s, U+017F, matches "s": reduce_\u017fcatter), and only in some readers.
_COLLECTIVE_RE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.IGNORECASE | re.ASCII)
# Every alternative above contains one of these (lower case): a substring test rules out most
# kernel names (long C++ templates) before the regex scans them. Exact for every name, ASCII or
# not, because the pattern folds ASCII letters only, as str.lower() does them.
_COLLECTIVE_HINTS = ("nccl", "rccl", "all", "scatter", "sendrecv")
# Kinds recorded on a device lane (pid = device, tid = stream). ``cuda_sync`` records are CUPTI's
# device-side view of a synchronisation (the host call carries the same correlation id): they
# mark a wait on a stream, not work, and never a host thread.
_DEVICE_KINDS = {Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC}
_STREAM_RE = re.compile(r"(\d+)\s*$")


def _mtia_device_events(xs: list[Any], kind: np.ndarray) -> list[Any]:
    """MTIA device events as work where they are work: their kinds (in place) and their names.

    Operator executions (``add-dtype_Float``, ``fc-dtype_Float``, ``pe_exe``, ``merge``, ``remote``)
    stay kernels; ``dma_request`` becomes a copy named as Kineto names CUDA copies
    (``Memcpy HtoD (MTIA DMA)``, from ``args.direction``) so the copy analyses apply; event records
    and waits are marks on a stream, not work. The names are returned before interning, so a trace
    read in batches interns them in the same order as one read whole.
    """
    names: list[Any] = []
    for i, e in enumerate(xs):
        name = e.name
        if isinstance(e.cat, str) and e.cat.lower() == "mtia_ccp_events":
            if name in _MTIA_NOT_WORK:
                kind[i] = int(Kind.GPU_ANNOTATION)
            elif name == _MTIA_DMA:
                kind[i] = int(Kind.MEMCPY)
                d = e.args.direction if e.args is not None else None
                label = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}.get(str(d), "")
                name = f"Memcpy {label} (MTIA DMA)" if label else "Memcpy (MTIA DMA)"
        names.append(name)
    return names


def _stream_of(e: Any, a: Any) -> str:
    if a is not None and a.stream is not None:
        return str(_as_int(a.stream, 0))
    m = _STREAM_RE.search(str(e.tid))
    return m.group(1) if m else str(e.tid)


# Per-name flags (step marker, collective kernel), computed once per distinct name per process:
# names repeat across batches, and the regexes are the costly part on long kernel names.
_NAME_FLAGS: dict[str, tuple[bool, bool]] = {}


def _name_flags(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    cache = _NAME_FLAGS
    step = np.empty(len(names), dtype=np.bool_)
    coll = np.empty(len(names), dtype=np.bool_)
    for i, nm in enumerate(names):
        f = cache.get(nm)
        if f is None:
            if len(cache) > 200_000:
                cache.clear()
            low = nm.lower()
            coll_hint = any(h in low for h in _COLLECTIVE_HINTS)
            f = cache[nm] = (bool(_STEP_RE.match(nm)), coll_hint and bool(_COLLECTIVE_RE.search(nm)))
        step[i], coll[i] = f
    return step, coll


class _Local(msgspec.Struct):
    """One batch as columns with batch-local tables (names, lanes, stacks): small to pickle."""

    n_events: int
    seen_ph: bool
    has_x: bool
    thread_names: list[tuple[str, str, Any]]
    unknown: dict[str, int]  # in first-seen order
    names: list[str]
    lane_keys: list[tuple[bool, int, str, str, str]]  # (device?, device, pid, tid/stream, thread tid)
    stacks: list[str]
    negative: int
    cols: dict[str, np.ndarray]
    inputs: list[str] = []  # the recorded inputs' texts (Timeline.inputs)


_GET = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")}
_ARG = {f: attrgetter(f) for f in ("correlation", "blocks_per_sm", "occupancy", "bytes", "grid", "block", "call_stack", "input_dims", "collective")}
_STR_OR_NONE = {str, type(None)}


def _field(items: list[Any], get: attrgetter[Any]) -> list[Any]:
    """One attribute of every item, in one C-level pass (``None`` for a missing item)."""
    if None in items:
        return [None if x is None else get(x) for x in items]
    return list(map(get, items))


def _intern(values: list[Any]) -> tuple[dict[Any, int], list[Any]]:
    """(value -> id in first-seen order, the values' ids); dict.fromkeys keeps the loop in C."""
    ids: dict[Any, int] = dict.fromkeys(values, 0)
    for i, k in enumerate(ids):
        ids[k] = i
    return ids, list(map(ids.__getitem__, values))


def _kinds(xs: list[Any], unknown: dict[str, int]) -> tuple[list[Any], np.ndarray, bool]:
    """The complete events of categories whyidle reads, their kinds, and whether any is MTIA's.

    Counts the categories it does not read into ``unknown`` (first-seen order)."""
    cats = list(map(_GET["cat"], xs))
    if not set(map(type, cats)) <= _STR_OR_NONE:  # a list or dict cannot be a key
        cats = [c if isinstance(c, str) or c is None else repr(c) for c in cats]
    cat_kind: dict[Any, int] = {}
    for c in dict.fromkeys(cats):
        ck = _CATEGORIES.get(c.lower() if isinstance(c, str) else "")
        cat_kind[c] = int(ck) if ck is not None else -1
    kind_all = np.fromiter(map(cat_kind.__getitem__, cats), dtype=np.int16, count=len(cats))
    for c, k in cat_kind.items():
        if k == -1 and not (isinstance(c, str) and c.lower() in _IGNORED):
            unknown[str(c)] = unknown.get(str(c), 0) + cats.count(c)
    keep = np.flatnonzero(kind_all >= 0)
    if keep.size != len(xs):
        xs = [xs[i] for i in keep]
    mtia = any(isinstance(c, str) and c.lower() == "mtia_ccp_events" for c in cat_kind)
    return xs, kind_all[keep].astype(np.int8), mtia


def _lanes(xs: list[Any], args: list[Any], is_device: np.ndarray) -> tuple[np.ndarray, list[tuple[bool, int, str, str, str]]]:
    """Batch-local lane of each event, and each lane's key (device?, device, pid, stream/tid, '')."""
    pids, tids = list(map(_GET["pid"], xs)), list(map(_GET["tid"], xs))
    try:
        lane_of, lane_list = _intern(list(zip(pids, tids, is_device.tolist())))
    except TypeError:  # a pid or tid that is not a scalar
        lane_of, lane_list = _intern(list(zip(map(str, pids), map(str, tids), is_device.tolist())))
    lane = np.array(lane_list, dtype=np.int32)
    first_row = np.flatnonzero(np.diff(np.maximum.accumulate(lane), prepend=-1))
    lane_keys: list[tuple[bool, int, str, str, str]] = []
    for (pid, tid, on_device), row in zip(lane_of, first_row.tolist()):
        if on_device:
            e, a = xs[row], args[row]
            dev = _as_int(a.device, -1) if a is not None and a.device is not None else _as_int(pid, 0)
            lane_keys.append((True, dev, str(pid), _stream_of(e, a), ""))
        else:
            lane_keys.append((False, -1, str(pid), str(tid), ""))
    return lane, lane_keys


def _device_columns(args: list[Any], is_device: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Kernel and copy columns (blocks per SM, occupancy, bytes, grid, block); unknown elsewhere."""
    cols: dict[str, np.ndarray] = {
        "blocks_per_sm": np.full(n, np.nan, dtype=np.float32),
        "occupancy": np.full(n, np.nan, dtype=np.float32),
        "nbytes": np.full(n, -1, dtype=np.int64),
        "grid": np.full(n, -1, dtype=np.int64),
        "block": np.full(n, -1, dtype=np.int32),
    }
    dev_idx = np.flatnonzero(is_device)
    if dev_idx.size:
        dargs = [args[i] for i in dev_idx.tolist()]
        cols["blocks_per_sm"][dev_idx] = _floats_or_nan(_field(dargs, _ARG["blocks_per_sm"]))
        cols["occupancy"][dev_idx] = _floats_or_nan(_field(dargs, _ARG["occupancy"]))
        cols["nbytes"][dev_idx] = _int_or(_field(dargs, _ARG["bytes"]), -1)
        cols["grid"][dev_idx] = _dims_many(_field(dargs, _ARG["grid"]))
        block = _dims_many(_field(dargs, _ARG["block"]))
        cols["block"][dev_idx] = block.tolist() if block.size and int(block.max()) > 2**31 - 1 else block  # out of range: numpy's error
    return cols


# The default of the reader's raw fields (kineto._Args): the JSON text of a field not recorded.
RAW_NULL = msgspec.Raw(b"null")
_JOIN = b",".join
# An op's recorded inputs, [dims, types, concrete inputs, flops, strides], and a collective's
# record, [name, in elements, out elements, group size, dtype], as the trace wrote them: joined
# with commas, the items of one JSON array (``_inputs_text`` decodes it).
_INPUTS = attrgetter("input_dims", "input_type", "concrete", "flops", "strides", "collective", "in_nelems", "out_nelems", "group_size", "comm_dtype")
_NO_INPUTS = (RAW_NULL,) * 10


def _inputs_columns(hargs: list[Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(inputs id, leading dimension of the first input) of each op, -1 where unknown, and the
    table of inputs texts the ids index: each op's recorded inputs as one JSON array, [dims,
    types, concrete inputs, flops, strides], re-encoded compactly (what the work model,
    analyses/work.py, reads; it checks each part's type); no text where the op recorded no
    dims. A collective's record (record_param_comms) adds [name, in elements, out elements,
    group size, dtype] as a sixth part (analyses/collectives.py), with or without dims. Each
    distinct text is decoded once per process; the ops' loop stays in C."""
    parts = _field(hargs, _INPUTS)
    if None in parts:
        parts = [_NO_INPUTS if p is None else p for p in parts]
    keys = list(map(_JOIN, parts))
    cache = _INPUTS_SEEN
    found = list(map(cache.get, keys))
    if None in found:
        if len(cache) > 200_000:
            cache.clear()
        for key in dict.fromkeys(keys):
            if key not in cache:
                cache[key] = _inputs_text(key)
        found = list(map(cache.__getitem__, keys))
    texts, firsts = zip(*found)
    table, ids = _intern(list(texts))
    inputs = np.array(ids, dtype=np.int32)
    if None in table:  # the ops without dims
        none = table.pop(None)
        inputs[inputs == none] = -1
        inputs[inputs > none] -= 1
    return inputs, np.array(firsts, dtype=np.int64), list(table)


# Per distinct inputs key, decoded once per process: inputs repeat across batches.
_INPUTS_SEEN: dict[bytes, tuple[str | None, int]] = {}


def _inputs_text(key: bytes) -> tuple[str | None, int]:
    """(the inputs text, None without dims; the leading dimension of the first input or -1)."""
    parts = msgspec.json.decode(b"[" + key + b"]")
    d, comm = parts[0], parts[5:]
    first = d0[0] if type(d) is list and d and type(d0 := d[0]) is list and d0 and type(d0[0]) is int else -1
    if comm[0] is not None:
        return _ENCODE([*parts[:5], comm]).decode(), first
    if type(d) is not list:
        return None, -1
    return _ENCODE(parts[:5]).decode(), first


_ENCODE = msgspec.json.Encoder().encode


def _host_columns(args: list[Any], is_device: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """(stack id, leading input dimension, inputs id) of host events; -1 elsewhere. And the
    batch's tables of stacks and of inputs texts (the ids index them)."""
    stack = np.full(n, -1, dtype=np.int32)
    shape0 = np.full(n, -1, dtype=np.int64)
    inputs = np.full(n, -1, dtype=np.int32)
    host_idx = np.flatnonzero(~is_device).tolist()
    if not host_idx:
        return stack, shape0, inputs, [], []
    stack_of: dict[str, int] = {}
    hargs = [args[i] for i in host_idx]
    if set(map(type, _field(hargs, _ARG["call_stack"]))) != {type(None)}:  # else none has a stack
        stack[host_idx] = [stack_of.setdefault(st, len(stack_of)) if a is not None and type(st := a.call_stack) is str and st else -1 for a in hargs]
    # Each distinct recorded inputs text is decoded once: its dims give the leading dimension of
    # the first input ("Input Dims": [[32, 3, 224, 224], ...]), the whole its inputs id.
    texts: list[str] = []
    dims, comms = _field(hargs, _ARG["input_dims"]), _field(hargs, _ARG["collective"])
    if dims.count(RAW_NULL) + dims.count(None) < len(dims) or comms.count(RAW_NULL) + comms.count(None) < len(comms):  # else none has either
        inputs[host_idx], shape0[host_idx], texts = _inputs_columns(hargs)
    return stack, shape0, inputs, list(stack_of), texts


def _local_columns(events: list[Any], style: str, path: str) -> _Local:
    """Columns of one batch of decoded events, as kineto._parse computes them."""
    phs = list(map(_GET["ph"], events))
    seen_ph = any(isinstance(p, str) for p in phs[:1000])
    thread_names = []
    if "M" in phs:
        thread_names = [
            (str(e.pid), str(e.tid), e.args.name)
            for e in compress(events, map(eq, phs, repeat("M")))
            if e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str)
        ]
    xs = list(compress(events, map(eq, phs, repeat("X"))))
    unknown: dict[str, int] = {}
    empty = _Local(len(events), seen_ph, bool(xs), thread_names, unknown, [], [], [], 0, {})
    if not xs:
        return empty
    xs, kind, mtia = _kinds(xs, unknown)
    if not xs:
        return empty
    # Ids are handed out in first-seen order, so the running maximum rises exactly at first uses.
    event_names = _mtia_device_events(xs, kind) if mtia else list(map(_GET["name"], xs))
    try:
        name_ids_of, name_list = _intern(event_names)
    except TypeError:  # a name that is not a string (a list?): intern its text
        name_ids_of, name_list = _intern(list(map(str, event_names)))
    name_ids = np.array(name_list, dtype=np.int32)
    names = [nm if isinstance(nm, str) else str(nm) for nm in name_ids_of]
    is_device = one_of(kind, [int(k) for k in _DEVICE_KINDS])
    args = list(map(_GET["args"], xs))
    lane, lane_keys = _lanes(xs, args, is_device)
    step_names, coll_names = _name_flags(names)
    host_range = (kind == int(Kind.CPU_OP)) | (kind == int(Kind.ANNOTATION))
    kind[host_range & step_names[name_ids]] = int(Kind.STEP)
    kind[(kind == int(Kind.KERNEL)) & coll_names[name_ids]] = int(Kind.COLLECTIVE)
    start_ns = _to_ns(list(map(_GET["ts"], xs)), style, path, "timestamp 'ts'")
    durs = list(map(_GET["dur"], xs))
    dur_ns = _to_ns([0 if d is None else d for d in durs] if None in durs else durs, style, path, "duration 'dur'")
    negative = int((dur_ns < 0).sum())
    if negative:
        dur_ns = np.maximum(dur_ns, 0)
    n = len(xs)
    stack, shape0, inputs, stacks, texts = _host_columns(args, is_device, n)
    cols = {
        "start_ns": start_ns,
        "end_ns": start_ns + dur_ns,  # base time is added at the end
        "lane": lane,
        "kind": kind,
        "name": name_ids,
        "corr": _int_or(_field(args, _ARG["correlation"]), -1),
        "stack": stack,
        "shape0": shape0,
        "inputs": inputs,
        **_device_columns(args, is_device, n),
    }
    return _Local(len(events), seen_ph, True, thread_names, unknown, names, lane_keys, stacks, negative, cols, texts)


class _Columns:
    """Merges batches (in file order) into one TimelineBuilder with global tables."""

    def __init__(self, path: str, style: str, max_events: int | None = None) -> None:
        self.path = path
        self.style = style
        self.max_events = max_events  # refuse past this many events (a gzip bomb of tiny events)
        self.meta = TimelineMeta(source_format="kineto", path=path)
        self.b = TimelineBuilder(self.meta)
        self.lane_of: dict[tuple[bool, int, str, str, str], int] = {}
        self.unknown: Counter[str] = Counter()
        self.thread_names: list[tuple[str, str, Any]] = []
        self.stack_ids: dict[str, int] = {}  # stacks are interned after every name, as in memory
        self.stacks: list[str] = []
        self.input_ids: dict[str, int] = {}  # inputs texts, interned after the stacks
        self.negative = 0
        self.n_events = 0
        self.seen_ph = False
        self.has_x = False

    def merge(self, loc: _Local) -> None:
        b = self.b
        if self.n_events < 1000 and loc.seen_ph:
            self.seen_ph = True
        self.has_x = self.has_x or loc.has_x
        self.n_events += loc.n_events
        if self.max_events is not None and self.n_events > self.max_events:
            raise TraceFormatError(
                self.path,
                f"holds more than {self.max_events} events for its compressed size (real traces hold at most 0.15 per "
                "compressed byte): a gzip bomb or a damaged file, not read further (ReadSettings.max_events_per_gzip_byte)",
            )
        self.thread_names.extend(loc.thread_names)
        for k, v in loc.unknown.items():
            self.unknown[k] += v
        self.negative += loc.negative
        if not loc.cols:
            return
        c = dict(loc.cols)
        c["name"] = b.intern_many(loc.names)[c["name"]]
        lanes = np.empty(len(loc.lane_keys), dtype=np.int32)
        for i, key in enumerate(loc.lane_keys):
            li = self.lane_of.get(key)
            if li is None:
                dev, device, pid, tid, _ = key
                li = b.lane_id(LaneKind.GPU_STREAM, device, pid, tid) if dev else b.lane_id(LaneKind.CPU_THREAD, -1, pid, tid)
                self.lane_of[key] = li
            lanes[i] = li
        c["lane"] = lanes[c["lane"]]
        if loc.stacks:
            remap = np.array([self._stack(st) for st in loc.stacks] + [-1], dtype=np.int32)
            c["stack"] = remap[c["stack"]]
        if loc.inputs:
            ids = self.input_ids  # the batch's texts are distinct: the new ones get the next ids
            ids.update(zip(filterfalse(ids.__contains__, loc.inputs), count(len(ids))))
            remap = np.array([*map(ids.__getitem__, loc.inputs), -1], dtype=np.int32)
            c["inputs"] = remap[c["inputs"]]
        b.add_columns(**c)

    def _stack(self, s: str) -> int:
        i = self.stack_ids.get(s)
        if i is None:
            i = len(self.stacks)
            self.stacks.append(s)
            self.stack_ids[s] = i
        return i

    def finish(self, doc: Any) -> Timeline:
        meta, b = self.meta, self.b
        base_ns = 0
        if doc is not None:
            note = doc.whyidle_annotation
            if isinstance(note, dict) and note.get("built_from") == "diagnosis":  # render_perfetto's drawing, not a capture
                source = f" ({str(note.get('source'))[:200]})" if note.get("source") else ""
                raise TraceFormatError(
                    meta.path or "(trace)",
                    f"is whyidle's drawing of a diagnosis saved without its trace, not a profiler trace; diagnose the original trace{source}",
                )
            meta.source_version = f"schemaVersion {doc.schemaVersion}" if doc.schemaVersion is not None else "2021 (no schemaVersion)"
            if isinstance(doc.deviceProperties, list):
                meta.devices = [_floats(d) for d in doc.deviceProperties if isinstance(d, dict)]
            info = doc.distributedInfo
            if isinstance(info, dict):
                rank, world = info.get("rank"), info.get("world_size")
                if type(world) is int and not 1 <= world <= MAX_WORLD_SIZE:
                    meta.quality.append(f"distributedInfo.world_size {str(world)[:24]} is not a plausible number of ranks (1..{MAX_WORLD_SIZE}); it was ignored")
                    world = None
                if type(rank) is int and not 0 <= rank < (world if type(world) is int else MAX_WORLD_SIZE):
                    meta.quality.append(f"distributedInfo.rank {str(rank)[:24]} is outside the world size; it was ignored")
                    rank = None
                if type(rank) is int:
                    meta.rank = rank
                    meta.rank_basis = "distributedInfo"
                if type(world) is int:
                    meta.world_size = world
            if doc.baseTimeNanoseconds is not None:
                base_ns = _base_ns(self.path, doc.baseTimeNanoseconds)
        if self.n_events == 0:
            raise TraceFormatError(self.path, "has an empty 'traceEvents' list; expected profiler events")
        if not self.has_x and not self.seen_ph:
            raise TraceFormatError(self.path, "holds no Chrome trace events (no 'ph' fields); expected a PyTorch profiler trace")
        # Stacks after every name, in first-use order, as the in-memory reader interns them.
        remap = np.array([b.intern(s) for s in self.stacks] + [-1], dtype=np.int32)
        remap_inputs = np.array([b.intern(t) for t in self.input_ids] + [-1], dtype=np.int32)
        for chunk in b._chunks:
            st = chunk["stack"]
            chunk["stack"] = remap[st]  # -1 indexes the trailing -1
            chunk["inputs"] = remap_inputs[chunk["inputs"]]
            if base_ns and chunk["start_ns"].size and int(np.abs(chunk["end_ns"]).max()) >= MAX_TIME_NS - abs(base_ns):
                raise TraceFormatError(self.path, "has times that overflow 64-bit nanoseconds once 'baseTimeNanoseconds' is added; expected times relative to it")
            if base_ns:
                chunk["start_ns"] += base_ns
                chunk["end_ns"] += base_ns
        if self.style == "unpadded_ns":
            meta.quality.append(
                "timestamps were written by the 2024 Kineto nanosecond exporter without zero-padded "
                "fractions ('12.5' means 12 us + 5 ns); they were read that way"
            )
        if self.negative:
            meta.quality.append(f"{self.negative} events have negative durations; they were treated as zero-length")
        for pid, tid, tname in self.thread_names:
            b.name_lane(pid, tid, tname)
        total = sum(self.unknown.values())
        if total:
            listed = ", ".join(f"{k} ({v})" for k, v in self.unknown.most_common(5))
            meta.quality.append(f"{total} events of categories whyidle does not use were ignored: {listed}")
        return b.build(consume=True)
