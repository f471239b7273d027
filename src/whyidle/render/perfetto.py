"""The Perfetto / chrome://tracing export: the original trace plus a whyidle track.

The output is the input trace, byte for byte, with these events added to ``traceEvents``:

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

import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.context import gap_context
from whyidle.catalogue import CATALOGUE
from whyidle.errors import InputError, TraceFormatError, UnsupportedInputError
from whyidle.findings.labels import cause_label
from whyidle.findings.model import Report
from whyidle.findings.rules import Analyses
from whyidle.render._source import analyses_for
from whyidle.sources._io import read_bytes
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, LaneKind, Timeline

__all__ = ["render_perfetto", "GAP_CATEGORY", "FLOW_CATEGORY", "CONTEXT_GAPS", "TIMELINE_FORMATS"]

# Inputs with no Chrome-trace JSON of their own: the export builds one from the Timeline.
TIMELINE_FORMATS = ("nsys", "parquet")
# Kineto's category for each kind, so Perfetto groups the events as it does a profiler trace.
_CATEGORY = {
    Kind.KERNEL: "kernel", Kind.MEMCPY: "gpu_memcpy", Kind.MEMSET: "gpu_memset", Kind.COLLECTIVE: "kernel",
    Kind.GPU_ANNOTATION: "gpu_user_annotation", Kind.CPU_OP: "cpu_op", Kind.RUNTIME: "cuda_runtime",
    Kind.SYNC: "cuda_sync", Kind.STEP: "user_annotation", Kind.ANNOTATION: "user_annotation", Kind.PYTHON: "python_function",
}  # fmt: skip

GAP_CATEGORY = "whyidle_gap"
FLOW_CATEGORY = "whyidle_flow"
# Gaps (largest first) that get the full CPU context (op before, Python line) in their
# arguments; the rest carry the cheap fields only. 2,000 keeps the export under a few seconds
# on traces with 10^5 gaps (measured: about 0.1 ms of context per gap on the ResNet-50 trace).
CONTEXT_GAPS = 2000
_PID = 7825529  # "why" in ASCII; bumped if the trace already uses it
_GPU_PID = 9_000_000  # + device index: a GPU's process in a trace built from the timeline
_HOST_CAUSES = {i for i, e in enumerate(CATALOGUE) if e.host_side}  # the gap's host-side op explains it


def _json_id(text: str) -> int | str:
    """A pid/tid as the trace wrote it: an integer when it looks like one."""
    try:
        return int(text)
    except ValueError:
        return text


def _explaining_ops(a: Analyses) -> np.ndarray:
    """For each gap, the timeline row of the top-level CPU op overlapping its host part most (-1: none)."""
    g = a.gaps
    tl = a.tl
    out = np.full(len(g), -1, dtype=np.int64)
    for lane in unique_sorted(g.thread_lane[g.thread_lane >= 0]):
        rows, top, _py = a.index.rows(int(lane))
        trow = rows[top]
        if trow.size == 0:
            continue
        ts, te = tl.start_ns[trow], tl.end_ns[trow]
        te_reach = np.maximum.accumulate(te)
        for i in np.flatnonzero(g.thread_lane == lane):
            gs, he = int(g.start_ns[i]), int(g.host_end_ns[i])
            if he <= gs:
                continue
            lo = int(np.searchsorted(te_reach, gs, side="right"))
            hi = int(np.searchsorted(ts, he, side="left"))
            if hi <= lo:
                continue
            ov = np.minimum(te[lo:hi], he) - np.maximum(ts[lo:hi], gs)
            j = int(np.argmax(ov))
            if ov[j] > 0:
                out[i] = int(trow[lo + j])
    return out


def _us(ns: int, base_ns: int) -> int:
    return int(round((ns - base_ns) / 1000))


def _events(a: Analyses, base_ns: int, pid: int) -> list[dict[str, Any]]:
    g = a.gaps
    tl = a.tl
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "whyidle: device idle"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
    ]
    if len(g) == 0:
        return events
    for dev in unique_sorted(g.device):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(dev), "args": {"name": f"GPU {int(dev)} idle, by cause"}})
    ops = _explaining_ops(a)
    primary = g.primary
    order = np.argsort(-g.dur_ns, kind="stable")
    with_context = set(order[:CONTEXT_GAPS].tolist())
    last_end: dict[int, int] = {}
    flow_id = 0
    for i in np.lexsort((g.start_ns, g.device)):
        i = int(i)
        dev = int(g.device[i])
        b = max(_us(int(g.start_ns[i]), base_ns), last_end.get(dev, -(2**62)))
        e = max(_us(int(g.end_ns[i]), base_ns), b)
        last_end[dev] = e
        cause = C.CAUSES[int(primary[i])]
        args: dict[str, Any] = {
            "cause": cause.key,
            "idle_ns": int(g.dur_ns[i]),
            "causes_ns": {C.CAUSES[c].key: int(v) for c, v in enumerate(g.slices[i]) if v > 0},
            "start_ns": int(g.start_ns[i]),
            "next_device_work": tl.name_of(int(g.next_row[i])) if g.next_row[i] >= 0 else "",
            "drained_by_sync": bool(g.drained_by_sync[i]),
        }
        lane = int(g.thread_lane[i])
        if lane >= 0:
            args["launching_thread"] = tl.lanes[lane].label
        op = int(ops[i])
        if op >= 0:
            args["cpu_op_during"] = tl.name_of(op)
        if i in with_context:
            ctx = gap_context(tl, g, i, a.index)
            args["cpu_op_before"] = ctx.before
            args["python_line"] = ctx.python_line
            if ctx.runtime_call:
                args["runtime_call_open"] = ctx.runtime_call
        name = cause_label(cause.key)
        events.append({"ph": "B", "cat": GAP_CATEGORY, "name": name, "pid": pid, "tid": dev, "ts": b, "args": args})
        events.append({"ph": "E", "cat": GAP_CATEGORY, "name": name, "pid": pid, "tid": dev, "ts": e})
        if op >= 0 and int(primary[i]) in _HOST_CAUSES and e - b >= 2:
            # The arrow's head must land inside the op: an integer microsecond within it.
            os_, oe = _us(int(tl.start_ns[op]), base_ns), _us(int(tl.end_ns[op]), base_ns)
            lo = max(os_ + 1, _us(int(g.start_ns[i]), base_ns))
            hi = min(oe - 1, _us(int(g.host_end_ns[i]), base_ns))
            if hi < lo:
                continue
            ln = tl.lanes[int(tl.lane[op])]
            flow_id += 1
            common = {"cat": FLOW_CATEGORY, "name": "explained by", "id": flow_id}
            events.append({"ph": "s", "pid": pid, "tid": dev, "ts": (b + e) // 2, **common})
            events.append({"ph": "f", "bp": "e", "pid": _json_id(ln.pid), "tid": _json_id(ln.tid), "ts": (lo + hi) // 2, **common})
    return events


def _split_doc(raw: bytes, path: str) -> tuple[dict[str, msgspec.Raw] | None, list[msgspec.Raw]]:
    try:
        doc = msgspec.json.decode(raw, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
        if isinstance(doc, list):
            return None, doc
        events = msgspec.json.decode(doc.get("traceEvents", b"[]"), type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceFormatError(path, f"cannot be re-read for the Perfetto export ({exc}); expected Chrome trace JSON") from None
    return doc, events


def render_perfetto(report: Report, timeline: Timeline | None = None, *, gzip: bool = False) -> bytes:
    """The original trace with a whyidle track of gap slices and flow arrows, as JSON bytes.

    Reads the original events again from ``report.source.path``; ``timeline`` (the Timeline the
    report was made from) saves parsing it a second time. ``gzip=True`` compresses the output.
    """
    path = report.source.path
    if report.source.format in TIMELINE_FORMATS:
        a, _note = analyses_for(report, timeline)
        if a is None:
            raise InputError(path or "(unknown)", f"cannot be analysed again for the Perfetto export: {_note}")
        return _from_timeline(a, gzip)
    if report.source.format != "kineto":
        raise UnsupportedInputError(
            path or "(unknown)",
            f"is a {report.source.format or 'non-Kineto'} profile; the Perfetto export annotates Chrome-trace JSON "
            "(PyTorch profiler) files and builds one from Nsight Systems captures and Parquet timelines; "
            "use -o report.html for a timeline of this one",
        )
    if not path or not Path(path).is_file():
        raise InputError(path or "(unknown)", "the Perfetto export needs the original trace file, which is not available")
    a, _note = analyses_for(report, timeline)
    if a is None:
        raise InputError(path, f"cannot be analysed again for the Perfetto export: {_note}")
    raw = read_bytes(Path(path))
    doc, events = _split_doc(raw, path)
    base_ns = 0
    if doc is not None and "baseTimeNanoseconds" in doc:
        try:
            base_ns = int(msgspec.json.decode(doc["baseTimeNanoseconds"]))
        except (msgspec.DecodeError, TypeError, ValueError):
            base_ns = 0
    used = {ln.pid for ln in a.tl.lanes}
    pid = _PID
    while str(pid) in used:
        pid += 1
    added = [msgspec.Raw(msgspec.json.encode(e)) for e in _events(a, base_ns, pid)]
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
        note = {"tool": "whyidle", "version": __version__, "gaps": len(a.gaps), "gap_category": GAP_CATEGORY}
        head += [b'"whyidle_annotation":', msgspec.json.encode(note), b"}"]
        pieces = head
    if not gzip:
        return b"".join(pieces)
    co = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing, as gzip.compress(mtime=0) writes
    out = [co.compress(bytes(p) if isinstance(p, msgspec.Raw) else p) for p in pieces]
    out.append(co.flush())
    return b"".join(out)


def _from_timeline(a: Analyses, gzip: bool) -> bytes:
    """A Chrome trace built from the Timeline (an input without one: Nsight Systems, Parquet), with
    the whyidle track: one process per host process and one per GPU, a thread per stream or host
    thread, every event as a complete (``X``) slice in microseconds since the capture's start."""
    tl = a.tl
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
    cats = {int(k): c for k, c in _CATEGORY.items()}
    starts = ((tl.start_ns - base_ns) / 1e3).tolist()
    durs = ((tl.end_ns - tl.start_ns) / 1e3).tolist()
    events = [
        {"ph": "X", "cat": cats.get(k, "other"), "name": tl.strings[n], "pid": lane_ids[ln][0], "tid": lane_ids[ln][1], "ts": t, "dur": d}
        for t, d, k, n, ln in zip(starts, durs, tl.kind.tolist(), tl.name.tolist(), tl.lane.tolist())
    ]
    pid = _PID
    while pid in seen or str(pid) in seen:
        pid += 1
    added = _events(a, base_ns, pid)
    note = {"tool": "whyidle", "version": __version__, "gaps": len(a.gaps), "gap_category": GAP_CATEGORY, "built_from": tl.meta.source_format}
    out = msgspec.json.encode({"traceEvents": [*meta, *events, *added], "displayTimeUnit": "ms", "whyidle_annotation": note})
    if not gzip:
        return out
    co = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing, as the Kineto export writes it
    return co.compress(out) + co.flush()
