"""PyTorch profiler (Kineto) Chrome-trace JSON -> Timeline.

The only module that knows Kineto's format. It reads every schema seen in the wild:

* 2021 schema: categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; integer
  microseconds (sub-microsecond kernels have ``dur: 0``).
* newer schema: ``cpu_op``, ``cuda_runtime``, ``cuda_driver``, ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, ``cuda_sync``, ``user_annotation``, ``gpu_user_annotation``,
  ``python_function``; fractional microseconds, optionally relative to ``baseTimeNanoseconds``.
* the 2024 nanosecond exporter (pytorch/kineto#890), which printed ``ts`` as ``{us}.{ns}``
  without zero-padding the nanoseconds: ``12.5`` there means 12 us + 5 ns. It is told apart from
  ordinary decimals by the fraction texts themselves (see :func:`_fraction_style`).

Decoding uses msgspec with typed structs that name only the fields whyidle reads, so the many
``args`` whyidle ignores are skipped by the decoder instead of becoming Python objects. Floats
arrive as their source text (``float_hook``) so that nanoseconds are never lost to float64
rounding (epoch microseconds near 1.7e15 have a float64 resolution of 0.25 us).
"""

from __future__ import annotations

import gc
import re
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union

import msgspec
import numpy as np

from whyidle.errors import TraceFormatError
from whyidle.sources._io import looks_like_kineto
from whyidle.sources.kineto_cuts import cut_bounds, events_span
from whyidle.sources.kineto_columns import (
    _Columns,
    _Local,
    RAW_NULL,
    _local_columns,
    _Num,
)
from whyidle.timeline.model import Timeline

if TYPE_CHECKING:
    from collections.abc import Callable

    from whyidle.parallel import Helpers

__all__ = ["load_kineto", "parse_kineto", "looks_like_kineto"]


# gc=False: decoded events hold only strings, numbers and lists, never cycles, so the collector
# need not track them (faster to create, and nothing for a collection to scan).
class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    stream: Any = None
    device: Any = None
    bytes: Any = None
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    grid: Any = None  # [x, y, z] blocks
    direction: Any = None  # MTIA dma_request: HOST_TO_DEVICE, DEVICE_TO_HOST
    block: Any = None  # [x, y, z] threads
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    # An op's recorded inputs, kept as their JSON text (RAW_NULL when absent): the reader joins
    # the five into one key per op and decodes only the distinct ones (kineto_columns._host_columns).
    input_dims: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Concrete Inputs")
    flops: msgspec.Raw = RAW_NULL  # with_flops=True: the profiler's own count for the op
    strides: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Input Strides")
    # record_param_comms (and NCCL kernels, PyTorch 2.1+): what a collective moved
    # (analyses/collectives.py); raw too, joined to the inputs' key (kineto_columns._INPUTS).
    collective: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Collective name")
    in_nelems: msgspec.Raw = msgspec.field(default=RAW_NULL, name="In msg nelems")
    out_nelems: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Out msg nelems")
    group_size: msgspec.Raw = msgspec.field(default=RAW_NULL, name="Group size")
    comm_dtype: msgspec.Raw = msgspec.field(default=RAW_NULL, name="dtype")
    name: Any = None  # metadata events: process / thread name
    labels: Any = None  # metadata events: process labels ("GPU 0", "CPU")


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[_Args, None] = None


class _ExactEvent(_Event):
    """Times kept as source text: for files where float64 would lose or misread nanoseconds."""

    ts: Any = None
    dur: Any = None


