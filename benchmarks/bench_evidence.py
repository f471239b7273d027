"""Benchmark: report-building time against a trace tiled 1x, 4x, 16x (evidence extraction scaling).

The evidence behind each cause (the ops open at each gap, its Python line, the op tallies:
``whyidle.analyses.context``) is computed for all gaps at once, in O(n log n) of the events. This
checks it: one trace's Timeline is tiled k times (each copy shifted in time past the previous
one, with fresh correlation ids and step numbers), so gaps and host events grow together, and
each stage is timed on each size (least CPU time of this process over ``--repeat`` runs: the
work is single-threaded, and CPU time does not count the turns other processes take on a shared
machine):

* analyse   ``pipeline.analyse``: links, window, gaps, utilisation, kernels, quality
* evidence  the context of every gap and the evidence of every cause with idle time, from a
            fresh index (what the report's findings and gap records read)
* report    ``pipeline.report_from``: findings (with their evidence), predictions, gap records

and the growth is printed as the time ratio to 1x beside k and k log k (linear and n log n growth).

Usage: python3 benchmarks/bench_evidence.py [TRACE] [--tiles 1,4,16] [--repeat 3]
Default trace: the generated compiled-backward trace (benchmarks/gen_backward.py, 12 MB, seed 0),
deep cpu_op nesting and no Python stacks.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_backward import write_backward_trace  # noqa: E402

from whyidle.analyses import causes as C  # noqa: E402
from whyidle.analyses.context import ThreadIndex, cause_evidence  # noqa: E402
from whyidle.config import Config  # noqa: E402
from whyidle.pipeline import analyse, report_from  # noqa: E402
from whyidle.sources import load  # noqa: E402
from whyidle.timeline.model import Kind, Timeline  # noqa: E402

_TIME = ("start_ns", "end_ns")


def tile(tl: Timeline, k: int) -> Timeline:
    """``tl`` repeated ``k`` times end to end: copy i shifted by i x (span + 1 ms), correlation ids
    by i x (largest + 1), step markers renumbered (ProfilerStep#n -> #n + i x steps)."""
    span = int(tl.end_ns.max() - tl.start_ns.min()) + 1_000_000
    corr_step = int(tl.corr.max()) + 1
    strings = list(tl.strings)
    steps = np.flatnonzero(tl.kind == int(Kind.STEP))
    n_steps = max(steps.size, 1)
    cols: dict[str, list[np.ndarray]] = {c: [] for c in tl.COLUMNS}
    for i in range(k):
        for c in tl.COLUMNS:
            v = getattr(tl, c)
            if c in _TIME:
                v = v + i * span
            elif c == "corr":
                v = np.where(v >= 0, v + i * corr_step, v)
            elif c == "name" and i and steps.size:
                v = v.copy()
                for r in steps.tolist():
                    base = tl.strings[int(tl.name[r])]
                    head, _, num = base.rpartition("#")
                    new = f"{head}#{int(num) + i * n_steps}" if num.isdigit() else base
                    strings.append(new)
                    v[r] = len(strings) - 1
            cols[c].append(v)
    out = {c: np.concatenate(v) for c, v in cols.items()}
    return Timeline(**out, lanes=tl.lanes, strings=strings, meta=tl.meta)


def best(fn: Callable[[], object], repeat: int, setup: Callable[[], object] = lambda: None) -> float:
    """Least time of ``fn(setup())`` (``fn()`` without a setup) over ``repeat`` runs; setup not timed."""
    times = []
    for _ in range(repeat):
        arg = setup()
        t0 = time.process_time()
        fn() if arg is None else fn(arg)  # type: ignore[call-arg]
        times.append(time.process_time() - t0)
    return min(times)


def evidence(tl: Timeline, cfg: Config) -> Callable[[], object]:
    a = analyse(tl, cfg)
    causes = [ci for ci in range(len(C.CAUSES)) if len(a.gaps) and a.gaps.slices[:, ci].any()]

    def run() -> object:
        index = ThreadIndex(tl)
        index.contexts(a.gaps)
        return [cause_evidence(tl, a.gaps, ci, index) for ci in causes]

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--tiles", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg = Config()
    with tempfile.TemporaryDirectory() as d:
        path = args.trace or write_backward_trace(Path(d) / "backward.json", target_mb=12.0, seed=0)
        base = load(path)
    print(f"trace: {args.trace or 'generated compiled backward (12 MB, seed 0)'}; least CPU seconds of {args.repeat} runs")
    print(f"{'tiles':>5} {'rows':>9} {'gaps':>7} {'analyse':>8} {'evidence':>9} {'report':>8} {'evid/1x':>8} {'report/1x':>9} {'k':>4} {'k log k':>8}")
    first: tuple[float, float, int] | None = None
    for k in (int(x) for x in args.tiles.split(",")):
        tl = tile(base, k)
        t_an = best(lambda: analyse(tl, cfg), args.repeat)
        a = analyse(tl, cfg)
        t_ev = best(evidence(tl, cfg), args.repeat)
        t_rep = best(lambda fresh: report_from(fresh, cfg), args.repeat, setup=lambda: analyse(tl, cfg))  # type: ignore[misc]
        if first is None:
            first = (t_ev, t_rep, len(tl))
        ratio_n = len(tl) / first[2]
        nlogn = ratio_n * math.log(len(tl)) / math.log(first[2])
        print(
            f"{k:5d} {len(tl):9d} {len(a.gaps):7d} {t_an:8.3f} {t_ev:9.3f} {t_rep:8.3f} "
            f"{t_ev / first[0]:8.2f} {t_rep / first[1]:9.2f} {ratio_n:4.0f} {nlogn:8.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
