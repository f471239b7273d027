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
from collections import Counter, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
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
    looks_like_kineto,
)
from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, LaneKind, Timeline, TimelineMeta

__all__ = ["load_kineto_stream", "parse_kineto_stream", "should_stream", "estimated_size"]

_BLOCK = 8 << 20  # bytes of plain text read per step
_GZ_READ = 1 << 20  # compressed bytes read per step (JSON traces inflate 10-30x)
_PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
_MAX_FALSE_CUTS = 64  # candidate cuts tried per batch before the text is called malformed
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
        if not path.is_file() or estimated_size(path) < min_bytes:
            return False
        gen = _blocks(path)
        try:
            head = next(gen, b"")
        finally:
            gen.close()
    except (OSError, TraceFormatError):
        return False  # the in-memory reader reports the problem in words
    return looks_like_kineto(head[:64])  # JSON; other large inputs go to their own readers


Progress = Callable[[int, int], None]  # (file bytes read, file size)


def _blocks(path: Path, progress: Progress | None = None) -> Generator[bytes, None, None]:
    """The decompressed content, block by block (gzip members one after another)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    with f:
        size = os.fstat(f.fileno()).st_size

        def tell() -> None:
            if progress is not None:
                progress(f.tell(), size)

        first = f.read(_GZ_READ)
        if not first:
            raise TraceFormatError(path, "the file is empty; expected a profiler trace")
        if not first.startswith(GZIP_MAGIC):
            yield first
            while blk := f.read(_BLOCK):
                tell()
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
                tell()
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


@dataclass
class _Local:
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
    cats = [e.cat for e in xs]
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
    name_ids_of: dict[str, int] = {}
    names: list[str] = []
    name_ids = np.empty(n, dtype=np.int32)
    for i, e in enumerate(xs):
        nm = e.name if isinstance(e.name, str) else str(e.name)
        j = name_ids_of.get(nm)
        if j is None:
            j = name_ids_of[nm] = len(names)
            names.append(nm)
        name_ids[i] = j
    is_device = np.isin(kind, [int(k) for k in _DEVICE_KINDS])
    lane = np.empty(n, dtype=np.int32)
    args = [e.args for e in xs]
    dev_flags = is_device.tolist()
    lane_of: dict[tuple[Any, Any, bool], int] = {}
    lane_keys: list[tuple[bool, int, str, str, str]] = []
    for i, e in enumerate(xs):
        lkey = (e.pid, e.tid, dev_flags[i])
        li = lane_of.get(lkey)
        if li is None:
            if dev_flags[i]:
                a = args[i]
                dev = _as_int(a.device, -1) if a is not None and a.device is not None else _as_int(e.pid, 0)
                lane_keys.append((True, dev, str(e.pid), _stream_of(e, a), ""))
            else:
                lane_keys.append((False, -1, str(e.pid), str(e.tid), ""))
            li = lane_of[lkey] = len(lane_keys) - 1
        lane[i] = li
    step_names = np.fromiter((bool(_STEP_RE.match(s_)) for s_ in names), dtype=np.bool_, count=len(names))
    coll_names = np.fromiter((bool(_COLLECTIVE_RE.search(s_)) for s_ in names), dtype=np.bool_, count=len(names))
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
    if dev_idx:
        dargs = [args[i] for i in dev_idx]
        bps[dev_idx] = [_as_float(a.blocks_per_sm) if a is not None else np.nan for a in dargs]
        occ[dev_idx] = [_as_float(a.occupancy) if a is not None else np.nan for a in dargs]
        nbytes[dev_idx] = _int_or([a.bytes if a is not None else None for a in dargs], -1)
    host_idx = np.flatnonzero(~is_device).tolist()
    stack = np.full(n, -1, dtype=np.int32)
    shape0 = np.full(n, -1, dtype=np.int64)
    stacks: list[str] = []
    if host_idx:
        stack_of: dict[str, int] = {}

        def intern_stack(st: str) -> int:
            k = stack_of.get(st)
            if k is None:
                k = stack_of[st] = len(stacks)
                stacks.append(st)
            return k

        hargs = [args[i] for i in host_idx]
        stack[host_idx] = [
            intern_stack(a.call_stack) if a is not None and isinstance(a.call_stack, str) and a.call_stack else -1 for a in hargs
        ]
        shape0[host_idx] = [_lead_dim(a.input_dims) if a is not None and a.input_dims is not None else -1 for a in hargs]
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
    }
    return _Local(len(events), seen_ph, True, thread_names, unknown, names, lane_keys, stacks, negative, cols)


_BAD_CUT = "bad cut"


def _read_at(path: str, offset: int, length: int) -> bytearray:
    """``"[" + file[offset:offset + length] + "]"``, read straight into one buffer."""
    out = bytearray(length + 2)
    out[0], out[-1] = 0x5B, 0x5D
    with open(path, "rb") as f:
        f.seek(offset)
        got = f.readinto(memoryview(out)[1:-1])
    if got != length:
        raise OSError(f"{path} changed while it was read")
    return out


def _decode_at(path: str, offset: int, length: int, exact: bool, style: str) -> _Local | str:
    """A worker reads its batch from a plain file itself: only offsets cross the pipe."""
    return _decode_local(_read_at(path, offset, length), exact, style, path)


def _decode_local(text: bytes | bytearray, exact: bool, style: str, path: str) -> _Local | str:
    """Decode one batch ``[...]`` into columns (runs in worker processes too).

    Returns :data:`_BAD_CUT` when the text is not whole events (the cut was wrong) and an error
    message (str) for a trace that is not a profiler trace.
    """
    gc.disable()
    try:
        try:
            events = (_EXACT_BATCH_DECODER if exact else _BATCH_DECODER).decode(text)
        except msgspec.ValidationError as exc:
            msg = str(exc)
            if ".ts`" in msg or ".dur`" in msg:
                return "has a time that is not a number; expected microseconds"
            return f"is JSON but not a Chrome/Kineto trace ({msg})"
        except msgspec.DecodeError:
            return _BAD_CUT
        try:
            return _local_columns(events, style, path)
        except TraceFormatError as exc:
            return str(exc.args[0]) if exc.args else "has an event that cannot be read"
    finally:
        gc.enable()


class _Columns:
    """Merges batches (in file order) into one TimelineBuilder with global tables."""

    def __init__(self, path: str, style: str) -> None:
        self.path = path
        self.style = style
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
        if not self.has_x and not self.seen_ph:
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


_EVENT_KEYS = (b'"ph"', b'"cat"', b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"args"', b'"id"')


def _cut(buf: bytearray, lo: int, hi: int) -> int:
    """Candidate end (exclusive) of the last whole event in ``buf[lo:hi]``.

    A '}' then ',' then '{' opening an object whose first key is an event field ("ph", "name",
    ...); failing that anywhere in the range, any '}' ',' '{'.
    """
    c = _find_cut(buf, lo, hi, True)
    return c if c >= 0 else _find_cut(buf, lo, hi, False)


def _find_cut(buf: bytearray, lo: int, hi: int, strict: bool) -> int:
    n = len(buf)
    while True:
        c = buf.rfind(b"}", lo, hi)
        if c < 0:
            return -1
        j = _skip_ws(buf, c + 1)
        if j < n and buf[j] == 0x2C:  # ','
            k = _skip_ws(buf, j + 1)
            if k < n and buf[k] == 0x7B:  # '{'
                if not strict:
                    return c + 1
                m = _skip_ws(buf, k + 1)
                if buf.startswith(_EVENT_KEYS, m):
                    return c + 1
        hi = c


class _Batches:
    """Decodes batches in order, in this process or in a pool of worker processes.

    Cuts are speculative with workers: a batch whose cut proves wrong (its text does not decode)
    is joined with the next one, byte for byte, and decoded again.
    """

    def __init__(self, cols: _Columns, exact: bool, jobs: int) -> None:
        self.cols = cols
        self.exact = exact
        self.pool: Any = None
        # (future, payload "[...]" or (offset, length) in a plain file, separator after it)
        self.pending: deque[tuple[Any, bytes | tuple[int, int], bytes]] = deque()
        self.carry = b""
        self.jobs = jobs
        if jobs > 1:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=jobs)

    def _check(self, res: _Local | str) -> _Local | None:
        if isinstance(res, str):
            if res == _BAD_CUT:
                return None
            raise TraceFormatError(self.cols.path, res)
        return res

    def decode_view(self, buf: bytearray, lo: int, hi: int) -> _Local | None:
        """Decode ``buf[lo:hi]`` in this process with one copy (serial path, no carry)."""
        with memoryview(buf) as mv:
            return self._check(_decode_local(b"".join((b"[", mv[lo:hi], b"]")), self.exact, self.cols.style, self.cols.path))

    def decode_now(self, text: bytes) -> _Local | None:
        return self._check(_decode_local(b"[" + text + b"]", self.exact, self.cols.style, self.cols.path))

    def submit(self, payload: bytes, sep: bytes) -> None:
        """Decode ``payload`` ("[" + events text + "]") in a worker; ``sep`` is the text after it."""
        if self.carry:
            payload = b"".join((b"[", self.carry, memoryview(payload)[1:]))
            self.carry = b""
        fut = self.pool.submit(_decode_local, payload, self.exact, self.cols.style, self.cols.path)
        self.pending.append((fut, payload, sep))
        while len(self.pending) > 2 * self.jobs:
            self._drain_one()

    def submit_at(self, offset: int, length: int, sep: bytes) -> None:
        """Decode ``length`` bytes at ``offset`` of the (plain) file in a worker."""
        if self.carry:
            self.submit(bytes(_read_at(self.cols.path, offset, length)), sep)
            return
        fut = self.pool.submit(_decode_at, self.cols.path, offset, length, self.exact, self.cols.style)
        self.pending.append((fut, (offset, length), sep))
        while len(self.pending) > 2 * self.jobs:
            self._drain_one()

    def _text(self, src: bytes | tuple[int, int]) -> bytes:
        return src[1:-1] if isinstance(src, bytes) else bytes(_read_at(self.cols.path, *src)[1:-1])

    def _drain_one(self) -> None:
        fut, src, sep = self.pending.popleft()
        loc = self._check(fut.result())
        text = self._text(src) if loc is None else b""
        while loc is None:  # a wrong cut: join with the next batch, byte for byte
            if not self.pending:
                self.carry = text + sep
                return
            nfut, nsrc, nsep = self.pending.popleft()
            nfut.cancel()
            text, sep = text + sep + self._text(nsrc), nsep
            loc = self.decode_now(text)
        self.cols.merge(loc)

    def flush(self) -> bytes:
        """Merge everything in flight; returns text carried over from a wrong last cut."""
        while self.pending:
            self._drain_one()
        carry, self.carry = self.carry, b""
        return carry

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _run(path: Path, style: str, exact: bool, jobs: int = 1, progress: Progress | None = None) -> tuple[Timeline | None, bytes, bytes]:
    """One pass: the Timeline, and the first and last MiB of text (to confirm the time style)."""
    spath = str(path)
    cols = _Columns(spath, style)
    blocks = _blocks(path, progress)
    with open(path, "rb") as f:
        plain = f.read(2) != GZIP_MAGIC  # workers then read their batches from the file
    buf_off = 0  # file offset of buf[0] (plain files)
    buf = bytearray()
    first = b""
    recent: list[bytes] = []  # the last blocks, at least 1 MiB together (no copies)
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
        recent.append(blk)
        while len(recent) > 1 and sum(map(len, recent[1:])) >= _MIB:
            recent.pop(0)
        buf.extend(blk)
        return True

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
    batches = _Batches(cols, exact, jobs)
    try:
        # -- events ---------------------------------------------------------------------------
        while True:
            pos = _skip_ws(buf, pos)
            if pos < len(buf) and buf[pos] == 0x5D and not batches.carry and not batches.pending:  # ']'
                pos += 1
                break
            if len(buf) - pos < _BATCH and more():
                continue
            c = _cut(buf, pos, len(buf))
            loc = None
            if c > pos and batches.pool is None:
                loc = batches.decode_view(buf, pos, c)
                tries = 0
                while loc is None:  # a wrong cut: try the one before it
                    tries += 1
                    c = _cut(buf, pos, c - 1)
                    if c <= pos:
                        break
                    if tries >= _MAX_FALSE_CUTS:
                        raise TraceFormatError(spath, "is not valid JSON inside 'traceEvents'; expected a PyTorch profiler trace")
                    loc = batches.decode_view(buf, pos, c)
            if c <= pos:
                if more():
                    continue
                # The last events: up to the array's closing ']'.
                rest = batches.flush() + bytes(buf[pos:])
                end = _close(rest, batches.decode_now)
                if end < 0:
                    raise TraceFormatError(spath, "the JSON is truncated or malformed inside 'traceEvents'; was the trace fully written?")
                loc = batches.decode_now(rest[:end])
                assert loc is not None
                cols.merge(loc)
                buf = bytearray(rest[end + 1 :])
                pos = 0
                break
            j = _skip_ws(buf, c)  # at the ','
            nxt = _skip_ws(buf, j + 1)
            if batches.pool is not None and plain:
                batches.submit_at(buf_off + pos, c - pos, bytes(buf[c:nxt]))
            elif batches.pool is not None:
                with memoryview(buf) as mv:
                    batches.submit(b"".join((b"[", mv[pos:c], b"]")), bytes(mv[c:nxt]))
            else:
                assert loc is not None
                cols.merge(loc)
            del buf[:nxt]
            buf_off += nxt
            pos = 0
        batches.flush()
    finally:
        batches.close()
    # -- tail: the rest of the object ----------------------------------------------------------
    while more():
        pass
    rest_b = bytes(buf[pos:]).strip()
    if doc is not None:
        rest_b = rest_b[1:].lstrip() if rest_b.startswith(b",") else rest_b
        if rest_b and rest_b != b"}":
            doc = _merge(doc, _decode_head(b"{" + rest_b, spath, exact))
        elif not rest_b:
            raise TraceFormatError(spath, "the JSON is truncated (no closing '}'); was the trace fully written?")
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        timeline = cols.finish(doc)
    finally:
        if gc_was_enabled:
            gc.enable()
    return timeline, bytes(first), b"".join(recent)[-_MIB:]


def _close(text: bytes, decode_now: Any) -> int:
    """Position of the ']' closing the events array in ``text`` (all the remaining text).

    Tried from the right: a longer prefix leaves trailing text and a shorter one is unbalanced,
    so the first that decodes is the array's end; only the few ']' of the tail are tried.
    """
    hi = len(text)
    while True:
        q = text.rfind(b"]", 0, hi)
        if q < 0:
            return -1
        if decode_now(text[:q]) is not None:
            return q
        hi = q


# Worker processes for decoding chunks: None picks min(cores, 4) for large traces; callers that
# already run one trace per core (whyidle.ranks) set it to 1.
DEFAULT_JOBS: int | None = None


def _auto_jobs(p: Path) -> int:
    if DEFAULT_JOBS is not None:
        return max(DEFAULT_JOBS, 1)
    try:
        big = estimated_size(p) >= _PARALLEL_MIN_BYTES
    except OSError:
        big = False
    return min(os.cpu_count() or 1, 4) if big else 1


def parse_kineto_stream(path: str | os.PathLike[str], jobs: int | None = None, progress: Progress | None = None) -> Timeline:
    """Read a Kineto trace (plain or gzip) in bounded memory; same Timeline as parse_kineto.

    ``jobs``: processes decoding chunks (default: :data:`DEFAULT_JOBS`, or by size).
    ``progress(bytes_read, file_size)`` is called as the file is read.
    """
    p = Path(path)
    jobs = _auto_jobs(p) if jobs is None else max(jobs, 1)
    # Decide from the first MiB, as the in-memory reader would with the first and last MiB.
    gen = _blocks(p)
    try:
        head = next(gen)
    finally:
        gen.close()
    texts, big = _samples(head[:_MIB])
    style = _fraction_style(texts)
    exact = big or style == "unpadded_ns"
    tl, first, last = _run(p, style, exact, jobs, progress)
    texts2, big2 = _samples(first)
    if len(first) >= _MIB and last:
        t_last, b_last = _samples(last)
        texts2 += t_last
        big2 = big2 or b_last
    style2 = _fraction_style(texts2)
    exact2 = big2 or style2 == "unpadded_ns"
    if (style2, exact2) != (style, exact):
        tl, _, _ = _run(p, style2, exact2, jobs, progress)
    assert tl is not None
    return tl


def load_kineto_stream(path: Path) -> Timeline:
    return parse_kineto_stream(path)