class _Doc(msgspec.Struct):
    traceEvents: Union[list[_Event], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    whyidle_annotation: Any = None  # written by whyidle's Perfetto exports


class _ExactDoc(_Doc):
    traceEvents: Union[list[_ExactEvent], None] = None  # type: ignore[assignment]


# Numbers decode natively (fast) where float64 holds every nanosecond; the exact decoder hands
# float texts over as _Num for the rest.
_EXACT_DECODER = msgspec.json.Decoder(Union[_ExactDoc, list[_ExactEvent]], float_hook=_Num)
# Fractional times as written: "ts": 123.4 / "dur": 5.67
_FLOAT_TIME_RE = re.compile(rb'"(?:ts|dur)"\s*:\s*-?(\d+)\.(\d+)')
# float64 has 53 bits: microsecond values below this keep every nanosecond through x * 1000.
_EXACT_FLOAT_US = 2**53 // 1000 // 4


def load_kineto(path: Path, raw: bytes | list[bytes], helpers: Helpers | None = None, meanwhile: Callable[[], object] | None = None) -> Timeline:
    """Parse a Kineto trace already read into ``raw`` (decompressed).

    ``raw`` may be a one-element list that the caller holds no other reference to: the text is
    then taken out of it and freed as soon as the events are decoded, before the columns are
    sorted (on the 50 MB generated benchmark trace, that text and its slices are 70 MB).
    """
    return parse_kineto(raw, path=str(path), helpers=helpers, meanwhile=meanwhile)


def _sample_fractions(raw: bytes) -> tuple[list[str], bool]:
    """The distinct fraction texts of times in the first and last MiB (:func:`_fraction_style`
    depends on which occur, not on how often: 5,815 times on the B200 trace, 995 distinct), and
    whether float64 would lose ns."""
    fracs: dict[bytes, None] = {}
    big = False
    view = memoryview(raw)
    for part in (view[: 1 << 20], view[-(1 << 20) :] if len(raw) > 1 << 20 else b""):
        for whole, frac in _FLOAT_TIME_RE.findall(part):
            fracs[frac] = None
            if not big and len(whole) > 12 and int(whole) >= _EXACT_FLOAT_US:
                big = True
    return ["0." + f.decode() for f in fracs], big


def _fraction_style(texts: list[str]) -> str:
    """How the fractional microseconds were written: "decimal" or "unpadded_ns".

    The 2024 exporter wrote ``{us}.{ns % 1000}`` without padding, so its fractions are integers
    0-999 written without leading zeros: 1-2 digit fractions occur, a multi-digit fraction never
    starts with 0, and about one in ten ends in 0. Correct exporters pad to three digits; Python's
    float repr strips trailing zeros (never a multi-digit fraction ending in 0) but keeps leading
    ones. So: short fractions, no leading zero, and some trailing zero -> unpadded nanoseconds.
    """
    short = lead0 = trail0 = False
    for t in texts:
        dot = t.find(".")
        if dot < 0 or "e" in t or "E" in t:
            continue
        frac = t[dot + 1 :]
        n = len(frac)
        if n < 3:
            short = True
        if n >= 2:
            if frac[0] == "0":
                lead0 = True
            if frac[-1] == "0":
                trail0 = True
    return "unpadded_ns" if (short and trail0 and not lead0) else "decimal"


def parse_kineto(
    raw: bytes | list[bytes], path: str = "<memory>", helpers: Helpers | None = None, meanwhile: Callable[[], object] | None = None
) -> Timeline:
    """The Timeline of a Kineto trace held in memory.

    ``helpers`` that fork (:class:`whyidle.parallel.Helpers`): a forked child plans the batches
    (:func:`_cut_plan`) while this process runs ``meanwhile()`` (the command line imports the
    analyses; see :meth:`~whyidle.parallel.Helpers.map`), then decodes batches from the back
    while this process takes them from the front (Linux with two cores, else one process).
    ``meanwhile`` may not be called at all. Forking is the caller's choice: do not ask for it in
    a process whose other threads hold native locks.
    """
    box = raw if isinstance(raw, list) else [raw]
    del raw
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of fresh objects, none cyclic: the collector would only rescan them
    try:
        if helpers is not None and helpers.forks() and len(box[0]) >= _FORK_MIN_BYTES:
            return _parse_two_way(box, path, helpers, meanwhile)
        return _parse(box, path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(box: list[bytes], path: str) -> Timeline:
    """Decode the event array in batches cut without decoding (:func:`_cut_plan`), so that only
    one batch of decoded events is alive at a time (the decoded objects take about twice the
    text); where the cuts cannot be found or proved, :func:`_parse_split`. The text (``box``'s
    one element) is let go of once every batch is decoded."""
    text = box.pop()
    p = _cut_plan(text)
    if p is not None:
        plan = p
        cols = _assemble(text, plan, path, lambda k: _decode_batch(text, plan, *plan.bounds[k], path))
        if cols is not None:
            del text  # before the columns are sorted
            return cols.finish(plan.doc)
    box.append(text)
    del text
    return _parse_split(box, path)


def _parse_split(box: list[bytes], path: str) -> Timeline:
    """Split the event array into raw slices by decoding it, then decode them in batches: the
    reader of any valid trace, and the one whose errors name the event at fault."""
    style, exact = _style(box[0])
    events, doc = _events(box.pop(), path)
    decoder = _EXACT_BATCH_DECODER if exact else _BATCH_DECODER
    cols = _Columns(path, style)
    for k in range(-(-len(events) // _BATCH_EVENTS)):
        i = k * _BATCH_EVENTS
        text = b"".join((b"[", b",".join(events[i : i + _BATCH_EVENTS]), b"]"))
        cols.merge(_batch_columns(decoder, text, i, style, path))
        del text
    events.clear()  # the slices hold the text: both go here, before the columns are sorted
    return cols.finish(doc)


class _Plan(msgspec.Struct):
    """How the two processes decode a trace: its time style, its top level without the events,
    and each batch's bytes in the text (``[start, end)``, from its first event to its last)."""

    style: str
    exact: bool
    doc: Any
    bounds: list[tuple[int, int]]


def _parse_two_way(box: list[bytes], path: str, helpers: Helpers, meanwhile: Callable[[], object] | None) -> Timeline:
    """:func:`_parse` with the plan made by a forked child (while this process runs
    ``meanwhile``) and the batches decoded from both ends of the text."""
    text = box.pop()

    def plan() -> _Plan:
        return _cut_plan(text) or _split_plan(text, path)

    p, locs = helpers.map(plan, lambda p: len(p.bounds), lambda p, k: _decode_batch(text, p, *p.bounds[k], path), meanwhile, min_size=_FORK_MIN_BATCHES)
    cols = _assemble(text, p, path, locs.__getitem__) if p.bounds else None
    locs.clear()
    box.append(text)
    del text
    if cols is None:  # a batch did not decode: the reader that names the error (or the slices did not point into the text)
        return _parse_split(box, path)
    box.clear()  # the batches were the text's last users: freed before the columns are sorted
    return cols.finish(p.doc)


def _split_plan(text: bytes, path: str) -> _Plan:
    """A plan from the event array split by decoding it (every cut an event's end)."""
    style, exact = _style(text)
    events, doc = _events(text, path)
    return _Plan(style, exact, doc, _batch_bounds(text, events))


def _decode_batch(text: bytes, p: _Plan, a: int, b: int, path: str) -> _Local | None:
    """The columns of ``text[a:b]``'s events; None if that is not a list of valid events (a cut
    in the wrong place, or a bad trace: :func:`_parse_split` then names the error)."""
    loc = batch_columns_or_why(b"".join((b"[", memoryview(text)[a:b], b"]")), p.exact, p.style, path)
    return None if isinstance(loc, str) else loc


BAD_CUT = "bad cut"


def batch_columns_or_why(text: bytes | bytearray, exact: bool, style: str, path: str) -> _Local | str:
    """The columns of one batch ``[...]`` of events, or why not: :data:`BAD_CUT` when the text is
    not whole events (a cut in the wrong place), else the trace's error message (both readers'
    batches, and the out-of-core reader's worker processes)."""
    try:
        events = (_EXACT_BATCH_DECODER if exact else _BATCH_DECODER).decode(text)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if ".ts`" in msg or ".dur`" in msg:
            return "has a time that is not a number; expected microseconds"
        return f"is JSON but not a Chrome/Kineto trace ({msg})"
    except msgspec.DecodeError:
        return BAD_CUT
    except RecursionError:
        return NESTED_TOO_DEEP
    try:
        return _local_columns(events, style, path)
    except TraceFormatError as exc:
        return str(exc.args[0]) if exc.args else "has an event that cannot be read"


def _assemble(text: bytes, p: _Plan, path: str, got: Callable[[int], _Local | None]) -> _Columns | None:
    """The batches' columns merged in order (``got(k)``: batch k's, None where it did not decode).
    A batch that did not decode is joined with the ones after it until the join decodes: each
    batch then decodes as a JSON list and is separated from the next by a comma, so together
    they are exactly the event array (JSON has one parse). None if the end comes first."""
    cols = _Columns(path, p.style)
    n, k = len(p.bounds), 0
    while k < n:
        loc = got(k)
        a = p.bounds[k][0]
        while loc is None and k + 1 < n:
            k += 1
            loc = _decode_batch(text, p, a, p.bounds[k][1], path)
        if loc is None:
            return None
        cols.merge(loc)
        k += 1
    return cols


def _cut_plan(text: bytes) -> _Plan | None:
    """A plan whose batches are cut where an event most likely ends (:mod:`kineto_cuts`), found
    without decoding the events: about :data:`_BATCH_BYTES` of text each. The cuts are proved
    when the batches decode (:func:`_assemble`). None where the text does not look like a trace
    written the usual way (the caller then splits it by decoding: :func:`_split_plan`)."""
    span = events_span(text, _top_level)
    bounds = None if span is None else cut_bounds(text, span[1], span[2], _BATCH_BYTES)
    if span is None or bounds is None:
        return None
    style, exact = _style(text)
    return _Plan(style, exact, span[0], bounds)


def _top_level(text: bytes) -> _SplitDoc | None:
    """The top-level fields in ``text`` (a JSON object without events), None if it is not one."""
    try:
        doc = _SPLIT_DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return doc if isinstance(doc, _SplitDoc) and doc.traceEvents is None else None


def _style(text: bytes) -> tuple[str, bool]:
    """How times are written (see :func:`_fraction_style`), and whether they need exact decoding."""
    texts, big = _sample_fractions(text)
    style = _fraction_style(texts)
    return style, big or style == "unpadded_ns"


def _events(text: bytes, path: str) -> tuple[list[msgspec.Raw], Any]:
    events, doc = _split(text, path)
    if not events:
        raise TraceFormatError(path, "has an empty 'traceEvents' list; expected profiler events")
    return events, doc


def _batch_bounds(text: bytes, events: list[msgspec.Raw]) -> list[tuple[int, int]]:
    """Each batch's ``[start, end)`` in ``text``: from its first event's first byte to its last
    event's last (between two events lie only a comma and white space, so ``[`` + that + ``]``
    is the batch). msgspec's raw slices point into the text they were split from; where one does
    not, [] (the caller splits again)."""
    base = np.frombuffer(text, dtype=np.uint8).ctypes.data
    view = memoryview(text)
    out: list[tuple[int, int]] = []
    for i in range(0, len(events), _BATCH_EVENTS):
        first, last = events[i], events[min(i + _BATCH_EVENTS, len(events)) - 1]
        a = np.frombuffer(first, dtype=np.uint8).ctypes.data - base
        b = np.frombuffer(last, dtype=np.uint8).ctypes.data - base + len(last)
        if not (0 <= a < b <= len(text) and view[a : a + len(first)] == memoryview(first) and view[b - len(last) : b] == memoryview(last)):
            return []
        out.append((a, b))
    return out


def _batch_columns(decoder: msgspec.json.Decoder[Any], text: bytes, offset: int, style: str, path: str) -> _Local:
    """The columns of one batch (a JSON array of events; ``offset``: its first event's index)."""
    try:
        batch = decoder.decode(text)
    except msgspec.ValidationError as exc:
        raise _event_error(path, str(exc), offset) from None
    except msgspec.DecodeError as exc:  # pragma: no cover - the split already parsed the JSON
        raise TraceFormatError(path, f"is not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceFormatError(path, NESTED_TOO_DEEP) from None
    return _local_columns(batch, style, path)


class _SplitDoc(msgspec.Struct):
    """The top level with the events left as raw text slices (no copy, no decoding)."""

    traceEvents: Union[list[msgspec.Raw], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    whyidle_annotation: Any = None  # written by whyidle's Perfetto exports


# Top-level floats arrive as their text (_Num), as in the out-of-core reader's head, so that both
# readers see the same baseTimeNanoseconds (kineto_columns._base_ns reads it exactly).
_SPLIT_DECODER = msgspec.json.Decoder(Union[_SplitDoc, list[msgspec.Raw]], float_hook=_Num)
_BATCH_DECODER = msgspec.json.Decoder(list[_Event])
_EXACT_BATCH_DECODER = msgspec.json.Decoder(list[_ExactEvent], float_hook=_Num)
# Below this many batches (about 8 MB of events) a forked helper costs more than it saves: it
# forks for texts of 8 MiB or more, and decodes no batch when the trace has fewer.
_FORK_MIN_BATCHES = 8
_FORK_MIN_BYTES = 8 << 20
_BATCH_BYTES = 1 << 20  # text per decoded batch (about 2,000 events): peak RSS 74 MiB on the 35 MB ResNet trace (bench_diagnose)
_BATCH_EVENTS = 2048  # events per decoded batch: about 1 MB of text; measured peak RSS 83 MB on the 35 MB ResNet trace (8192: 99 MB)
_AT_EVENT = re.compile(r"\$\[(\d+)\]")
NESTED_TOO_DEEP = "has JSON nested deeper than the decoder allows (thousands of levels); expected a profiler trace"


_WHYIDLE_SAVED = re.compile(rb'"tool"\s*:\s*(?:"whyidle|\{\s*"name"\s*:\s*"whyidle")|"schema"\s*:\s*"whyidle\.')
_SAVED_KIND = re.compile(rb'"kind"\s*:\s*"([a-z_]{1,40})"|"schema"\s*:\s*"whyidle\.([a-z_]{1,40})/')


_SAVED_WHAT = {"report": "report", "multi_rank": "multi-rank report", "comparison": "comparison", "sweep": "sweep", "batching": "batching result", "serving": "serving diagnosis"}


def no_events_error(path: str, head: bytes | bytearray) -> TraceFormatError:
    """The error for a JSON object without a ``traceEvents`` list: a result whyidle saved (a
    report, a comparison, a sweep...) is named as one, with what reads it back."""
    head = bytes(head[:4096])
    kinds = [(m.group(1) or m.group(2)).decode() for m in _SAVED_KIND.finditer(head)]
    kind = next((k for k in kinds if k in _SAVED_WHAT), "report")  # a nested "kind" (a workload's) is not one
    if _WHYIDLE_SAVED.search(head) or kind != "report":  # results saved before their tool field name a kind
        what = _SAVED_WHAT[kind]
        reads = "whyidle compare takes it as a side, and " if kind == "report" else ""
        return TraceFormatError(path, f"is a whyidle {what} saved as JSON, not a profiler trace; {reads}whyidle.load_report() reads it back")
    return TraceFormatError(path, "is a JSON object without a 'traceEvents' list; expected a PyTorch profiler trace")


def _event_error(path: str, msg: str, offset: int) -> TraceFormatError:
    where = _AT_EVENT.sub(lambda m: f"$.traceEvents[{int(m.group(1)) + offset}]", msg.rsplit(" - at ", 1)[-1])
    if ".ts`" in msg or ".dur`" in msg:
        return TraceFormatError(path, f"has a time that is not a number at {where}; expected microseconds")
    return TraceFormatError(path, f"is JSON but not a Chrome/Kineto trace ({msg.rsplit(' - at ', 1)[0]} - at {where})")


def _split(raw: bytes, path: str) -> tuple[list[msgspec.Raw], Any]:
    try:
        doc = _SPLIT_DECODER.decode(raw)
    except RecursionError:
        raise TraceFormatError(path, NESTED_TOO_DEEP) from None
    except msgspec.ValidationError as exc:
        raise TraceFormatError(path, f"is JSON but not a Chrome/Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceFormatError(path, f"the JSON is truncated ({msg}); was the trace fully written?") from None
        raise TraceFormatError(path, f"is not valid JSON ({msg}); expected a PyTorch profiler trace") from None
    if isinstance(doc, list):
        return doc, None
    if doc.traceEvents is None:
        raise no_events_error(path, raw)
    events, doc.traceEvents = doc.traceEvents, None  # the caller frees them when it is done
    return events, doc
