"""Reading input bytes: plain or gzip, with errors that name the file and the problem."""

from __future__ import annotations

import importlib
import os
import stat
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from whyidle.errors import InputError, TraceFormatError

if TYPE_CHECKING:
    from whyidle.config import ReadSettings

__all__ = ["read_bytes", "ReadAhead", "check_regular", "gzip_cap", "TooLargeForMemory", "estimated_size", "looks_like_kineto", "GZIP_MAGIC", "SQLITE_MAGIC"]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def gzip_cap(compressed_bytes: int, settings: ReadSettings | None = None) -> int:
    """The most bytes a gzip file of ``compressed_bytes`` may decompress to: the settings'
    ``max_gzip_ratio`` times its size, or ``gzip_ratio_floor_bytes`` if more (None: the defaults)."""
    ratio, floor = _gzip_limits(settings)
    return max(floor, int(ratio * compressed_bytes))


def _gzip_limits(settings: ReadSettings | None) -> tuple[float, int]:
    """The settings' gzip limits (None: the defaults'), to tell whether two reads used the same."""
    if settings is None:
        from whyidle.config import ReadSettings

        settings = ReadSettings()
    return (settings.max_gzip_ratio, settings.gzip_ratio_floor_bytes)


def bomb_error(path: Path, compressed_bytes: int, cap: int) -> TraceFormatError:
    return TraceFormatError(
        path,
        f"decompresses to more than {cap >> 20} MiB from {compressed_bytes / (1 << 20):.1f} MiB (over "
        f"{cap / max(compressed_bytes, 1):.0f}x; real traces inflate under 30x): a damaged file or a gzip bomb, not read further "
        "(ReadSettings.max_gzip_ratio, gzip_ratio_floor_bytes)",
    )


class TooLargeForMemory(InputError):
    """The decompressed content is larger than the in-memory reader's range (``max_bytes``)."""


# A gzip file under this size cannot decompress past 4 GiB (deflate's limit is 1032:1), so its
# size field (the uncompressed size modulo 4 GiB) is the exact size.
_EXACT_ISIZE_MAX = (1 << 32) // 1032


def _gunzip(path: Path, raw: bytes, max_bytes: int | None = None, settings: ReadSettings | None = None) -> bytes:
    cap = gzip_cap(len(raw), settings)
    limit = cap if max_bytes is None else min(cap, max_bytes)
    # The gzip trailer holds the uncompressed size (mod 4 GiB). Where that is exact, decompressing
    # into a buffer of that size avoids growing, and briefly doubling, a buffer as large as the trace.
    # The size field is the last member's: trusted only when no second member can start inside
    # (no gzip header after the first; a false match in compressed bytes just takes the careful path).
    size_hint = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    one_member = raw.find(GZIP_MAGIC + b"\x08", 10) < 0
    if size_hint and one_member and len(raw) <= _EXACT_ISIZE_MAX and size_hint <= limit:
        try:
            whole = zlib.decompress(raw, 31, size_hint)
            if len(whole) == size_hint:
                return whole
        except zlib.error:
            pass  # truncated, corrupt or several members: the careful path below says which
    out: list[bytes] = []
    total = 0
    data = raw
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(data, limit - total + 1)
        except zlib.error as exc:
            raise TraceFormatError(path, f"the gzip stream is corrupt ({exc})") from None
        total += len(chunk)
        out.append(chunk)
        if total > limit:
            out.clear()  # not held while the caller reads the file another way
            if limit < cap:
                raise TooLargeForMemory(path, f"decompresses to more than {limit} bytes")
            raise bomb_error(path, len(raw), cap)
        if not d.eof:
            raise TraceFormatError(path, "the gzip stream is truncated (the file ends before the compressed data does)")
        data = d.unused_data
        if data and not data.startswith(GZIP_MAGIC):
            break  # trailing garbage after the last member, as gzip(1) tolerates
    return out[0] if len(out) == 1 else b"".join(out)


