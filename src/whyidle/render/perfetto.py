"""Perfetto / chrome://tracing exports of a diagnosis: drawn from it alone, or annotating the original.

:func:`render_perfetto` (the ``perfetto`` renderer) builds a Chrome trace from the diagnosis
alone, so it works without the input file (a saved JSON report, a trace since deleted):

* one process per GPU, with a thread per kind of busy time (compute, exposed communication,
  copies) holding the device's busy intervals;
* the whyidle track (below); the CPU op that explains each host-caused gap, on its thread;
* the steps of the window, on a thread of their own.

:func:`annotate` is the other export: the original trace, byte for byte, with the whyidle track
added to ``traceEvents`` (an Nsight Systems capture or a Parquet timeline, which have no Chrome
trace of their own, get one built from their Timeline). The whyidle track is:

* a process "whyidle: device idle" with one thread per GPU;
* one slice per device-idle gap on that GPU's thread, named by the gap's cause, its arguments
  holding the evidence (every cause's share, the next device work, the launching thread, the CPU
  op during the gap, and for the largest gaps the op before it and the Python line);
* a flow arrow from each host-caused gap to the top-level CPU op that overlapped it most on the
  launching thread: the op that explains the wait.

The slices are ``B``/``E`` pairs and the arrows ``s``/``f`` flow events: whyidle's own reader takes
only complete (``X``) events, so the annotated trace diagnoses exactly as the original does.
Times are written as integer microseconds, which never changes how whyidle reads the fractional
timestamps of the original events, and the new events are inserted in the middle of the event
list so the start and end of the file, which the reader samples, are the original's.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.strip import BUSY_CLASSES
from whyidle.catalogue import derived
from whyidle.errors import InputError, TraceFormatError, UnsupportedInputError
from whyidle.findings.labels import cause_label
from whyidle.findings.model import DiagnosisData, GapColumns
from whyidle.sources import read_bytes
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, LaneKind, Timeline

__all__ = ["render_perfetto", "annotate", "annotation_source", "GAP_CATEGORY", "FLOW_CATEGORY", "TIMELINE_FORMATS"]

# Inputs with no Chrome-trace JSON of their own: annotate() builds one from the Timeline.
TIMELINE_FORMATS = ("nsys", "parquet", "rocprofv3")
# Kineto's category for each kind, so Perfetto groups the events as it does a profiler trace.
_CATEGORY = {
    Kind.KERNEL: "kernel", Kind.MEMCPY: "gpu_memcpy", Kind.MEMSET: "gpu_memset", Kind.COLLECTIVE: "kernel",
    Kind.GPU_ANNOTATION: "gpu_user_annotation", Kind.CPU_OP: "cpu_op", Kind.RUNTIME: "cuda_runtime",
    Kind.SYNC: "cuda_sync", Kind.STEP: "user_annotation", Kind.ANNOTATION: "user_annotation", Kind.PYTHON: "python_function",
}  # fmt: skip

GAP_CATEGORY = "whyidle_gap"
FLOW_CATEGORY = "whyidle_flow"
BUSY_CATEGORY = "whyidle_busy"
_PID = 7825529  # "why" in ASCII; bumped if the trace already uses it
_GPU_PID = 9_000_000  # + device index: a GPU's process in a trace built from the timeline or the diagnosis
_STEPS_PID = 8_999_999  # the steps, in a trace drawn from the diagnosis
_CHUNK_EVENTS = 32_768  # events made and encoded at a time: about 20 MB of dicts, whatever the capture's size
_HOST_CAUSES = derived(lambda entries: {i for i, e in enumerate(entries) if e.host_side})  # the gap's host-side op explains it


def _json_id(text: str) -> int | str:
    """A pid/tid as the trace wrote it: an integer when it looks like one."""
    try:
        return int(text)
    except ValueError:
        return text


def _columns(d: DiagnosisData) -> GapColumns:
    if d.gap_columns is None or d.activity is None:
        raise UnsupportedInputError(
            d.source.path or "(unknown)",
            f"is a {d.source.format or 'non-trace'} diagnosis with no device events to draw (a counter log, the step tracker, "
            "or a JSON report saved in its summary form: save it with --full-json / columns=True to draw it); use -o report.html for this one",
        )
    return d.gap_columns


def _us(ns: int, base_ns: int) -> int:
    return int(round((ns - base_ns) / 1000))


def _events(d: DiagnosisData, g: GapColumns, base_ns: int, pid: int) -> Iterator[dict[str, Any]]:
    """The whyidle track: metadata, a B/E slice per gap and a flow arrow per explained gap (made
    as they are written: a capture's gaps can be millions)."""
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "whyidle: device idle"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}}
    if len(g) == 0:
        return
    for dev in unique_sorted(g.device):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": int(dev), "args": {"name": f"GPU {int(dev)} idle, by cause"}}
    primary = g.primary
    causes, host_causes = tuple(C.CAUSES), _HOST_CAUSES()
    last_end: dict[int, int] = {}
    flow_id = 0
    for i in np.lexsort((g.start_ns, g.device)).tolist():
        dev = int(g.device[i])
        b = max(_us(int(g.start_ns[i]), base_ns), last_end.get(dev, -(2**62)))
        e = max(_us(int(g.end_ns[i]), base_ns), b)
        last_end[dev] = e
        cause = causes[int(primary[i])]
        name = cause_label(cause.key)
        yield {"ph": "B", "cat": GAP_CATEGORY, "name": name, "pid": pid, "tid": dev, "ts": b, "args": _gap_args(d, g, i, cause.key)}
        yield {"ph": "E", "cat": GAP_CATEGORY, "name": name, "pid": pid, "tid": dev, "ts": e}
        op = int(g.op[i])
        if op >= 0 and int(primary[i]) in host_causes and e - b >= 2:
            # The arrow's head must land inside the op: an integer microsecond within it.
            os_, oe = _us(int(g.op_start_ns[i]), base_ns), _us(int(g.op_end_ns[i]), base_ns)
            lo = max(os_ + 1, _us(int(g.start_ns[i]), base_ns))
            hi = min(oe - 1, _us(int(g.host_end_ns[i]), base_ns))
            if hi < lo:
                continue
            ln = d.lanes[int(g.thread[i])]  # the op is on the launching thread
            flow_id += 1
            common = {"cat": FLOW_CATEGORY, "name": "explained by", "id": flow_id}
            yield {"ph": "s", "pid": pid, "tid": dev, "ts": (b + e) // 2, **common}
            yield {"ph": "f", "bp": "e", "pid": _json_id(ln.pid), "tid": _json_id(ln.tid), "ts": (lo + hi) // 2, **common}


def _gap_args(d: DiagnosisData, g: GapColumns, i: int, key: str) -> dict[str, Any]:
    """A gap slice's arguments: its evidence, the CPU context where the diagnosis looked it up."""
    args: dict[str, Any] = {
        "cause": key,
        "idle_ns": int(g.end_ns[i] - g.start_ns[i]),
        "causes_ns": {C.CAUSES[c].key: int(v) for c, v in enumerate(g.causes_ns[i].tolist()) if v > 0},
        "start_ns": int(g.start_ns[i]),
        "next_device_work": g.text(g.next_work, i),
        "drained_by_sync": bool(g.drained_by_sync[i]),
    }
    lane = int(g.thread[i])
    if lane >= 0:
        args["launching_thread"] = d.lanes[lane].label
    if g.op[i] >= 0:
        args["cpu_op_during"] = g.text(g.op, i)
    if g.before[i] >= 0:  # looked up for the largest gaps only (RenderSettings.context_gaps)
        args["cpu_op_before"] = g.text(g.before, i)
        args["python_line"] = g.text(g.python_line, i)
        if g.text(g.runtime_call, i):
            args["runtime_call_open"] = g.text(g.runtime_call, i)
    return args


def _split_doc(raw: bytes, path: str) -> tuple[dict[str, msgspec.Raw] | None, list[msgspec.Raw]]:
    try:
        doc = msgspec.json.decode(raw, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
        if isinstance(doc, list):
            return None, doc
        events = msgspec.json.decode(doc.get("traceEvents", b"[]"), type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceFormatError(path, f"cannot be re-read for the Perfetto export ({exc}); expected Chrome trace JSON") from None
    return doc, events


def render_perfetto(diagnosis: DiagnosisData, *, gzip: bool = False) -> bytes:
    """A Chrome trace drawn from the diagnosis alone (no input file): per GPU its busy time by
    kind, the whyidle track, the CPU ops that explain gaps, and the steps. Times are microseconds
    from the window's start; every gap of the diagnosis is one slice."""
    g = _columns(diagnosis)
    d = diagnosis
    base_ns = d.window.start_ns
    steps = d.utilization.steps
    step_events = [
        {"ph": "X", "cat": "user_annotation", "name": f"step {s.number}", "pid": _STEPS_PID, "tid": 0, "ts": (s.start_ns - base_ns) / 1e3, "dur": s.duration_ns / 1e3}
        for s in steps
    ]
    steps_meta = [{"ph": "M", "name": "process_name", "pid": _STEPS_PID, "tid": 0, "args": {"name": "steps"}}] if steps else []
    events = chain(_busy_slices(d, base_ns), _explaining_op_slices(d, g, base_ns), steps_meta, step_events, _events(d, g, base_ns, _PID))
    note = {"tool": "whyidle", "version": __version__, "gaps": len(g), "gap_category": GAP_CATEGORY, "built_from": "diagnosis", "source": d.source.path}
    return _encode(events, {"displayTimeUnit": "ms", "whyidle_annotation": note}, gzip)


def _busy_slices(d: DiagnosisData, base_ns: int) -> Iterator[dict[str, Any]]:
    """Per GPU, its busy time by kind (compute, exposed communication, copies), one slice each."""
    for act in d.activity or ():
        pid = _GPU_PID + act.device
        name = d.source.devices[act.device] if 0 <= act.device < len(d.source.devices) else ""
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"GPU {act.device}" + (f" ({name})" if name else "")}}
        for tid, (kind, busy) in enumerate(zip(BUSY_CLASSES, act.sets())):
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"{kind} (all streams)"}}
            for lo in range(0, len(busy.start), _CHUNK_EVENTS):
                sl = slice(lo, lo + _CHUNK_EVENTS)
                starts, durs = ((busy.start[sl] - base_ns) / 1e3).tolist(), ((busy.end[sl] - busy.start[sl]) / 1e3).tolist()
                yield from ({"ph": "X", "cat": BUSY_CATEGORY, "name": kind, "pid": pid, "tid": tid, "ts": t, "dur": u} for t, u in zip(starts, durs))


