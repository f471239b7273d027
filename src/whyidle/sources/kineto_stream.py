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
from collections import deque
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import msgspec

from whyidle.errors import InputError, TraceFormatError
from whyidle.sources._io import GZIP_MAGIC, bomb_error, check_regular, estimated_size, gzip_cap
from whyidle.sources.kineto import (
    _BATCH_DECODER,
    _EXACT_BATCH_DECODER,
    _EXACT_DECODER,
    _EXACT_FLOAT_US,
    _FLOAT_TIME_RE,
    NESTED_TOO_DEEP,
    _Doc,
    _fraction_style,
    looks_like_kineto,
)
from whyidle.sources.kineto_columns import _Columns, _Local, _local_columns
from whyidle.timeline.model import Timeline

__all__ = ["load_kineto_stream", "parse_kineto_stream", "should_stream"]

_BLOCK = 8 << 20  # bytes of plain text read per step
_GZ_READ = 1 << 20  # compressed bytes read per step (JSON traces inflate 10-30x)
_GZ_OUT = 64 << 20  # decompressed bytes produced per step at most (a bomb inflates 1000x)
_PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
_MAX_FALSE_CUTS = 64  # candidate cuts tried per batch before the text is called malformed
_BATCH = 16 << 20  # text per decoded batch of events
_MIB = 1 << 20
_WS = b" \t\r\n"


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
    check_regular(path)
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
        cap = gzip_cap(size)  # a gzip bomb stops here, whatever the reader downstream holds
        total = 0
        while True:
            try:
                out = d.decompress(data, _GZ_OUT)
            except zlib.error as exc:
                raise TraceFormatError(path, f"the gzip stream is corrupt ({exc})") from None
            data = d.unconsumed_tail
            total += len(out)
            if total > cap:
                raise bomb_error(path, size, cap)
            if out:
                tell()
                yield out
            if data and not d.eof:
                continue  # more output from the input already read
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
                if len(out) == _GZ_OUT:
                    continue  # the output limit was hit as the input ran out: zlib still holds output
                raise TraceFormatError(path, "the gzip stream is truncated (the file ends before the compressed data does)")


def _samples(part: bytes) -> tuple[list[str], bool]:
    texts: list[str] = []
    big = False
    for whole, frac in _FLOAT_TIME_RE.findall(part):
        texts.append("0." + frac.decode())
        if len(whole) > 12 and int(whole) >= _EXACT_FLOAT_US:
            big = True
    return texts, big


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
        except RecursionError:
            return NESTED_TOO_DEEP
        try:
            return _local_columns(events, style, path)
        except TraceFormatError as exc:
            return str(exc.args[0]) if exc.args else "has an event that cannot be read"
    finally:
        gc.enable()


def _decode_head(text: bytes, path: str, exact: bool) -> _Doc:
    try:
        doc = _EXACT_DECODER.decode(text)  # floats as text, as the in-memory reader's top level
    except RecursionError:
        raise TraceFormatError(path, NESTED_TOO_DEEP) from None
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

            from whyidle.sources._twoway import quiet_worker

            self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=quiet_worker)

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
    from whyidle.config import Config

    spath = str(path)
    with open(path, "rb") as f:
        plain = f.read(2) != GZIP_MAGIC  # workers then read their batches from the file
        size = os.fstat(f.fileno()).st_size
    # Memory grows with the events kept (about 60 bytes each): for gzip, their number is bounded
    # by the compressed size, as the inflated text is by max_gzip_ratio.
    cols = _Columns(spath, style, None if plain else int(Config.max_events_per_gzip_byte * size) + 100_000)
    blocks = _blocks(path, progress)
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

    max_held = Config.max_event_bytes

    def too_big(what: str) -> TraceFormatError:
        return TraceFormatError(spath, f"has {what} larger than {max_held >> 20} MiB; expected a PyTorch profiler trace (its events are under 1 MiB each)")

    # -- head: up to the '[' of traceEvents (or of a bare list) -------------------------------
    more()
    doc: _Doc | None = None
    start = _skip_ws(buf, 0)
    while start >= len(buf) and more():
        if len(buf) > max_held:
            raise too_big("blank space before its JSON")
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
            if len(buf) > max_held:
                raise too_big("the JSON before its 'traceEvents' list")
        head = bytes(buf[start:k]).rstrip()
        head = head[:-1] if head.endswith(b",") else head
        doc = _decode_head(head + b"}", spath, exact)
        pos = j + 1
    batches = _Batches(cols, exact, jobs)
    try:
        # -- events ---------------------------------------------------------------------------
        while True:
            pos = _skip_ws(buf, pos)
            if pos > _BATCH:  # blank space between events: drop it, never hold it
                del buf[:pos]
                buf_off += pos
                pos = 0
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
                if len(buf) - pos > max_held + _BATCH:
                    raise too_big("an event")
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
        if len(buf) - pos > max_held:
            raise too_big("the JSON after its 'traceEvents' list")
    rest_b = bytes(buf[pos:]).strip()
    if doc is None and rest_b:  # as the in-memory decoder: nothing may follow the JSON
        raise TraceFormatError(spath, "is not valid JSON (text after the end of its event list); expected a PyTorch profiler trace")
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


def _auto_jobs(p: Path) -> int:
    """Worker processes for decoding chunks when the caller does not say: min(cores, 4) for
    large traces, else 1."""
    try:
        big = estimated_size(p) >= _PARALLEL_MIN_BYTES
    except OSError:
        big = False
    return min(os.cpu_count() or 1, 4) if big else 1


def parse_kineto_stream(path: str | os.PathLike[str], jobs: int | None = None, progress: Progress | None = None) -> Timeline:
    """Read a Kineto trace (plain or gzip) in bounded memory; same Timeline as parse_kineto.

    ``jobs``: processes decoding chunks (default: by size; callers that read one trace per
    core, such as :mod:`whyidle.ranks`, pass 1).
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


def load_kineto_stream(path: Path, jobs: int | None = None) -> Timeline:
    return parse_kineto_stream(path, jobs=jobs)