def check_regular(path: Path) -> None:
    """Refuse what is not a regular file (a FIFO, a device such as /dev/zero, a socket): it may
    never end, block forever, or be consumed by reading; whyidle reads files."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a folder, expected a file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
        raise InputError(path, f"is {kind}, not a regular file; whyidle reads files (save the stream to a file first)")


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

    def __init__(self, path: Path, stamp: tuple[int, int], max_bytes: int, settings: ReadSettings | None) -> None:
        self.stamp = stamp
        self.settings = settings  # the gzip limits it read under: a reader with others reads again
        self.data: bytes | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(path, max_bytes), name="whyidle-prefetch", daemon=True)
        self.thread.start()

    def _run(self, path: Path, max_bytes: int) -> None:
        try:
            self.data = _read(path, max_bytes, settings=self.settings)
        except BaseException as exc:  # handed to the reader, which raises it as its own
            self.error = exc.with_traceback(None)  # its frames would hold what was read so far


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class ReadAhead:
    """Files being read in background threads, handed to :func:`read_bytes` when it asks.

    The command line starts one before it imports numpy and the analyses: reading and
    decompressing (zlib releases the GIL) then overlap the imports on a second core. It is passed
    explicitly (``sources.read(path, read_ahead=...)``); nothing is kept at module level. Use it as a
    context manager, or call :meth:`close`, so that no thread is left holding a file's bytes.

    ``imports``: modules the caller needs next (the analyses). :func:`whyidle.sources.load`
    imports them while a forked child plans and decodes the trace (``jobs=2``), when it forks one.
    """

    def __init__(self, imports: tuple[str, ...] = ()) -> None:
        self._pending: dict[Path, _Pending] = {}
        self._lock = threading.Lock()
        self._imports = imports

    def import_now(self) -> None:
        """Import the modules named at construction (once)."""
        names, self._imports = self._imports, ()
        for name in names:
            importlib.import_module(name)

    def start(self, path: str | os.PathLike[str], max_bytes: int, settings: ReadSettings | None = None) -> None:
        """Start reading ``path``: only regular files whose decompressed size is estimated under
        ``max_bytes`` (the in-memory reader's range) and that look like JSON or gzip are read
        ahead, gzip within ``settings``' limits (the reader's own: a read made under other limits
        is not handed to it); anything else, and any error, is left to the reader."""
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
        with self._lock:
            if p not in self._pending:
                self._pending[p] = _Pending(p, stamp, max_bytes, settings)

    def take(self, path: Path) -> _Pending | None:
        """The finished read-ahead of ``path``, no longer listed; None if there was none."""
        with self._lock:
            pending = self._pending.pop(path, None)
        if pending is not None:
            pending.thread.join()
        return pending

    def discard(self, path: Path) -> None:
        """Forget a read-ahead of ``path`` that no reader took (the input went another way)."""
        self.take(path)

    def pending(self) -> list[Path]:
        with self._lock:
            return list(self._pending)

    def close(self) -> None:
        for p in self.pending():
            self.take(p)

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_bytes(
    path: Path, read_ahead: ReadAhead | None = None, max_bytes: int | None = None, expected: str = "a profiler trace", *, settings: ReadSettings | None = None
) -> bytes:
    """The file's content, decompressed if it is gzip (taken from ``read_ahead`` if it read it
    under the same ``settings``).

    Every input file goes through here: only a regular file is opened (a FIFO, ``/dev/stdin`` or
    ``/dev/zero`` is refused before reading), and gzip is inflated no further than
    :func:`gzip_cap` of ``settings`` (a Config's ``read``; None: the defaults). ``expected`` names
    what the file should hold in the messages (an empty file).

    Raises :class:`TooLargeForMemory` when the content exceeds ``max_bytes`` (the caller then
    reads it another way) and :class:`TraceFormatError` when a gzip file inflates past
    :func:`gzip_cap`.
    """
    pending = read_ahead.take(path) if read_ahead is not None else None
    if pending is not None and pending.stamp == _stamp(path) and _gzip_limits(pending.settings) == _gzip_limits(settings):  # unchanged since the read began
        if pending.error is not None:
            raise pending.error
        assert pending.data is not None
        return pending.data
    return _read(path, max_bytes, expected, settings)


def _read(path: Path, max_bytes: int | None = None, expected: str = "a profiler trace", settings: ReadSettings | None = None) -> bytes:
    check_regular(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise TooLargeForMemory(path, f"is larger than {max_bytes} bytes")
            raw = f.read()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, expected a file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not raw:
        raise TraceFormatError(path, f"the file is empty; expected {expected}")
    if raw.startswith(GZIP_MAGIC):
        raw = _gunzip(path, raw, max_bytes, settings)
        if not raw:
            raise TraceFormatError(path, f"the gzip file decompresses to nothing; expected {expected}")
    return raw
