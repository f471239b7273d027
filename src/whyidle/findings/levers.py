"""The catalogue of levers: for each cause (and variant), the title, the fix, code and how to verify.

Text only; the numbers are filled in by the rules from measurements.
"""

from __future__ import annotations

import msgspec

__all__ = ["Lever", "LEVERS", "lever_for"]

DOCS = "docs/causes"


class Lever(msgspec.Struct, frozen=True):
    title: str
    summary: str
    steps: tuple[str, ...]
    code: str
    verify: str
    docs: str


LEVERS: dict[tuple[str, str], Lever] = {
    ("input_pipeline", "single_process"): Lever(
        title="Input starvation: the DataLoader runs in the training process (num_workers=0)",
        summary="Load batches in background worker processes so the next batch is ready when the GPU needs it.",
        steps=(
            "Set num_workers to the number of CPU cores available per GPU (start with 4-8).",
            "Set pin_memory=True so batches land in page-locked memory and copy asynchronously.",
            "Set persistent_workers=True to keep workers alive between epochs.",
            "Raise prefetch_factor (default 2) if single batches still arrive late.",
        ),
        code=(
            "loader = torch.utils.data.DataLoader(\n"
            "    dataset, batch_size=B, shuffle=True,\n"
            "    num_workers=8, pin_memory=True,\n"
            "    persistent_workers=True, prefetch_factor=4)"
        ),
        verify="Re-profile: the time in enumerate(DataLoader)...__next__ per step should drop to well under a millisecond and samples/s rise.",
        docs=f"{DOCS}/starvation.md",
    ),
    ("input_pipeline", "multi_process"): Lever(
        title="Input starvation: DataLoader workers cannot keep up",
        summary="Workers are already used; each sample costs too much to prepare. Make samples cheaper or move work to the GPU.",
        steps=(
            "Cache deterministic preprocessing (decode, resize, tokenise) once, offline.",
            "Pack small samples into sequential formats (WebDataset shards, FFCV, LMDB) to avoid per-file I/O.",
            "Move augmentation to the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI).",
            "Check that workers are not starved of CPU: more workers only help while cores are free.",
        ),
        code=(
            "# decode on the GPU, after the copy\n"
            "images = batch['jpeg'].cuda(non_blocking=True)\n"
            "images = torchvision.io.decode_jpeg(images, device='cuda')\n"
            "images = gpu_augment(images)  # torchvision.transforms.v2 on CUDA tensors"
        ),
        verify="Re-profile: per-step time in the DataLoader's __next__ should fall, and GPU idle at step starts should shrink.",
        docs=f"{DOCS}/starvation.md",
    ),
    ("input_pipeline", ""): Lever(
        title="Input starvation: the training loop waits for the next batch",
        summary="Prepare batches ahead of the GPU: background workers, pinned memory, prefetching.",
        steps=(
            "Use DataLoader(num_workers>0, pin_memory=True, persistent_workers=True).",
            "If workers are already used, make samples cheaper (cache preprocessing, pack shards, GPU augmentation).",
        ),
        code="loader = DataLoader(dataset, batch_size=B, num_workers=8, pin_memory=True, persistent_workers=True)",
        verify="Re-profile and compare per-step DataLoader time and samples/s (whyidle compare before.json after.json).",
        docs=f"{DOCS}/starvation.md",
    ),
    ("h2d_copy", ""): Lever(
        title="Starvation: host-to-device copies on the critical path",
        summary="Copy from pinned memory with non_blocking=True so copies overlap compute instead of blocking the host.",
        steps=(
            "Create the DataLoader with pin_memory=True (or tensor.pin_memory() for your own buffers).",
            "Copy with .to(device, non_blocking=True); a pageable copy makes the host wait for the DMA.",
            "For large inputs, prefetch the next batch on a side stream while the current one computes.",
        ),
        code=(
            "loader = DataLoader(dataset, batch_size=B, num_workers=8, pin_memory=True)\n"
            "for x, y in loader:\n"
            "    x = x.to('cuda', non_blocking=True)\n"
            "    y = y.to('cuda', non_blocking=True)"
        ),
        verify="Re-profile: copies should show 'Pinned -> Device', no cudaStreamSynchronize after cudaMemcpyAsync, and the gaps before the first kernel of each step should close.",
        docs=f"{DOCS}/starvation.md",
    ),
    ("host_sync", ""): Lever(
        title="Synchronization: the host waits for the GPU, draining its queue",
        summary="Keep values on the device and read them back less often, so the host stays ahead of the GPU.",
        steps=(
            "Accumulate metrics as tensors (running_loss += loss.detach()) and call .item() every N steps.",
            "Avoid print(tensor), .cpu(), .tolist(), .numpy() and tensor-valued if-conditions inside the step.",
            "Replace data-dependent shapes (nonzero, masked_select, unique) with fixed-shape ops where possible.",
            "Remove torch.cuda.synchronize() from the loop unless you are timing; use CUDA events for timing.",
            "Find every implicit sync with torch.cuda.set_sync_debug_mode('warn') or whyidle's sync finder.",
        ),
        code=(
            "running = torch.zeros((), device='cuda')\n"
            "for step, (x, y) in enumerate(loader):\n"
            "    loss = model(x).loss\n"
            "    ...\n"
            "    running += loss.detach()          # stays on the GPU\n"
            "    if step % 100 == 0:\n"
            "        print(running.item() / 100)   # one sync per 100 steps\n"
            "        running.zero_()"
        ),
        verify="Re-profile: cudaStreamSynchronize / aten::item should disappear from the step, and kernels of the next step should be queued before the previous ones finish.",
        docs=f"{DOCS}/synchronization.md",
    ),
    ("host_overhead", ""): Lever(
        title="Underfilled: the GPU outruns the host (launch and Python overhead)",
        summary="Give the GPU more work per launch: larger batches, fused kernels, CUDA graphs, fused optimizers.",
        steps=(
            "Raise the batch size (or micro-batch) if memory allows: the host cost per step stays, the GPU work grows.",
            "torch.compile(model) fuses small ops and cuts Python dispatch; mode='reduce-overhead' adds CUDA graphs.",
            "Use fused/foreach optimizers (torch.optim.AdamW(..., fused=True)).",
            "Use optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0) instead of filling gradients with zeros.",
        ),
        code=(
            "model = torch.compile(model, mode='reduce-overhead')  # fusion + CUDA graphs\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)\n"
            "opt.zero_grad(set_to_none=True)"
        ),
        verify="Re-profile: kernels per step should fall (compile/fusion) or grow longer (batch size), and the host should run ahead of the GPU (launches queued before kernels start).",
        docs=f"{DOCS}/underfilled.md",
    ),
    ("kernel_boundaries", ""): Lever(
        title="Underfilled: many tiny kernels, each paying the device's start-up cost",
        summary="Fewer, larger kernels: fuse elementwise chains and use CUDA graphs.",
        steps=(
            "torch.compile(model) fuses elementwise and reduction chains into few kernels.",
            "Use fused implementations (fused optimizers, scaled_dot_product_attention, fused LayerNorm).",
            "Capture static parts with CUDA graphs to remove per-kernel launch gaps.",
        ),
        code="model = torch.compile(model)",
        verify="Re-profile: kernel count per step should fall and the idle between back-to-back kernels shrink.",
        docs=f"{DOCS}/underfilled.md",
    ),
    ("idle_host", ""): Lever(
        title="Insufficient demand: the service gives the GPU too little work",
        summary="Batch concurrent requests and keep several in flight, so the GPU always has queued work.",
        steps=(
            "Use dynamic batching (Triton Inference Server, TorchServe batch_size/max_batch_delay, vLLM continuous batching).",
            "Raise client concurrency or the number of in-flight requests per GPU.",
            "Find the batching settings for your latency percentile: whyidle batching --latency CURVE.csv --rate REQUESTS_PER_S --slo-ms SLO (or --requests LOG; --measure MODULE:FUNCTION times the model).",
            "From a request log, whyidle serving LOG --trace TRACE tells scarce requests from bad batching and a slow host pipeline.",
        ),
        code=(
            "# TorchServe model-config.yaml\n"
            "batchSize: 16\n"
            "maxBatchDelay: 5   # ms to wait for a fuller batch"
        ),
        verify="Re-profile under production-like load: the host should no longer sit idle between requests and GPU busy time per request should rise.",
        docs=f"{DOCS}/insufficient_demand.md",
    ),
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
        docs=f"{DOCS}/underfilled.md",
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
        docs=f"{DOCS}/underfilled.md",
    ),
    ("cold_start", ""): Lever(
        title="Cold start: first-call costs dominate the capture",
        summary="Profile steady state: skip the first steps, then diagnose again.",
        steps=(
            "Use torch.profiler.schedule(wait=1, warmup=2, active=3) or whyidle.schedule().",
            "If allocator calls (cudaMalloc/cudaFree) stay slow after warm-up, look for torch.cuda.empty_cache() in the loop.",
        ),
        code=(
            "with torch.profiler.profile(\n"
            "    schedule=torch.profiler.schedule(wait=1, warmup=2, active=3),\n"
            "    on_trace_ready=torch.profiler.tensorboard_trace_handler('runs/')) as prof:\n"
            "    for step, batch in enumerate(loader):\n"
            "        train_step(batch)\n"
            "        prof.step()"
        ),
        verify="The new trace's quality notes should no longer mention a cold start.",
        docs="docs/capture.md",
    ),
    ("untraced_host", ""): Lever(
        title="Unattributed: the launching thread ran code the trace does not show",
        summary="Capture more context so the cause can be named.",
        steps=(
            "Profile with with_stack=True to get Python lines.",
            "Wrap suspect regions (logging, checkpointing, evaluation) in torch.profiler.record_function('name').",
            "Use Nsight Systems with OS-runtime tracing (nsys profile -t cuda,nvtx,osrt) to see blocking I/O.",
        ),
        code="with torch.profiler.record_function('checkpoint'):\n    save_checkpoint(model)",
        verify="Re-profile: the time should appear under a named range, and whyidle can attribute it.",
        docs="docs/capture.md",
    ),
    ("queued_work_waiting", ""): Lever(
        title="Unattributed: queued work waited on the device",
        summary="Work was already queued but did not start: a device-side dependency the trace cannot name.",
        steps=(
            "Look for cudaStreamWaitEvent / cross-stream dependencies and collectives waiting for other ranks.",
            "Capture with Nsight Systems to see dependencies between streams.",
        ),
        code="# nsys profile -t cuda,nvtx,osrt --cuda-event-trace=true python train.py",
        verify="Re-profile with event tracing to see which stream or event the work waited on.",
        docs="docs/capture.md",
    ),
    ("no_launch_info", ""): Lever(
        title="Unattributed: device work without a matching host launch",
        summary="The trace lost the launch records, so the host side of these gaps is unknown.",
        steps=("Capture CPU and CUDA activities together: activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA].",),
        code="torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
        verify="Re-profile: the quality notes should report no device events without a launch.",
        docs="docs/capture.md",
    ),
}


def lever_for(cause: str, variant: str = "") -> Lever:
    return LEVERS.get((cause, variant)) or LEVERS[(cause, "")]
