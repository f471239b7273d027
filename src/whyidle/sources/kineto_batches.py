"""The out-of-core Kineto reader's batches: where to cut the event array, and decoding the pieces.

See :mod:`whyidle.sources.kineto_cuts` for how a cut is found and proved (a batch that decodes as
a JSON list of whole events). :class:`_Batches` decodes them in order, in this process or in a pool of
worker processes; :func:`_decode_local` runs in the workers.
"""

from __future__ import annotations

import gc
import re
from collections import deque
from typing import Any

from whyidle.errors import TraceFormatError
from whyidle.sources.kineto import BAD_CUT, batch_columns_or_why
from whyidle.sources.kineto_columns import _Columns, _Local


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
    """Decode one batch ``[...]`` into columns with the collector off (runs in worker processes
    too): :func:`whyidle.sources.kineto.batch_columns_or_why`."""
    gc.disable()
    try:
        return batch_columns_or_why(text, exact, style, path)
    finally:
        gc.enable()


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

            from whyidle.parallel import quiet_worker

            self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=quiet_worker)

    def _check(self, res: _Local | str) -> _Local | None:
        if isinstance(res, str):
            if res == BAD_CUT:
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


# A JSON string (escapes included), or one byte that opens or closes a structure; a '"' alone is
# a string that never ends.
_RIGHT_TRIES = 8  # ']' tried from the right before the scan: a tail's lists (deviceProperties) hold a few
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\[\]{}]', re.S)


def _close(text: bytes, decode_now: Any) -> int:
    """Position of the ']' closing the events array in ``text`` (all the remaining text), -1 if
    the text has none.

    The few ']' of a trace's tail are tried from the right (a longer prefix leaves trailing text,
    a shorter one is unbalanced, so the first that decodes is the array's end). Past
    ``_RIGHT_TRIES`` of them, one scan that skips strings and counts nesting finds the first ']'
    outside every event, and one decode proves it: trying every ']' decoded a copy of the prefix
    per ']', and a 2 MB trace ending in a million of them took over 30 s.
    """
    hi = len(text)
    for _ in range(_RIGHT_TRIES):
        q = text.rfind(b"]", 0, hi)
        if q < 0:
            return -1
        if decode_now(text[:q]) is not None:
            return q
        hi = q
    depth = 0
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == 0x22:  # '"': a string, skipped; alone, a string that never ends
            if m.end() - m.start() == 1:
                return -1
        elif c in b"[{":
            depth += 1
        elif depth:
            depth -= 1
        elif c == 0x5D:  # ']' outside every event: the array's end, if the events before it decode
            return m.start() if decode_now(text[: m.start()]) is not None else -1
        else:
            return -1  # a '}' closing nothing
    return -1
