"""The levers: for each cause (and variant), the title, the fix, code and how to verify.

Text only; the numbers are filled in by the rules from measurements. The levers of idle causes
come from the cause catalogue (``whyidle.catalogue``); this module adds those of findings that
are not idle causes but about busy time (FP32 math without tensor cores, kernels too small to
fill the device).
"""

from __future__ import annotations

from whyidle.catalogue import BUSY_CAUSES, CATALOGUE, Lever

__all__ = ["Lever", "LEVERS", "FINDING_IDIOM_LEVERS", "lever_for"]


_FINDING_LEVERS: dict[tuple[str, str], Lever] = {
    ("fp32_math", ""): Lever(
        title="Tensor cores unused: matrix math runs in FP32",
        summary="Run matrix multiplications and convolutions in BF16/FP16 (autocast) or allow TF32.",
        steps=(
            "Wrap the forward pass in torch.autocast('cuda', dtype=torch.bfloat16) (Ampere and newer).",
            "Or allow TF32: torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True.",
        ),
        code="",
        when_steps=(
            ("training", "With FP16 instead of BF16, use torch.amp.GradScaler to avoid underflowing gradients."),
            ("training", "Compare loss curves with the FP32 run and watch for NaN/inf before adopting the change."),
            ("not_training", "Compare the outputs with the FP32 run on a validation set before adopting the change."),
        ),
        when_code=(
            ("training", "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x).loss\nloss.backward()"),
            ("not_training", "with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):\n    out = model(x)"),
        ),
        verify="Re-profile: GEMM/conv kernels should carry tensor-core names (h884/1688/16816, xmma, wgmma), step time should fall; compare the loss curve against the FP32 run.",
        docs="underfilled",
    ),
    ("fp32_math", "fp16_only"): Lever(
        title="Tensor cores unused: matrix math runs in FP32",
        summary="This GPU (Volta/Turing) has FP16 tensor cores but no BF16 or TF32: run matrix math in FP16 with autocast and a GradScaler.",
        steps=(
            "Wrap the forward pass in torch.autocast('cuda', dtype=torch.float16).",
            "Keep channel counts and matrix sizes multiples of 8 so cuDNN/cuBLAS pick tensor-core kernels.",
        ),
        code="",
        when_steps=(
            ("training", "Scale the loss with torch.amp.GradScaler so small FP16 gradients do not underflow."),
            ("training", "Compare loss curves with the FP32 run and watch for NaN/inf (the scaler skips such steps) before adopting the change."),
            ("not_training", "Compare the outputs with the FP32 run on a validation set before adopting the change."),
        ),
        when_code=(
            (
                "training",
                "scaler = torch.amp.GradScaler('cuda')\n"
                "with torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = model(x).loss\n"
                "scaler.scale(loss).backward()\n"
                "scaler.step(optimizer)\n"
                "scaler.update()",
            ),
            ("not_training", "with torch.inference_mode(), torch.autocast('cuda', dtype=torch.float16):\n    out = model(x)"),
        ),
        verify="Re-profile: GEMM/conv kernels should carry tensor-core names (h884, s884, hmma), step time should fall; compare the loss curve against the FP32 run.",
        docs="underfilled",
    ),
    ("small_grids", ""): Lever(
        title="Kernels too small to fill the device: the GPU reads busy while SMs sit idle",
        summary="Give each kernel more parallel work: a larger batch or micro-batch, fused ops, fewer and larger kernels.",
        steps=(
            "Raise the batch size (or micro-batch, or sequences per forward) until each kernel's grid covers every SM; "
            "in inference, batch requests together.",
            "When the work cannot grow, run independent small kernels at the same time (CUDA streams, grouped or batched GEMMs).",
        ),
        code="",
        verify="Re-profile: the report's est. SM efficiency should approach 100% and kernel time per sample fall (whyidle compare before after).",
        docs="underfilled",
        when_steps=(
            ("eager", "Fuse chains of small ops into one kernel (torch.compile)."),
            ("compiled", "The compiled regions are already fused: look for the small kernels outside them (graph breaks) and for shapes too small per kernel."),
        ),
        when_code=(("eager", "model = torch.compile(model)  # fuses small kernels; then try a larger batch"),),
    ),
}

_GRID_STEPS = (
    "Launch at least a few blocks per SM: a grid-stride loop in the kernel with a grid of a few times the SM count.",
    "Give each launch more work (batch several problems into one kernel, larger tiles), or run independent small kernels on separate streams.",
)

