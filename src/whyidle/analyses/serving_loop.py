"""A serving loop's traffic and latency curve, measured from the trace's own batches.

``whyidle batching`` needs two things to tune a server: the traffic (requests per second) and
the model's latency per batch size. A trace of a serving loop holds both when it marks each batch
with a range (``record_function("serve_batch")``, or any range or Python function named for
serving) and knows the batch sizes::

    host    [serve_batch: to(8,64,1024) ... linear ...]      [serve_batch: to(1,64,1024) ...]
    device      [k][k][k]  [k]   [k][k]                          [k][k]  [k]
            |<---- one batch of 8: its time ---->|    idle    |<-- a batch of 1 -->|

* the batch ranges: a serving engine's step function (vLLM's ``execute_model``, SGLang's
  ``forward_batch_generation``, TGI's ``generate_token``), else the serving-named range or function
  seen most often on the host (at least ``MIN_BATCHES``), nested ones counted once (the outermost);
  an engine's batch is tokens of many requests, so its input shapes are not taken as a request count;
* each batch's size: the leading dimension of the first op inside it whose input shape is known
  (``record_shapes=True``), or, without shapes, the number of ranges named for a single request
  (``handle_request``, ``request``) nested in it;
* traffic: batches and requests served per second over the first to the last batch, and the
  **arrival rate**: requests per second from the first batch the server had to wait for
  (``AttributionSettings.serving_wait_min_ns`` blocked before or inside it) to the end. Before that it was
  draining a backlog (requests queued before the capture), which inflates the served rate; once
  it waits, it keeps up, and what it serves is what arrived;
* the curve: per batch size, the median and 90th percentile of what the server spent on the
  batch: the range's duration less the time its thread was blocked inside it waiting for
  requests (``queue.get``, a lock, a socket: a loop often waits inside its batch range), host
  dispatch included: the simulator's service time; and the median device time (the batch's
  kernels and copies, found through their launches' correlation, union of their intervals).

What the trace cannot give is named in ``missing``, with the way to get it.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from whyidle.config import AttributionSettings
from whyidle.analyses.hostwork import SERVING_NAME, WorkClass, classify
from whyidle.timeline.arrays import median, one_of, setdiff_sorted, unique_sorted
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import DEVICE_WORK_KINDS, Kind, Timeline

__all__ = ["CurvePoint", "ServingLoop", "serving_loop", "MIN_BATCHES"]

MIN_BATCHES = 3  # fewer batch ranges than this give no rate
_ENGINE_STEP = re.compile(r"(^|[^a-z_])(execute_model|forward_batch_generation|generate_token)$")
_REQUEST = re.compile(r"(?i)(^|[^a-z])(handle_request|request)([^a-z]|$)")
_RANGE_KINDS = (int(Kind.ANNOTATION), int(Kind.PYTHON))


class CurvePoint(msgspec.Struct, frozen=True):
    batch_size: int
    batches: int
    median_ns: float  # the batch range's duration less waits for requests inside it
    p90_ns: float
    device_median_ns: float | None  # the batch's kernels and copies, summed; None without launches


class ServingLoop(msgspec.Struct, frozen=True):
    batch_range: str  # the range taken as one batch ("" when none was found)
    batches: int
    batches_per_s: float | None
    sizes_from: str  # "input shapes", "request ranges" or "" (not known)
    requests: int | None
    requests_per_s: float | None  # served over the first to the last batch
    arrival_per_s: float | None  # served from the first batch the server waited for (None: it never waited)
    arrival_requests: int  # the requests that rate counts
    backlog_batches: int  # batches before that: a queue being drained
    mean_batch: float | None
    curve: tuple[CurvePoint, ...]
    missing: tuple[str, ...]  # what the trace lacks for `whyidle batching`, and how to get it

    def curve_arg(self) -> str:
        """The curve as ``whyidle batching --curve``'s value: batch:median_ms[:p90_ms],..."""
        return ",".join(f"{p.batch_size}:{p.median_ns / 1e6:.3g}:{p.p90_ns / 1e6:.3g}" for p in self.curve)


