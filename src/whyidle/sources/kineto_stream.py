"""Out-of-core Kineto reading: a trace of any size, in bounded memory, to the same Timeline.

:func:`sources.kineto.parse_kineto` holds the whole text and every decoded event at once (about
3x the file). This reader never does: it decompresses incrementally, cuts the ``traceEvents``
array into batches of whole events, decodes each batch with the same msgspec structs, turns it
into columns with the same helpers, and drops it. Peak memory is the columns (about 60 bytes per
kept event, twice while they are sorted) plus one batch, whatever the trace's size.

Cutting the array without a full JSON scanner::

    ..."args": {...}\\n  },\\n  {"ph": "X", ...   <- the last '}' followed by ',' and '{'
                      ^ candidate cut

The candidate is checked by decoding ``[`` + batch + ``]``: a cut inside an event or a string
cannot give balanced JSON, so a successful decode proves the cut; a failed one falls back to the
previous candidate. The few top-level fields (schemaVersion, deviceProperties, distributedInfo,
baseTimeNanoseconds, which Kineto writes after the events) are decoded from the text around the
array.

How times are read (float64 or exact text, and the 2024 unpadded-nanosecond style) is decided
from the first and last MiB, as the in-memory reader does; the first MiB decides up front and, if
the last MiB disagrees (rare), the trace is read a second time the other way.
"""

from __future__ import annotations

import gc
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from whyidle.errors import InputError, TraceFormatError
from whyidle.sources._io import GZIP_MAGIC
from whyidle.sources.kineto import (
    _CATEGORIES,
    _COLLECTIVE_RE,
    _DECODER,
    _DEVICE_KINDS,
    _EXACT_DECODER,
    _EXACT_FLOAT_US,
    _FLOAT_TIME_RE,
    _IGNORED,
    _STEP_RE,
    _as_float,
    _as_int,
    _Doc,
    _Event,
    _ExactEvent,
    _fraction_style,
    _int_or,
    _lead_dim,
    _Num,
    _stream_of,
    _to_ns,
)
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["load_kineto_stream", "parse_kineto_stream", "should_stream", "estimated_size"]

_BLOCK = 8 << 20  # bytes of plain text read per step
_GZ_READ = 1 << 20  # compressed bytes read per step (JSON traces inflate 10-30x)
_MAX_FALSE_CUTS = 8  # candidate cuts tried per batch before the text is called malformed
_BATCH = 16 << 20  # text per decoded batch of events
_MIB = 1 << 20
_WS = b" \t\r\n"
_BATCH_DECODER = msgspec.json.Decoder(list[_Event])
_EXACT_BATCH_DECODER = msgspec.json.Decoder(list[_ExactEvent], float_hook=_Num)


def estimated_size(path: Path) -> int:
    """Uncompressed size: the file size, or for gzip the larger of its size field and 5x."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return size
        f.seek(max(size - 4, 0))
        isize = int.from_bytes(f.read(4), "little")  # modulo 4 GiB
    return max(isize, 5 * size)


def should_stream(path: Path, min_bytes: int | None = None) -> bool:
    """Whether ``path`` is large enough for the out-of-core reader (config.stream_min_bytes)."""
    if min_bytes is None:
        from whyidle.config import Config

        min_bytes = Config().stream_min_bytes
    try:
        return path.is_file() and estimated_size(path) >= min_bytes
    except OSError:
        return False


def _blocks(path: Path) -> Iterator[bytes]:
    """The decompressed content, block by block (gzip members one after another)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    with f:
        first = f.read(_GZ_READ)
        if not first:
            raise TraceFormatError(path, "the file is empty; expected a profiler trace")
        if not first.startswith(GZIP_MAGIC):
            yield first
            while blk := f.read(_BLOCK):
                yield blk
            return
        d = zlib.decompressobj(wbits=31)
        data = first
        while True:
            try:
                out = d.decompress(data)
            except zlib.error as exc:
                raise TraceFormatError(path, f"the gzip stream is corrupt ({exc})") from None
            if out:
                yield out
            if d.eof:
                rest = d.unused_data
                if len(rest) < 2:
                    rest += f.read(_GZ_READ)
                if not rest.startswith(GZIP_MAGIC):
                    return  # the end, or trailing garbage after the last member (as gzip(1) tolerates)
                d = zlib.decompressobj(wbits=31)
                data = rest
                continue
            data = f.read(_GZ_READ)
            if not data:
                raise TraceFormatError(path, "the gzip stream is truncated (the file ends before the compressed data does)")


