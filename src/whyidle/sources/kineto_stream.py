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
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from whyidle.errors import InputError, TraceFormatError
from whyidle.sources._io import GZIP_MAGIC, bomb_error, check_regular, estimated_size, gzip_cap
from whyidle.sources.kineto import (
    _EXACT_DECODER,
    _EXACT_FLOAT_US,
    _FLOAT_TIME_RE,
    NESTED_TOO_DEEP,
    _Doc,
    _fraction_style,
    looks_like_kineto,
    no_events_error,
)
from whyidle.sources.kineto_batches import _Batches, _close
from whyidle.sources.kineto_cuts import cut, find_cut, merge_top_level, skip_ws
from whyidle.sources.rocprof_schema import looks_like_rocprof
from whyidle.sources.kineto_columns import _Columns, _Local
from whyidle.timeline.model import Timeline

if TYPE_CHECKING:
    from whyidle.config import ReadSettings

__all__ = ["load_kineto_stream", "parse_kineto_stream", "should_stream"]

_BLOCK = 8 << 20  # bytes of plain text read per step
_GZ_READ = 1 << 20  # compressed bytes read per step (JSON traces inflate 10-30x)
_GZ_OUT = 64 << 20  # decompressed bytes produced per step at most (a bomb inflates 1000x)
_PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
_MAX_FALSE_CUTS = 64  # candidate cuts tried per batch before the text is called malformed
_BATCH = 16 << 20  # text per decoded batch of events
_WINDOW = 64 << 10  # plain file, workers decoding: text read past a batch's first _BATCH bytes to cut it
_MIB = 1 << 20


def should_stream(path: Path, min_bytes: int | None = None, settings: ReadSettings | None = None) -> bool:
    """Whether ``path`` is large enough for the out-of-core reader (``min_bytes``, else the
    settings' ``stream_min_bytes``; None: the defaults)."""
    rs = _settings(settings)
    if min_bytes is None:
        min_bytes = rs.stream_min_bytes
    try:
        if not path.is_file() or estimated_size(path) < min_bytes:
            return False
        gen = _blocks(path, None, rs)
        try:
            head = next(gen, b"")
        finally:
            gen.close()
    except (OSError, TraceFormatError):
        return False  # the in-memory reader reports the problem in words
    return looks_like_kineto(head[:64]) and not looks_like_rocprof(head[:256])  # other large inputs go to their own readers


Progress = Callable[[int, int], None]  # (file bytes read, file size)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _settings(settings: ReadSettings | None) -> ReadSettings:
    from whyidle.config import ReadSettings

    return ReadSettings() if settings is None else settings


def _blocks(path: Path, progress: Progress | None, settings: ReadSettings, start: int = 0) -> Generator[bytes, None, None]:
    """The decompressed content, block by block (gzip members one after another), gzip within
    the settings' limits; a plain file's from byte ``start``."""
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
            if start:
                f.seek(start)
            else:
                yield first
            while blk := f.read(_BLOCK):
                tell()
                yield blk
            return
        d = zlib.decompressobj(wbits=31)
        data = first
        cap = gzip_cap(size, settings)  # a gzip bomb stops here, whatever the reader downstream holds
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


