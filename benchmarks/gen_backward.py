"""A generated Kineto trace shaped like a compiled backward with gradient accumulation.

It stresses evidence extraction (``whyidle.analyses.context``): thousands of device gaps, each
under a deep stack of ``cpu_op`` ranges on the launching thread, and no Python stacks (no
``Call stack`` arguments, no ``python_function`` events), so every search for a Python line
comes back empty and would walk the whole nest. The shape::

    ProfilerStep#n
      for each micro-batch (gradient accumulation):
        forward: a few top-level ops, each launching kernels
        autograd::engine::evaluate_function: CompiledFunctionBackward
          CompiledFunctionBackward
            Torch-Compiled Region
              ## Call CompiledFxGraph ##
                (depth more levels of aten ops) -> cudaLaunchKernel -> kernel
        aten::add_ per parameter group (the accumulation)
      optimizer step

Kernels are short next to the host's dispatch through the nest, so the device idles between
most of them (host overhead). Deterministic: ``random.Random(seed)``.

Usage: python3 benchmarks/gen_backward.py OUT.json [--mb 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

__all__ = ["write_backward_trace"]

_PID, _TID, _STREAM = 4242, 4242, 7
_NEST = ["aten::mm", "aten::matmul", "aten::linear", "aten::addmm", "aten::bmm", "aten::mul", "aten::add", "aten::sum", "aten::view", "aten::t"]
_KERNELS = ["sm90_xmma_gemm_bf16bf16_bf16f32", "triton_poi_fused_mul_0", "triton_red_fused_sum_1", "void at::native::elementwise_kernel<128, 2>"]


class _Writer:
    """Appends Kineto events; times in microseconds, as Kineto writes them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.t = 1_000_000.0  # host clock, us
        self.dev_free = 0.0
        self.corr = 1_000_000  # as in long runs: HTA 0.5.0 stores small ids as int16, then fails to write row numbers into them
        self.events: list[dict[str, Any]] = []

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": _PID, "tid": _TID, "ts": round(ts, 3), "dur": round(dur, 3), "args": {"External id": len(self.events)}})

    def launch(self) -> None:
        self.corr += 1
        host = 4.0 + self.rng.random() * 2
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": _PID, "tid": _TID, "ts": round(self.t, 3), "dur": round(host, 3), "args": {"correlation": self.corr, "cbid": 211}}
        )
        start = max(self.dev_free + 1.0, self.t + 3.0)
        dur = 2.0 + self.rng.random() * 8
        args = {"device": 0, "context": 1, "stream": _STREAM, "correlation": self.corr, "grid": [132, 1, 1], "block": [256, 1, 1]}
        name = _KERNELS[self.corr % len(_KERNELS)]
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": _STREAM, "ts": round(start, 3), "dur": round(dur, 3), "args": args})
        self.dev_free = start + dur
        self.t += host

    def nested(self, names: list[str], leaves: int) -> None:
        """``names[0]`` containing ``names[1]``... the innermost launching ``leaves`` kernels."""
        start = self.t
        self.t += 1.0 + self.rng.random()
        if len(names) == 1:
            for _ in range(leaves):
                self.t += 8.0 + self.rng.random() * 20  # dispatch: the device drains meanwhile
                self.launch()
        else:
            self.nested(names[1:], leaves)
        self.t += 1.0 + self.rng.random()
        self.cpu(names[0], start, self.t - start)

    def backward(self, depth: int, ops: int) -> None:
        start = self.t
        self.t += 2.0
        outer = ["CompiledFunctionBackward", "Torch-Compiled Region: 1/0", "## Call CompiledFxGraph f3k2 ##"]
        inner_start = self.t
        for i in range(ops):
            chain = [_NEST[(i + k) % len(_NEST)] for k in range(depth)]
            self.nested(chain, 1 + i % 3)
        self.t += 2.0
        for k, name in enumerate(reversed(outer)):  # enclose the ops, innermost first
            self.cpu(name, inner_start - 0.5 * (k + 1), self.t - inner_start + 0.5 * (2 * k + 2))
        self.t += 2.0
        self.cpu("autograd::engine::evaluate_function: CompiledFunctionBackward", start, self.t - start)


def _step(w: _Writer, n: int, micro: int, depth: int, ops: int) -> None:
    start = w.t
    w.t += 5.0
    for _ in range(micro):
        for name in ("aten::embedding", "aten::linear", "aten::layer_norm"):
            w.nested([name, "aten::" + name.split("::")[1] + "_impl"], 2)
        w.t += 10.0 + w.rng.random() * 30  # Python between forward and backward: untraced
        w.backward(depth, ops)
        for _ in range(4):  # gradient accumulation into .grad
            w.nested(["aten::add_"], 1)
    w.nested(["Optimizer.step#AdamW.step", "aten::_foreach_add_", "aten::_fused_adamw_"], 3)
    w.t += 5.0
    w.cpu(f"ProfilerStep#{n}", start, w.t - start, cat="user_annotation")


def write_backward_trace(path: Path, target_mb: float = 50.0, seed: int = 0, depth: int = 24, ops: int = 300, micro: int = 2) -> Path:
    """Write the trace as plain JSON to ``path``, steps added until it holds ``target_mb`` MB."""
    w = _Writer(random.Random(seed))
    n = 0
    approx = 0
    while approx < target_mb * 1e6:
        before = len(w.events)
        _step(w, n, micro, depth, ops)
        approx += (len(w.events) - before) * 135  # bytes per event, about
        n += 1
    w.events.sort(key=lambda e: (e["ts"], -e["dur"]))
    meta = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": _PID, "tid": 0, "args": {"name": "python"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": _PID, "tid": _TID, "args": {"name": "thread 4242 (python)"}},
    ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": meta + w.events,
        "whyidle_synthetic": f"generated by benchmarks/gen_backward.py (seed {seed}); not recorded on a GPU",
    }
    path.write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p = write_backward_trace(args.out, args.mb, args.seed)
    print(f"{p}: {p.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
