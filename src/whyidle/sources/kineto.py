"""PyTorch profiler (Kineto) Chrome-trace JSON -> Timeline.

The only module that knows Kineto's format. It reads every schema seen in the wild:

* 2021 schema: categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; integer
  microseconds (sub-microsecond kernels have ``dur: 0``).
* newer schema: ``cpu_op``, ``cuda_runtime``, ``cuda_driver``, ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, ``cuda_sync``, ``user_annotation``, ``gpu_user_annotation``,
  ``python_function``; fractional microseconds, optionally relative to ``baseTimeNanoseconds``.
* the 2024 nanosecond exporter (pytorch/kineto#890), which printed ``ts`` as ``{us}.{ns}``
  without zero-padding the nanoseconds: ``12.5`` there means 12 us + 5 ns. It is told apart from
  ordinary decimals by the fraction texts themselves (see :func:`_fraction_style`).

Decoding uses msgspec with typed structs that name only the fields whyidle reads, so the many
``args`` whyidle ignores are skipped by the decoder instead of becoming Python objects. Floats
arrive as their source text (``float_hook``) so that nanoseconds are never lost to float64
rounding (epoch microseconds near 1.7e15 have a float64 resolution of 0.25 us).
"""

from __future__ import annotations

import gc
import re
from collections import Counter
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Union, cast

import msgspec
import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["load_kineto", "parse_kineto", "looks_like_kineto"]


class _Num(str):
    """The source text of a JSON float (a str subclass, so it is told apart from JSON strings)."""

    __slots__ = ()


class _Args(msgspec.Struct):
    correlation: Any = None
    stream: Any = None
    device: Any = None
    bytes: Any = None
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    name: Any = None  # metadata events: process / thread name
    labels: Any = None  # metadata events: process labels ("GPU 0", "CPU")


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[_Args, None] = None


class _ExactEvent(_Event):
    """Times kept as source text: for files where float64 would lose or misread nanoseconds."""

    ts: Any = None
    dur: Any = None


class _Doc(msgspec.Struct):
    traceEvents: Union[list[_Event], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


class _ExactDoc(_Doc):
    traceEvents: Union[list[_ExactEvent], None] = None  # type: ignore[assignment]


# Numbers decode natively (fast) where float64 holds every nanosecond; the exact decoder hands
# float texts over as _Num for the rest.
_DECODER = msgspec.json.Decoder(Union[_Doc, list[_Event]])
_EXACT_DECODER = msgspec.json.Decoder(Union[_ExactDoc, list[_ExactEvent]], float_hook=_Num)
# Fractional times as written: "ts": 123.4 / "dur": 5.67
_FLOAT_TIME_RE = re.compile(rb'"(?:ts|dur)"\s*:\s*-?(\d+)\.(\d+)')
# float64 has 53 bits: microsecond values below this keep every nanosecond through x * 1000.
_EXACT_FLOAT_US = 2**53 // 1000 // 4

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
}
# Categories Kineto writes that carry no interval whyidle uses (flows, counters, the trace span).
_IGNORED = {"ac2g", "async", "async_gpu", "fwdbwd", "trace", "overhead", "cpu_instant_event", "gpu_instant_event"}
_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
_COLLECTIVE_RE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.IGNORECASE)
# Kinds recorded on a device lane (pid = device, tid = stream). ``cuda_sync`` records are CUPTI's
# device-side view of a synchronisation (the host call carries the same correlation id): they
# mark a wait on a stream, not work, and never a host thread.
_DEVICE_KINDS = {Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC}
_STREAM_RE = re.compile(r"(\d+)\s*$")


def looks_like_kineto(head: bytes) -> bool:
    h = head.lstrip()
    return h.startswith(b"{") or h.startswith(b"[")


def load_kineto(path: Path, raw: bytes) -> Timeline:
    """Parse a Kineto trace already read into ``raw`` (decompressed)."""
    return parse_kineto(raw, path=str(path))


