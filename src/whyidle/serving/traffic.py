"""What a request log says about the traffic and the server: rates, bursts, queues, batches, idle time.

Every figure is computed from the per-request arrival, start and finish times (ns)::

    request   arrival        start           finish
    r0        |--- wait ------|=== batch 0 ===|
    r1           |-- wait ----|=== batch 0 ===|
    r2                                           |-wait-|=== batch 1 ===|
    server    ....idle.......[=== busy ======]..idle...[==== busy =====]
                 ^ no request in the system: demand        ^ a request waits, nothing runs: batching delay

* **rate** requests / (last arrival - first arrival); **burstiness** the squared coefficient of
  variation of the gaps between arrivals (Poisson 1, evenly spaced 0, bursts > 1);
  **peak rate** the most arrivals in any window of ``traffic_peak_window_ns`` (a tenth of the
  arrival span for logs shorter than ten windows).
* **concurrency** (in the system: arrival to finish) and **queue depth** (arrival to start), as
  time averages over the window and maxima; Little's law ``L = rate x mean latency`` is given
  beside the measured mean as a check of the log.
* **server busy** the union of batch run times ``[start, finish]``; **idle with no request** the
  window minus the union of ``[arrival, finish]`` of all requests (nothing to do: demand);
  **idle with requests waiting** the union of ``[arrival, start]`` minus the busy time (the
  batcher held them: its queue delay).
* **left behind**: a batch sent while another request had already arrived and was not in it, with
  fewer requests than the server's max batch (given, else the largest batch the log shows; a
  server that never ran a batch of two could have taken every waiting request).
"""

from __future__ import annotations

import math

from typing import Any

import msgspec
import numpy as np

from whyidle.config import Config
from whyidle.findings.fields import FLOAT, INT, NAN_FLOAT, Field, Opt, Table, Value
from whyidle.serving.requestlog import RequestLog
from whyidle.timeline.intervals import Intervals
from whyidle.serving.batching import Traffic
from whyidle.serving.simulate import percentile_ns

__all__ = ["RequestStats", "STATS", "analyse_requests", "traffic_from_log"]


class RequestStats(msgspec.Struct, frozen=True):
    requests: int
    window_ns: int  # first arrival to last finish
    rate_per_s: float
    burstiness: float
    peak_rate_per_s: float
    peak_window_ns: int
    concurrency_mean: float
    concurrency_max: int
    littles_law_concurrency: float  # rate x mean latency
    queue_depth_mean: float | None  # None without start times
    queue_depth_max: int | None
    latency_p50_ns: float
    latency_p90_ns: float
    latency_p95_ns: float
    latency_p99_ns: float
    wait_p50_ns: float | None
    wait_p99_ns: float | None
    batches: int | None
    batch_sizes: dict[int, int]  # size -> number of batches
    mean_batch: float | None
    server_busy_ns: int | None
    idle_no_request_ns: int
    idle_requests_waiting_ns: int | None
    left_behind_batches: int | None
    left_behind_busy_ns: int | None  # run time of the batches that left requests behind
    arrivals_to_idle_server: float | None  # share of requests arriving while no batch ran

    def share(self, ns: int | None) -> float:
        return (ns or 0) / self.window_ns if self.window_ns > 0 else 0.0