class _Text:
    """The decompressed text as it arrives: a buffer of what is not yet decoded, and the first
    and last MiB seen (to confirm the time style)."""

    def __init__(self, path: Path, progress: Progress | None, settings: ReadSettings) -> None:
        self.path = str(path)
        self.progress = progress
        self.settings = settings
        self.blocks = _blocks(path, progress, settings)
        self.buf = bytearray()
        self.buf_off = 0  # file offset of buf[0] (plain files)
        self.first = b""
        self.recent: list[bytes] = []  # the last blocks, at least 1 MiB together (no copies)
        self.eof = False
        self.max_held = settings.max_event_bytes

    def more(self) -> bool:
        """Append the next block to the buffer; False at the end."""
        if self.eof:
            return False
        try:
            blk = next(self.blocks)
        except StopIteration:
            self.eof = True
            return False
        if len(self.first) < _MIB:
            self.first += blk[: _MIB - len(self.first)]
        self.recent.append(blk)
        while len(self.recent) > 1 and sum(map(len, self.recent[1:])) >= _MIB:
            self.recent.pop(0)
        self.buf.extend(blk)
        return True

    def too_big(self, what: str) -> TraceFormatError:
        return TraceFormatError(
            self.path, f"has {what} larger than {_size(self.max_held)} (ReadSettings.max_event_bytes); expected a PyTorch profiler trace (its events are under 1 MiB each)"
        )

    def drop(self, n: int) -> None:
        """Forget the first ``n`` bytes of the buffer."""
        del self.buf[:n]
        self.buf_off += n

    def jump(self, offset: int, size: int) -> None:
        """A plain file: forget the buffer and go on reading at byte ``offset``, the text before
        it being taken care of (by a worker, see :func:`_cut_ahead`)."""
        self.blocks.close()
        self.blocks = _blocks(Path(self.path), self.progress, self.settings, offset)
        self.buf = bytearray()
        self.buf_off = offset
        if self.progress is not None:
            self.progress(offset, size)


def _head(t: _Text, exact: bool) -> tuple[_Doc | None, int]:
    """The fields before the events (None for a bare list), and the position after its '['."""
    t.more()
    buf, spath = t.buf, t.path
    start = skip_ws(buf, 0)
    while start >= len(buf) and t.more():
        if len(buf) > t.max_held:
            raise t.too_big("blank space before its JSON")
        start = skip_ws(buf, 0)
    if start >= len(buf) or buf[start] not in b"{[":
        raise TraceFormatError(spath, "is not valid JSON; expected a PyTorch profiler trace")
    if buf[start] == 0x5B:  # '[': a bare list of events
        return None, start + 1
    key = b'"traceEvents"'
    while True:
        k = buf.find(key)
        if k >= 0:
            j = skip_ws(buf, k + len(key))
            while j >= len(buf) - 1 and t.more():
                j = skip_ws(buf, k + len(key))
            if j < len(buf) and buf[j] == 0x3A:  # ':'
                j = skip_ws(buf, j + 1)
                while j >= len(buf) and t.more():
                    j = skip_ws(buf, j)
                if j < len(buf) and buf[j] == 0x5B:
                    break
            raise TraceFormatError(spath, "has a 'traceEvents' field that is not a list; expected a PyTorch profiler trace")
        if not t.more():
            raise no_events_error(spath, t.first)
        if len(buf) > t.max_held:
            raise t.too_big("the JSON before its 'traceEvents' list")
    head = bytes(buf[start:k]).rstrip()
    head = head[:-1] if head.endswith(b",") else head
    return _decode_head(head + b"}", spath, exact), j + 1


def _serial_cut(t: _Text, batches: _Batches, pos: int) -> tuple[int, _Local | None]:
    """In one process: the last cut in the buffer that decodes, and its columns ((pos, None): none)."""
    c = cut(t.buf, pos, len(t.buf))
    loc = None
    if c > pos:
        loc = batches.decode_view(t.buf, pos, c)
        tries = 0
        while loc is None:  # a wrong cut: try the one before it
            tries += 1
            c = cut(t.buf, pos, c - 1)
            if c <= pos:
                break
            if tries >= _MAX_FALSE_CUTS:
                raise TraceFormatError(t.path, "is not valid JSON inside 'traceEvents'; expected a PyTorch profiler trace")
            loc = batches.decode_view(t.buf, pos, c)
    return c, loc


def _last_events(t: _Text, batches: _Batches, cols: _Columns, pos: int) -> None:
    """The events up to the array's closing ']', with the text carried over; the buffer then
    holds what follows the ']'."""
    rest = batches.flush() + bytes(t.buf[pos:])
    end = _close(rest, batches.decode_now)
    if end < 0:
        raise TraceFormatError(t.path, "the JSON is truncated or malformed inside 'traceEvents'; was the trace fully written?")
    loc = batches.decode_now(rest[:end])
    assert loc is not None
    cols.merge(loc)
    t.buf = bytearray(rest[end + 1 :])


