"""Benchmark: what a sweep costs besides the training it measures.

1. **One trial's fixed cost**, with a workload whose step does nothing: the trial process's
   start (a fresh interpreter importing whyidle), ``setup`` (importing torch and the target,
   ``make(cfg)``), warm-up and the measurement (at least three 200 ms windows). Median of
   ``--repeat`` trials.
2. **A typical sweep**: the lab MLP (examples/sweep_lab.py) over ``--batch-size 16..1024`` with
   fp32 and bf16: how many trials, how long in all, and the recommended configuration.

Usage: python3 benchmarks/bench_sweep.py [--repeat 3] [--skip-sweep]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

from whyidle.sweep.runner import FunctionRunner
from whyidle.sweep.search import Space, run_sweep
from whyidle.sweep.trial import Trial

EMPTY = textwrap.dedent(
    """
    import whyidle
    def make(cfg):
        return whyidle.Workload(step=lambda b: None, loader=range(1000), samples_per_step=cfg.batch_size)
    """
)
ROOT = Path(__file__).resolve().parent.parent


def fixed_cost(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "empty.py"
        spec.write_text(EMPTY)
        runner = FunctionRunner(f"{spec}:make", warmup=10, max_steps=50, time_limit_s=60)
        rows = []
        for _ in range(repeat):
            r = runner.run(Trial(batch_size=8))
            assert r.ok, r.message
            start = r.wall_ns - r.setup_ns - r.warmup_ns - r.measure_ns
            rows.append((r.wall_ns, start, r.setup_ns, r.warmup_ns, r.measure_ns))
    med = [statistics.median(c) / 1e6 for c in zip(*rows)]
    print(f"one trial, empty step (median of {repeat}): {med[0]:.0f} ms in all = process start and imports {med[1]:.0f} ms "
          f"+ setup (torch, make) {med[2]:.0f} ms + warm-up {med[3]:.1f} ms + measurement {med[4]:.0f} ms")


def typical_sweep() -> None:
    runner = FunctionRunner(f"{ROOT / 'examples' / 'sweep_lab.py'}:make", warmup=5, max_steps=50, time_limit_s=120)
    t0 = time.perf_counter()
    sw = run_sweep(Space(batch_lo=16, batch_hi=1024, levers={"precision": ["fp32", "bf16"]}), runner)
    wall = time.perf_counter() - t0
    best = sw.best
    assert best is not None
    per = statistics.median(r.wall_ns for r in sw.trials) / 1e9
    print(f"lab MLP sweep (CPU, batch 16..1024, fp32/bf16): {len(sw.trials)} trials in {wall:.1f} s (median trial {per:.1f} s); "
          f"recommended {best.trial.label()} at {best.samples_per_s:.0f} samples/s; batch search ended at "
          f"{'a plateau' if sw.batch.plateau else 'the end of the range'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-sweep", action="store_true")
    a = ap.parse_args()
    fixed_cost(a.repeat)
    if not a.skip_sweep:
        typical_sweep()


if __name__ == "__main__":
    main()
