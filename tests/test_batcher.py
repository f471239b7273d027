"""The asyncio dynamic batcher and the load generator, on a real CPU model (bounded time, in process)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from whyidle.errors import UsageError
from whyidle.serving.requestlog import from_records
from whyidle.serving.batcher import DynamicBatcher, generate_load
from whyidle.serving.traffic import analyse_requests


def _serve(run_batch: Any, arrivals_s: list[float], max_batch: int, delay_s: float, instances: int = 1) -> tuple[list[Any], list[dict[str, int]]]:
    async def main() -> tuple[list[Any], list[dict[str, int]]]:
        b: DynamicBatcher[int, Any] = DynamicBatcher(run_batch, max_batch=max_batch, max_delay_s=delay_s, instances=instances)
        results: list[Any] = []
        async with b:
            async def one(i: int, at: float) -> None:
                await asyncio.sleep(at)
                results.append((i, await b.submit(i)))

            await asyncio.gather(*(one(i, at) for i, at in enumerate(arrivals_s)))
        return results, b.records

    return asyncio.run(main())


def test_real_model_batches_within_its_settings() -> None:
    torch = pytest.importorskip("torch")
    from whyidle.sweep.examples import tiny_encoder

    model, x1 = tiny_encoder()

    def run_batch(items: list[int]) -> list[float]:
        with torch.inference_mode():
            out = model(x1.repeat(len(items), 1, 1))
        return [float(out[k].sum()) + i for k, i in enumerate(items)]  # each result carries its request

    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.002, 120)).tolist()
    delay = 0.004
    results, records = _serve(run_batch, arrivals, max_batch=8, delay_s=delay)
    assert len(results) == 120 and len(records) == 120
    with torch.inference_mode():
        ref = float(model(x1).sum())
    for i, r in results:
        assert r == pytest.approx(ref + i, abs=1e-3)  # the right result went to the right request
    log = from_records(records, "batcher")
    st = analyse_requests(log)
    assert max(st.batch_sizes) <= 8 and st.batches is not None and st.batches < 120  # it did batch
    # a batch smaller than max_batch never leaves before its oldest request's deadline
    for bid in np.unique(log.batch):
        sel = log.batch == bid
        if sel.sum() < 8:
            assert log.start_ns[sel][0] >= log.arrival_ns[sel].min() + int(delay * 1e9)
    # one instance runs one batch at a time
    ids, first = np.unique(log.batch, return_index=True)
    order = np.argsort(log.start_ns[first])
    s, f = log.start_ns[first][order], log.finish_ns[first][order]
    assert (s[1:] >= f[:-1]).all()


def test_load_generator_is_open_loop_and_failures_reach_the_callers() -> None:
    calls: list[int] = []

    def run_batch(items: list[int]) -> list[int]:
        calls.append(len(items))
        if 3 in items:
            raise RuntimeError("bad request")
        return items

    async def main() -> list[dict[str, int]]:
        b: DynamicBatcher[int, int] = DynamicBatcher(run_batch, max_batch=2, max_delay_s=0.0)
        async with b:
            await generate_load(b, [0.0, 0.0, 0.01, 0.01, 0.02], lambda i: i)
            with pytest.raises(RuntimeError):
                await b.submit(3)
            assert await b.submit(7) == 7  # the batcher kept serving after a failed batch
        return b.records

    records = asyncio.run(main())
    assert len(records) == 7 and max(calls) <= 2
    with pytest.raises(UsageError):
        DynamicBatcher(run_batch, max_batch=0, max_delay_s=0.0)


def test_two_instances_share_the_queue() -> None:
    import time

    def run_batch(items: list[int]) -> list[int]:
        time.sleep(0.01)
        return items

    results, records = _serve(run_batch, [0.0] * 6, max_batch=2, delay_s=0.0, instances=2)
    assert sorted(r for _, r in results) == list(range(6))
    log = from_records(records, "batcher")
    starts = sorted(set(log.start_ns.tolist()))
    assert len(starts) == 3 or len(starts) == 4  # 3 batches of 2 (a late wake-up may split one)
    # two batches ran at the same time
    ids, first = np.unique(log.batch, return_index=True)
    s, f = log.start_ns[first], log.finish_ns[first]
    assert any(s[j] < f[i] and s[i] < f[j] for i in range(len(s)) for j in range(i + 1, len(s)))


def test_records_split_the_model_call_from_the_batcher_overhead() -> None:
    import time

    from whyidle.serving.batcher import overhead_from_records

    def run_batch(items: list[int]) -> list[int]:
        time.sleep(0.002)
        return items

    _, records = _serve(run_batch, [0.0, 0.0005, 0.05], max_batch=4, delay_s=0.003)
    for r in records:
        assert r["start_ns"] <= r["run_start_ns"] <= r["run_end_ns"] <= r["finish_ns"]
        assert r["run_end_ns"] - r["run_start_ns"] >= 2_000_000  # the sleep itself
    ov = overhead_from_records(records, 4, 3_000_000)
    assert ov.overhead_ns.size == 2 and (ov.overhead_ns >= 0).all()
    assert ov.late_ns.size == 2 and (ov.late_ns >= 0).all()  # both batches left on their timer, after it


def test_measure_overhead_draws() -> None:
    from whyidle.serving.batcher import measure_overhead

    ov = measure_overhead(0.002, rate_per_s=400, requests=60)
    assert ov.overhead_ns.size > 0 and ov.late_ns.size > 0
    assert (ov.late_ns >= 0).all() and (np.diff(ov.overhead_ns) >= 0).all()  # sorted samples
    extra, late = ov.draws(1000, seed=1)
    assert extra.size == late.size == 1000 and set(late.tolist()) <= set(ov.late_ns.tolist())
    with pytest.raises(UsageError):
        measure_overhead(0.0)


def test_profile_function_keeps_every_pass_and_the_tuner_draws_them(tmp_path: Any) -> None:
    import json

    from whyidle.serving.latency import load_latency, profile_function

    now = [0]
    calls = [0]

    def run(k: int) -> None:  # 0.5 ms x k on a fake clock, every other pass 10% slower
        calls[0] += 1
        now[0] += 500_000 * k + (50_000 * k if calls[0] % 2 else 0)

    prof = profile_function(run, [1, 2, 4], warmup=1, iters=7, clock=lambda: now[0])
    # steady at once: the 3 windows of 7 passes are kept, every one of them
    assert prof.samples_ns is not None and [len(x) for x in prof.samples_ns] == [21, 21, 21]
    assert prof.median_ns[2] >= 2_000_000 and prof.notes == ()
    table = prof.spread_table(3)
    # size 3 was not measured: it takes the factors of the next size up (4)
    assert table is not None and len(table) == 4 and table[3] == sorted(x / prof.median_ns[2] for x in prof.samples_ns[2])
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(prof.to_dict()))
    again = load_latency(path)
    assert again.samples_ns == prof.samples_ns  # the passes survive --save-latency


def test_overhead_from_records_exactly() -> None:
    from whyidle.serving.batcher import overhead_from_records

    ms = 1_000_000

    def rec(arrival: float, start: float, finish: float, bid: int, run: tuple[float, float]) -> dict[str, int]:
        return {"arrival_ns": int(arrival * ms), "start_ns": int(start * ms), "finish_ns": int(finish * ms), "batch_id": bid,
                "run_start_ns": int(run[0] * ms), "run_end_ns": int(run[1] * ms)}

    records = [
        rec(0, 5.5, 9, 0, (5.6, 8.9)),  # deadline 5 ms, sent by the timer at 5.5
        rec(1.4, 5.5, 9, 0, (5.6, 8.9)),
        rec(6, 9.1, 12, 1, (9.2, 11)),  # deadline 11 ms but sent at 9.1: not by a timer
        rec(20, 25.05, 27, 2, (25.06, 26)),  # deadline 25 ms: the arrival at 25.05 woke the loop
        rec(25.05, 25.05, 27, 2, (25.06, 26)),
    ]
    ov = overhead_from_records(records, 4, 5 * ms)
    assert ov.overhead_ns.tolist() == [200_000, 1_010_000, 1_100_000]  # (finish - start) - (run_end - run_start)
    assert ov.late_ns.tolist() == [500_000]  # batch 0 only, from its deadline
    # with a 1 ms timer: the loop last slept at the arrival at 1.4 ms; 3.6 ms left round up to
    # 4, so the timer fired at 5.4 ms and the wake-up took 0.1 ms
    assert overhead_from_records(records, 4, 5 * ms, timer_ns=ms).late_ns.tolist() == [100_000]


def test_curve_from_records_is_the_model_call_per_batch_size() -> None:
    from whyidle.serving.batcher import curve_from_records

    def rec(bid: int, run: tuple[int, int]) -> dict[str, int]:
        return {"arrival_ns": 0, "start_ns": 0, "finish_ns": 0, "batch_id": bid, "run_start_ns": run[0], "run_end_ns": run[1]}

    records = [rec(b, (0, 10 + b)) for b in range(3)] + [rec(b, (0, 100 + b)) for b in (3, 3, 4, 4, 5, 5)] + [rec(6, (0, 7))]
    curve = curve_from_records(records)
    assert curve.batch_sizes == (1, 2)  # four batches of 1 (ids 0, 1, 2, 6), three of 2
    assert curve.samples_ns == ((7.0, 10.0, 11.0, 12.0), (103.0, 104.0, 105.0)) and curve.median_ns == (11.0, 104.0)
    with pytest.raises(UsageError):
        curve_from_records(records[:2])
