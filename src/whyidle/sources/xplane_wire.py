"""The protobuf wire format, read by hand for the few XPlane fields whyidle uses.

XPlane files (``*.xplane.pb``, written by ``jax.profiler.trace``, TensorFlow's and PyTorch/XLA's
profilers) are protocol buffers of the schema ``tsl/profiler/protobuf/xplane.proto``. whyidle
reads them without the ``protobuf`` package: the wire format is four record shapes (varint,
64-bit, length-delimited, 32-bit) and the schema's fields used here are listed in
:mod:`whyidle.sources.xplane`; any other field is skipped, as protobuf skips unknown fields.

A damaged file (a varint running past its message, a length pointing past the end, a wire type
that does not exist) raises :class:`WireError`, which the reader turns into a one-line
:class:`~whyidle.errors.TraceFormatError` naming the file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = ["XPLANE_SUFFIXES", "WireError", "fields", "varint", "as_signed", "as_double", "text", "looks_like_xspace"]

XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")  # jax.profiler.trace: <logdir>/plugins/profile/<run>/<host>.xplane.pb
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
_DOUBLE = struct.Struct("<d")


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (what and where, in words)."""


def varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[i]`` and the position after it; it must end before ``end``."""
    if i >= end:
        raise WireError(f"a number runs past the end of its message at byte {i}")
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    result = b & 0x7F
    shift = 7
    i += 1
    while True:
        if i >= end:
            raise WireError(f"a number runs past the end of its message at byte {i}")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise WireError(f"a number longer than 10 bytes at byte {i}")


def fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the message ``buf[start:end]`` as (field number, wire type, a, b).

    Varint and fixed fields: ``a`` is the value (fixed ones as unsigned integers), ``b`` is 0.
    Length-delimited fields: the content is ``buf[a:b]``.
    """
    i = start
    while i < end:
        key, i = varint(buf, i, end)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise WireError(f"field number 0 at byte {i}")
        if wt == VARINT:
            v, i = varint(buf, i, end)
            yield num, wt, v, 0
        elif wt == LEN:
            n, i = varint(buf, i, end)
            if i + n > end:
                raise WireError(f"a field of {n} bytes at byte {i} runs past the end of its message (byte {end})")
            yield num, wt, i, i + n
            i += n
        elif wt == FIXED64:
            if i + 8 > end:
                raise WireError(f"an 8-byte field at byte {i} runs past the end of its message")
            yield num, wt, int.from_bytes(buf[i : i + 8], "little"), 0
            i += 8
        elif wt == FIXED32:
            if i + 4 > end:
                raise WireError(f"a 4-byte field at byte {i} runs past the end of its message")
            yield num, wt, int.from_bytes(buf[i : i + 4], "little"), 0
            i += 4
        else:
            raise WireError(f"wire type {wt} (not a protobuf wire type) at byte {i}")


def as_signed(v: int) -> int:
    """An int64 field's varint (two's complement in 64 bits; a 10-byte varint's bits past 64
    dropped, as protobuf drops them) as a Python int."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def as_double(v: int) -> float:
    """A double field's 64 bits as a float."""
    return float(_DOUBLE.unpack(v.to_bytes(8, "little"))[0])


def text(buf: bytes, a: int, b: int) -> str:
    """A string field (UTF-8; a damaged byte becomes U+FFFD rather than an error)."""
    return buf[a:b].decode("utf-8", "replace")


def looks_like_xspace(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of a file) can begin an XSpace message.

    An XSpace starts with one of its fields 1-4 (planes, errors, warnings, hostnames), all
    length-delimited: key byte 0x0a, 0x12, 0x1a or 0x22, then the field's length as a varint. A
    JSON trace, a SQLite file, gzip or Parquet never starts so. The length is checked to be a
    well-formed varint; whether the bytes hold the whole message is for the reader to find.
    """
    if len(head) < 2 or head[0] not in (0x0A, 0x12, 0x1A, 0x22):
        return False
    try:
        varint(head, 1, min(len(head), 11))
    except WireError:
        return False
    return True
