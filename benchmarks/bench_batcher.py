"""Benchmark: the simulator's prediction against the real asyncio batcher on a CPU model.

For several settings, the real ``DynamicBatcher`` serves an open-loop Poisson load on a small
transformer encoder (``whyidle.tune.examples:cpu_encoder``, one torch thread) and every request's
arrival, start and finish is recorded. The simulator then replays the *same* arrival times with
the latency curve measured beforehand by ``profile_latency`` (the prediction a user gets), and
its p99 and throughput are compared with the measured ones. A second replay uses the batch times
the real run measured, which isolates the batching logic from the curve's accuracy.

``--model sleep`` replaces the encoder with ``time.sleep`` of a fixed curve (2 ms + 0.25 ms per
request): the service times are then known exactly, so the comparison tests the batching policy
and the asyncio timing alone, free of the CPU model's noise on a shared machine.

Usage: PYTHONPATH=src python3 benchmarks/bench_batcher.py [--requests 1500] [--load 0.5] [--model encoder|sleep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np
import torch

from whyidle.sources.requestlog import from_records
from whyidle.tune.batcher import DynamicBatcher, generate_load
from whyidle.tune.batching import unit_arrivals
from whyidle.tune.examples import cpu_encoder
from whyidle.tune.latency import profile_latency
from whyidle.tune.simulate import Settings, percentile_ns, simulate

SETTINGS = (Settings(1, 0), Settings(4, 2_000_000), Settings(8, 4_000_000), Settings(16, 8_000_000), Settings(32, 8_000_000))


def _sleep_ns(k: int) -> int:
    return 2_000_000 + 250_000 * k


class SleepCurve:
    """A latency curve known exactly: the sleep model's."""

    def __init__(self, max_batch: int) -> None:
        self.batch_sizes = tuple(range(1, max_batch + 1))
        self.median_ns = tuple(float(_sleep_ns(k)) for k in self.batch_sizes)
        self.p90_ns = None

    def service_table(self, b: int) -> list[int]:
        return [0] + [_sleep_ns(k) for k in range(1, b + 1)]

    def sigma_table(self, b: int) -> list[float]:
        return [0.0] * (b + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"sleep_ns": "2 ms + 0.25 ms x batch"}


def run_real(model: Any, x1: Any, st: Settings, arrivals_s: np.ndarray) -> list[dict[str, int]]:
    def run_batch(items: list[int]) -> list[int]:
        if model is None:
            time.sleep(_sleep_ns(len(items)) / 1e9)
            return items
        with torch.inference_mode():
            model(x1.repeat(len(items), 1, 1))
        return items

    async def main() -> list[dict[str, int]]:
        b: DynamicBatcher[int, int] = DynamicBatcher(run_batch, max_batch=st.max_batch, max_delay_s=st.max_delay_ns / 1e9)
        async with b:
            await generate_load(b, arrivals_s.tolist(), lambda i: i)
        return b.records

    return asyncio.run(main())


def compare(model: Any, x1: Any, curve: Any, st: Settings, rate: float, n: int, seed: int) -> dict[str, Any]:
    arrivals_s = unit_arrivals(n, 1.0, seed=seed) / rate
    arrivals_s -= arrivals_s[0]
    log = from_records(run_real(model, x1, st, arrivals_s), "batcher", "records")
    a = log.arrival_ns - log.arrival_ns[0]
    lat = log.finish_ns - log.arrival_ns
    span = int(log.finish_ns.max() - log.arrival_ns[0])
    measured = {"p99_ms": percentile_ns(lat, 99) / 1e6, "p50_ms": percentile_ns(lat, 50) / 1e6, "throughput_per_s": n / (span / 1e9)}
    svc = curve.service_table(st.max_batch)
    sig = [min(s, 0.75) for s in curve.sigma_table(st.max_batch)]
    z = np.random.default_rng(seed + 7).standard_normal(n)
    sim = simulate(a, svc, st, sigma=sig, z=z)
    predicted = {"p99_ms": sim.percentile_ns(99) / 1e6, "p50_ms": sim.percentile_ns(50) / 1e6, "throughput_per_s": sim.throughput_per_s}
    # replay with the batch times the real run took, in send order
    ids, first = np.unique(log.batch, return_index=True)
    order = np.argsort(log.start_ns[first], kind="stable")
    real_svc = (log.finish_ns[first] - log.start_ns[first])[order]
    real_k = np.bincount(log.batch)[ids][order]
    sizes_table = np.asarray(svc, dtype=np.float64)
    scale = np.ones(n)
    scale[: real_svc.size] = real_svc / sizes_table[real_k]
    replay = simulate(a, svc, st, scale=scale)
    replayed = {"p99_ms": replay.percentile_ns(99) / 1e6, "throughput_per_s": replay.throughput_per_s}
    err = {k: predicted[k] / measured[k] - 1 for k in ("p99_ms", "throughput_per_s")}
    return {"settings": [st.max_batch, st.max_delay_ns / 1e6], "rate_per_s": rate, "requests": n, "measured": measured,
            "predicted": predicted, "replayed_with_real_batch_times": replayed, "relative_error": err,
            "mean_batch_real": float(np.bincount(log.batch).mean()), "mean_batch_sim": sim.mean_batch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--load", type=float, default=0.5, help="offered rate as a share of the capacity without batching (1 / latency at batch 1)")
    ap.add_argument("--model", choices=("encoder", "sleep"), default="encoder")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, x1 = cpu_encoder() if args.model == "encoder" else (None, None)
    rows = []
    for i, st in enumerate(SETTINGS):
        # the curve is measured again before each setting: on a shared machine its speed drifts
        if model is None:
            curve: Any = SleepCurve(32)
        else:
            curve = profile_latency(model, x1, [b for b in (1, 2, 4, 8, 16, 32) if b <= max(st.max_batch, 2)], warmup=5, iters=30)
        print("  curve (ms):", ", ".join(f"{b}: {m / 1e6:.2f} (p90 {q / 1e6:.2f})" for b, m, q in zip(curve.batch_sizes, curve.median_ns, curve.p90_ns or curve.median_ns)))
        rate = args.load / (curve.median_ns[0] / 1e9)  # the same share of the no-batching capacity for all
        r = compare(model, x1, curve, st, rate, args.requests, seed=i)
        rows.append(r)
        e = r["relative_error"]
        print(f"max batch {st.max_batch:>2}, delay {st.max_delay_ns / 1e6:g} ms, {r['rate_per_s']:,.0f}/s: "
              f"p99 measured {r['measured']['p99_ms']:.2f} ms, predicted {r['predicted']['p99_ms']:.2f} ({e['p99_ms']:+.0%}), "
              f"replayed {r['replayed_with_real_batch_times']['p99_ms']:.2f}; throughput {r['measured']['throughput_per_s']:,.0f} vs "
              f"{r['predicted']['throughput_per_s']:,.0f} ({e['throughput_per_s']:+.0%}); mean batch {r['mean_batch_real']:.1f} vs {r['mean_batch_sim']:.1f}")
    within = sum(abs(r["relative_error"]["p99_ms"]) <= 0.10 and abs(r["relative_error"]["throughput_per_s"]) <= 0.10 for r in rows)
    print(f"{within} of {len(rows)} settings within +-10% on both p99 and throughput")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"curve": curve.to_dict(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