# The findings' levers for jobs that are not a PyTorch program (see catalogue.IDIOM_LEVERS).
FINDING_IDIOM_LEVERS: dict[str, dict[str, Lever]] = {
    "small_grids": {
        "cuda": Lever(
            title="Kernels too small to fill the device: the GPU reads busy while SMs sit idle",
            summary="Launch grids that cover every SM: a grid-stride loop sized from the SM count, or more work per launch.",
            steps=_GRID_STEPS,
            code=(
                "int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);\n"
                "saxpy<<<4 * sms, 256>>>(n, a, x, y);   // grid-stride loop inside the kernel"
            ),
            verify="Re-capture: the report's est. SM efficiency should approach 100%.",
            docs="underfilled",
        ),
        "cupy": Lever(
            title="Kernels too small to fill the device: the GPU reads busy while SMs sit idle",
            summary="Give each kernel more elements: batch arrays, and size RawKernel grids from the SM count.",
            steps=("Stack small arrays into one larger array so each kernel covers the device.", *_GRID_STEPS),
            code=(
                "sms = cupy.cuda.Device().attributes['MultiProcessorCount']\n"
                "kernel((4 * sms,), (256,), (n, a, x, y))   # grid-stride loop inside the RawKernel"
            ),
            verify="Re-profile: the report's est. SM efficiency should approach 100%.",
            docs="underfilled",
        ),
        "jax": Lever(
            title="Kernels too small to fill the device: the device reads busy while its units sit idle",
            summary="Give each compiled op more work: a larger batch, jax.vmap over independent problems.",
            steps=("Raise the batch size, or jax.vmap the step over independent problems so each kernel covers the device.",),
            code="batched_step = jax.jit(jax.vmap(step))   # one kernel over all problems",
            verify="Re-profile: kernel time per sample should fall.",
            docs="underfilled",
        ),
    },
    "fp32_math": {
        "cuda": Lever(
            title="Tensor cores unused: matrix math runs in FP32",
            summary="Let cuBLAS use tensor cores: TF32 math mode for FP32 GEMMs (Ampere and newer), or FP16/BF16 inputs.",
            steps=(
                "Set the handle's math mode: cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH), or use cublasGemmEx / cublasLt with CUBLAS_COMPUTE_32F_FAST_TF32.",
                "Or store operands in __half / __nv_bfloat16 and compute with CUBLAS_COMPUTE_32F (FP32 accumulation).",
                "Check the result's accuracy against the FP32 run before adopting the change.",
            ),
            code="cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);",
            verify="Re-capture: GEMM kernels should carry tensor-core names (xmma, wgmma, 1688/16816).",
            docs="underfilled",
        ),
        "cupy": Lever(
            title="Tensor cores unused: matrix math runs in FP32",
            summary="Let CuPy's cuBLAS calls use TF32 tensor cores (CUPY_TF32=1), or run the matrix math in float16.",
            steps=("Set CUPY_TF32=1 in the environment (Ampere and newer) so FP32 matmuls use TF32 tensor cores.", "Or cast operands to cupy.float16 for the matmul and accumulate in float32."),
            code="CUPY_TF32=1 python run.py",
            verify="Re-profile: GEMM kernels should carry tensor-core names.",
            docs="underfilled",
        ),
        "jax": Lever(
            title="Tensor cores unused: matrix math runs in FP32",
            summary="Allow reduced-precision matmuls: jax.default_matmul_precision('tensorfloat32') or bfloat16 inputs.",
            steps=("Set jax.config.update('jax_default_matmul_precision', 'tensorfloat32') (or 'bfloat16').", "Or keep parameters in float32 and cast activations to bfloat16 inside the step."),
            code="jax.config.update('jax_default_matmul_precision', 'tensorfloat32')",
            verify="Re-profile: GEMM kernels should carry tensor-core names.",
            docs="underfilled",
        ),
    },
}

LEVERS: dict[tuple[str, str], Lever] = {
    **{(e.cause, variant): lever for e in (*CATALOGUE, *BUSY_CAUSES) for variant, lever in e.levers.items()},
    **_FINDING_LEVERS,
}


def lever_for(cause: str, variant: str = "") -> Lever:
    return LEVERS.get((cause, variant)) or LEVERS[(cause, "")]
