"""Benchmark: what the work model (FLOPs, bytes, roofline, MFU: analyses/work.py) adds to a diagnosis.

For each trace, in one process, rounds alternate between two diagnoses of the same file:

* with the work model: ``whyidle.diagnose(path)`` as shipped (the reader keeps each op's recorded
  inputs, the pipeline measures the work);
* without it: the same call with the reader keeping no inputs texts (``kineto_columns._inputs_columns``
  still gives each op's leading input dimension, which the batch size needs, and drops the texts)
  and the pipeline's ``measure_work`` and ``op_kernels`` replaced by functions that return None, so
  neither cost is paid (the busy-time rules, which read both, then only note the missing shapes).

Each variant's median wall time is reported, and their ratio. ``measure_work`` alone is also timed
on the loaded timeline (its own median). The issue's bar: under 10 % added.

Usage: PYTHONPATH=src python3 benchmarks/bench_work.py [--repeat 5] [TRACE ...]
Default traces, from ../shared/traces: resnet50_num_workers_0 (V100 training, 2,000+ convolutions
with shapes) and the B200 LLM prefill (4,800 ops with shapes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

import whyidle
from whyidle import sources
from whyidle.analyses.links import link_launches
from whyidle.analyses.window import select_window
from whyidle.analyses.work import measure_work
from whyidle.config import Config
from whyidle.sources.kineto_columns import _INPUTS_SEEN
from whyidle.sources.kineto_columns import _inputs_columns as _INPUTS_COLUMNS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT = [SHARED / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz", SHARED / "inference" / "tracelens__b200_eager_llm_prefill_rank0.json.gz"]


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _no_texts(hargs: list[Any]) -> tuple[Any, Any, list[str]]:
    inputs, shape0, _ = _INPUTS_COLUMNS(hargs)
    return np.full(inputs.size, -1, dtype=np.int32), shape0, []


def _without_work(path: Path) -> None:
    _INPUTS_SEEN.clear()
    with mock.patch("whyidle.sources.kineto_columns._inputs_columns", _no_texts), mock.patch("whyidle.pipeline.measure_work", lambda *a: None), mock.patch("whyidle.pipeline.op_kernels", lambda *a: None):
        d = whyidle.diagnose(path, jobs=1)
    assert d.work is None


def _with_work(path: Path) -> None:
    _INPUTS_SEEN.clear()  # as in a fresh process: each distinct inputs text decoded once per process
    d = whyidle.diagnose(path, jobs=1)
    assert d.work is not None


def bench(path: Path, repeat: int) -> dict[str, float]:
    _with_work(path)  # warm: imports, caches, page cache
    with_s, without_s = [], []
    for _ in range(repeat):
        without_s.append(_timed(lambda: _without_work(path)))
        with_s.append(_timed(lambda: _with_work(path)))
    tl = sources.load(path)
    cfg = Config()
    links = link_launches(tl)
    window = select_window(tl, links, cfg.window)
    alone = [_timed(lambda: measure_work(tl, links, window, cfg)) for _ in range(repeat)]
    w, wo = statistics.median(with_s), statistics.median(without_s)
    return {"with_s": w, "without_s": wo, "ratio": w / wo, "measure_work_s": statistics.median(alone)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("traces", nargs="*", type=Path)
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    if not traces:
        print("no traces: ../shared/traces is absent; pass trace paths", file=sys.stderr)
        return 2
    for p in traces:
        r = bench(p, args.repeat)
        print(
            f"{p.name}: with the work model {r['with_s'] * 1e3:.0f} ms, without {r['without_s'] * 1e3:.0f} ms "
            f"(x{r['ratio']:.3f}, {r['ratio'] - 1:+.1%}); measure_work alone {r['measure_work_s'] * 1e3:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
