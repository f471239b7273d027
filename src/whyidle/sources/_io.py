"""Reading input bytes: plain or gzip, with errors that name the file and the problem."""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

from whyidle.errors import InputError, TraceFormatError

__all__ = ["read_bytes", "prefetch", "discard", "estimated_size", "looks_like_kineto", "GZIP_MAGIC", "SQLITE_MAGIC"]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def _gunzip(path: Path, raw: bytes) -> bytes:
    # The gzip trailer holds the uncompressed size (mod 4 GiB). Decompressing into a buffer of
    # that size avoids growing, and briefly doubling, a buffer as large as the trace.
    size_hint = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if size_hint > 1032 * len(raw):  # deflate cannot expand more: a truncated file's garbage tail
        size_hint = 0
    if size_hint:
        try:
            whole = zlib.decompress(raw, 31, size_hint)
            if len(whole) % (1 << 32) == size_hint:
                return whole
        except zlib.error:
            pass  # truncated, corrupt or several members: the careful path below says which
    out: list[bytes] = []
    data = raw
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
        except zlib.error as exc:
            raise TraceFormatError(path, f"the gzip stream is corrupt ({exc})") from None
        if not d.eof:
            raise TraceFormatError(path, "the gzip stream is truncated (the file ends before the compressed data does)")
        data = d.unused_data
        if data and not data.startswith(GZIP_MAGIC):
            break  # trailing garbage after the last member, as gzip(1) tolerates
    return out[0] if len(out) == 1 else b"".join(out)


def looks_like_kineto(head: bytes) -> bool:
    """Whether decompressed text starts as JSON does (a Chrome/Kineto trace is an object or list)."""
    h = head.lstrip()
    return h.startswith(b"{") or h.startswith(b"[")


def estimated_size(path: Path) -> int:
    """Uncompressed size: the file size, or for gzip the larger of its size field and 5x."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return size
        f.seek(max(size - 4, 0))
        isize = int.from_bytes(f.read(4), "little")  # modulo 4 GiB
    return max(isize, 5 * size)


class _Pending:
    """One file being read (and gunzipped) by a background thread."""

    def __init__(self, path: Path, stamp: tuple[int, int]) -> None:
        self.stamp = stamp
        self.data: bytes | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(path,), name="whyidle-prefetch", daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        try:
            self.data = _read(path)
        except BaseException as exc:  # handed to the reader, which raises it as its own
            self.error = exc


_PENDING: dict[Path, _Pending] = {}
_PENDING_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def prefetch(path: str | os.PathLike[str], max_bytes: int) -> None:
    """Start reading ``path`` in a background thread; :func:`read_bytes` then takes the result.

    The command line calls this before it imports numpy and the analyses: reading and
    decompressing (zlib releases the GIL) then overlap the imports on a second core. Only plain
    files whose decompressed size is estimated under ``max_bytes`` (the in-memory reader's
    range) are read ahead; anything else, and any error, is left to the reader.
    """
    p = Path(path)
    stamp = _stamp(p)
    try:
        if stamp is None or not p.is_file() or estimated_size(p) >= max_bytes:
            return
        with open(p, "rb") as f:
            head = f.read(64)
    except OSError:
        return
    if not (head.startswith(GZIP_MAGIC) or looks_like_kineto(head)):
        return  # not JSON (an Nsight export, Parquet, a counter log): its reader reads it its way
    with _PENDING_LOCK:
        if p not in _PENDING:
            _PENDING[p] = _Pending(p, stamp)


def _take(path: Path) -> _Pending | None:
    """The finished read-ahead of ``path``, no longer listed; None if there was none."""
    with _PENDING_LOCK:
        pending = _PENDING.pop(path, None)
    if pending is not None:
        pending.thread.join()
    return pending


def discard(path: Path) -> None:
    """Forget a read-ahead of ``path`` that no reader took (the input went another way)."""
    _take(path)


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed if it is gzip (taken from :func:`prefetch` if it ran)."""
    pending = _take(path)
    if pending is not None and pending.stamp == _stamp(path):  # unchanged since the read began
        if pending.error is not None:
            raise pending.error
        assert pending.data is not None
        return pending.data
    return _read(path)


def _read(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, expected a file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not raw:
        raise TraceFormatError(path, "the file is empty; expected a profiler trace")
    if raw.startswith(GZIP_MAGIC):
        raw = _gunzip(path, raw)
        if not raw:
            raise TraceFormatError(path, "the gzip file decompresses to nothing; expected a profiler trace")
    return raw
