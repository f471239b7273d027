"""Advice that fits the job: every lever, step and snippet chosen from the advice context.

The rules name a cause and a variant; this module turns the catalogue's lever for it into the
advice for *this* job (:class:`~whyidle.analyses.advice_context.AdviceContext`):

* the **idiom**: a CUDA C/C++, HIP, CuPy, JAX or serving-engine job gets the cause's lever in its
  own language (``catalogue.idiom_levers``; HIP's is CUDA's with the runtime's names translated);
  where a cause has none for the idiom, its default lever without the steps and code that only a
  PyTorch program can use, never a PyTorch snippet;
* **what the job already does**: conditional steps and code lines (``Lever.when_steps`` and
  ``when_code``) are kept where :data:`CONDITIONS` holds, so no ``torch.compile`` for a compiled
  model, no CUDA graphs where graph launches are seen, no optimizer line without an optimizer step
  in the trace, no ``set_to_none`` unless zero_grad was seen filling gradients;
* **one lever, one number**: the worker count in a snippet is the one the prediction replays.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from whyidle.analyses.advice_context import AdviceContext
from whyidle.catalogue import Lever, idiom_levers

__all__ = ["CONDITIONS", "fit_lever", "for_idiom", "hipify", "FUSED_OPTIMIZERS"]

# Optimizers with a fused implementation in torch.optim (fused=True; SGD's since PyTorch 2.4);
# any other optimizer class the trace names gets foreach=True.
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")

CONDITIONS: dict[str, Callable[[AdviceContext], bool]] = {
    "eager": lambda c: not c.compiled,
    "compiled": lambda c: c.compiled,
    "compiled_without_graphs": lambda c: c.compiled and not c.cuda_graphs,
    "compiled_with_graphs": lambda c: c.compiled and c.cuda_graphs,
    "without_graphs": lambda c: not c.cuda_graphs,
    "with_graphs": lambda c: c.cuda_graphs,
    "training": lambda c: c.training,
    "not_training": lambda c: not c.training,
    "optimizer_per_parameter": lambda c: bool(c.optimizer) and c.optimizer_impl == "per_parameter",
    "zero_grad_fills": lambda c: c.zero_grad_fills is True,
    "dataloader": lambda c: bool(c.loader),
    "no_dataloader": lambda c: not c.loader,
}

# Words that make a step or snippet PyTorch-only (left out of a default lever for another idiom).
_TORCH_ONLY = re.compile(r"torch|DataLoader|num_workers|pin_memory|non_blocking|\.item\(\)|\.cpu\(\)|autocast|record_function|zero_grad|model\(")

# CUDA runtime and library names -> HIP's (the HIP API mirrors CUDA's names).
_HIP_NAMES = (
    ("cudaMallocHost", "hipHostMalloc"),
    ("cudaHostAlloc", "hipHostMalloc"),
    ("cudaStreamCreateWithFlags", "hipStreamCreateWithFlags"),
    ("cudaStreamNonBlocking", "hipStreamNonBlocking"),
    ("cudaStreamBeginCapture", "hipStreamBeginCapture"),
    ("cudaStreamCaptureModeGlobal", "hipStreamCaptureModeGlobal"),
    ("cudaStreamEndCapture", "hipStreamEndCapture"),
    ("cudaGraphInstantiate", "hipGraphInstantiate"),
    ("cudaGraphLaunch", "hipGraphLaunch"),
    ("cudaGraphExec_t", "hipGraphExec_t"),
    ("cudaGraph_t", "hipGraph_t"),
    ("cudaStream_t", "hipStream_t"),
    ("cudaProfilerStart", "roctxProfilerResume"),
    ("cudaProfilerStop", "roctxProfilerPause"),
    ("nsys profile --capture-range=cudaProfilerApi ./app", "rocprofv3 --kernel-trace --hip-runtime-trace --collection-period ... -- ./app"),
    ("nsys profile -t cuda,nvtx,osrt", "rocprofv3 --runtime-trace --marker-trace"),
    ("with nsys", "with rocprofv3"),
    ("nvtxRangePushA", "roctxRangePush"),
    ("nvtxRangePop", "roctxRangePop"),
    ("<nvtx3/nvToolsExt.h>", "<roctracer/roctx.h>"),
    ("NVTX", "ROCTx"),
    ("CUDA graph", "HIP graph"),
    ("Programmatic Dependent Launch (Hopper and newer)", "fewer, larger kernels"),
    ("cuda", "hip"),
)


def hipify(text: str) -> str:
    """CUDA runtime text in HIP's names (``cudaMemcpyAsync`` -> ``hipMemcpyAsync``)."""
    for a, b in _HIP_NAMES:
        text = text.replace(a, b)
    return text


def _hip_lever(lv: Lever) -> Lever:
    return Lever(hipify(lv.title), hipify(lv.summary), tuple(hipify(s) for s in lv.steps), hipify(lv.code), hipify(lv.verify), lv.docs)


def _without_torch(lv: Lever) -> Lever:
    """The lever with the steps and code only a PyTorch program can use left out."""
    steps = tuple(s for s in lv.steps if not _TORCH_ONLY.search(s))
    code = lv.code if not _TORCH_ONLY.search(lv.code) else ""
    return Lever(lv.title, lv.summary, steps, code, lv.verify if not _TORCH_ONLY.search(lv.verify) else "Re-profile and diagnose again: the time named in the evidence should shrink.", lv.docs)


def for_idiom(cause: str, lever: Lever, ctx: AdviceContext | None) -> Lever:
    """The lever of a finding on ``cause`` in the job's idiom: ``lever`` (the PyTorch one) for a
    PyTorch job, else the catalogue's lever for the idiom (``catalogue.idiom_levers``: idle causes
    and busy-time findings alike)."""
    if ctx is None or ctx.idiom == "pytorch":
        return lever
    table = idiom_levers(cause)
    if ctx.idiom in table:
        return table[ctx.idiom]
    if ctx.idiom == "hip" and "cuda" in table:
        return _hip_lever(table["cuda"])
    return _without_torch(lever)


def _fill(text: str, ctx: AdviceContext | None, workers: int) -> str:
    opt = ctx.optimizer if ctx is not None else ""
    flag = "fused" if opt in FUSED_OPTIMIZERS else "foreach"
    return text.replace("{workers}", str(workers)).replace("{optimizer_flag}", flag).replace("{optimizer}", opt or "AdamW")


def fit_lever(lever: Lever, ctx: AdviceContext | None, workers: int) -> Lever:
    """The lever's steps and code for this job: its conditional parts kept where their condition
    holds (none without a context), placeholders filled (``workers``: the DataLoader workers the
    prediction replays)."""
    steps = list(lever.steps)
    code = [lever.code] if lever.code else []
    if ctx is not None:
        steps += [text for cond, text in lever.when_steps if CONDITIONS[cond](ctx)]
        code += [text for cond, text in lever.when_code if CONDITIONS[cond](ctx)]
    return Lever(
        lever.title,
        lever.summary,
        tuple(_fill(s, ctx, workers) for s in steps),
        _fill("\n".join(code), ctx, workers),
        lever.verify,
        lever.docs,
    )
