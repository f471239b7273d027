"""XSpace bytes -> planes, lines and per-line event columns (the schema, decoded by hand).

The fields read, from ``tsl/profiler/protobuf/xplane.proto`` (any other field is skipped)::

    XSpace          planes=1, errors=2, warnings=3, hostnames=4
    XPlane          id=1, name=2, lines=3, event_metadata=4 (map<int64, XEventMetadata>),
                    stat_metadata=5 (map<int64, XStatMetadata>), stats=6
    XLine           id=1, name=2, timestamp_ns=3, events=4, display_name=11
    XEvent          metadata_id=1, offset_ps=2 (oneof num_occurrences=5), duration_ps=3, stats=4
    XStat           metadata_id=1, double_value=2, uint64_value=3, int64_value=4, str_value=5,
                    bytes_value=6, ref_value=7 (the id of a stat metadata whose name is the value)
    XEventMetadata  id=1, name=2, display_name=4
    XStatMetadata   id=1, name=2

An event's time is its line's ``timestamp_ns`` plus its ``offset_ps``; offsets stay in int64
picoseconds per line (a line is at most hours long), the line's base is added in nanoseconds.
Of the events' stats only those the Timeline uses are kept (:data:`EVENT_STATS`).
"""

from __future__ import annotations

from array import array

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.sources.xplane_wire import FIXED32, FIXED64, LEN, WireError, as_double, as_signed, fields, text, varint

__all__ = ["Space", "Plane", "Line", "decode_space", "EVENT_STATS", "walk_space"]

# Per-event stats kept, by name: the launch <-> kernel link, a step's number, and on XLA's CPU
# backend the op an event runs (its presence: a string's id) and the program run it belongs to.
EVENT_STATS = ("correlation_id", "step_num", "hlo_op", "run_id")
_I63 = (1 << 63) - 1
Value = int | float | str


class Line(msgspec.Struct):
    """One XLine: a device stream or a host thread, its events as columns."""

    id: int
    name: str
    timestamp_ns: int
    metadata_id: npt.NDArray[np.int64]
    offset_ps: npt.NDArray[np.int64]
    duration_ps: npt.NDArray[np.int64]
    stats: dict[str, npt.NDArray[np.int64]]  # EVENT_STATS name -> value per event (-1: absent)
    aggregated: int = 0  # events with num_occurrences and no time (skipped)


class Plane(msgspec.Struct):
    id: int
    name: str
    stats: dict[str, Value]
    event_names: dict[int, str]
    lines: list[Line]


class Space(msgspec.Struct):
    planes: list[Plane]
    hostnames: list[str]
    errors: list[str]
    warnings: list[str]


def walk_space(buf: bytes) -> int:
    """The number of planes, checking that ``buf`` is an XSpace message at its top level.

    Only the top-level fields are read (a plane is skipped by its length): every field must be
    one of XSpace's length-delimited fields 1-4 or an unknown field, and they must end exactly
    at the end of the bytes. Raises :class:`WireError` otherwise.
    """
    planes = 0
    for num, wt, _a, _b in fields(buf, 0, len(buf)):
        if num in (1, 2, 3, 4) and wt != LEN:
            raise WireError(f"XSpace field {num} has wire type {wt}, not a length-delimited field")
        planes += num == 1
    return planes


def decode_space(buf: bytes) -> Space:
    planes: list[Plane] = []
    space = Space(planes, [], [], [])
    for num, wt, a, b in fields(buf, 0, len(buf)):
        if wt != LEN:
            continue
        if num == 1:
            planes.append(_plane(buf, a, b))
        elif num == 2:
            space.errors.append(text(buf, a, b))
        elif num == 3:
            space.warnings.append(text(buf, a, b))
        elif num == 4:
            space.hostnames.append(text(buf, a, b))
    return space


def _plane(buf: bytes, start: int, end: int) -> Plane:
    pid, name = 0, ""
    line_spans: list[tuple[int, int]] = []
    stat_spans: list[tuple[int, int]] = []
    event_names: dict[int, str] = {}
    stat_names: dict[int, str] = {}
    for num, wt, a, b in fields(buf, start, end):
        if num == 1 and wt != LEN:
            pid = a
        elif wt != LEN:
            continue
        elif num == 2:
            name = text(buf, a, b)
        elif num == 3:
            line_spans.append((a, b))
        elif num == 4:
            k, v = _map_entry(buf, a, b, (2, 4))
            event_names[k] = v
        elif num == 5:
            k, v = _map_entry(buf, a, b, (2,))
            stat_names[k] = v
        elif num == 6:
            stat_spans.append((a, b))
    stats: dict[str, Value] = {}
    for a, b in stat_spans:
        sid, value = _stat(buf, a, b, stat_names)
        stats[stat_names.get(sid, str(sid))] = value
    wanted = {sid: n for sid, n in stat_names.items() if n in EVENT_STATS}
    lines = [_line(buf, a, b, wanted) for a, b in line_spans]
    return Plane(pid, name, stats, event_names, lines)


