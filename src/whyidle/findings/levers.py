"""The levers: for each cause (and variant), the title, the fix, code and how to verify.

Text only; the numbers are filled in by the rules from measurements. The levers of idle causes
come from the cause catalogue (``whyidle.catalogue``); this module adds those of findings that
are not idle causes but about busy time (FP32 math without tensor cores, kernels too small to
fill the device).
"""

from __future__ import annotations

from whyidle.catalogue import CATALOGUE, Lever

__all__ = ["Lever", "LEVERS", "lever_for"]


_FINDING_LEVERS: dict[tuple[str, str], Lever] = {
    ("fp32_math", ""): Lever(
        title="Tensor cores unused: matrix math runs in FP32",
        summary="Run matrix multiplications and convolutions in BF16/FP16 (autocast) or allow TF32.",
        steps=(
            "Wrap the forward pass in torch.autocast('cuda', dtype=torch.bfloat16) (Ampere and newer).",
            "With FP16, use torch.amp.GradScaler to avoid underflowing gradients.",
            "Or allow TF32: torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True.",
            "Compare loss curves with the FP32 run and watch for NaN/inf before adopting the change.",
        ),
        code=(
            "scaler = torch.amp.GradScaler('cuda')  # only needed for float16\n"
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n"
            "    loss = model(x).loss\n"
            "loss.backward()"
        ),
        verify="Re-profile: GEMM/conv kernels should carry tensor-core names (h884/1688/16816, xmma, wgmma), step time should fall; compare the loss curve against the FP32 run.",
        docs="underfilled",
    ),
    ("fp32_math", "fp16_only"): Lever(
        title="Tensor cores unused: matrix math runs in FP32",
        summary="This GPU (Volta/Turing) has FP16 tensor cores but no BF16 or TF32: run matrix math in FP16 with autocast and a GradScaler.",
        steps=(
            "Wrap the forward pass in torch.autocast('cuda', dtype=torch.float16).",
            "Scale the loss with torch.amp.GradScaler so small FP16 gradients do not underflow.",
            "Keep channel counts and matrix sizes multiples of 8 so cuDNN/cuBLAS pick tensor-core kernels.",
            "Compare loss curves with the FP32 run and watch for NaN/inf (the scaler skips such steps) before adopting the change.",
        ),
        code=(
            "scaler = torch.amp.GradScaler('cuda')\n"
            "with torch.autocast('cuda', dtype=torch.float16):\n"
            "    loss = model(x).loss\n"
            "scaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\n"
            "scaler.update()"
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
            "Fuse chains of small ops into one kernel (torch.compile); for hand-written kernels, launch at least one block "
            "per SM (a grid-stride loop with a grid of a few times the SM count).",
            "When the work cannot grow, run independent small kernels at the same time (CUDA streams, grouped or batched GEMMs).",
        ),
        code=(
            "model = torch.compile(model)  # fuses small kernels; then try a larger batch\n"
            "// CUDA C++: a grid of a few blocks per SM, with a grid-stride loop in the kernel\n"
            "int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);\n"
            "saxpy<<<4 * sms, 256>>>(n, a, x, y);"
        ),
        verify="Re-profile: the report's est. SM efficiency should approach 100% and kernel time per sample fall (whyidle compare before after).",
        docs="underfilled",
    ),
}

LEVERS: dict[tuple[str, str], Lever] = {
    **{(e.cause, variant): lever for e in CATALOGUE for variant, lever in e.levers.items()},
    **_FINDING_LEVERS,
}


def lever_for(cause: str, variant: str = "") -> Lever:
    return LEVERS.get((cause, variant)) or LEVERS[(cause, "")]