def _explaining_op_slices(d: DiagnosisData, g: GapColumns, base_ns: int) -> Iterator[dict[str, Any]]:
    """The CPU ops that explain gaps, once each, on their threads (the flow arrows land on them)."""
    seen: set[tuple[int, int, int]] = set()
    named: set[int] = set()
    for i in np.flatnonzero(g.op >= 0).tolist():
        lane = int(g.thread[i])
        key = (lane, int(g.op_start_ns[i]), int(g.op_end_ns[i]))
        if key in seen:
            continue
        seen.add(key)
        ln = d.lanes[lane]
        pid, tid = _json_id(ln.pid), _json_id(ln.tid)
        if lane not in named:
            named.add(lane)
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": ln.label}}
        ts, dur = (key[1] - base_ns) / 1e3, (key[2] - key[1]) / 1e3
        yield {"ph": "X", "cat": "cpu_op", "name": g.text(g.op, i), "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def annotation_source(path: str | os.PathLike[str], timeline: Timeline) -> str | os.PathLike[str] | Timeline | None:
    """What :func:`annotate` takes for an input read from ``path`` into ``timeline``: the file itself
    for a PyTorch profiler trace (its events are copied byte for byte), the Timeline for an input
    with no Chrome trace of its own (Nsight Systems, Parquet), None for the others (drawn from
    the diagnosis alone)."""
    fmt = timeline.meta.source_format
    return path if fmt == "kineto" else timeline if fmt in TIMELINE_FORMATS else None


def annotate(trace: str | os.PathLike[str] | Timeline, diagnosis: DiagnosisData, *, gzip: bool = False) -> bytes:
    """The original trace with the whyidle track of gap slices and flow arrows, as JSON bytes.

    ``trace``: the PyTorch profiler trace the diagnosis was made from (its events are copied
    byte for byte), or the Timeline of an input with no Chrome trace of its own (Nsight Systems,
    Parquet: a trace is built from it). ``gzip=True`` compresses the output. The gaps and their
    evidence come from the diagnosis; only the original events are read from ``trace``.
    """
    g = _columns(diagnosis)
    if isinstance(trace, Timeline):
        return _from_timeline(trace, diagnosis, g, gzip)
    path = os.fspath(trace)
    if diagnosis.source.format in TIMELINE_FORMATS:
        from whyidle.sources import load

        return _from_timeline(load(path), diagnosis, g, gzip)
    if diagnosis.source.format != "kineto":
        raise UnsupportedInputError(
            path or "(unknown)",
            f"is a {diagnosis.source.format or 'non-Kineto'} profile; annotate() adds the whyidle track to Chrome-trace JSON "
            "(PyTorch profiler) files and builds one from Nsight Systems captures, rocprofv3 output and Parquet timelines",
        )
    if not path or not Path(path).is_file():
        raise InputError(path or "(unknown)", "annotating needs the original trace file, which is not available")
    raw = read_bytes(Path(path))
    doc, events = _split_doc(raw, path)
    base_ns = 0
    if doc is not None and "baseTimeNanoseconds" in doc:
        try:
            base_ns = int(msgspec.json.decode(doc["baseTimeNanoseconds"]))
        except (msgspec.DecodeError, TypeError, ValueError):
            base_ns = 0
    used = {ln.pid for ln in diagnosis.lanes}
    pid = _PID
    while str(pid) in used:
        pid += 1
    added = [msgspec.Raw(msgspec.json.encode(e)) for e in _events(diagnosis, g, base_ns, pid)]
    # One flat list of pieces (views into the original text, no copies) joined once: the output
    # is the only copy made of the trace (it was three: events, object, then gzip's input), and
    # with gzip it is compressed piece by piece, so only the compressed output is made.
    mid = len(events) // 2
    pieces: list[Any] = [b"["]
    for i, ev in enumerate([*events[:mid], *added, *events[mid:]]):
        if i:
            pieces.append(b",")
        pieces.append(ev)
    pieces.append(b"]")
    if doc is not None:
        head: list[Any] = [b"{"]
        for k, v in doc.items():
            head.append(msgspec.json.encode(k) + b":")
            if k == "traceEvents":
                head.extend(pieces)
            else:
                head.append(v)
            head.append(b",")
        if "traceEvents" not in doc:
            head.append(b'"traceEvents":')
            head.extend(pieces)
            head.append(b",")
        note = {"tool": "whyidle", "version": __version__, "gaps": len(g), "gap_category": GAP_CATEGORY}
        head += [b'"whyidle_annotation":', msgspec.json.encode(note), b"}"]
        pieces = head
    if not gzip:
        return b"".join(pieces)
    co = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing, as gzip.compress(mtime=0) writes
    out = [co.compress(bytes(p) if isinstance(p, msgspec.Raw) else p) for p in pieces]
    out.append(co.flush())
    return b"".join(out)


def _from_timeline(tl: Timeline, d: DiagnosisData, g: GapColumns, gzip: bool) -> bytes:
    """A Chrome trace built from the Timeline (an input without one: Nsight Systems, Parquet), with
    the whyidle track: one process per host process and one per GPU, a thread per stream or host
    thread, every event as a complete (``X``) slice in microseconds since the capture's start."""
    base_ns = int(tl.start_ns.min()) if len(tl) else 0
    lane_ids: list[tuple[int | str, int | str]] = []
    meta: list[dict[str, Any]] = []
    seen: set[int | str] = set()
    for ln in tl.lanes:
        # host lanes keep the capture's own ids (the whyidle track's flow arrows point at them);
        # each GPU becomes a process of its own
        gpu = ln.kind is LaneKind.GPU_STREAM
        pid, tid = (_GPU_PID + ln.device if gpu else _json_id(ln.pid)), _json_id(ln.tid)
        lane_ids.append((pid, tid))
        if pid not in seen:
            seen.add(pid)
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"GPU {ln.device}" if gpu else f"process {ln.pid}"}})
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": ln.label}})
    pid = _PID
    while pid in seen or str(pid) in seen:
        pid += 1
    events = chain(meta, _timeline_slices(tl, lane_ids, base_ns), _events(d, g, base_ns, pid))
    note = {"tool": "whyidle", "version": __version__, "gaps": len(g), "gap_category": GAP_CATEGORY, "built_from": tl.meta.source_format}
    return _encode(events, {"displayTimeUnit": "ms", "whyidle_annotation": note}, gzip)


