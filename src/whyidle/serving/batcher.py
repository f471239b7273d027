"""A dynamic batcher for asyncio services, and an open-loop load generator to measure it.

The batcher is the policy the simulator models (``whyidle.serving.simulate``), so the settings the
tuner recommends can be used as they are::

    batcher = DynamicBatcher(run_model, max_batch=32, max_delay_s=0.002)
    async with batcher:
        result = await batcher.submit(request)          # from each request handler

``run_model(items) -> results`` takes a list and returns one result per item, in order; it runs
in a worker thread (``asyncio.to_thread``) so arrivals keep being accepted while a batch runs
(PyTorch releases the GIL inside its kernels). ``instances`` workers share one queue.

Each worker takes the oldest waiting request, then waits until ``max_batch`` requests are waiting
or the oldest has waited ``max_delay_s`` since it *arrived* (not since the worker became free),
and runs what is waiting, up to ``max_batch``. Every request's arrival, batch start and finish are
kept in ``batcher.records`` in the request-log fields (``arrival_ns``, ``start_ns``, ``finish_ns``,
``batch_id``), so ``whyidle serving`` and ``whyidle batching --requests`` read them directly.

Each record also holds ``run_start_ns`` and ``run_end_ns``, the model call itself as timed in
the worker thread, so a log splits every batch into what the model took and what the batcher
added::

    arrival   deadline  start  run_start            run_end  finish
    |--delay--|--late---|-hand-|======= model =======|-back--|
                          off                         (overhead = hand-off + back)

``generate_load(batcher, arrivals_s, make_item)`` submits requests at given times from now (open
loop: a slow server does not slow the arrivals) and returns when all have finished.

``measure_overhead()`` measures, with a no-op model, the two costs the batcher adds to the
model's own latency: the per-batch overhead and how late a deadline's timer fires; the simulator
draws from both (``whyidle.serving.simulate.Draws``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from whyidle.errors import UsageError
from whyidle.serving.latency import LatencyProfile, curve_from_samples

__all__ = ["DynamicBatcher", "Overhead", "curve_from_records", "generate_load", "measure_overhead", "overhead_from_records"]

T = TypeVar("T")
R = TypeVar("R")


class _Pending(Generic[T, R]):
    __slots__ = ("item", "arrival_ns", "future")

    def __init__(self, item: T, arrival_ns: int, future: asyncio.Future[R]) -> None:
        self.item = item
        self.arrival_ns = arrival_ns
        self.future = future


class DynamicBatcher(Generic[T, R]):
    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R]],
        *,
        max_batch: int,
        max_delay_s: float,
        instances: int = 1,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if max_batch < 1 or max_delay_s < 0 or instances < 1:
            raise UsageError("DynamicBatcher needs max_batch >= 1, max_delay_s >= 0 and instances >= 1")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_delay_ns = int(max_delay_s * 1e9)
        self.instances = instances
        self.clock_ns = clock_ns
        self.records: list[dict[str, int]] = []
        self._queue: deque[_Pending[T, R]] = deque()
        self._changed: asyncio.Condition | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._batches = 0

    async def __aenter__(self) -> DynamicBatcher[T, R]:
        self._changed = asyncio.Condition()
        self._workers = [asyncio.create_task(self._work()) for _ in range(self.instances)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def submit(self, item: T) -> R:
        if self._changed is None:
            raise UsageError("use the batcher inside 'async with batcher:'")
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(item, self.clock_ns(), fut))
        async with self._changed:
            self._changed.notify_all()
        return await fut

    async def _wait_change(self, timeout_s: float | None) -> None:
        assert self._changed is not None
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass

    async def _work(self) -> None:
        while True:
            while not self._queue:
                await self._wait_change(None)
            # wait for a full batch or the oldest request's deadline
            while len(self._queue) < self.max_batch:
                left_ns = self._queue[0].arrival_ns + self.max_delay_ns - self.clock_ns()
                if left_ns <= 0:
                    break
                await self._wait_change(left_ns / 1e9)
                if not self._queue:  # another instance took them
                    break
            if not self._queue:
                continue
            batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
            if self._queue and self.instances > 1:
                assert self._changed is not None
                async with self._changed:
                    self._changed.notify_all()  # wake another instance for the rest
            bid = self._batches
            self._batches += 1
            start = self.clock_ns()
            timed = [start, start]  # the model call itself, timed in the worker thread
            try:
                results = await asyncio.to_thread(self._timed, [p.item for p in batch], timed)
                if len(results) != len(batch):
                    raise UsageError(f"run_batch returned {len(results)} results for {len(batch)} requests")
            except Exception as exc:  # the requests fail, the batcher keeps serving
                finish = self.clock_ns()
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
            else:
                finish = self.clock_ns()
                for p, r in zip(batch, results):
                    if not p.future.done():
                        p.future.set_result(r)
            for p in batch:
                self.records.append({"arrival_ns": p.arrival_ns, "start_ns": start, "finish_ns": finish, "batch_id": bid,
                                     "run_start_ns": timed[0], "run_end_ns": timed[1]})

    def _timed(self, items: list[T], timed: list[int]) -> Sequence[R]:
        timed[0] = self.clock_ns()
        try:
            return self.run_batch(items)
        finally:
            timed[1] = self.clock_ns()


async def generate_load(batcher: DynamicBatcher[T, Any], arrivals_s: Sequence[float], make_item: Callable[[int], T]) -> None:
    """Submit request ``i`` at ``arrivals_s[i]`` seconds from now (open loop); return when all finished."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tasks = []
    for i, at in enumerate(arrivals_s):
        delay = t0 + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(batcher.submit(make_item(i))))
    await asyncio.gather(*tasks, return_exceptions=True)


