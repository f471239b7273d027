"""Benchmark: how fast the batching simulator and the tuner run (issue 13: a million simulated
requests in about a second).

1. One simulation of 1,000,000 Poisson requests against the H200 encoder's measured curve
   (tests/data/h200/measured.json), for a few settings: batch size 1 is the slow case (one loop
   step per request), large batches take one step per batch. Median of ``--repeat`` runs.
2. The whole default search of ``whyidle batching`` on that curve (9 max batch sizes x 6 delays,
   capacity by doubling + bisection, 20,000 requests per run, p90 spread drawn).

Usage: PYTHONPATH=src python3 benchmarks/bench_batching.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from whyidle.serving.batching import Traffic, tune_batching, unit_arrivals
from whyidle.serving.latency import load_latency
from whyidle.serving.simulate import Draws, Settings, simulate

CURVE = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200" / "measured.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    prof = load_latency(CURVE)
    n = 1_000_000
    unit = unit_arrivals(n, 1.0, seed=0)
    for st, rate in ((Settings(1, 0), 300.0), (Settings(32, 2_000_000), 5_000.0), (Settings(256, 1_000_000), 15_000.0)):
        a = np.asarray(np.rint(unit * (1e9 / rate)), dtype=np.int64)
        svc = prof.service_table(st.max_batch)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            sim = simulate(a, svc, st)
            times.append(time.perf_counter() - t0)
        print(f"simulate 1,000,000 requests, max batch {st.max_batch:>3}, delay {st.max_delay_ns / 1e6:g} ms, {rate:,.0f}/s: "
              f"{statistics.median(times):.3f} s (median of {args.repeat}; {sim.batch_size.size:,} batches, p99 {sim.percentile_ns(99) / 1e6:.2f} ms)")
    # with every per-batch draw a real run needs: measured passes per size, overhead, late timer
    st, rate = Settings(1, 0), 300.0
    a = np.asarray(np.rint(unit * (1e9 / rate)), dtype=np.int64)
    rng = np.random.default_rng(1)
    spread = [[1.0]] + [sorted(rng.lognormal(0.0, 0.1, 30).tolist())]
    draws = Draws(spread=spread, u=rng.random(n), overhead_ns=rng.integers(50_000, 200_000, n), late_ns=rng.integers(100_000, 200_000, n), timer_ns=1_000_000)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sim = simulate(a, prof.service_table(1), Settings(1, 2_000_000), draws=draws)
        times.append(time.perf_counter() - t0)
    print(f"simulate 1,000,000 requests, max batch   1, delay 2 ms, {rate:,.0f}/s, with measured-pass, overhead and 1 ms timer draws: "
          f"{statistics.median(times):.3f} s (median of {args.repeat})")
    traffic = Traffic(unit_arrivals(20_000, 1.0), 125.0, 1.0, "poisson")
    t0 = time.perf_counter()
    res = tune_batching(prof, traffic, 50_000_000)
    dt = time.perf_counter() - t0
    assert res.best is not None
    print(f"tune (defaults, p99 <= 50 ms at 125/s): {dt:.2f} s for {res.simulations} simulations; "
          f"best max batch {res.best.settings.max_batch}, delay {res.best.settings.max_delay_ns / 1e6:g} ms, capacity {res.best.capacity_per_s:,.0f}/s")


if __name__ == "__main__":
    main()
