"""What the trace shows about the job, once per diagnosis: the only input advice may branch on.

A fix, a snippet, a step or a prediction is written for a job: its workload (training,
inference, serving, non-PyTorch compute), its framework and runtime (PyTorch eager or compiled,
CUDA graphs, a serving engine, CuPy, JAX, CUDA or HIP C/C++), what it already does (DataLoader
workers, pinned copies, mixed precision, a fused optimizer, ``zero_grad(set_to_none=True)``) and
its device (vendor and generation). :func:`advice_context` reads all of it from the timeline,
with the evidence for each item, and says what the trace cannot tell. The findings layer chooses
every lever, step and snippet from this object (``findings/advice.py``), never from the trace.

Each item is decided from records a profiler writes for that feature, not from thresholds:

* compiled regions: ``Torch-Compiled Region``, ``CompiledFunction``, ``## Call CompiledFxGraph``
  ranges or ``torch/_dynamo`` / ``torch/_inductor`` frames;
* CUDA graphs: graph launch calls (``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``);
* the serving engine: Python frames under the engine's package (``vllm/``, ``sglang/``, ...);
* the DataLoader: its iterator's class in ``enumerate(DataLoader)#...__next__``;
* pinned or pageable copies: the copy records' own names (``Memcpy HtoD (Pinned -> Device)``);
* the optimizer: ``Optimizer.step#<Class>.step`` and the kernels' ops inside it (``_fused_``,
  ``_foreach_``);
* mixed precision: GradScaler's ops (``_amp_update_scale_``), autocast frames, and GEMM
  kernels whose names carry a 16-bit type.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec.structs
import numpy as np

from whyidle.analyses.calls import is_graph_launch
from whyidle.analyses.workload import Workload
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["AdviceContext", "advice_context", "count_in_ranges", "IDIOMS", "ENGINES", "COMPILED_RANGE"]

# The language and idiom a snippet is written in.
IDIOMS = ("pytorch", "cuda", "hip", "cupy", "jax", "engine")

# Serving engines whose settings replace a training loop's advice: Python package prefix -> name.
ENGINES: dict[str, str] = {
    "vllm/": "vLLM",
    "sglang/": "SGLang",
    "text_generation_server/": "TGI",
    "tensorrt_llm/": "TensorRT-LLM",
    "lmdeploy/": "LMDeploy",
}

_COMPILED_RANGE = re.compile(r"^(Torch-Compiled Region|CompiledFunction|## Call CompiledFxGraph|## Call CompiledFunction)")
COMPILED_RANGE = _COMPILED_RANGE  # the names of compiled regions (analyses/sequences.py skips them)
_COMPILED_FRAME = re.compile(r"^torch/_(dynamo|inductor)/")
_HIP_CALL = re.compile(r"^(hip|hsa_)")
_MODULE_LOAD = re.compile(r"^(cuModuleLoad|cuLibraryLoad|nvrtc|hipModuleLoad|hiprtc)", re.IGNORECASE)
_GEMM_KERNEL = re.compile(r"(?i)gemm|matmul|conv|cutlass|xmma|wgmma|hmma|mfma|Cijk_")
_HALF = re.compile(r"(?i)bf16|bfloat16|f16|fp16|half|h884|h1688|h16816|s884|s1688|s16816|hmma")
_BF16 = re.compile(r"(?i)bf16|bfloat16")
_AMP_OPS = ("aten::_amp_update_scale_", "aten::_amp_foreach_non_finite_check_and_unscale_")
_ARCH = ((7, 0, "Volta"), (7, 5, "Turing"), (8, 0, "Ampere"), (8, 9, "Ada Lovelace"), (9, 0, "Hopper"), (10, 0, "Blackwell"))
_AMD_ARCH = (("MI300", "CDNA3"), ("MI325", "CDNA3"), ("MI350", "CDNA4"), ("MI355", "CDNA4"), ("MI250", "CDNA2"), ("MI210", "CDNA2"), ("MI100", "CDNA"))


class AdviceContext(msgspec.Struct, frozen=True):
    """What the job is and already does, as the trace shows it (see the module docstring).

    ``None`` for a yes/no item means the trace cannot tell; ``seen`` says each decided item in
    words with its evidence, ``unknown`` what advice had to leave open."""

    workload: str  # analyses/workload.py KINDS
    framework: str  # "pytorch", "jax", "cupy", "cuda", "hip" or "unknown"
    idiom: str  # the language of snippets: IDIOMS
    engine: str = ""  # a serving engine's name ("vLLM"), '' if none
    compiled: bool = False  # torch.compile / inductor regions run in the window
    compiled_regions: int = 0
    cuda_graphs: bool = False  # graph launches seen
    graph_launches: int = 0
    module_loads: int = 0  # module loads / runtime compilations (cuModuleLoadData, nvrtc, hipModuleLoad)
    loader: str = ""  # "single_process", "multi_process" or '' (no DataLoader seen)
    loader_workers: int | None = None  # the worker count, when the trace gives it
    pinned_copies: int = 0  # host-to-device copies from pinned memory
    pageable_copies: int = 0  # host-to-device copies from pageable memory
    reduced_precision: str = ""  # "bf16", "fp16" or '' (GEMM/conv kernels named for a 16-bit type)
    grad_scaler: bool = False
    optimizer: str = ""  # the optimizer class, '' if no optimizer step is seen
    optimizer_impl: str = ""  # "fused", "foreach", "per_parameter" or ''
    zero_grad_fills: bool | None = None  # zero_grad fills gradients (set_to_none=False); None: no zero_grad seen
    vendor: str = ""  # "nvidia", "amd" or ''
    generation: str = ""  # "Ampere (8.0)", "CDNA3 (gfx942)", '' if unknown
    seen: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def training(self) -> bool:
        return self.workload == "training"

    @property
    def pytorch(self) -> bool:
        return self.idiom == "pytorch"


def _names(tl: Timeline, kinds: tuple[Kind, ...], pattern: re.Pattern[str]) -> np.ndarray:
    return np.flatnonzero(tl.kind_name_mask(lambda s: bool(pattern.search(s)), *kinds))


def _host_names(tl: Timeline) -> tuple[str, ...]:
    """The distinct names of the host's frames, ops and ranges (read once: every frame test below
    looks at these, not at the rows)."""
    rows = np.flatnonzero(tl.mask(Kind.PYTHON, Kind.CPU_OP, Kind.ANNOTATION))
    return tuple(tl.strings[int(i)] for i in unique_sorted(tl.name[rows]))


def _has_frame(names: tuple[str, ...], prefix: str) -> bool:
    return any(s.startswith(prefix) for s in names)


def _generation(tl: Timeline) -> str:
    vendor = tl.meta.vendor
    if vendor == "nvidia":
        cc = tl.meta.min_compute_capability
        if cc is None:
            return ""
        name = next((n for major, minor, n in reversed(_ARCH) if cc >= (major, minor)), "pre-Volta")
        return f"{name} ({cc[0]}.{cc[1]})"
    if vendor == "amd":
        for d in tl.meta.devices:
            arch = str(d.get("gcnArchName", "")).split(":")[0]
            name = str(d.get("name", ""))
            family = next((f for key, f in _AMD_ARCH if key in name.upper()), "")
            if family or arch:
                return f"{family or 'AMD'}{f' ({arch})' if arch else ''}"
    return ""


def _optimizer(tl: Timeline) -> tuple[str, str]:
    """(class, implementation) of the optimizer steps the trace shows."""
    counts: dict[str, int] = {}
    for i, name in enumerate(tl.strings):
        if name.startswith("Optimizer.step#") and name.endswith(".step"):
            cls = name[len("Optimizer.step#") : -len(".step")]
            if cls.isidentifier():
                counts[cls] = counts.get(cls, 0) + int((tl.name == i).sum())
    counts = {k: v for k, v in counts.items() if v}
    if not counts:
        return "", ""
    cls = max(counts, key=lambda k: counts[k])
    ops = tl.kind_name_mask(lambda s: s.startswith(("aten::_fused_", "aten::_foreach_")), Kind.CPU_OP)
    names = {tl.strings[int(n)] for n in unique_sorted(tl.name[ops])}
    fused = cls.startswith("Fused") or any(n.startswith("aten::_fused_") for n in names)  # apex/DeepSpeed FusedAdam, fused=True
    impl = "fused" if fused else "foreach" if names else "per_parameter"
    return cls, impl


def count_in_ranges(tl: Timeline, range_pred: Callable[[str], bool], op_pred: Callable[[str], bool]) -> tuple[int, int]:
    """(number of ranges matching range_pred, ops matching op_pred inside them on the same thread)."""
    ranges = np.flatnonzero(tl.kind_name_mask(range_pred, Kind.CPU_OP, Kind.ANNOTATION))
    if ranges.size == 0:
        return 0, 0
    ops = np.flatnonzero(tl.kind_name_mask(op_pred, Kind.CPU_OP, Kind.RUNTIME))
    total = 0
    # Per thread: ops sorted by start; the ones inside a range are those starting in it and
    # ending by its end (binary search for the candidates, then a check on the few found).
    for lane in unique_sorted(tl.lane[ranges]):
        on = ops[tl.lane[ops] == lane]  # timeline rows are sorted by start
        starts = tl.start_ns[on]
        for r in ranges[tl.lane[ranges] == lane]:
            a = int(np.searchsorted(starts, tl.start_ns[r], side="left"))
            b = int(np.searchsorted(starts, tl.end_ns[r], side="right"))
            total += int((tl.end_ns[on[a:b]] <= tl.end_ns[r]).sum())
    return int(ranges.size), total


def _zero_grad_fills(tl: Timeline) -> bool | None:
    n_zero, fills = count_in_ranges(tl, lambda s: s.startswith("Optimizer.zero_grad"), lambda s: s in ("aten::zero_", "aten::fill_"))
    return fills > 0 if n_zero else None


def _precision(tl: Timeline) -> str:
    gemm = np.flatnonzero(tl.kind_name_mask(lambda s: bool(_GEMM_KERNEL.search(s)), Kind.KERNEL))
    if gemm.size == 0:
        return ""
    dur = (tl.end_ns[gemm] - tl.start_ns[gemm]).astype(np.float64)
    half = tl.name_mask(lambda s: bool(_HALF.search(s)), gemm)
    if dur[half].sum() < 0.5 * dur.sum():
        return ""
    bf16 = tl.name_mask(lambda s: bool(_BF16.search(s)), gemm) & half
    return "bf16" if dur[bf16].sum() >= 0.5 * dur[half].sum() else "fp16"


def _framework(tl: Timeline, workload: Workload, names: tuple[str, ...]) -> str:
    if tl.meta.source_format in ("xplane", "jax") or _has_frame(names, "jax/") or _has_frame(names, "jaxlib/"):
        return "jax"
    if workload.kind in ("training", "inference") or (workload.kind == "serving" and _has_frame(names, "torch/")):
        return "pytorch"
    if _has_frame(names, "cupy/") or _has_frame(names, "cupyx/") or bool(tl.kind_name_mask(lambda s: s.startswith("cupy_"), Kind.KERNEL).any()):
        return "cupy"
    if workload.kind == "serving":
        return "pytorch" if (tl.kind == int(Kind.CPU_OP)).any() else "unknown"
    if tl.kind_name_mask(lambda s: s.startswith("ProfilerStep#"), Kind.STEP).any():  # torch.profiler's step marker
        return "pytorch"
    if workload.kind == "non_pytorch":
        hip = tl.meta.vendor == "amd" or bool(tl.kind_name_mask(lambda s: bool(_HIP_CALL.match(s)), Kind.RUNTIME).any())
        return "hip" if hip else "cuda"
    return "unknown"


def _in_words(c: AdviceContext, tl: Timeline) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the trace shows, what it cannot tell), in words, for the report."""
    seen: list[str] = [f"workload {c.workload.replace('_', '-')}"]
    unknown: list[str] = []
    fw = {"pytorch": "PyTorch", "jax": "JAX", "cupy": "CuPy", "cuda": "CUDA C/C++ (no Python frames)", "hip": "HIP C/C++ (no Python frames)"}
    seen.append(f"framework {fw.get(c.framework, 'not identified')}" + (f", served by {c.engine}" if c.engine else ""))
    if c.framework == "pytorch" or c.engine:
        seen.append(f"torch.compile regions ({c.compiled_regions:,} runs)" if c.compiled_regions else "torch.compile (inductor frames)" if c.compiled else "eager mode (no compiled regions)")
    if c.cuda_graphs:
        seen.append(f"{'HIP' if c.vendor == 'amd' else 'CUDA'} graphs ({c.graph_launches:,} graph launches)")
    if c.module_loads:
        seen.append(f"{c.module_loads:,} module loads or runtime compilations in the window")
    if c.loader == "single_process":
        seen.append("DataLoader in the training process (num_workers=0)")
    elif c.loader == "multi_process":
        seen.append("DataLoader with worker processes (num_workers>0)")
        unknown.append("how many DataLoader workers run (the trace shows that they exist, not their number)")
    if c.pinned_copies or c.pageable_copies:
        seen.append(f"host-to-device copies: {c.pinned_copies:,} from pinned, {c.pageable_copies:,} from pageable memory")
    if c.reduced_precision:
        seen.append(f"{c.reduced_precision} matrix math (GEMM/convolution kernels)" + (" with a GradScaler" if c.grad_scaler else ""))
    elif c.grad_scaler:
        seen.append("a GradScaler (float16 autocast)")
    if c.optimizer:
        seen.append(f"optimizer {c.optimizer} ({c.optimizer_impl.replace('_', '-')})")
    elif c.framework == "pytorch" and c.workload == "training":
        unknown.append("the optimizer (no Optimizer.step range in the trace)")
    if c.zero_grad_fills is True:
        seen.append("zero_grad fills gradients with zeros (set_to_none=False)")
    elif c.zero_grad_fills is False:
        seen.append("zero_grad sets gradients to None")
    if c.generation:
        seen.append(f"{'NVIDIA' if c.vendor == 'nvidia' else 'AMD' if c.vendor == 'amd' else ''} {c.generation}".strip())
    elif not c.vendor:
        unknown.append("the device's vendor and generation")
    else:
        unknown.append(f"the {c.vendor.upper() if c.vendor == 'amd' else 'NVIDIA'} device's generation")
    if c.framework == "pytorch" and not (tl.kind == int(Kind.PYTHON)).any() and not (tl.stack >= 0).any():
        how = "nsys profile --python-backtrace=cuda" if tl.meta.source_format == "nsys" else "torch.profiler with_stack=True"
        unknown.append(f"Python lines (captured without {how})")
    return tuple(seen), tuple(unknown)


