"""Reading input bytes: plain or gzip, with errors that name the file and the problem."""

from __future__ import annotations

import zlib
from pathlib import Path

from whyidle.errors import InputError, TraceFormatError

__all__ = ["read_bytes", "GZIP_MAGIC", "SQLITE_MAGIC"]

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


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed if it is gzip."""
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
