"""Benchmark: the step tracker's overhead, as a share of step time, in the same run.

Two measurements, both tracked vs untracked over the same loader and the same loop:

1. **Bookkeeping per step** (the precise number): a loop whose body does nothing but iterate, so
   all that differs is the tracker's work per step: two clock reads around ``next()``, closing
   the step, one ``tracker.copy()`` block. Reported in microseconds per step (median of
   ``--repeat`` interleaved runs).
2. **A real loop on CPU**: a small MLP's forward/backward/optimizer step on batches from a
   DataLoader, runs alternating tracked and untracked; the median step time of each. The
   difference is within the machine's noise, so the headline ratio is (1) divided by this step
   time: the share of a step the tracker costs.

Target (issue 4): under 1% of step time.

Usage: python3 benchmarks/bench_tracker.py [--steps 300] [--repeat 5] [--width 512]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterable
from typing import Any

import torch

from whyidle.capture.tracker import track


def empty_loop(loader: Iterable[Any], tracked: bool) -> float:
    """Seconds for one pass over ``loader`` with an empty body."""
    t0 = time.perf_counter()
    if tracked:
        tr = track(loader, device="cpu")
        for _ in tr:
            with tr.copy():
                pass
    else:
        for _ in loader:
            pass
    return time.perf_counter() - t0


def train_loop(loader: Iterable[Any], model: Any, opt: Any, tracked: bool) -> list[float]:
    """Per-step seconds of a training pass (host clock, step = next() to next())."""
    times: list[float] = []
    it: Iterable[Any] = track(loader, device="cpu") if tracked else loader
    last = time.perf_counter()
    for x, y in it:
        if tracked:
            with it.copy():  # type: ignore[attr-defined]
                x = x.to("cpu")
        else:
            x = x.to("cpu")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times[1:]  # the first includes loader start-up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    # 1. bookkeeping per step: a list of prebuilt batches, so next() itself costs ~nothing
    batches = [(torch.randn(args.batch, 64), torch.randint(0, 10, (args.batch,))) for _ in range(args.steps)]
    plain, tracked = [], []
    for _ in range(args.repeat):
        plain.append(empty_loop(batches, False))
        tracked.append(empty_loop(batches, True))
    per_step_us = (statistics.median(tracked) - statistics.median(plain)) / args.steps * 1e6

    # 2. a real (small) training loop from a DataLoader
    ds = torch.utils.data.TensorDataset(torch.randn(args.steps * args.batch, 64), torch.randint(0, 10, (args.steps * args.batch,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step_plain, step_tracked = [], []
    for _ in range(max(2, args.repeat // 2)):
        step_plain.append(statistics.median(train_loop(loader, model, opt, False)))
        step_tracked.append(statistics.median(train_loop(loader, model, opt, True)))
    sp, st = statistics.median(step_plain), statistics.median(step_tracked)

    print(f"torch {torch.__version__}, {args.steps} steps x {args.repeat} interleaved repeats, 1 intra-op thread")
    print(f"tracker bookkeeping: {per_step_us:.2f} us per step (empty loop: {statistics.median(plain) / args.steps * 1e6:.2f} -> {statistics.median(tracked) / args.steps * 1e6:.2f} us/step)")
    print(f"training loop step (median): untracked {sp * 1e3:.3f} ms, tracked {st * 1e3:.3f} ms (difference {100 * (st - sp) / sp:+.2f}%, within noise)")
    print(f"overhead ratio: {per_step_us:.2f} us / {sp * 1e3:.3f} ms = {100 * per_step_us * 1e-6 / sp:.3f}% of step time (target < 1%)")
    for ms in (1, 10, 100):
        print(f"  at a {ms} ms step: {100 * per_step_us / (ms * 1e3):.3f}%")


if __name__ == "__main__":
    main()