def _samples(part: bytes) -> tuple[list[str], bool]:
    texts: list[str] = []
    big = False
    for whole, frac in _FLOAT_TIME_RE.findall(part):
        texts.append("0." + frac.decode())
        if len(whole) > 12 and int(whole) >= _EXACT_FLOAT_US:
            big = True
    return texts, big


class _Columns:
    """Accumulates batches of decoded events into a TimelineBuilder, as kineto._parse does."""

    def __init__(self, path: str, style: str) -> None:
        self.path = path
        self.style = style
        self.meta = TimelineMeta(source_format="kineto", path=path)
        self.b = TimelineBuilder(self.meta)
        self.lane_of: dict[tuple[Any, Any, bool], int] = {}
        self.unknown: Counter[str] = Counter()
        self.thread_names: list[tuple[str, str, Any]] = []
        self.stack_ids: dict[str, int] = {}  # stacks are interned after every name, as in memory
        self.stacks: list[str] = []
        self.negative = 0
        self.n_events = 0
        self.seen_ph = False
        self.step_flags: list[bool] = []
        self.coll_flags: list[bool] = []

    def add(self, events: list[Any]) -> None:
        b = self.b
        if self.n_events < 1000 and any(isinstance(e.ph, str) for e in events[: 1000 - self.n_events]):
            self.seen_ph = True
        self.n_events += len(events)
        xs = [e for e in events if e.ph == "X"]
        self.thread_names.extend(
            (str(e.pid), str(e.tid), e.args.name)
            for e in events
            if e.ph == "M" and e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str)
        )
        if not xs:
            return
        cats = [e.cat for e in xs]
        cat_kind: dict[Any, int] = {}
        for c in dict.fromkeys(cats):
            ck = _CATEGORIES.get(c.lower() if isinstance(c, str) else "")
            cat_kind[c] = int(ck) if ck is not None else -1
        kind_all = np.fromiter((cat_kind[c] for c in cats), dtype=np.int16, count=len(cats))
        for c, k in cat_kind.items():
            if k == -1 and not (isinstance(c, str) and c.lower() in _IGNORED):
                self.unknown[str(c)] += cats.count(c)
        keep = np.flatnonzero(kind_all >= 0)
        if keep.size != len(xs):
            xs = [xs[i] for i in keep]
        if not xs:
            return
        kind = kind_all[keep].astype(np.int8)
        n = len(xs)
        names = [e.name if isinstance(e.name, str) else str(e.name) for e in xs]
        name_ids = b.intern_many(names)
        is_device = np.isin(kind, [int(k) for k in _DEVICE_KINDS])
        lane = np.empty(n, dtype=np.int32)
        args = [e.args for e in xs]
        dev_flags = is_device.tolist()
        lane_of = self.lane_of
        for i, e in enumerate(xs):
            lkey = (e.pid, e.tid, dev_flags[i])
            li = lane_of.get(lkey)
            if li is None:
                if dev_flags[i]:
                    a = args[i]
                    dev = _as_int(a.device, -1) if a is not None and a.device is not None else _as_int(e.pid, 0)
                    li = b.lane_id(LaneKind.GPU_STREAM, dev, str(e.pid), _stream_of(e, a))
                else:
                    li = b.lane_id(LaneKind.CPU_THREAD, -1, str(e.pid), str(e.tid))
                lane_of[lkey] = li
            lane[i] = li
        strings = b._strings
        new = strings[len(self.step_flags) :]  # flags for the names first seen in this batch
        self.step_flags.extend(bool(_STEP_RE.match(s_)) for s_ in new)
        self.coll_flags.extend(bool(_COLLECTIVE_RE.search(s_)) for s_ in new)
        step_names = np.array(self.step_flags, dtype=np.bool_)
        coll_names = np.array(self.coll_flags, dtype=np.bool_)
        host_range = (kind == int(Kind.CPU_OP)) | (kind == int(Kind.ANNOTATION))
        kind[host_range & step_names[name_ids]] = int(Kind.STEP)
        kind[(kind == int(Kind.KERNEL)) & coll_names[name_ids]] = int(Kind.COLLECTIVE)
        start_ns = _to_ns([e.ts for e in xs], self.style, self.path, "timestamp 'ts'")
        dur_ns = _to_ns([0 if e.dur is None else e.dur for e in xs], self.style, self.path, "duration 'dur'")
        neg = int((dur_ns < 0).sum())
        if neg:
            self.negative += neg
            dur_ns = np.maximum(dur_ns, 0)
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
                self._stack(a.call_stack) if a is not None and isinstance(a.call_stack, str) and a.call_stack else -1
                for a in hargs
            ]
            shape0[host_idx] = [_lead_dim(a.input_dims) if a is not None and a.input_dims is not None else -1 for a in hargs]
        b.add_columns(
            start_ns=start_ns,
            end_ns=start_ns + dur_ns,  # base time is added at the end
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

    def _stack(self, s: str) -> int:
        i = self.stack_ids.get(s)
        if i is None:
            i = len(self.stacks)
            self.stacks.append(s)
            self.stack_ids[s] = i
        return i

    def finish(self, doc: _Doc | None) -> Timeline:
        meta, b = self.meta, self.b
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
        if self.n_events == 0:
            raise TraceFormatError(self.path, "has an empty 'traceEvents' list; expected profiler events")
        if not b._chunks and not self.seen_ph:
            raise TraceFormatError(self.path, "holds no Chrome trace events (no 'ph' fields); expected a PyTorch profiler trace")
        # Stacks after every name, in first-use order, as the in-memory reader interns them.
        remap = np.array([b.intern(s) for s in self.stacks] + [-1], dtype=np.int32)
        for chunk in b._chunks:
            st = chunk["stack"]
            chunk["stack"] = remap[st]  # -1 indexes the trailing -1
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


def _decode_head(text: bytes, path: str, exact: bool) -> _Doc:
    try:
        doc = (_EXACT_DECODER if exact else _DECODER).decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceFormatError(path, f"is not valid JSON around its 'traceEvents' list ({exc}); expected a PyTorch profiler trace") from None
    if not isinstance(doc, _Doc):
        raise TraceFormatError(path, "is not a JSON object with a 'traceEvents' list; expected a PyTorch profiler trace")
    return doc


def _merge(a: _Doc | None, b: _Doc) -> _Doc:
    if a is None:
        return b
    for f in ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds"):
        if getattr(b, f) is not None:
            setattr(a, f, getattr(b, f))
    return a


def _skip_ws(buf: bytes | bytearray, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _cut(buf: bytearray, lo: int, hi: int) -> int:
    """Candidate end (exclusive) of the last whole event in ``buf[lo:hi]``: a '}' then ',' then '{'."""
    while True:
        c = buf.rfind(b"}", lo, hi)
        if c < 0:
            return -1
        j = _skip_ws(buf, c + 1)
        if j < len(buf) and buf[j] == 0x2C:  # ','
            k = _skip_ws(buf, j + 1)
            if k < len(buf) and buf[k] == 0x7B:  # '{'
                return c + 1
        hi = c


def _run(path: Path, style: str, exact: bool) -> tuple[Timeline | None, bytes, bytes]:
    """One pass: the Timeline, and the first and last MiB of text (to confirm the time style)."""
    spath = str(path)
    decoder = _EXACT_BATCH_DECODER if exact else _BATCH_DECODER
    cols = _Columns(spath, style)
    blocks = _blocks(path)
    buf = bytearray()
    first = b""
    tail = bytearray()
    eof = False

    def more() -> bool:
        nonlocal first, eof
        if eof:
            return False
        try:
            blk = next(blocks)
        except StopIteration:
            eof = True
            return False
        if len(first) < _MIB:
            first += blk[: _MIB - len(first)]
        tail.extend(blk)
        if len(tail) > 2 * _MIB:
            del tail[: len(tail) - _MIB]
        buf.extend(blk)
        return True

    def decode(text: bytes | bytearray) -> list[Any]:
        try:
            out: list[Any] = decoder.decode(text)
            return out
        except msgspec.ValidationError as exc:
            msg = str(exc)
            if ".ts`" in msg or ".dur`" in msg:
                raise TraceFormatError(spath, "has a time that is not a number; expected microseconds") from None
            raise TraceFormatError(spath, f"is JSON but not a Chrome/Kineto trace ({msg})") from None

    # -- head: up to the '[' of traceEvents (or of a bare list) -------------------------------
    more()
    doc: _Doc | None = None
    start = _skip_ws(buf, 0)
    while start >= len(buf) and more():
        start = _skip_ws(buf, 0)
    if start >= len(buf) or buf[start] not in b"{[":
        raise TraceFormatError(spath, "is not valid JSON; expected a PyTorch profiler trace")
    if buf[start] == 0x5B:  # '[': a bare list of events
        pos = start + 1
    else:
        key = b'"traceEvents"'
        while True:
            k = buf.find(key)
            if k >= 0:
                j = _skip_ws(buf, k + len(key))
                while j >= len(buf) - 1 and more():
                    j = _skip_ws(buf, k + len(key))
                if j < len(buf) and buf[j] == 0x3A:  # ':'
                    j = _skip_ws(buf, j + 1)
                    while j >= len(buf) and more():
                        j = _skip_ws(buf, j)
                    if j < len(buf) and buf[j] == 0x5B:
                        break
                raise TraceFormatError(spath, "has a 'traceEvents' field that is not a list; expected a PyTorch profiler trace")
            if not more():
                raise TraceFormatError(spath, "is a JSON object without a 'traceEvents' list; expected a PyTorch profiler trace")
        head = bytes(buf[start:k]).rstrip()
        head = head[:-1] if head.endswith(b",") else head
        doc = _decode_head(head + b"}", spath, exact)
        pos = j + 1
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # -- events ---------------------------------------------------------------------------
        while True:
            pos = _skip_ws(buf, pos)
            if pos < len(buf) and buf[pos] == 0x5D:  # ']': end of the array
                pos += 1
                break
            if len(buf) - pos < _BATCH and more():
                continue
            c = _cut(buf, pos, len(buf))
            events = None
            tries = 0
            while c > pos:
                try:
                    events = decode(b"[" + buf[pos:c] + b"]")
                    break
                except msgspec.DecodeError as exc:
                    tries += 1
                    if tries >= _MAX_FALSE_CUTS:
                        raise TraceFormatError(spath, f"is not valid JSON inside 'traceEvents' ({exc}); expected a PyTorch profiler trace") from None
                    c = _cut(buf, pos, c - 1)
            if events is None:
                if more():
                    continue
                # The last events: up to the array's closing ']'.
                end = _close(buf, pos, decode)
                if end < 0:
                    raise TraceFormatError(spath, "the JSON is truncated or malformed inside 'traceEvents'; was the trace fully written?")
                cols.add(decode(b"[" + buf[pos:end] + b"]"))
                pos = end + 1
                break
            cols.add(events)
            del events
            j = _skip_ws(buf, c)
            pos = j + 1  # past the ','
            del buf[:pos]
            pos = 0
        # -- tail: the rest of the object ------------------------------------------------------
        while more():
            pass
        rest = bytes(buf[pos:]).strip()
        if doc is not None:
            rest = rest[1:].lstrip() if rest.startswith(b",") else rest
            if rest and rest != b"}":
                doc = _merge(doc, _decode_head(b"{" + rest, spath, exact))
            elif not rest:
                raise TraceFormatError(spath, "the JSON is truncated (no closing '}'); was the trace fully written?")
        timeline = cols.finish(doc)
    finally:
        if gc_was_enabled:
            gc.enable()
    return timeline, bytes(first), bytes(tail[-_MIB:])


def _close(buf: bytearray, lo: int, decode: Any) -> int:
    """Position of the ']' closing the events array in ``buf[lo:]`` (all remaining text)."""
    at = lo
    while True:
        q = buf.find(b"]", at)
        if q < 0:
            return -1
        try:
            decode(b"[" + buf[lo:q] + b"]")
            return q
        except (msgspec.DecodeError, TraceFormatError):
            at = q + 1


def parse_kineto_stream(path: str | os.PathLike[str]) -> Timeline:
    """Read a Kineto trace (plain or gzip) in bounded memory; same Timeline as parse_kineto."""
    p = Path(path)
    # Decide from the first MiB, as the in-memory reader would with the first and last MiB.
    with open(p, "rb") as f:
        magic = f.read(2)
    head = next(_blocks(p)) if magic == GZIP_MAGIC else p.open("rb").read(_MIB)
    texts, big = _samples(head[:_MIB])
    style = _fraction_style(texts)
    exact = big or style == "unpadded_ns"
    tl, first, last = _run(p, style, exact)
    texts2, big2 = _samples(first)
    if len(first) >= _MIB and last:
        t_last, b_last = _samples(last)
        texts2 += t_last
        big2 = big2 or b_last
    style2 = _fraction_style(texts2)
    exact2 = big2 or style2 == "unpadded_ns"
    if (style2, exact2) != (style, exact):
        tl, _, _ = _run(p, style2, exact2)
    assert tl is not None
    return tl


def load_kineto_stream(path: Path) -> Timeline:
    return parse_kineto_stream(path)
