"""Benchmark: the simulator's prediction against the real asyncio batcher on a CPU model.

For several settings, the real ``DynamicBatcher`` serves an open-loop Poisson load on a small
transformer encoder (``whyidle.sweep.examples:cpu_encoder``, one torch thread) and every request's
arrival, start and finish is recorded, with the model call itself (``run_start_ns``,
``run_end_ns``). The simulator then replays the *same* arrival times with inputs measured just
before, as a user would: the latency curve with every pass kept (``profile_latency``;
``profile_function`` of the batch function for the sleep model) and the batcher's own per-batch
overhead and timer lateness at this delay and rate (``measure_overhead``). Its p99 and throughput
are compared with the measured ones, beside the old prediction (the median curve with a
log-normal from p90/median) and a replay with the batch times the real run took (the queue logic
alone). Each real run is split: model call / curve median, overhead, timer lateness.

The prediction is random too (which pass, overhead and lateness each batch draws): it is run with
9 draw seeds and its median is compared; the band (min-max) says whether the measured p99 lies in
what the inputs allow. A p99 of 1,500 requests is the 15th-largest latency, itself noisy.

``--model sleep`` replaces the encoder with ``time.sleep`` of a fixed curve (2 ms + 0.25 ms per
request): the service times are then nearly fixed, so the comparison tests the batching policy
and the asyncio timing alone, free of the CPU model's noise on a shared machine.

Usage: PYTHONPATH=src python3 benchmarks/bench_batcher.py [--requests 1500] [--load 0.5] [--model encoder|sleep] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from whyidle.serving.requestlog import from_records
from whyidle.serving.batcher import DynamicBatcher, Overhead, curve_from_records, generate_load, measure_overhead, overhead_from_records
from whyidle.serving.batching import unit_arrivals
from whyidle.sweep.examples import cpu_encoder
from whyidle.serving.latency import curve_from_samples, profile_function, profile_latency
from whyidle.serving.simulate import Draws, Settings, percentile_ns, simulate

DRAW_SEEDS = 9
TIMER_NS = 1_000_000  # asyncio's epoll timeout resolution on Linux (whole milliseconds, rounded up)
SETTINGS = (Settings(1, 0), Settings(4, 2_000_000), Settings(8, 4_000_000), Settings(16, 8_000_000), Settings(32, 8_000_000))


def _sleep_ns(k: int) -> int:
    return 2_000_000 + 250_000 * k


def make_run_batch(model: Any, x1: Any) -> Callable[[list[int]], list[int]]:
    def run_batch(items: list[int]) -> list[int]:
        if model is None:
            time.sleep(_sleep_ns(len(items)) / 1e9)
            return items
        with torch.inference_mode():
            model(x1.repeat(len(items), 1, 1))
        return items

    return run_batch


def run_real(run_batch: Callable[[list[int]], list[int]], st: Settings, arrivals_s: np.ndarray) -> list[dict[str, int]]:
    async def main() -> list[dict[str, int]]:
        b: DynamicBatcher[int, int] = DynamicBatcher(run_batch, max_batch=st.max_batch, max_delay_s=st.max_delay_ns / 1e9)
        async with b:
            await generate_load(b, arrivals_s.tolist(), lambda i: i)
        return b.records

    return asyncio.run(main())


def _figures(lat: np.ndarray, span_ns: int) -> dict[str, float]:
    return {"p99_ms": percentile_ns(lat, 99) / 1e6, "p50_ms": percentile_ns(lat, 50) / 1e6, "throughput_per_s": lat.size / (span_ns / 1e9)}


def _q_ms(x: np.ndarray) -> list[float]:
    return [round(float(np.percentile(x, q)) / 1e6, 3) for q in (50, 90, 99)] if x.size else []


def where_it_went(records: list[dict[str, int]], st: Settings, curve: Any) -> dict[str, Any]:
    """The real run's batches split: model call vs the curve, per-batch overhead, timer lateness (p50/p90/p99 ms)."""
    ov = overhead_from_records(records, st.max_batch, st.max_delay_ns, TIMER_NS)
    first: dict[int, dict[str, int]] = {}
    sizes: dict[int, int] = {}
    for r in records:
        first.setdefault(r["batch_id"], r)
        sizes[r["batch_id"]] = sizes.get(r["batch_id"], 0) + 1
    svc = curve.service_table(st.max_batch)
    ratio = np.asarray([(r["run_end_ns"] - r["run_start_ns"]) / svc[sizes[b]] for b, r in first.items()])
    return {"overhead_ms": _q_ms(ov.overhead_ns), "timer_late_ms": _q_ms(ov.late_ns),
            "model_over_curve_median": [round(float(np.percentile(ratio, q)), 3) for q in (50, 90, 99)]}