class _SizeCounts(Value):
    """Batch size -> number of batches (JSON holds the sizes as strings)."""

    def dec(self, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError(f"expected an object, found {type(v).__name__}")
        return {INT.dec(k): INT.dec(v[k]) for k in v}


STATS = Table(
    RequestStats,
    Field("requests", INT),
    Field("window_ns", INT, "first arrival to last finish"),
    Field("rate_per_s", NAN_FLOAT, "requests over the arrival span (null: one arrival time)"),
    Field("burstiness", NAN_FLOAT, "squared coefficient of variation of the gaps between arrivals (Poisson 1, even 0, bursts > 1)"),
    Field("peak_rate_per_s", NAN_FLOAT, "the most arrivals in any window of `peak_window_ns`"),
    Field("peak_window_ns", INT),
    Field("concurrency_mean", FLOAT, "requests in the system (arrival to finish), time average"),
    Field("concurrency_max", INT),
    Field("littles_law_concurrency", NAN_FLOAT, "rate x mean latency: a check of the log against `concurrency_mean`"),
    Field("queue_depth_mean", Opt(FLOAT), "requests waiting (arrival to start), time average; null without start times"),
    Field("queue_depth_max", Opt(INT)),
    Field("latency_p50_ns", FLOAT),
    Field("latency_p90_ns", FLOAT),
    Field("latency_p95_ns", FLOAT),
    Field("latency_p99_ns", FLOAT),
    Field("wait_p50_ns", Opt(FLOAT), "arrival to start; null without start times"),
    Field("wait_p99_ns", Opt(FLOAT)),
    Field("batches", Opt(INT), "null without start times"),
    Field("batch_sizes", _SizeCounts(), "batch size -> number of batches"),
    Field("mean_batch", Opt(FLOAT)),
    Field("server_busy_ns", Opt(INT), "the union of batch run times"),
    Field("idle_no_request_ns", INT, "no request in the system: demand"),
    Field("idle_requests_waiting_ns", Opt(INT), "requests waiting, nothing running: the batcher's queue delay"),
    Field("left_behind_batches", Opt(INT), "batches sent while another request waited, with room for it"),
    Field("left_behind_busy_ns", Opt(INT), "their run time"),
    Field("arrivals_to_idle_server", Opt(FLOAT), "share of requests arriving while no batch ran"),
)


def _level(up: np.ndarray, down: np.ndarray, lo: int, hi: int) -> tuple[float, int]:
    """Time-average and maximum of a count that rises at ``up`` and falls at ``down`` (ns)."""
    t = np.concatenate([up, down])
    d = np.concatenate([np.ones(up.size, np.int64), -np.ones(down.size, np.int64)])
    order = np.lexsort((d, t))  # at a tie the fall comes first: a request that leaves as another arrives
    t, d = t[order], d[order]
    level = np.cumsum(d)
    dt = np.diff(np.append(t, hi))
    avg = float((level * dt).sum()) / (hi - lo) if hi > lo else 0.0
    return avg, int(level.max()) if level.size else 0


def analyse_requests(log: RequestLog, cfg: Config | None = None, max_batch: int | None = None) -> RequestStats:
    """The figures above. ``max_batch``: the server's configured largest batch, if known."""
    cfg = cfg or Config()
    a, s, f = log.arrival_ns, log.start_ns, log.finish_ns
    n = log.requests
    lo, hi = int(a[0]), int(f.max())
    span = int(a[-1] - a[0])
    rate = (n - 1) / (span / 1e9) if span > 0 else math.nan
    gaps = np.diff(a).astype(np.float64)
    burst = float(gaps.var() / gaps.mean() ** 2) if gaps.size > 1 and gaps.mean() > 0 else math.nan
    # a log shorter than ten windows gets windows of a tenth of its span, so the peak can exceed the mean
    win = max(min(cfg.serving.traffic_peak_window_ns, span // 10), 1)
    ends = np.searchsorted(a, a + win, side="left")
    peak = float((ends - np.arange(n)).max()) / (win / 1e9) if span > 0 else math.nan
    lat = f - a
    conc_avg, conc_max = _level(a, f, lo, hi)
    in_system = Intervals.union_of(a, f)
    idle_none = (hi - lo) - in_system.total()
    has_start = log.has_start
    q_avg = q_max = None
    wait50 = wait99 = None
    busy = idle_wait = None
    left = left_busy = None
    to_idle = None
    sizes: dict[int, int] = {}
    mean_batch = None
    nb = None
    if has_start:
        q_avg_f, q_max_i = _level(a, s, lo, hi)
        q_avg, q_max = q_avg_f, q_max_i
        wait = s - a
        wait50, wait99 = percentile_ns(wait, 50), percentile_ns(wait, 99)
        ids, first, counts = np.unique(log.batch, return_index=True, return_counts=True)
        b_start, b_finish = s[first], f[first]
        nb = int(ids.size)
        vals, cnt = np.unique(counts, return_counts=True)
        sizes = {int(v): int(c) for v, c in zip(vals, cnt)}
        mean_batch = float(counts.mean())
        running = Intervals.union_of(b_start, b_finish)
        busy = running.total()
        idle_wait = (Intervals.union_of(a, s) - running).total()
        # requests that had arrived by a batch's start but started later: left behind by it
        order = np.argsort(b_start, kind="stable")
        b_start_o, counts_o, b_finish_o = b_start[order], counts[order], b_finish[order]
        arrived = np.searchsorted(a, b_start_o, side="right")
        started_by = np.searchsorted(np.sort(s), b_start_o, side="right")
        waiting = arrived - started_by  # arrived by then, not yet started (not in this batch or earlier)
        biggest = int(counts.max())
        # the batch could have held more: below the configured max, else below the largest seen
        # (a server that never batched, largest 1, could have taken every waiting request)
        cap = max_batch if max_batch else (biggest if biggest > 1 else n + 1)
        lb = (waiting > 0) & (counts_o < cap)
        left = int(lb.sum())
        left_busy = int((b_finish_o - b_start_o)[lb].sum())
        # (a - 1: a request arriving as a batch starts is usually that batch's own)
        to_idle = float((~running.contains(a - 1)).mean())
    return RequestStats(
        n, hi - lo, rate, burst, peak, win, conc_avg, conc_max,
        rate * float(lat.mean()) / 1e9 if math.isfinite(rate) else math.nan,
        q_avg, q_max,
        percentile_ns(lat, 50), percentile_ns(lat, 90), percentile_ns(lat, 95), percentile_ns(lat, 99),
        wait50, wait99, nb, sizes, mean_batch, busy, idle_none, idle_wait, left, left_busy, to_idle,
    )


def traffic_from_log(log: RequestLog, n: int) -> Traffic:
    """The log's arrivals as a unit-rate template for the tuner, tiled to at least ``n`` requests.

    The gaps keep their order (bursts stay bursts); tiling repeats the log's sequence of gaps.
    """
    gaps = np.diff(log.arrival_ns).astype(np.float64)
    if gaps.size == 0 or gaps.sum() <= 0:
        from whyidle.errors import InputError

        raise InputError(log.source, "needs at least two requests at different arrival times to replay its traffic")
    mean = gaps.mean()
    unit = gaps / mean
    reps = max(1, math.ceil(n / unit.size))
    tiled = np.tile(unit, reps)
    times: np.ndarray = np.concatenate([[0.0], np.cumsum(tiled)])
    rate = float(1e9 / mean)
    burst = float(gaps.var() / mean**2)
    return Traffic(times, rate, burst, f"replayed from {log.source} ({log.requests} requests{', tiled' if reps > 1 else ''})")