def advice_context(tl: Timeline, workload: Workload) -> AdviceContext:
    """The advice context of a timeline (pure; see the module docstring)."""
    names = _host_names(tl)
    framework = _framework(tl, workload, names)
    engine = next((name for prefix, name in ENGINES.items() if _has_frame(names, prefix)), "")
    idiom = "engine" if engine else framework
    if idiom not in IDIOMS:  # not identified: PyTorch's ops are there, or it is the runtime's C API
        idiom = "pytorch" if (tl.kind == int(Kind.CPU_OP)).any() else "hip" if tl.meta.vendor == "amd" else "cuda"
    compiled_rows = _names(tl, (Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON), _COMPILED_RANGE)
    # Not torch/_dynamo frames alone: optimizers and other eager code pass through dynamo's disable
    # wrappers; a compiled graph runs as a named range or through inductor's generated code.
    compiled = bool(compiled_rows.size) or _has_frame(names, "torch/_inductor/")
    graphs = int(tl.kind_name_mask(is_graph_launch, Kind.RUNTIME).sum())
    loads = int(_names(tl, (Kind.RUNTIME, Kind.CPU_OP, Kind.ANNOTATION), _MODULE_LOAD).size)
    loader = ""
    if tl.kind_name_mask(lambda s: "_MultiProcessingDataLoaderIter" in s, Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON).any():
        loader = "multi_process"
    elif tl.kind_name_mask(lambda s: "_SingleProcessDataLoaderIter" in s, Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON).any():
        loader = "single_process"
    h2d = np.flatnonzero(tl.kind_name_mask(lambda s: "HtoD" in s or "Host to Device" in s, Kind.MEMCPY))
    pinned = int(tl.name_mask(lambda s: "Pinned" in s, h2d).sum()) if h2d.size else 0
    pageable = int(tl.name_mask(lambda s: "Pageable" in s, h2d).sum()) if h2d.size else 0
    torch_job = framework == "pytorch"
    opt, impl = _optimizer(tl) if torch_job else ("", "")
    fills = _zero_grad_fills(tl) if torch_job else None
    scaler = torch_job and bool(tl.kind_name_mask(lambda s: s in _AMP_OPS, Kind.CPU_OP).any())
    precision = _precision(tl)
    gen = _generation(tl)

    ctx = AdviceContext(
        workload=workload.kind,
        framework=framework,
        idiom=idiom,
        engine=engine,
        compiled=compiled,
        compiled_regions=int(compiled_rows.size),
        cuda_graphs=graphs > 0,
        graph_launches=graphs,
        module_loads=loads,
        loader=loader,
        pinned_copies=pinned,
        pageable_copies=pageable,
        reduced_precision=precision,
        grad_scaler=scaler,
        optimizer=opt,
        optimizer_impl=impl,
        zero_grad_fills=fills,
        vendor=tl.meta.vendor,
        generation=gen,
    )
    seen, unknown = _in_words(ctx, tl)
    return msgspec.structs.replace(ctx, seen=seen, unknown=unknown)
