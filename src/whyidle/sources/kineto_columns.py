"""Decoded Kineto events -> Timeline columns: the one implementation both readers use.

:mod:`whyidle.sources.kineto` decodes a trace held in memory and :mod:`whyidle.sources.kineto_stream`
decodes one in chunks; both hand batches of decoded events to :func:`_local_columns`, which turns
a batch into columns with batch-local tables (small to pickle between processes), and
:class:`_Columns` merges batches, in file order, into one TimelineBuilder.
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta


class _Num(str):
    """The source text of a JSON float (a str subclass, so it is told apart from JSON strings)."""

    __slots__ = ()


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
_COLLECTIVE_RE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.IGNORECASE)
# Every alternative above contains one of these (lower case): a substring test rules out most
# kernel names (long C++ templates) before the regex scans them.
_COLLECTIVE_HINTS = ("nccl", "rccl", "all", "scatter", "sendrecv")
# Kinds recorded on a device lane (pid = device, tid = stream). ``cuda_sync`` records are CUPTI's
# device-side view of a synchronisation (the host call carries the same correlation id): they
# mark a wait on a stream, not work, and never a host thread.
_DEVICE_KINDS = {Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC}
_STREAM_RE = re.compile(r"(\d+)\s*$")


# Times in microseconds must stay within this magnitude so that nanoseconds, plus a base time and
# a duration, fit int64 (2**62 ns is 146 years: epoch microseconds today are 1.7e15 of 4.6e15).
MAX_TIME_NS = 2**62
_MAX_US = MAX_TIME_NS // 1000
# The largest world size believed: 2**24 ranks is 100x the largest training jobs reported (about
# 100k GPUs); a larger distributedInfo.world_size is a damaged or hostile file.
MAX_WORLD_SIZE = 1 << 24


def _time_range_error(path: str, what: str, v: Any) -> TraceFormatError:
    text = str(v)
    shown = text if len(text) <= 40 else text[:40] + "..."
    return TraceFormatError(path, f"has a {what} of {shown} microseconds, too large to be a time (more than {_MAX_US:.2e}); expected microseconds")


def _to_ns(values: list[Any], style: str, path: str, what: str) -> np.ndarray:
    """Microsecond values (int, float, float text) -> int64 nanoseconds.

    Values beyond :data:`MAX_TIME_NS` are refused (never wrapped into negative times)."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    # Fast path: numpy infers int64 only when every value is a Python int (the typed decoder
    # admits no bools). Anything else (floats, float texts, strings) takes the careful path.
    try:
        guess = np.asarray(values)
    except (ValueError, OverflowError):
        guess = np.empty(0)
    if guess.dtype == np.int64 and guess.shape == (n,):
        lo, hi = int(guess.min()), int(guess.max())
        if hi > _MAX_US or lo < -_MAX_US:
            raise _time_range_error(path, what, hi if hi > _MAX_US else lo)
        return guess * 1000
    is_int = np.fromiter((type(v) is int for v in values), dtype=np.bool_, count=n)
    is_float = np.fromiter((type(v) is float for v in values), dtype=np.bool_, count=n)
    if (is_int | is_float).all():
        out = np.empty(n, dtype=np.int64)
        ints = [v for v in values if type(v) is int]
        for v in ints:
            if not -_MAX_US <= v <= _MAX_US:
                raise _time_range_error(path, what, v)
        out[is_int] = np.asarray(ints, dtype=np.int64) * 1000
        fl = np.asarray([v for v in values if type(v) is float], dtype=np.float64)
        if not np.isfinite(fl).all():
            raise TraceFormatError(path, f"has a {what} that is not a finite number")
        if fl.size and float(np.abs(fl).max()) > _MAX_US:
            raise _time_range_error(path, what, float(np.abs(fl).max()))
        out[is_float] = np.rint(fl * 1000.0).astype(np.int64)
        return out
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        if type(v) is int:
            if not -_MAX_US <= v <= _MAX_US:
                raise _time_range_error(path, what, v)
            out[i] = v * 1000
        elif type(v) is _Num:
            dot = v.find(".")
            if dot >= 0 and "e" not in v and "E" not in v:
                whole = v[:dot] or "0"
                frac = v[dot + 1 :]
                neg = whole.startswith("-")
                if style == "unpadded_ns":
                    ns = int(frac) if frac else 0
                else:
                    digits = (frac + "000")[:3]
                    ns = int(digits)
                    if len(frac) > 3 and frac[3] >= "5":
                        ns += 1
                if len(whole) > 19 or not -_MAX_US <= int(whole) <= _MAX_US:
                    raise _time_range_error(path, what, v)
                w = int(whole)
                out[i] = w * 1000 - ns if neg else w * 1000 + ns
            else:
                try:
                    d = Decimal(v)
                except InvalidOperation:
                    raise TraceFormatError(path, f"has a non-numeric {what} {v!r}") from None
                if not d.is_finite():
                    raise TraceFormatError(path, f"has a {what} that is not a finite number ({v[:40]})")
                if abs(d) > _MAX_US:
                    raise _time_range_error(path, what, v)
                out[i] = int((d * 1000).to_integral_value())
        elif v is None:
            raise TraceFormatError(path, f"has a complete event without a {what}; expected a number of microseconds")
        elif type(v) is bool:
            raise TraceFormatError(path, f"has a {what} that is a boolean ({v}); expected a number of microseconds")
        else:
            raise TraceFormatError(path, f"has a {what} that is a {type(v).__name__} ({str(v)[:40]!r}); expected a number of microseconds")
    return out