def _label(name: str) -> str:
    return name.rsplit(": ", 1)[-1]  # a Python frame "file.py(12): serve_batch" -> its function


def _outermost(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Rows (sorted by start) not inside an earlier one: a recursive or nested range counted once."""
    keep = np.ones(starts.size, dtype=bool)
    reach = -1
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        if e <= reach:
            keep[i] = False
        reach = max(reach, e)
    return keep


def _batch_rows(tl: Timeline) -> tuple[str, np.ndarray]:
    """The most frequent serving-named range on one host lane (a batch per row), outermost only."""
    ranges = np.flatnonzero(one_of(tl.kind, _RANGE_KINDS))
    rows = ranges[tl.name_mask(lambda s: bool(_ENGINE_STEP.search(_label(s))), ranges)]
    if rows.size == 0:
        rows = ranges[tl.name_mask(lambda s: bool(SERVING_NAME.search(_label(s))) and not _REQUEST.search(_label(s)), ranges)]
    if rows.size == 0:
        rows = np.flatnonzero(one_of(tl.kind, _RANGE_KINDS))
        rows = rows[tl.name_mask(lambda s: bool(_REQUEST.search(_label(s))), rows)]
    if rows.size == 0:
        return "", rows
    keys, counts = np.unique(np.stack([tl.name[rows], tl.lane[rows]]), axis=1, return_counts=True)
    name, lane = keys[:, int(np.argmax(counts))].tolist()
    sel = rows[(tl.name[rows] == name) & (tl.lane[rows] == lane)]
    sel = sel[np.argsort(tl.start_ns[sel], kind="stable")]
    return _label(tl.strings[name]), sel[_outermost(tl.start_ns[sel], tl.end_ns[sel])]


def _sizes(tl: Timeline, batches: np.ndarray) -> tuple[np.ndarray, str]:
    """Each batch's size from the first known input shape inside it, else its nested request ranges."""
    lane = int(tl.lane[batches[0]])
    engine = bool(_ENGINE_STEP.search(_label(tl.strings[int(tl.name[batches[0]])])))
    on = np.flatnonzero((tl.lane == lane) & (tl.kind == int(Kind.CPU_OP)) & (tl.shape0 > 0) & (not engine))
    req = np.flatnonzero((tl.lane == lane) & one_of(tl.kind, _RANGE_KINDS))
    req = req[tl.name_mask(lambda s: bool(_REQUEST.search(_label(s))), req)]
    req = setdiff_sorted(req, batches)  # both are row numbers; np.isin would import numpy.ma (docs/performance.md)
    by_shape = np.full(batches.size, -1, dtype=np.int64)
    by_req = np.zeros(batches.size, dtype=np.int64)
    for j, b in enumerate(batches.tolist()):
        s, e = int(tl.start_ns[b]), int(tl.end_ns[b])
        inside = on[(tl.start_ns[on] >= s) & (tl.end_ns[on] <= e)]
        if inside.size:
            by_shape[j] = int(tl.shape0[inside[np.argmin(tl.start_ns[inside])]])
        by_req[j] = int(((tl.start_ns[req] >= s) & (tl.end_ns[req] <= e)).sum())
    if (by_shape > 0).all():
        return by_shape, "input shapes"
    if (by_req > 0).all():
        return by_req, "request ranges"
    return np.zeros(0, dtype=np.int64), ""


def _waits(tl: Timeline, lane: int) -> Intervals:
    """When the thread was blocked waiting (queue.get, locks, sockets, sleeps): its wait records."""
    rows = np.flatnonzero((tl.lane == lane) & one_of(tl.kind, _RANGE_KINDS))
    rows = rows[tl.name_mask(lambda s: classify(s) == WorkClass.WAIT, rows)]
    return Intervals.union_of(tl.start_ns[rows], tl.end_ns[rows])


def _device_ns(tl: Timeline, batches: np.ndarray) -> np.ndarray | None:
    """Per batch, the busy time of the device work launched from inside it (union of intervals)."""
    lane = int(tl.lane[batches[0]])
    launches = np.flatnonzero((tl.lane == lane) & (tl.kind == int(Kind.RUNTIME)) & (tl.corr >= 0))
    dev = np.flatnonzero(tl.mask(*DEVICE_WORK_KINDS) & (tl.corr >= 0))
    if launches.size == 0 or dev.size == 0:
        return None
    row_by_corr = dict(zip(tl.corr[dev].tolist(), dev.tolist()))
    out = np.zeros(batches.size, dtype=np.int64)
    for j, b in enumerate(batches.tolist()):
        inside = launches[(tl.start_ns[launches] >= tl.start_ns[b]) & (tl.start_ns[launches] < tl.end_ns[b])]
        rows = np.asarray([row_by_corr[c] for c in tl.corr[inside].tolist() if c in row_by_corr], dtype=np.int64)
        out[j] = Intervals.union_of(tl.start_ns[rows], tl.end_ns[rows]).total() if rows.size else 0
    return out


def _curve(sizes: np.ndarray, dur: np.ndarray, dev: np.ndarray | None) -> tuple[CurvePoint, ...]:
    out = []
    for k in unique_sorted(sizes).tolist():
        sel = sizes == k
        d = dur[sel]
        out.append(CurvePoint(
            int(k), int(sel.sum()), median(d), float(np.percentile(d, 90, method="inverted_cdf")),
            median(dev[sel]) if dev is not None else None,
        ))
    return tuple(out)


def serving_loop(tl: Timeline, cfg: AttributionSettings) -> ServingLoop:
    """The serving loop's traffic and latency per batch size, as far as the trace holds them."""
    name, rows = _batch_rows(tl)
    if rows.size < MIN_BATCHES:
        why = (
            f"only {rows.size} '{name}' range(s) in the trace; capture longer"
            if name
            else "no range marks a batch; wrap each batch in torch.profiler.record_function('serve_batch')"
        )
        return ServingLoop(name, int(rows.size), None, "", None, None, None, 0, 0, None, (), (
            f"the rate of batches and requests: {why}, or give a request log (whyidle serving LOG, whyidle batching --requests LOG)",
            "the latency per batch size: whyidle batching --measure MODULE:FUNCTION (profile_latency times the model per batch size)",
        ))
    starts, ends = tl.start_ns[rows], tl.end_ns[rows]
    waits = _waits(tl, int(tl.lane[rows[0]]))
    inside = waits.overlap(starts, ends)
    busy = (ends - starts) - inside
    # blocked for the next requests: inside the batch range, or between it and the previous one
    before = np.r_[0, waits.overlap(ends[:-1], starts[1:])] + inside
    span_s = (int(ends.max()) - int(starts.min())) / 1e9
    per_s = rows.size / span_s if span_s > 0 else None
    sizes, sizes_from = _sizes(tl, rows)
    if not sizes_from:
        return ServingLoop(name, int(rows.size), per_s, "", None, None, None, 0, 0, None, (), (
            "the batch sizes, hence requests per second and the latency per batch size: capture with "
            "torch.profiler.profile(record_shapes=True), or wrap each request in record_function('handle_request'); "
            "or give a request log (whyidle batching --requests LOG) and measure the curve (whyidle batching --measure MODULE:FUNCTION)",
        ))
    n_req = int(sizes.sum())
    waited = np.flatnonzero(before >= cfg.serving_wait_min_ns)
    arrival = None
    if waited.size and ends[-1] > starts[waited[0]]:
        arrival = int(sizes[waited[0] :].sum()) / ((int(ends[-1]) - int(starts[waited[0]])) / 1e9)
    missing: tuple[str, ...] = ()
    if unique_sorted(sizes).size == 1:
        missing = (
            f"the latency at batch sizes other than {int(sizes[0])}: every batch in the trace held {int(sizes[0])}; "
            "measure the curve with whyidle batching --measure MODULE:FUNCTION (profile_latency)",
        )
    return ServingLoop(
        name, int(rows.size), per_s, sizes_from, n_req, n_req / span_s if span_s > 0 else None, arrival,
        int(sizes[waited[0] :].sum()) if waited.size else 0,
        int(waited[0]) if waited.size else int(rows.size), n_req / rows.size, _curve(sizes, busy, _device_ns(tl, rows)), missing,
    )
