"""Where the ``traceEvents`` array can be cut into batches of whole events, found without decoding.

Both Kineto readers decode the array in batches (``[`` + batch + ``]``). A cut is a candidate
only: it is proved by decoding the batches on both sides of it (a cut inside an event or a string
cannot leave balanced JSON on both sides), and a batch that does not decode is joined with the
next one. See :mod:`whyidle.sources.kineto_stream` for the picture.

A candidate is a '}' then ',' then '{' opening an object whose first key is an event field
("ph", "name", ...). Inside a JSON string a quote is escaped, so ``{"ph"`` never matches there:
a strict candidate is always outside strings, and can only be wrong about depth (a nested object
in ``args`` whose first key is an event field).
"""

from __future__ import annotations

__all__ = ["skip_ws", "cut", "find_cut"]

_WS = b" \t\r\n"
_EVENT_KEYS = (b'"ph"', b'"cat"', b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"args"', b'"id"')


def skip_ws(buf: bytes | bytearray, i: int) -> int:
    """The first position from ``i`` that is not JSON white space (``len(buf)`` if none)."""
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def cut(buf: bytes | bytearray, lo: int, hi: int) -> int:
    """Candidate end (exclusive) of the last whole event in ``buf[lo:hi]``, -1 if none.

    A strict candidate (see the module's docstring); failing that anywhere in the range, any '}'
    ',' '{'.
    """
    c = find_cut(buf, lo, hi, True)
    return c if c >= 0 else find_cut(buf, lo, hi, False)


def find_cut(buf: bytes | bytearray, lo: int, hi: int, strict: bool, tries: int = -1) -> int:
    """The last candidate end in ``buf[lo:hi]``, looking at ``tries`` '}' at most (all if < 0)."""
    n = len(buf)
    while tries != 0:
        tries -= 1
        c = buf.rfind(b"}", lo, hi)
        if c < 0:
            return -1
        j = skip_ws(buf, c + 1)
        if j < n and buf[j] == 0x2C:  # ','
            k = skip_ws(buf, j + 1)
            if k < n and buf[k] == 0x7B:  # '{'
                if not strict:
                    return c + 1
                m = skip_ws(buf, k + 1)
                if buf.startswith(_EVENT_KEYS, m):
                    return c + 1
        hi = c
    return -1