def _decode(raw: bytes, path: str, exact: bool) -> tuple[list[_Event], _Doc | None]:
    try:
        doc = (_EXACT_DECODER if exact else _DECODER).decode(raw)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if ".ts`" in msg or ".dur`" in msg:
            where = msg.rsplit(" - at ", 1)[-1]
            raise TraceFormatError(path, f"has a time that is not a number at {where}; expected microseconds") from None
        raise TraceFormatError(path, f"is JSON but not a Chrome/Kineto trace ({msg})") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceFormatError(path, f"the JSON is truncated ({msg}); was the trace fully written?") from None
        raise TraceFormatError(path, f"is not valid JSON ({msg}); expected a PyTorch profiler trace") from None
    if isinstance(doc, list):
        return cast("list[_Event]", doc), None
    if doc.traceEvents is None:
        raise TraceFormatError(path, "is a JSON object without a 'traceEvents' list; expected a PyTorch profiler trace")
    return doc.traceEvents, doc


def _sample_fractions(raw: bytes) -> tuple[list[str], bool]:
    """Fraction texts of times in the first and last MiB, and whether float64 would lose ns."""
    texts: list[str] = []
    big = False
    for part in (raw[: 1 << 20], raw[-(1 << 20) :] if len(raw) > 1 << 20 else b""):
        for whole, frac in _FLOAT_TIME_RE.findall(part):
            texts.append("0." + frac.decode())
            if len(whole) > 12 and int(whole) >= _EXACT_FLOAT_US:
                big = True
    return texts, big


def _fraction_style(texts: list[str]) -> str:
    """How the fractional microseconds were written: "decimal" or "unpadded_ns".

    The 2024 exporter wrote ``{us}.{ns % 1000}`` without padding, so its fractions are integers
    0-999 written without leading zeros: 1-2 digit fractions occur, a multi-digit fraction never
    starts with 0, and about one in ten ends in 0. Correct exporters pad to three digits; Python's
    float repr strips trailing zeros (never a multi-digit fraction ending in 0) but keeps leading
    ones. So: short fractions, no leading zero, and some trailing zero -> unpadded nanoseconds.
    """
    short = lead0 = trail0 = False
    for t in texts:
        dot = t.find(".")
        if dot < 0 or "e" in t or "E" in t:
            continue
        frac = t[dot + 1 :]
        n = len(frac)
        if n < 3:
            short = True
        if n >= 2:
            if frac[0] == "0":
                lead0 = True
            if frac[-1] == "0":
                trail0 = True
    return "unpadded_ns" if (short and trail0 and not lead0) else "decimal"


def _to_ns(values: list[Any], style: str, path: str, what: str) -> np.ndarray:
    """Microsecond values (int, float, float text) -> int64 nanoseconds."""
    n = len(values)
    is_int = np.fromiter((type(v) is int for v in values), dtype=np.bool_, count=n)
    if is_int.all():
        return np.asarray(values, dtype=np.int64) * 1000
    is_float = np.fromiter((type(v) is float for v in values), dtype=np.bool_, count=n)
    if (is_int | is_float).all():
        out = np.empty(n, dtype=np.int64)
        out[is_int] = np.asarray([v for v in values if type(v) is int], dtype=np.int64) * 1000
        fl = np.asarray([v for v in values if type(v) is float], dtype=np.float64)
        if not np.isfinite(fl).all():
            raise TraceFormatError(path, f"has a {what} that is not a finite number")
        out[is_float] = np.rint(fl * 1000.0).astype(np.int64)
        return out
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        if type(v) is int:
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
                w = int(whole)
                out[i] = w * 1000 - ns if neg else w * 1000 + ns
            else:
                try:
                    d = Decimal(v)
                except InvalidOperation:
                    raise TraceFormatError(path, f"has a non-numeric {what} {v!r}") from None
                if not d.is_finite():
                    raise TraceFormatError(path, f"has a {what} that is not a finite number ({v})")
                out[i] = int((d * 1000).to_integral_value())
        elif v is None:
            raise TraceFormatError(path, f"has a complete event without a {what}; expected a number of microseconds")
        elif type(v) is bool:
            raise TraceFormatError(path, f"has a {what} that is a boolean ({v}); expected a number of microseconds")
        else:
            raise TraceFormatError(path, f"has a {what} that is a {type(v).__name__} ({str(v)[:40]!r}); expected a number of microseconds")
    return out