def _read_window(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _cut_ahead(t: _Text, batches: _Batches, offset: int, size: int) -> int | None:
    """A plain file whose batches the workers read themselves: cut the batch that starts at file
    byte ``offset`` from a window past its first ``_BATCH`` bytes, without reading the batch here,
    and submit it; the file offset of the next event (None: read on the usual way instead).

    Only a strict candidate (``find_cut``) in the window is taken, and never near the end of the
    file, where the array's closing ']' and the fields after it are: anything else (a window
    without a candidate, white space running past it) is left to the buffered path, which
    reads the text and owns every error. A wrong candidate (inside an event's ``args``) is
    joined with the next batch by :class:`_Batches`, as on the buffered path."""
    start = offset + _BATCH
    if start + _WINDOW + _BATCH > size:
        return None
    win = _read_window(t.path, start, _WINDOW)
    c = find_cut(win, 0, len(win), True)
    if c < 0:
        return None
    j = skip_ws(win, c)  # at the ','
    nxt = skip_ws(win, j + 1)  # at the '{' (find_cut checked it is in the window)
    batches.submit_at(offset, start + c - offset, win[c:nxt])
    return start + nxt


def _events(t: _Text, batches: _Batches, cols: _Columns, pos: int, plain: bool, size: int) -> int:
    """Decode every event from ``pos``; returns the position after the array in the buffer."""
    ahead = plain and batches.pool is not None
    while True:
        pos = skip_ws(t.buf, pos)
        if pos > _BATCH:  # blank space between events: drop it, never hold it
            t.drop(pos)
            pos = 0
        if pos < len(t.buf) and t.buf[pos] == 0x5D and not batches.carry and not batches.pending:  # ']'
            return pos + 1
        if len(t.buf) - pos < _BATCH:
            # Cut ahead only from an event's start: ``pos`` inside the buffer (past the blank
            # space), or an empty buffer after a jump (which lands on the '{' that find_cut saw).
            if ahead and (pos < len(t.buf) or not t.buf) and (nxt := _cut_ahead(t, batches, t.buf_off + pos, size)) is not None:
                t.jump(nxt, size)
                pos = 0
                continue
            if t.more():
                continue
        c, loc = _serial_cut(t, batches, pos) if batches.pool is None else (cut(t.buf, pos, len(t.buf)), None)
        if c <= pos:
            if len(t.buf) - pos > t.max_held + _BATCH:
                raise t.too_big("an event")
            if t.more():
                continue
            _last_events(t, batches, cols, pos)
            return 0
        buf = t.buf
        j = skip_ws(buf, c)  # at the ','
        nxt = skip_ws(buf, j + 1)
        if batches.pool is not None and plain:
            batches.submit_at(t.buf_off + pos, c - pos, bytes(buf[c:nxt]))
        elif batches.pool is not None:
            with memoryview(buf) as mv:
                batches.submit(b"".join((b"[", mv[pos:c], b"]")), bytes(mv[c:nxt]))
        else:
            assert loc is not None
            cols.merge(loc)
        t.drop(nxt)
        pos = 0


def _tail(t: _Text, doc: _Doc | None, pos: int, exact: bool) -> _Doc | None:
    """The fields after the events (Kineto writes most of them there), merged into ``doc``."""
    while t.more():
        if len(t.buf) - pos > t.max_held:
            raise t.too_big("the JSON after its 'traceEvents' list")
    rest_b = bytes(t.buf[pos:]).strip()
    if doc is None and rest_b:  # as the in-memory decoder: nothing may follow the JSON
        raise TraceFormatError(t.path, "is not valid JSON (text after the end of its event list); expected a PyTorch profiler trace")
    if doc is not None:
        rest_b = rest_b[1:].lstrip() if rest_b.startswith(b",") else rest_b
        if rest_b and rest_b != b"}":
            doc = merge_top_level(doc, _decode_head(b"{" + rest_b, t.path, exact))
        elif not rest_b:
            raise TraceFormatError(t.path, "the JSON is truncated (no closing '}'); was the trace fully written?")
    return doc


def _run(path: Path, style: str, exact: bool, settings: ReadSettings, jobs: int = 1, progress: Progress | None = None) -> tuple[Timeline | None, bytes, bytes]:
    """One pass: the Timeline, and the first and last MiB of text (to confirm the time style)."""
    with open(path, "rb") as f:
        plain = f.read(2) != GZIP_MAGIC  # workers then read their batches from the file
        size = os.fstat(f.fileno()).st_size
    # Memory grows with the events kept (about 60 bytes each): for gzip, their number is bounded
    # by the compressed size, as the inflated text is by max_gzip_ratio.
    cols = _Columns(str(path), style, None if plain else int(settings.max_events_per_gzip_byte * size) + 100_000)
    t = _Text(path, progress, settings)
    doc, pos = _head(t, exact)
    batches = _Batches(cols, exact, jobs)
    try:
        pos = _events(t, batches, cols, pos, plain, size)
        batches.flush()
    finally:
        batches.close()
    doc = _tail(t, doc, pos, exact)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        timeline = cols.finish(doc)
    finally:
        if gc_was_enabled:
            gc.enable()
    _give_back_freed_memory()
    last = _read_window(str(path), max(size - _MIB, 0), _MIB) if plain else b"".join(t.recent)[-_MIB:]
    return timeline, bytes(t.first), last


def _give_back_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; elsewhere nothing).

    The batches' columns and the sort's copies, freed by now, are held as free heap in pieces
    that the analyses' larger arrays do not fit into, so without this the process keeps them and
    grows past them (a 2 GB trace: 557 -> 387 MB resident after reading, and the diagnosis's peak
    834 -> 671 MB)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _auto_jobs(p: Path) -> int:
    """Worker processes for decoding chunks when the caller does not say: min(cores, 4) for
    large traces, else 1."""
    try:
        big = estimated_size(p) >= _PARALLEL_MIN_BYTES
    except OSError:
        big = False
    return min(os.cpu_count() or 1, 4) if big else 1


