"""Where the ``traceEvents`` array can be cut into batches of whole events, found without decoding.

Both Kineto readers decode the array in batches (``[`` + batch + ``]``). A cut is a candidate
only: it is proved by decoding the batches on both sides of it (a cut inside an event or a string
cannot leave balanced JSON on both sides), and a batch that does not decode is joined with the
next one. See :mod:`whyidle.sources.kineto_stream` for the picture.

A candidate is a '}' then ',' then '{' opening an object whose first key is an event field
("ph", "name", ...). Inside a JSON string a quote is escaped, so ``{"ph"`` never matches there:
a strict candidate is always outside strings, and can only be wrong about depth (a nested object
in ``args`` whose first key is an event field).

For a trace held in memory, :func:`events_span` finds the array itself (after the top level's
``"traceEvents"`` key, up to the ']' after which the rest of the top level decodes) and
:func:`cut_bounds` cuts all of it at once; the in-memory reader proves the cuts by decoding
(``kineto._assemble``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["skip_ws", "cut", "find_cut", "cut_bounds", "events_span", "merge_top_level"]

_WS = b" \t\r\n"
_EVENT_KEYS = (b'"ph"', b'"cat"', b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"args"', b'"id"')
_MAX_BATCH_BYTES = 64 << 20  # a batch grown this far without an event's end found: not the usual layout
_CUT_TRIES = 64  # '}' looked at per cut before the layout is called unusual
_END_TRIES = 64  # ']' tried from the right for the event array's end
_MAX_TAIL_BYTES = 1 << 20  # top-level fields after the array (Kineto writes a few hundred bytes)
_EVENTS_KEY = b'"traceEvents"'


class _Phased(msgspec.Struct, gc=False):
    """An event's one field every event has (checks that a list holds events)."""

    ph: str


_LAST_EVENTS = msgspec.json.Decoder(list[_Phased])


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


def cut_bounds(text: bytes, a: int, end: int, batch_bytes: int) -> list[tuple[int, int]] | None:
    """The event array ``text[a:end]`` cut into batches of about ``batch_bytes`` at candidate
    event ends (``[start, end)`` each, separated by a comma); None where no candidate is found
    where one should be (not the usual layout)."""
    bounds: list[tuple[int, int]] = []
    while True:
        hi, c = a + batch_bytes, -1
        while hi < end and (c := find_cut(text, a + 1, hi, True, _CUT_TRIES)) < 0:
            if hi - a > _MAX_BATCH_BYTES:
                return None
            hi += batch_bytes
        if hi >= end:
            bounds.append((a, end))
            return bounds
        bounds.append((a, c))
        a = skip_ws(text, skip_ws(text, c) + 1)  # past the ','


def events_span(text: bytes, top_level: Callable[[bytes], Any]) -> tuple[Any, int, int] | None:
    """The top level without its events (None for a bare list of events), and where the event
    array's text lies (``[start, end)``: from its first event to the ']' that closes it); None
    where any of it is not found in a few tries. ``top_level(text)``: the fields of a JSON object
    without events, None if ``text`` is not one (the reader's decoder)."""
    start = skip_ws(text, 0)
    if start >= len(text) or text[start] not in b"[{":
        return None
    doc: Any = None
    if text[start] == 0x5B:  # '['
        a = start + 1
    else:
        k = text.find(_EVENTS_KEY, start)
        if k < 0:
            return None
        j = skip_ws(text, k + len(_EVENTS_KEY))
        if j >= len(text) or text[j] != 0x3A:  # ':'
            return None
        a = skip_ws(text, j + 1)
        if a >= len(text) or text[a] != 0x5B:
            return None
        a += 1
        head = text[start:k].rstrip()
        doc = top_level(b"{}" if head == b"{" else head[:-1] + b"}" if head.endswith(b",") else b"")
        if doc is None:
            return None
    a = skip_ws(text, a)
    end = _events_end(text, a, doc, top_level)
    return None if end < 0 else (doc, a, end)


def _events_end(text: bytes, a: int, doc: Any, top_level: Callable[[bytes], Any]) -> int:
    """Position of the ']' closing the event array that starts at ``a`` (-1 if not found). Tried
    from the right: what follows it must be the rest of the top level (merged into ``doc``), and
    what lies between it and the cut before it must decode as events (so that a ']' in a field
    after the array, or in a string, is not taken for the array's end)."""
    hi = len(text)
    for _ in range(_END_TRIES):
        e = text.rfind(b"]", a, hi)
        if e < 0 or len(text) - e > _MAX_TAIL_BYTES:
            return -1
        hi = e
        j = skip_ws(text, e + 1)
        if doc is None:
            if j < len(text):
                continue  # a bare list: nothing may follow it
            tail = None
        elif j < len(text) and text[j] == 0x7D and skip_ws(text, j + 1) == len(text):  # '}'
            tail = None
        elif j < len(text) and text[j] == 0x2C:  # ','
            tail = top_level(b"{" + text[j + 1 :])
            if tail is None:
                continue
        else:
            continue
        c = find_cut(text, a + 1, e, True, _CUT_TRIES)
        if c < 0:
            return -1  # one event, or not the usual layout
        try:
            _LAST_EVENTS.decode(b"".join((b"[", memoryview(text)[skip_ws(text, skip_ws(text, c) + 1) : e], b"]")))
        except (msgspec.DecodeError, RecursionError):
            continue
        if tail is not None:
            merge_top_level(doc, tail)
        return e
    return -1


def merge_top_level(a: Any, b: Any) -> Any:
    """``a`` (the top-level fields before the events; None for none) with those of ``b`` (after
    them) that are set: Kineto writes some on each side of the array."""
    if a is None:
        return b
    for f in ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "whyidle_annotation"):
        if getattr(b, f) is not None:
            setattr(a, f, getattr(b, f))
    return a
