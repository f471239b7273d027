"""What kind of job the trace shows, and the evidence that decided it.

* ``training``: a backward pass or an optimizer step (``autograd::engine``, ``*Backward*``,
  ``Optimizer.step``, or backward kernels);
* ``serving``: no training, and frames or ranges of a serving engine or server (vLLM, SGLang, TGI,
  TorchServe, Triton's Python backend, Ray Serve, uvicorn/FastAPI, gRPC), or ranges and functions
  named for serving requests (``serve_batch``, ``handle_request``);
* ``inference``: framework ops (``aten::``) without training or serving evidence: offline or
  batch inference, benchmarks, tests;
* ``non_pytorch``: device work with host records but no PyTorch op or frame at all: CUDA C/C++,
  CuPy, HPC codes under Nsight Systems;
* ``unknown``: nothing decides (no device work, or no host records).

Only a serving workload can be short of demand: the insufficient-demand cause needs both this
and the launching thread blocked waiting (``analyses/hostwork.py``), never the absence of evidence.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np

from whyidle.analyses.hostwork import SERVING_ENGINE, SERVING_NAME
from whyidle.timeline.model import DEVICE_WORK_KINDS, Kind, Timeline
from whyidle.timeline.arrays import one_of

__all__ = ["Workload", "workload_kind", "KINDS", "TRAINING_MARKERS"]

KINDS = ("training", "serving", "inference", "non_pytorch", "unknown")
TRAINING_MARKERS = ("Backward", "backward", "Optimizer.", "AccumulateGrad", "autograd::engine")


class Workload(msgspec.Struct, frozen=True):
    kind: str  # one of KINDS
    evidence: tuple[str, ...]  # what decided it, in words

    @property
    def training(self) -> bool:
        return self.kind == "training"


def _count(tl: Timeline, kinds: tuple[int, ...], pred: Callable[[str], bool]) -> tuple[int, str]:
    """(number of rows of these kinds whose name matches, the most common such name)."""
    rows = np.flatnonzero(one_of(tl.kind, kinds))
    rows = rows[tl.name_mask(pred, rows)]
    if rows.size == 0:
        return 0, ""
    ids, counts = np.unique(tl.name[rows], return_counts=True)
    return int(rows.size), tl.strings[int(ids[np.argmax(counts)])]


def workload_kind(tl: Timeline) -> Workload:
    host_kinds = (int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.ANNOTATION), int(Kind.PYTHON), int(Kind.STEP))
    has_device = bool(tl.mask(*DEVICE_WORK_KINDS).any()) if len(tl) else False
    n_train, train_name = _count(
        tl, (int(Kind.CPU_OP), int(Kind.ANNOTATION), int(Kind.STEP), int(Kind.KERNEL)), lambda s: any(m in s for m in TRAINING_MARKERS)
    )
    if n_train:
        return Workload("training", (f"{n_train:,} backward or optimizer records (e.g. {train_name})",))
    if not has_device:
        return Workload("unknown", ("no device work in the trace",))
    if not one_of(tl.kind, host_kinds).any():
        return Workload("unknown", ("no host records: cannot tell what drove the device",))
    n_engine, engine = _count(tl, (int(Kind.PYTHON), int(Kind.ANNOTATION)), lambda s: bool(SERVING_ENGINE.search(s)))
    if n_engine:
        return Workload("serving", (f"{n_engine:,} frames of a serving engine or server (e.g. {engine})",))
    n_named, named = _count(tl, (int(Kind.PYTHON), int(Kind.ANNOTATION), int(Kind.STEP)), lambda s: bool(SERVING_NAME.search(s.rsplit(": ", 1)[-1])))
    if n_named:
        return Workload("serving", (f"{n_named:,} ranges or functions named for serving requests (e.g. {named})",))
    # Framework ops (Kineto's cpu_op records and nsys' emit_nvtx ops are PyTorch's), or torch frames.
    n_torch, op = _count(tl, (int(Kind.CPU_OP),), lambda s: True)
    if not n_torch:
        n_torch, op = _count(tl, (int(Kind.PYTHON),), lambda s: s.startswith("torch/"))
    if n_torch:
        what = "JAX/XLA host records" if tl.meta.source_format == "xplane" else "PyTorch ops or frames"
        return Workload("inference", (f"{n_torch:,} {what} (e.g. {op}) and no backward pass, optimizer step or serving loop",))
    return Workload("non_pytorch", ("device work launched from the host with no PyTorch op or frame: CUDA C/C++, CuPy or another runtime",))