def parse_kineto_stream(path: str | os.PathLike[str], jobs: int | None = None, progress: Progress | None = None, settings: ReadSettings | None = None) -> Timeline:
    """Read a Kineto trace (plain or gzip) in bounded memory; same Timeline as parse_kineto.

    ``jobs``: processes decoding chunks (default: by size; callers that read one trace per
    core, such as :mod:`whyidle.ranks`, pass 1).
    ``progress(bytes_read, file_size)`` is called as the file is read.
    ``settings``: the reading settings (a Config's ``read``) whose hostile-input limits apply:
    ``max_gzip_ratio``, ``gzip_ratio_floor_bytes``, ``max_event_bytes``, ``max_events_per_gzip_byte``.
    """
    p = Path(path)
    rs = _settings(settings)
    jobs = _auto_jobs(p) if jobs is None else max(jobs, 1)
    # Decide from the first MiB, as the in-memory reader would with the first and last MiB.
    gen = _blocks(p, None, rs)
    try:
        head = next(gen)
    finally:
        gen.close()
    texts, big = _samples(head[:_MIB])
    style = _fraction_style(texts)
    exact = big or style == "unpadded_ns"
    tl, first, last = _run(p, style, exact, rs, jobs, progress)
    texts2, big2 = _samples(first)
    if len(first) >= _MIB and last:
        t_last, b_last = _samples(last)
        texts2 += t_last
        big2 = big2 or b_last
    style2 = _fraction_style(texts2)
    exact2 = big2 or style2 == "unpadded_ns"
    if (style2, exact2) != (style, exact):
        tl, _, _ = _run(p, style2, exact2, rs, jobs, progress)
    assert tl is not None
    return tl


def load_kineto_stream(path: Path, jobs: int | None = None, settings: ReadSettings | None = None) -> Timeline:
    return parse_kineto_stream(path, jobs=jobs, settings=settings)