def _timeline_slices(tl: Timeline, lane_ids: list[tuple[int | str, int | str]], base_ns: int) -> Iterator[dict[str, Any]]:
    """Every event of the Timeline as a complete slice, made a chunk of rows at a time."""
    cats = {int(k): c for k, c in _CATEGORY.items()}
    for lo in range(0, len(tl), _CHUNK_EVENTS):
        sl = slice(lo, lo + _CHUNK_EVENTS)
        starts = ((tl.start_ns[sl] - base_ns) / 1e3).tolist()
        durs = ((tl.end_ns[sl] - tl.start_ns[sl]) / 1e3).tolist()
        rows = zip(starts, durs, tl.kind[sl].tolist(), tl.name[sl].tolist(), tl.lane[sl].tolist())
        yield from (
            {"ph": "X", "cat": cats.get(k, "other"), "name": tl.strings[n], "pid": lane_ids[ln][0], "tid": lane_ids[ln][1], "ts": t, "dur": u}
            for t, u, k, n, ln in rows
        )


def _encode(events: Iterable[dict[str, Any]], fields: dict[str, Any], gzip: bool) -> bytes:
    """``{"traceEvents": [...events], **fields}`` as compact JSON, the bytes msgspec writes for the
    whole object, encoded ``_CHUNK_EVENTS`` events at a time: one encode of a capture's millions of
    events (and their dicts, all made first) ran a 5M-row Nsight export out of memory, with
    SIGSEGV inside the encoder under a 3 GB limit. With ``gzip`` each chunk is compressed as it
    is made, so the memory is the compressed output and one chunk."""
    co = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None  # gzip framing, as the Kineto export writes it
    parts: list[bytes] = []

    def put(b: bytes) -> None:
        parts.append(co.compress(b) if co is not None else b)

    put(b'{"traceEvents":[')
    first = True
    it = iter(events)
    while chunk := list(islice(it, _CHUNK_EVENTS)):
        put((b"" if first else b",") + msgspec.json.encode(chunk)[1:-1])
        first = False
    put(b"]")
    for k, v in fields.items():
        put(b"," + msgspec.json.encode(k) + b":" + msgspec.json.encode(v))
    put(b"}")
    if co is not None:
        parts.append(co.flush())
    return b"".join(parts)
