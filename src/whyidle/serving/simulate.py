"""A discrete-event simulation of a dynamic batcher, exact for a given list of arrival times.

The batcher (Triton's dynamic batching, TorchServe's batch aggregation, Ray Serve's
``@serve.batch``) keeps one FIFO queue and ``instances`` identical model instances. When an
instance is free and requests wait, it sends a batch as soon as ``max_batch`` requests have
arrived, or when the oldest waiting request has waited ``max_delay``, whichever comes first; the
batch holds every request that has arrived by then, up to ``max_batch``::

    arrivals   a0  a1      a2                a3 a4 a5
    queue      |--max_delay--|                |  |  |
    instance   [====batch {a0,a1,a2}=====]   [{a3,a4,a5}: full at a5, sent at once]
               ^ sent at a0 + max_delay       (max_batch = 3)

With preferred sizes (Triton's ``preferred_batch_size``) a batch leaves as soon as the smallest
preferred size has arrived, holding the largest preferred size that has; at the deadline, whatever
waits. A batch of ``k`` takes the profile's latency for ``k`` (optionally times a per-batch factor:
the measured spread, or any service distribution in tests); every request of the batch finishes
when the batch does. Given the arrival times, the sequence of batches is fully determined, so the
simulation walks batches, not events: for the next waiting request ``i`` and the earliest free
instance at ``t_free``, the batch is sent at ``max(t_free, min(a[i + max_batch - 1], a[i] + max_delay))``
and holds the requests that arrived by then. Each step is two comparisons and one binary search;
the per-request latencies come out of one ``numpy.repeat``.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from whyidle.errors import UsageError

__all__ = ["Draws", "Settings", "Simulation", "simulate", "percentile_ns"]


class Settings(msgspec.Struct, frozen=True):
    """Dynamic-batching settings: the largest batch, the longest wait for a fuller one, instances."""

    max_batch: int
    max_delay_ns: int
    instances: int = 1
    # Triton's preferred_batch_size: when one of these (or max_batch) can be formed, the largest
    # that can is sent at once; otherwise the batcher waits up to the delay and sends what waits.
    preferred: tuple[int, ...] = ()


class Simulation(msgspec.Struct, frozen=True):
    """The batches a batcher forms from one arrival list, and what every request experienced."""

    settings: Settings
    batch_start_ns: np.ndarray  # when each batch was sent (int64), in send order
    batch_size: np.ndarray  # requests per batch (int64)
    batch_finish_ns: np.ndarray  # when each batch finished (int64)
    latency_ns: np.ndarray  # per request, arrival to finish (int64), in arrival order
    wait_ns: np.ndarray  # per request, arrival to the start of its batch (int64)
    span_ns: int  # first arrival to last finish

    @property
    def requests(self) -> int:
        return int(self.latency_ns.size)

    @property
    def throughput_per_s(self) -> float:
        return self.requests / (self.span_ns / 1e9) if self.span_ns > 0 else 0.0

    @property
    def mean_batch(self) -> float:
        return float(self.batch_size.mean()) if self.batch_size.size else 0.0

    @property
    def busy_share(self) -> float:
        """Share of instance-time spent running batches (busy instance-ns / (span x instances))."""
        busy = float((self.batch_finish_ns - self.batch_start_ns).sum())
        return busy / (self.span_ns * self.settings.instances) if self.span_ns > 0 else 0.0

    def percentile_ns(self, q: float) -> float:
        return percentile_ns(self.latency_ns, q)


def percentile_ns(values: np.ndarray, q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    if values.size == 0:
        return math.nan
    return float(np.percentile(values, q, method="inverted_cdf"))


class Draws(msgspec.Struct, frozen=True):
    """What varies from batch to batch; the ``j``-th value of each array goes to the ``j``-th batch sent.

    Each is something a user measures rather than a constant to tune:

    * ``scale[j]`` multiplies the batch's time (any distribution: exponential for M/M/1);
    * ``exp(sigma[k] * z[j])``: a log-normal factor of median 1 from a curve's p90/median;
    * ``spread[k]``: the sorted factors (sample / median) that ``profile_latency`` measured at
      batch size ``k``; the batch takes the one at quantile ``u[j]`` (the measured distribution
      itself, tails included, rather than a mean or a fitted shape);
    * ``overhead_ns[j]``: added to the batch's time: the server's own cost per batch (hand-off to
      the model's thread and back; ``whyidle.serving.batcher.measure_overhead``);
    * ``late_ns[j]``: the time an idle instance's timer takes to wake it, added to the deadline;
    * ``timer_ns``: the timer's resolution. asyncio on Linux sleeps in ``epoll_wait`` with the
      timeout rounded *up* to a whole millisecond (``timer_ns=1_000_000``), counted from when the
      loop last went to sleep: the later of the instance freeing up and the last arrival before
      the deadline (each arrival wakes the loop, which sleeps again)::

          last arrival    deadline     timer fires (whole ms after the last sleep)
               |------------|-----------|~wake~> batch sent
                 0.6 ms       + 0.4 ms rounding

      An arrival after the deadline but before the timer fires wakes the loop, which sends the
      batch at once, that arrival included.
        """

    scale: np.ndarray | None = None
    sigma: Sequence[float] | None = None
    z: np.ndarray | None = None
    spread: Sequence[Sequence[float]] | None = None
    u: np.ndarray | None = None
    overhead_ns: np.ndarray | None = None
    late_ns: np.ndarray | None = None
    timer_ns: int = 0


def _timer_fires(a: list[int], i: int, n: int, deadline: int, t_free: int, res: int, wake: int) -> int:
    """When an idle instance waiting on a timer for ``deadline`` sends the batch (see ``Draws``)."""
    after = bisect_right(a, deadline, i, n)  # the first arrival after the deadline
    t = deadline
    if res:
        t_arm = max(t_free, a[after - 1])  # the loop last went to sleep here
        t = t_arm - (t_arm - deadline) // res * res  # t_arm + the remaining time rounded up
    t += wake
    return a[after] if after < n and a[after] < t else t


def _check(n: int, a: np.ndarray, service_ns: Sequence[int], settings: Settings, d: Draws) -> None:
    bmax, delay, c = settings.max_batch, settings.max_delay_ns, settings.instances
    if bmax < 1 or delay < 0 or c < 1:
        raise UsageError(f"batching settings need max_batch >= 1, max_delay >= 0 and instances >= 1 (got {settings})")
    if len(service_ns) <= bmax:
        raise UsageError(f"the service table covers batch sizes up to {len(service_ns) - 1}, below max_batch {bmax}")
    if d.timer_ns < 0:
        raise UsageError(f"the timer's resolution cannot be negative (got {d.timer_ns} ns)")
    if n and bool(np.any(np.diff(a) < 0)):
        raise UsageError("arrival times must be sorted")
    for name in ("scale", "z", "u", "overhead_ns", "late_ns"):
        arr = getattr(d, name)
        if arr is not None and arr.size < n:
            raise UsageError(f"{name} needs one value per possible batch ({n}), got {arr.size}")
    if (d.z is None) != (d.sigma is None) or (d.u is None) != (d.spread is None):
        raise UsageError("z needs sigma (the log-normal spread per batch size), and u needs spread (the measured factors per size)")
    if d.spread is not None and (len(d.spread) <= bmax or any(len(f) == 0 for f in d.spread[1 : bmax + 1])):
        raise UsageError(f"spread needs measured factors for every batch size 1..{bmax}")


def _varied(d: Draws) -> Callable[[int, int, int], int]:
    """The time of the ``j``-th batch, of size ``k`` and table time ``s``, with the draws applied."""
    sc = d.scale.tolist() if d.scale is not None else None
    zz = d.z.tolist() if d.z is not None else None
    sg = list(d.sigma) if d.sigma is not None else []
    uu = d.u.tolist() if d.u is not None else None
    sp = [list(f) for f in d.spread] if d.spread is not None else []
    oh = d.overhead_ns.tolist() if d.overhead_ns is not None else None

    def time_of(j: int, k: int, s: int) -> int:
        f = sc[j] if sc is not None else 1.0
        if zz is not None:
            f *= math.exp(sg[k] * zz[j])
        if uu is not None:
            f *= sp[k][min(int(uu[j] * len(sp[k])), len(sp[k]) - 1)]
        return round(s * f) + (int(oh[j]) if oh is not None else 0)

    return time_of


def simulate(
    arrivals_ns: np.ndarray | Sequence[int], service_ns: Sequence[int], settings: Settings, *, draws: Draws | None = None
) -> Simulation:
    """Run the batcher over sorted arrival times (ns).

    ``service_ns[k]`` is the time of a batch of ``k`` (index 0 unused; see
    ``LatencyProfile.service_table``); ``draws`` makes it vary from batch to batch (``Draws``).
    """
    a_arr = np.asarray(arrivals_ns, dtype=np.int64)
    n = int(a_arr.size)
    d = draws or Draws()
    _check(n, a_arr, service_ns, settings, d)
    bmax, delay, c = settings.max_batch, settings.max_delay_ns, settings.instances
    a, svc = a_arr.tolist(), list(service_ns)
    vary = _varied(d) if any(getattr(d, f) is not None for f in ("scale", "z", "u", "overhead_ns")) else None
    late = d.late_ns.tolist() if d.late_ns is not None else None
    timer = delay > 0 and (late is not None or d.timer_ns > 0)
    starts: list[int] = []
    sizes: list[int] = []
    finishes: list[int] = []
    free = [a[0] if n else 0] * c  # instance free times: a min-heap (all free at the first arrival)
    i = j = 0
    pref = sorted({p for p in settings.preferred if 1 <= p < bmax} | {bmax}) if settings.preferred else []
    trigger = pref[0] if pref else bmax  # the batch count that sends a batch at once
    while i < n:
        t_free = free[0]
        last = i + trigger - 1
        t = a[i] + delay
        if timer and t > t_free:  # an idle instance waits on a timer, which fires late
            t = _timer_fires(a, i, n, t, t_free, d.timer_ns, int(late[j]) if late is not None else 0)
        full = last < n and a[last] <= t
        if full:
            t = a[last]
        if t_free > t:
            t = t_free
            full = last < n and a[last] <= t
        if pref or not full:
            k = bisect_right(a, t, i, min(i + bmax, n)) - i  # waiting, up to max_batch
            if pref and k >= trigger:  # a preferred size can be formed: the largest that fits
                k = pref[bisect_right(pref, k) - 1]
        else:
            k = bmax
        end = t + (svc[k] if vary is None else vary(j, k, svc[k]))
        heapq.heapreplace(free, end)
        starts.append(t)
        sizes.append(k)
        finishes.append(end)
        i += k
        j += 1
    b_start, b_size, b_finish = (np.asarray(x, dtype=np.int64) for x in (starts, sizes, finishes))
    latency = np.repeat(b_finish, b_size) - a_arr
    wait = np.repeat(b_start, b_size) - a_arr
    span = int(b_finish.max() - a_arr[0]) if n else 0
    return Simulation(settings, b_start, b_size, b_finish, latency, wait, span)