_I64 = 2**63


def _as_int(v: Any, default: int = -1) -> int:
    """``v`` as an int64 value: ints and numeric texts; anything else (or out of range) is ``default``."""
    if type(v) is int:
        return v if -_I64 <= v < _I64 else default
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return default
        if not -_I64 <= f < _I64:  # also inf and nan
            return default
        return int(f)
    return default


def _floats(v: Any) -> Any:
    """``v`` with float texts (_Num, from a decoder's float hook) turned back into floats."""
    if type(v) is _Num:
        try:
            return float(v)
        except ValueError:  # pragma: no cover - _Num is always a JSON number
            return v
    if isinstance(v, dict):
        return {k: _floats(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_floats(x) for x in v]
    return v


def _base_ns(path: str, v: Any) -> int:
    """``baseTimeNanoseconds`` as an int, read the same by both readers whatever its JSON form
    (integer, float, float text, numeric string); 0 when absent or not a number."""
    if type(v) is bool:
        return 0
    if type(v) is int:
        n = v
    elif isinstance(v, (float, str)):  # _Num (exact float text) is a str
        try:
            d = Decimal(str(v).strip())
        except InvalidOperation:
            return 0
        if not d.is_finite():
            raise TraceFormatError(path, f"has a 'baseTimeNanoseconds' that is not a finite number ({str(v)[:40]})")
        n = int(d.to_integral_value())
    else:
        return 0
    if not -MAX_TIME_NS < n < MAX_TIME_NS:
        raise TraceFormatError(path, f"has a 'baseTimeNanoseconds' of {str(v)[:40]}, too large to be a time (more than {MAX_TIME_NS:.2e} ns)")
    return n


def _as_float(v: Any) -> float:
    if v is None:
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


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


def _dims(v: Any) -> int:
    """A launch dimension ([x, y, z] in Kineto's 'grid' and 'block') as its product; -1 if unknown."""
    if type(v) is list and v and all(type(x) is int and x > 0 for x in v):
        out = 1
        for x in v:
            out *= x
        return out
    return -1


def _int_or(values: list[Any], default: int) -> np.ndarray:
    """int64 ids and sizes; a value that is not an int64 number counts as unknown (``default``)."""
    return np.array([v if type(v) is int and -_I64 <= v < _I64 else (_as_int(v, default) if v is not None else default) for v in values], dtype=np.int64)


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


def _local_columns(events: list[Any], style: str, path: str) -> _Local:
    """Columns of one batch of decoded events, as kineto._parse computes them."""
    seen_ph = any(isinstance(e.ph, str) for e in events[:1000])
    thread_names = [
        (str(e.pid), str(e.tid), e.args.name)
        for e in events
        if e.ph == "M" and e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str)
    ]
    xs = [e for e in events if e.ph == "X"]
    unknown: dict[str, int] = {}
    empty = _Local(len(events), seen_ph, bool(xs), thread_names, unknown, [], [], [], 0, {})
    if not xs:
        return empty
    cats = [e.cat if isinstance(e.cat, str) or e.cat is None else repr(e.cat) for e in xs]  # a list or dict cannot be a key
    cat_kind: dict[Any, int] = {}
    for c in dict.fromkeys(cats):
        ck = _CATEGORIES.get(c.lower() if isinstance(c, str) else "")
        cat_kind[c] = int(ck) if ck is not None else -1
    kind_all = np.fromiter((cat_kind[c] for c in cats), dtype=np.int16, count=len(cats))
    for c, k in cat_kind.items():
        if k == -1 and not (isinstance(c, str) and c.lower() in _IGNORED):
            unknown[str(c)] = unknown.get(str(c), 0) + cats.count(c)
    keep = np.flatnonzero(kind_all >= 0)
    if keep.size != len(xs):
        xs = [xs[i] for i in keep]
    if not xs:
        return empty
    kind = kind_all[keep].astype(np.int8)
    n = len(xs)
    # Interning by dict.setdefault inside one comprehension keeps the per-event work in C. Ids
    # are handed out in first-seen order, so the running maximum rises exactly at first uses.
    mtia = any(isinstance(c, str) and c.lower() == "mtia_ccp_events" for c in cat_kind)
    event_names = _mtia_device_events(xs, kind) if mtia else [e.name for e in xs]
    name_ids_of: dict[Any, int] = {}
    try:
        name_list = [name_ids_of.setdefault(nm, len(name_ids_of)) for nm in event_names]
    except TypeError:  # a name that is not a string (a list?): intern its text
        name_ids_of.clear()
        name_list = [name_ids_of.setdefault(str(nm), len(name_ids_of)) for nm in event_names]
    name_ids = np.array(name_list, dtype=np.int32)
    names = [nm if isinstance(nm, str) else str(nm) for nm in name_ids_of]
    is_device = np.isin(kind, [int(k) for k in _DEVICE_KINDS])
    args = [e.args for e in xs]
    lane_of: dict[tuple[Any, Any, bool], int] = {}
    keys = zip([e.pid for e in xs], [e.tid for e in xs], is_device.tolist())
    try:
        lane_list = [lane_of.setdefault(k, len(lane_of)) for k in keys]
    except TypeError:  # a pid or tid that is not a scalar
        lane_of.clear()
        keys = zip([str(e.pid) for e in xs], [str(e.tid) for e in xs], is_device.tolist())
        lane_list = [lane_of.setdefault(k, len(lane_of)) for k in keys]
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
    step_names, coll_names = _name_flags(names)
    host_range = (kind == int(Kind.CPU_OP)) | (kind == int(Kind.ANNOTATION))
    kind[host_range & step_names[name_ids]] = int(Kind.STEP)
    kind[(kind == int(Kind.KERNEL)) & coll_names[name_ids]] = int(Kind.COLLECTIVE)
    start_ns = _to_ns([e.ts for e in xs], style, path, "timestamp 'ts'")
    dur_ns = _to_ns([0 if e.dur is None else e.dur for e in xs], style, path, "duration 'dur'")
    negative = int((dur_ns < 0).sum())
    if negative:
        dur_ns = np.maximum(dur_ns, 0)
    corr = _int_or([a.correlation if a is not None else None for a in args], -1)
    dev_idx = np.flatnonzero(is_device).tolist()
    bps = np.full(n, np.nan, dtype=np.float32)
    occ = np.full(n, np.nan, dtype=np.float32)
    nbytes = np.full(n, -1, dtype=np.int64)
    grid = np.full(n, -1, dtype=np.int64)
    block = np.full(n, -1, dtype=np.int32)
    if dev_idx:
        dargs = [args[i] for i in dev_idx]
        bps[dev_idx] = [_as_float(a.blocks_per_sm) if a is not None else np.nan for a in dargs]
        occ[dev_idx] = [_as_float(a.occupancy) if a is not None else np.nan for a in dargs]
        nbytes[dev_idx] = _int_or([a.bytes if a is not None else None for a in dargs], -1)
        grid[dev_idx] = [_dims(a.grid) if a is not None else -1 for a in dargs]
        block[dev_idx] = [_dims(a.block) if a is not None else -1 for a in dargs]
    host_idx = np.flatnonzero(~is_device).tolist()
    stack = np.full(n, -1, dtype=np.int32)
    shape0 = np.full(n, -1, dtype=np.int64)
    stacks: list[str] = []
    if host_idx:
        stack_of: dict[str, int] = {}
        hargs = [args[i] for i in host_idx]
        stack[host_idx] = [
            stack_of.setdefault(st, len(stack_of)) if a is not None and type(st := a.call_stack) is str and st else -1 for a in hargs
        ]
        stacks = list(stack_of)
        # The leading dimension of the first input ("Input Dims": [[32, 3, 224, 224], ...]).
        shape0[host_idx] = [
            d0[0] if a is not None and type(d := a.input_dims) is list and d and type(d0 := d[0]) is list and d0 and type(d0[0]) is int else -1
            for a in hargs
        ]
    cols = {
        "start_ns": start_ns,
        "end_ns": start_ns + dur_ns,  # base time is added at the end
        "lane": lane,
        "kind": kind,
        "name": name_ids,
        "corr": corr,
        "stack": stack,
        "shape0": shape0,
        "blocks_per_sm": bps,
        "occupancy": occ,
        "nbytes": nbytes,
        "grid": grid,
        "block": block,
    }
    return _Local(len(events), seen_ph, True, thread_names, unknown, names, lane_keys, stacks, negative, cols)


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
                "compressed byte): a gzip bomb or a damaged file, not read further",
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
        for chunk in b._chunks:
            st = chunk["stack"]
            chunk["stack"] = remap[st]  # -1 indexes the trailing -1
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
        return b.build()