def _map_entry(buf: bytes, start: int, end: int, name_fields: tuple[int, ...]) -> tuple[int, str]:
    """A map<int64, XEventMetadata | XStatMetadata> entry: (key, the value's name)."""
    key, vs, ve = 0, -1, -1
    for num, wt, a, b in fields(buf, start, end):
        if num == 1 and wt != LEN:
            key = as_signed(a)
        elif num == 2 and wt == LEN:
            vs, ve = a, b
    found: dict[int, str] = {}
    if vs >= 0:
        for num, wt, a, b in fields(buf, vs, ve):
            if num == 1 and wt != LEN and key == 0:
                key = as_signed(a)
            elif num in name_fields and wt == LEN:
                found[num] = text(buf, a, b)
    return key, next((found[n] for n in name_fields if found.get(n)), "")


def _stat(buf: bytes, start: int, end: int, stat_names: dict[int, str]) -> tuple[int, Value]:
    sid = 0
    value: Value = 0
    for num, wt, a, b in fields(buf, start, end):
        if num == 1 and wt != LEN:
            sid = a
        elif num == 2 and wt == FIXED64:
            value = as_double(a)
        elif num == 3 and wt != LEN:
            value = a
        elif num == 4 and wt != LEN:
            value = as_signed(a)
        elif num in (5, 6) and wt == LEN:
            value = text(buf, a, b)
        elif num == 7 and wt != LEN:
            value = stat_names.get(a, "")
    return sid, value


def _line(buf: bytes, start: int, end: int, wanted: dict[int, str]) -> Line:
    """One XLine; its events' columns grow as int64 arrays (8 bytes a value, not a Python int's 36)."""
    lid, name, display, ts = 0, "", "", 0
    meta, off, dur = array("q"), array("q"), array("q")
    kept = {n: array("q") for n in EVENT_STATS}
    aggregated = 0
    for num, wt, a, b in fields(buf, start, end):
        if num == 4 and wt == LEN:
            m, o, d, st = _event(buf, a, b, wanted)
            if o is None:
                aggregated += 1
                continue
            meta.append(m)
            off.append(o)
            dur.append(d)
            for n, col in kept.items():
                col.append(st.get(n, -1))
        elif wt == LEN:
            if num == 2:
                name = text(buf, a, b)
            elif num == 11:
                display = text(buf, a, b)
        elif num == 1:
            lid = a
        elif num == 3:
            ts = as_signed(a)
    cols = {n: _column(v) for n, v in kept.items()}
    return Line(lid, display or name, ts, _column(meta), _column(off), _column(dur), cols, aggregated)


def _column(values: array[int]) -> npt.NDArray[np.int64]:
    return np.frombuffer(values, dtype=np.int64) if len(values) else np.empty(0, dtype=np.int64)


def _event(buf: bytes, start: int, end: int, wanted: dict[int, str]) -> tuple[int, int | None, int, dict[str, int]]:
    """(metadata id, offset in ps or None when aggregated, duration in ps, wanted stats).

    proto3 leaves out a field at its default: an absent offset is 0, not aggregated; an event is
    aggregated (``num_occurrences``, no time) when that field is there. The hot loop of the
    reader: :func:`fields` inlined, one-byte keys and values read without a call."""
    meta, dur = 0, 0
    off: int | None = 0
    st: dict[str, int] = {}
    i = start
    while i < end:
        key = buf[i]
        if key < 0x80:
            i += 1
        else:
            key, i = varint(buf, i, end)
        if key < 8:
            raise WireError(f"field number 0 at byte {i}")
        wt = key & 7
        if wt == 0:
            if i < end and buf[i] < 0x80:
                v = buf[i]
                i += 1
            else:
                v, i = varint(buf, i, end)
            num = key >> 3
            if num == 1:
                meta = as_signed(v)
            elif num == 2:
                off = as_signed(v)
            elif num == 3:
                dur = as_signed(v)
            elif num == 5:
                off = None
        elif wt == LEN:
            n, i = varint(buf, i, end)
            if i + n > end:
                raise WireError(f"a field of {n} bytes at byte {i} runs past the end of its message (byte {end})")
            if key >> 3 == 4 and wanted:
                _event_stat(buf, i, i + n, wanted, st)
            i += n
        elif wt in (FIXED64, FIXED32):
            i += 8 if wt == FIXED64 else 4
            if i > end:
                raise WireError(f"a fixed-size field runs past the end of its message at byte {end}")
        else:
            raise WireError(f"wire type {wt} (not a protobuf wire type) at byte {i}")
    return meta, off, dur, st


def _event_stat(buf: bytes, start: int, end: int, wanted: dict[int, str], out: dict[str, int]) -> None:
    sid = -1
    value = -1
    for num, wt, a, _b in fields(buf, start, end):
        if num == 1 and wt == 0:
            sid = a
            if sid not in wanted:
                return
        elif num in (3, 4, 7) and wt == 0:
            value = a & _I63  # ids that use all 64 bits (run ids, as uint64 or int64): kept as int64 >= 0
    if sid in wanted and value >= 0:
        out[wanted[sid]] = value