def _as_int(v: Any, default: int = -1) -> int:
    if type(v) is int:
        return v
    if isinstance(v, str):
        try:
            return int(float(v))
        except ValueError:
            return default
    return default


def _as_float(v: Any) -> float:
    if v is None:
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _lead_dim(dims: Any) -> int:
    if isinstance(dims, list) and dims:
        first = dims[0]
        if isinstance(first, list) and first and type(first[0]) is int:
            return int(first[0])
    return -1


def _stream_of(e: _Event, a: _Args | None) -> str:
    if a is not None and a.stream is not None:
        return str(_as_int(a.stream, 0))
    m = _STREAM_RE.search(str(e.tid))
    return m.group(1) if m else str(e.tid)


def _int_or(values: list[Any], default: int) -> np.ndarray:
    return np.fromiter((v if type(v) is int else (_as_int(v, default) if v is not None else default) for v in values), dtype=np.int64, count=len(values))


def parse_kineto(raw: bytes, path: str = "<memory>") -> Timeline:
    texts, big = _sample_fractions(raw)
    style = _fraction_style(texts)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of fresh objects, none cyclic: the collector would only rescan them
    try:
        return _parse(raw, path, style, exact=big or style == "unpadded_ns")
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(raw: bytes, path: str, style: str, exact: bool) -> Timeline:
    events, doc = _decode(raw, path, exact)
    meta = TimelineMeta(source_format="kineto", path=path)
    base_ns = 0
    if doc is not None:
        meta.source_version = f"schemaVersion {doc.schemaVersion}" if doc.schemaVersion is not None else "2021 (no schemaVersion)"
        if isinstance(doc.deviceProperties, list):
            meta.devices = [d for d in doc.deviceProperties if isinstance(d, dict)]
        info = doc.distributedInfo
        if isinstance(info, dict):
            if type(info.get("rank")) is int:
                meta.rank = int(info["rank"])
                meta.rank_basis = "distributedInfo"
            if type(info.get("world_size")) is int:
                meta.world_size = int(info["world_size"])
        if doc.baseTimeNanoseconds is not None:
            base_ns = _as_int(doc.baseTimeNanoseconds, 0)
    if not events:
        raise TraceFormatError(path, "has an empty 'traceEvents' list; expected profiler events")
    b = TimelineBuilder(meta)

    # Column-wise extraction: one comprehension per field is several times faster than one
    # loop that appends to eleven lists.
    xs = [e for e in events if e.ph == "X"]
    thread_names = [
        (str(e.pid), str(e.tid), e.args.name)
        for e in events
        if e.ph == "M" and e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str)
    ]
    if not xs and not any(isinstance(e.ph, str) for e in events[:1000]):
        raise TraceFormatError(path, "holds no Chrome trace events (no 'ph' fields); expected a PyTorch profiler trace")

    cats = [e.cat for e in xs]
    cat_kind: dict[Any, int] = {}
    unknown: Counter[str] = Counter()
    for c in set(cats):
        known = _CATEGORIES.get(c.lower() if isinstance(c, str) else "")
        cat_kind[c] = int(known) if known is not None else -1
    kind_all = np.fromiter((cat_kind[c] for c in cats), dtype=np.int16, count=len(cats))
    for c, code in cat_kind.items():
        if code == -1 and not (isinstance(c, str) and c.lower() in _IGNORED):
            unknown[str(c)] = cats.count(c)
    keep = np.flatnonzero(kind_all >= 0)
    if keep.size != len(xs):
        xs = [xs[i] for i in keep]
    kind = kind_all[keep].astype(np.int8)
    n = len(xs)

    names = [e.name if isinstance(e.name, str) else str(e.name) for e in xs]
    name_ids = b.intern_many(names)
    is_device = np.isin(kind, [int(k) for k in _DEVICE_KINDS])

    # Lanes: device events by (pid, tid) -> stream lane, host events -> thread lane.
    lane = np.empty(n, dtype=np.int32)
    lane_of: dict[tuple[Any, Any, bool], int] = {}
    args = [e.args for e in xs]
    dev_flags = is_device.tolist()
    for i, e in enumerate(xs):
        lane_key = (e.pid, e.tid, dev_flags[i])
        li = lane_of.get(lane_key)
        if li is None:
            if dev_flags[i]:
                a = args[i]
                dev = _as_int(a.device, -1) if a is not None and a.device is not None else _as_int(e.pid, 0)
                li = b.lane_id(LaneKind.GPU_STREAM, dev, str(e.pid), _stream_of(e, a))
            else:
                li = b.lane_id(LaneKind.CPU_THREAD, -1, str(e.pid), str(e.tid))
            lane_of[lane_key] = li
        lane[i] = li

    # Kinds resolved by name: steps among host ranges, collectives among kernels.
    strings = b._strings
    step_names = np.fromiter((bool(_STEP_RE.match(s_)) for s_ in strings), dtype=np.bool_, count=len(strings))
    coll_names = np.fromiter((bool(_COLLECTIVE_RE.search(s_)) for s_ in strings), dtype=np.bool_, count=len(strings))
    host_range = (kind == int(Kind.CPU_OP)) | (kind == int(Kind.ANNOTATION))
    kind[host_range & step_names[name_ids]] = int(Kind.STEP)
    kind[(kind == int(Kind.KERNEL)) & coll_names[name_ids]] = int(Kind.COLLECTIVE)

    # Times.
    starts = [e.ts for e in xs]
    durs = [e.dur for e in xs]
    start_ns = _to_ns(starts, style, path, "timestamp 'ts'")
    dur_ns = _to_ns([0 if d is None else d for d in durs], style, path, "duration 'dur'")
    if style == "unpadded_ns":
        meta.quality.append(
            "timestamps were written by the 2024 Kineto nanosecond exporter without zero-padded "
            "fractions ('12.5' means 12 us + 5 ns); they were read that way"
        )
    negative = int((dur_ns < 0).sum())
    if negative:
        meta.quality.append(f"{negative} events have negative durations; they were treated as zero-length")
        dur_ns = np.maximum(dur_ns, 0)
    if base_ns:
        start_ns = start_ns + base_ns

    # Arguments: correlation for launches and device work; the rest only where it applies.
    corr = _int_or([a.correlation if a is not None else None for a in args], -1)
    dev_idx = np.flatnonzero(is_device).tolist()
    bps = np.full(n, np.nan, dtype=np.float32)
    occ = np.full(n, np.nan, dtype=np.float32)
    nbytes = np.full(n, -1, dtype=np.int64)
    if dev_idx:
        dargs = [args[i] for i in dev_idx]
        bps[dev_idx] = [_as_float(a.blocks_per_sm) if a is not None else np.nan for a in dargs]
        occ[dev_idx] = [_as_float(a.occupancy) if a is not None else np.nan for a in dargs]
        nbytes[dev_idx] = _int_or([a.bytes if a is not None else None for a in dargs], -1)
    host_idx = np.flatnonzero(~is_device).tolist()
    stack = np.full(n, -1, dtype=np.int32)
    shape0 = np.full(n, -1, dtype=np.int64)
    if host_idx:
        hargs = [args[i] for i in host_idx]
        stack[host_idx] = [
            b.intern(a.call_stack) if a is not None and isinstance(a.call_stack, str) and a.call_stack else -1
            for a in hargs
        ]
        shape0[host_idx] = [_lead_dim(a.input_dims) if a is not None and a.input_dims is not None else -1 for a in hargs]

    for pid, tid, tname in thread_names:
        b.name_lane(pid, tid, tname)
    unknown_total = sum(unknown.values())
    if unknown_total:
        listed = ", ".join(f"{k} ({v})" for k, v in unknown.most_common(5))
        meta.quality.append(f"{unknown_total} events of categories whyidle does not use were ignored: {listed}")
    b.add_columns(
        start_ns=start_ns,
        end_ns=start_ns + dur_ns,
        lane=lane,
        kind=kind,
        name=name_ids,
        corr=corr,
        stack=stack,
        shape0=shape0,
        blocks_per_sm=bps,
        occupancy=occ,
        nbytes=nbytes,
    )
    return b.build()