def in_service_curve(run_batch: Any, st: Settings, rate: float, profiled: Any, seed: int) -> Any:
    """The model's curve as it ran in a calibration run of the batcher (other arrivals, 600
    requests); sizes it did not see take the profiled curve, scaled by the in-service/profiled
    ratio at the largest size it saw."""
    arrivals_s = unit_arrivals(600, 1.0, seed=seed + 50) / rate
    cal = curve_from_records(run_real(run_batch, st, arrivals_s - arrivals_s[0]), min_batches=3)
    sizes, med, smp = list(cal.batch_sizes), list(cal.median_ns), list(cal.samples_ns or ())
    ratio = med[-1] / profiled.service_table(sizes[-1])[sizes[-1]]
    for b, m, x in zip(profiled.batch_sizes, profiled.median_ns, profiled.samples_ns or ()):
        if b > sizes[-1]:
            sizes.append(b)
            med.append(m * ratio)
            smp.append(tuple(v * ratio for v in x))
    return curve_from_samples({b: list(x) for b, x in zip(sizes, smp)}, source="in service")


def _predict(a: np.ndarray, curve: Any, over: Overhead, st: Settings, n: int, seed: int) -> tuple[Any, list[float]]:
    """The median of DRAW_SEEDS simulations (by p99) and the p99s' band."""
    svc = curve.service_table(st.max_batch)
    sims = []
    for k in range(DRAW_SEEDS):
        extra, late = over.draws(n, seed * 100 + k)
        r = np.random.default_rng(seed * 100 + k)
        sims.append(simulate(a, svc, st, draws=Draws(spread=curve.spread_table(st.max_batch), u=r.random(n), overhead_ns=extra, late_ns=late, timer_ns=TIMER_NS)))
    p99s = sorted(x.percentile_ns(99) / 1e6 for x in sims)
    return sims[int(np.argsort([x.percentile_ns(99) for x in sims])[DRAW_SEEDS // 2])], [p99s[0], p99s[-1]]


def compare(run_batch: Any, curve: Any, over: Overhead, st: Settings, rate: float, n: int, seed: int, served: Any = None) -> dict[str, Any]:
    arrivals_s = unit_arrivals(n, 1.0, seed=seed) / rate
    arrivals_s -= arrivals_s[0]
    records = run_real(run_batch, st, arrivals_s)
    log = from_records(records, "batcher", "records")
    a = log.arrival_ns - log.arrival_ns[0]
    measured = _figures(log.finish_ns - log.arrival_ns, int(log.finish_ns.max() - log.arrival_ns[0]))
    svc = curve.service_table(st.max_batch)
    rng = np.random.default_rng(seed + 7)
    # what the simulator predicted before: the median curve with a log-normal from p90/median
    sig = [min(x, 0.75) for x in curve.sigma_table(st.max_batch)]
    before = simulate(a, svc, st, draws=Draws(sigma=sig, z=rng.standard_normal(n)))
    # now: the passes profile_latency kept, the batcher's measured overhead and timer lateness
    # the prediction is itself random (which pass, overhead and lateness each batch draws): its
    # p99 over DRAW_SEEDS seeds gives the band the measured value should fall in
    sim, band = _predict(a, curve, over, st, n, seed)
    extra, late = over.draws(n, seed)
    # replay with the batch times the real run took, in send order (the queue logic alone)
    ids, first = np.unique(log.batch, return_index=True)
    order = np.argsort(log.start_ns[first], kind="stable")
    real_svc = (log.finish_ns[first] - log.start_ns[first])[order]
    real_k = np.bincount(log.batch)[ids][order]
    scale = np.ones(n)
    scale[: real_svc.size] = real_svc / np.asarray(svc, dtype=np.float64)[real_k]
    replay = simulate(a, svc, st, draws=Draws(scale=scale, late_ns=late, timer_ns=TIMER_NS))
    if served is not None:  # with the curve timed in service (a calibration run)
        sim_s, band_s = _predict(a, served, over, st, n, seed)
    out = {"measured": measured, "predicted": _figures(sim.latency_ns, sim.span_ns), "predicted_p99_band_ms": band,
           "predicted_median_curve_only": _figures(before.latency_ns, before.span_ns),
           "replayed_with_real_batch_times": _figures(replay.latency_ns, replay.span_ns)}
    err = {k: out["predicted"][k] / measured[k] - 1 for k in ("p99_ms", "throughput_per_s")}
    return {"settings": [st.max_batch, st.max_delay_ns / 1e6], "rate_per_s": rate, "requests": n, **out, "relative_error": err,
            "relative_error_before": {k: out["predicted_median_curve_only"][k] / measured[k] - 1 for k in ("p99_ms", "throughput_per_s")},
            "mean_batch_real": float(np.bincount(log.batch).mean()), "mean_batch_sim": sim.mean_batch,
            "where_it_went": where_it_went(records, st, curve),
            **({"predicted_in_service_curve": _figures(sim_s.latency_ns, sim_s.span_ns), "in_service_band_ms": band_s,
                "relative_error_in_service_curve": {k: _figures(sim_s.latency_ns, sim_s.span_ns)[k] / measured[k] - 1 for k in ("p99_ms", "throughput_per_s")}}
               if served is not None else {}),
            "measured_beforehand": {"overhead_ms": _q_ms(over.overhead_ns), "timer_late_ms": _q_ms(over.late_ns)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--load", type=float, default=0.5, help="offered rate as a share of the capacity without batching (1 / latency at batch 1)")
    ap.add_argument("--model", choices=("encoder", "sleep"), default="encoder")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--in-service", action="store_true", help="also predict with the model's curve timed inside the batcher (a calibration run per setting)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, x1 = cpu_encoder() if args.model == "encoder" else (None, None)
    run_batch = make_run_batch(model, x1)
    rows = []
    for i, st in enumerate(SETTINGS):
        # the inputs are measured again before each setting (on a shared machine speed drifts):
        # the curve with every pass kept, and the batcher's overhead and timer at this delay and rate
        sizes = [b for b in (1, 2, 4, 8, 16, 32) if b <= max(st.max_batch, 2)]
        if model is None:
            curve: Any = profile_function(lambda k: run_batch(list(range(k))), sizes, warmup=3, iters=30)
        else:
            curve = profile_latency(model, x1, sizes, warmup=5, iters=30)
        print("  curve (ms):", ", ".join(f"{b}: {m / 1e6:.2f} (p90 {q / 1e6:.2f})" for b, m, q in zip(curve.batch_sizes, curve.median_ns, curve.p90_ns or curve.median_ns)))
        rate = args.load / (curve.median_ns[0] / 1e9)  # the same share of the no-batching capacity for all
        over = measure_overhead(max(st.max_delay_ns, 1_000_000) / 1e9, rate, 600, seed=i, timer_ns=TIMER_NS)
        served = in_service_curve(run_batch, st, rate, curve, seed=i) if args.in_service else None
        r = compare(run_batch, curve, over, st, rate, args.requests, seed=i, served=served)
        rows.append(r)
        e, b, w = r["relative_error"], r["relative_error_before"], r["where_it_went"]
        print(f"max batch {st.max_batch:>2}, delay {st.max_delay_ns / 1e6:g} ms, {r['rate_per_s']:,.0f}/s: "
              f"p99 measured {r['measured']['p99_ms']:.2f} ms, predicted {r['predicted']['p99_ms']:.2f} ({e['p99_ms']:+.0%}; "
              f"median curve only {r['predicted_median_curve_only']['p99_ms']:.2f}, {b['p99_ms']:+.0%}), "
              f"band {r['predicted_p99_band_ms'][0]:.2f}-{r['predicted_p99_band_ms'][1]:.2f}, "
              f"replayed {r['replayed_with_real_batch_times']['p99_ms']:.2f}; throughput {r['measured']['throughput_per_s']:,.0f} vs "
              f"{r['predicted']['throughput_per_s']:,.0f} ({e['throughput_per_s']:+.0%}); mean batch {r['mean_batch_real']:.2f} vs {r['mean_batch_sim']:.2f}")
        print(f"    where it went (p50/p90/p99): overhead {w['overhead_ms']} ms, timer late {w['timer_late_ms']} ms, "
              f"model / curve median {w['model_over_curve_median']}; measured beforehand: overhead "
              f"{r['measured_beforehand']['overhead_ms']} ms, timer late {r['measured_beforehand']['timer_late_ms']} ms")
        if "predicted_in_service_curve" in r:
            print(f"    with the curve timed in service: p99 {r['predicted_in_service_curve']['p99_ms']:.2f} ms "
                  f"({r['relative_error_in_service_curve']['p99_ms']:+.0%}), band {r['in_service_band_ms'][0]:.2f}-{r['in_service_band_ms'][1]:.2f}")
    keys = [("relative_error", "now"), ("relative_error_before", "median curve only")]
    if args.in_service:
        keys.append(("relative_error_in_service_curve", "with the curve timed in service"))
    for key, name in keys:
        within = sum(abs(r[key]["p99_ms"]) <= 0.10 and abs(r[key]["throughput_per_s"]) <= 0.10 for r in rows)
        print(f"{name}: {within} of {len(rows)} settings within +-10% on both p99 and throughput")
    inside = sum(r["predicted_p99_band_ms"][0] <= r["measured"]["p99_ms"] <= r["predicted_p99_band_ms"][1] for r in rows)
    print(f"measured p99 inside the prediction's band ({DRAW_SEEDS} draw seeds) in {inside} of {len(rows)} settings")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "load": args.load, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