class Overhead(msgspec.Struct, frozen=True):
    """What a batcher adds to its model's latency, per batch (ns samples, sorted)."""

    overhead_ns: np.ndarray  # (finish - start) - (run_end - run_start): hand-off to the thread and back
    late_ns: np.ndarray  # start - (oldest arrival + max_delay), for batches a timer sent

    def draws(self, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n`` draws of each (with replacement), for ``Draws(overhead_ns=..., late_ns=...)``."""
        rng = np.random.default_rng(seed)
        late = self.late_ns if self.late_ns.size else np.zeros(1, dtype=np.int64)
        return rng.choice(self.overhead_ns, n), rng.choice(late, n)


def overhead_from_records(records: Sequence[dict[str, int]], max_batch: int, max_delay_ns: int, timer_ns: int = 0) -> Overhead:
    """The batcher's own costs from its records: every batch's overhead, and how late the timer
    woke the worker for batches a timer sent: below ``max_batch``, no earlier batch still running
    at the deadline (else it waited for the instance), no arrival between the deadline and the
    send (which woke the loop itself). With ``timer_ns`` (the timer's resolution, see
    ``simulate.Draws``) the lateness is counted from when the rounded-up timeout ended, so what
    is left is the wake-up itself; without it, from the deadline."""
    first: dict[int, dict[str, int]] = {}
    oldest: dict[int, int] = {}
    count: dict[int, int] = {}
    for r in records:
        b = r["batch_id"]
        first.setdefault(b, r)
        oldest[b] = min(oldest.get(b, r["arrival_ns"]), r["arrival_ns"])
        count[b] = count.get(b, 0) + 1
    over = [(r["finish_ns"] - r["start_ns"]) - (r["run_end_ns"] - r["run_start_ns"]) for r in first.values()]
    arrivals = np.sort(np.asarray([r["arrival_ns"] for r in records], dtype=np.int64))
    late: list[int] = []
    busy_until = -1  # the latest finish of the batches sent so far
    for b, r in sorted(first.items(), key=lambda kv: kv[1]["start_ns"]):
        deadline, start = oldest[b] + max_delay_ns, r["start_ns"]
        after = int(np.searchsorted(arrivals, deadline, side="right"))
        woken = after < arrivals.size and arrivals[after] <= start  # an arrival woke the loop
        if max_delay_ns > 0 and count[b] < max_batch and busy_until < deadline <= start and not woken:
            fires = deadline
            if timer_ns:
                t_arm = max(busy_until, int(arrivals[after - 1]))
                fires = t_arm - (t_arm - deadline) // timer_ns * timer_ns
            late.append(max(start - fires, 0))
        busy_until = max(busy_until, r["finish_ns"])
    return Overhead(np.sort(np.asarray(over, dtype=np.int64)), np.sort(np.asarray(late, dtype=np.int64)))


def measure_overhead(
    max_delay_s: float = 0.002, rate_per_s: float = 200.0, requests: int = 600, seed: int = 0, timer_ns: int = 0
) -> Overhead:
    """Serve ``requests`` single requests through a ``DynamicBatcher`` with a no-op model and no
    batch limit, one at a time after a random pause (exponential, mean ``1 / rate_per_s``), so
    every batch leaves on its deadline's timer and no other arrival cuts the wait short.

    One at a time matters: under traffic, a batch whose timer fires late is often sent early by
    the next arrival, so counting only the batches a timer sent keeps the prompt wake-ups and
    drops the slow ones. With ``timer_ns=1_000_000`` the millisecond rounding of asyncio's epoll
    timeout is taken out (the simulator models it, ``Draws.timer_ns``) and what is left is the
    wake-up itself. Measure on the machine and event loop that will serve, at its usual load.
    """
    if max_delay_s <= 0 or rate_per_s <= 0 or requests < 1:
        raise UsageError("measure_overhead needs max_delay_s > 0, rate_per_s > 0 and requests >= 1")
    pauses = np.random.default_rng(seed).exponential(1 / rate_per_s, requests).tolist()

    async def run() -> list[dict[str, int]]:
        b: DynamicBatcher[int, int] = DynamicBatcher(lambda items: items, max_batch=requests + 1, max_delay_s=max_delay_s)
        async with b:
            for i, pause in enumerate(pauses):
                await asyncio.sleep(pause)
                await b.submit(i)
        return b.records

    return overhead_from_records(asyncio.run(run()), requests + 1, int(max_delay_s * 1e9), timer_ns)


def curve_from_records(records: Sequence[dict[str, int]], min_batches: int = 3) -> LatencyProfile:
    """The model's latency per batch size as it ran *in service*: each batch's model call
    (``run_end_ns - run_start_ns``), every call kept, for sizes seen at least ``min_batches`` times.

    A model timed alone (``profile_latency``) can be faster than in a service: its thread shares
    the GIL and the cores with the event loop taking arrivals, so a CPU model whose time is mostly
    Python dispatch slows down with the request rate. A log of the service at one setting gives
    the curve the simulator needs to predict the others.
    """
    by_batch: dict[int, tuple[int, int]] = {}
    sizes: dict[int, int] = {}
    for r in records:
        by_batch[r["batch_id"]] = (r["run_start_ns"], r["run_end_ns"])
        sizes[r["batch_id"]] = sizes.get(r["batch_id"], 0) + 1
    times: dict[int, list[float]] = {}
    for b, (s, e) in by_batch.items():
        times.setdefault(sizes[b], []).append(float(e - s))
    kept = {k: v for k, v in times.items() if len(v) >= min_batches}
    if not kept:
        raise UsageError(f"no batch size was seen {min_batches} times in the records; serve more requests")
    return curve_from_samples(kept, source=f"in service: {len(by_batch)} batches")
