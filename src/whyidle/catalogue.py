"""The cause catalogue: one entry per cause of device idle, and every table derived from it.

Each entry holds everything whyidle knows about a cause apart from its detector: the key
(``group/cause``), its short label, a colour, its documentation page, and its levers (title, fix,
code and how to verify; one per variant). The analyses read only the keys (``analyses/causes.py``),
the rules read the levers, the renderers read labels and colours; nothing else lists causes.

Adding a cause: add an entry here, the detector that fills its column (``analyses/gaps.py``), and
a section in its group's page (``whyidle/data/causes/<group>.md``, see ``whyidle.pages``). ``tests/test_catalogue.py`` fails when an entry misses any
of these.

# long: one table with an entry per cause; splitting it would scatter what it exists to keep together

Colours. Every cause has its own colour, and the causes of a group share a hue family: oranges
and brick reds for starvation, plums for synchronization, yellows and tan for underfilled work,
pink for insufficient demand, greys (warm, cool, light, dark) for what the trace cannot explain.
Busy work keeps Okabe-Ito's blue, sky blue and bluish green (``BUSY``; Okabe and Ito, "Color
Universal Design", 2008), and the idle families follow that palette's and Paul Tol's hues
(vermillion/orange, wine/purple, sand/yellow, pink, greys). The shade of each cause was chosen by
a search, inside its family's hue range, for the palette whose closest pair of colours (among
the 14 causes, the 3 busy classes and the white page) is as far apart as possible in CIEDE2000
under normal vision and under simulated deuteranopia and protanopia (Machado, Oliveira and
Fernandes 2009, severity 1). ``tests/test_palette.py`` holds every pair to its minimum and says
why that minimum.
"""

from __future__ import annotations

import msgspec

__all__ = ["Lever", "CauseEntry", "CATALOGUE", "GROUPS", "GROUP_LABELS", "GROUP_COLOURS", "BUSY", "entry"]


class Lever(msgspec.Struct, frozen=True):
    """What to change for a cause: the numbers are filled in by the rules from measurements."""

    title: str
    summary: str
    steps: tuple[str, ...]
    code: str
    verify: str
    docs: str  # the page: a group name (whyidle.pages)


class CauseEntry(msgspec.Struct, frozen=True):
    group: str
    cause: str
    label: str  # short human name: the HTML legend, the comparison verdict, Perfetto slices
    colour: str  # "#rrggbb"
    docs: str  # its page (whyidle.pages): the group name; whyidle explain prints it
    levers: dict[str, Lever]  # by variant; "" is the default
    # The gap's host-side op explains it (Perfetto draws an arrow from the gap to that op).
    host_side: bool = False
    # A capture artifact (cold start, the profiler's start/stop, work launched before the
    # capture): reported in the headline as such, never as a ranked finding of the job.
    artifact: bool = False

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


GROUPS = ("starvation", "underfilled", "synchronization", "insufficient_demand", "unattributed")
GROUP_LABELS: dict[str, str] = {
    "starvation": "starvation",
    "underfilled": "underfilled",
    "synchronization": "synchronization",
    "insufficient_demand": "insufficient demand",
    "unattributed": "unattributed",
}
# A group's colour (a finding's border, the batching report) is that of its first cause.
GROUP_COLOURS: dict[str, str] = {
    "starvation": "#ce7005",
    "underfilled": "#f8c709",
    "synchronization": "#610f61",
    "insufficient_demand": "#fd7092",
    "unattributed": "#716f6f",
}
# Busy classes: (label, colour).
BUSY: dict[str, tuple[str, str]] = {
    "compute": ("compute kernels", "#0072b2"),
    "communication": ("communication (exposed)", "#56b4e9"),
    "copies": ("copies and memsets", "#009e73"),
}

_CAPTURE = (
    "torch.profiler.profile(\n"
    "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
    "    with_stack=True,  # Python frames: whyidle names the host work\n"
    "    schedule=torch.profiler.schedule(wait=1, warmup=2, active=3))"
)

CATALOGUE: tuple[CauseEntry, ...] = (
    CauseEntry(
        "starvation",
        "input_pipeline",
        "input starvation",
        "#ce7005",
        "starvation",
        {
            "single_process": Lever(
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
                docs="starvation",
            ),
            "multi_process": Lever(
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
                docs="starvation",
            ),
            "": Lever(
                title="Input starvation: the training loop waits for the next batch",
                summary="Prepare batches ahead of the GPU: background workers, pinned memory, prefetching.",
                steps=(
                    "Use DataLoader(num_workers>0, pin_memory=True, persistent_workers=True).",
                    "If workers are already used, make samples cheaper (cache preprocessing, pack shards, GPU augmentation).",
                ),
                code="loader = DataLoader(dataset, batch_size=B, num_workers=8, pin_memory=True, persistent_workers=True)",
                verify="Re-profile and compare per-step DataLoader time and samples/s (whyidle compare before.json after.json).",
                docs="starvation",
            ),
        },
        host_side=True,
    ),
    CauseEntry(
        "starvation",
        "host_preprocessing",
        "host preprocessing",
        "#c1554b",
        "starvation",
        {
            "": Lever(
                title="Starvation: the launching thread prepares data in Python while the GPU waits",
                summary="Move data preparation off the thread that launches GPU work, or onto the GPU.",
                steps=(
                    "Wrap the preparation in a Dataset and load it with DataLoader(num_workers>0, pin_memory=True), so workers prepare the next batch while the GPU computes.",
                    "Or run it in a background thread / process pool feeding a queue a few batches deep.",
                    "Move array work (normalisation, resizing, augmentation) to the GPU: torch ops on CUDA tensors, torchvision.transforms.v2, DALI.",
                    "Cache deterministic preprocessing once, offline.",
                ),
                code=(
                    "class Batches(torch.utils.data.Dataset):\n"
                    "    def __getitem__(self, i):\n"
                    "        return torch.from_numpy(decode_and_normalise(i))  # your preprocessing\n"
                    "loader = DataLoader(Batches(), batch_size=None, num_workers=8, pin_memory=True)\n"
                    "for x in loader:\n"
                    "    y = model(x.to('cuda', non_blocking=True))"
                ),
                verify="Re-profile: the Python frames named in the evidence should leave the launching thread, and device idle between batches should shrink.",
                docs="starvation",
            ),
        },
        host_side=True,
    ),
    CauseEntry(
        "starvation",
        "h2d_copy",
        "host-to-device copies",
        "#9c3919",
        "starvation",
        {"": Lever(
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
            docs="starvation",
        ), "exposed": Lever(
            title="Starvation: the GPU's compute waits while input is copied from the host",
            summary="Copy input from pinned memory with non_blocking=True, a batch ahead, so the copy is fast and overlaps compute.",
            steps=(
                "Create the DataLoader with pin_memory=True (or tensor.pin_memory() for your own buffers): a pinned copy runs "
                "at the link's speed, a pageable one is staged through a bounce buffer while the host waits.",
                "Copy with .to(device, non_blocking=True) so the host goes on launching work.",
                "Prefetch: issue the next batch's copy on a side stream (torch.cuda.Stream) while this batch computes, and "
                "make the compute stream wait on it (wait_stream) before use.",
                "Send less: keep inputs in a compact dtype (uint8 images, int token ids) and convert on the GPU.",
            ),
            code=(
                "loader = DataLoader(dataset, batch_size=B, num_workers=8, pin_memory=True)\n"
                "copy_stream = torch.cuda.Stream()\n"
                "def to_gpu(batch):\n"
                "    with torch.cuda.stream(copy_stream):\n"
                "        return [t.to('cuda', non_blocking=True) for t in batch]\n"
                "it = iter(loader); nxt = to_gpu(next(it))\n"
                "for batch in it:\n"
                "    torch.cuda.current_stream().wait_stream(copy_stream)\n"
                "    x, y = nxt\n"
                "    nxt = to_gpu(batch)          # next copy overlaps this step\n"
                "    train_step(x, y)"
            ),
            verify="Re-profile: copies should read 'Pinned -> Device' and run beside kernels on another stream; the time with only a copy on the device should shrink, and samples/s rise.",
            docs="starvation",
        )},
        host_side=True,
    ),
    CauseEntry(
        "synchronization",
        "host_sync",
        "host synchronisation",
        "#610f61",
        "synchronization",
        {"": Lever(
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
            docs="synchronization",
        )},
        host_side=True,
    ),
    CauseEntry(
        "synchronization",
        "dependency_wait",
        "waits on device dependencies",
        "#b9138b",
        "synchronization",
        {
            "": Lever(
                title="Synchronization: queued work waited on another stream, event or collective",
                summary="The next work was queued but waited on a dependency: overlap or shorten what it waits for.",
                steps=(
                    "Look at what the work waited for (the evidence names the event, stream or collective).",
                    "A collective waiting for other ranks: see whyidle's multi-rank report for the late rank (diagnose the run folder).",
                    "A stream waiting on another: start the producer earlier or split it so the consumer can begin sooner.",
                    "Remove cudaStreamWaitEvent / torch.cuda.current_stream().wait_stream() calls that are not needed for correctness.",
                ),
                code=(
                    "# wait only where the data is needed, not at the start of the step\n"
                    "copy_stream = torch.cuda.Stream()\n"
                    "with torch.cuda.stream(copy_stream):\n"
                    "    nxt = batch.to('cuda', non_blocking=True)\n"
                    "...  # compute on the current batch\n"
                    "torch.cuda.current_stream().wait_stream(copy_stream)"
                ),
                verify="Re-profile: the waits named in the evidence should shrink, and the next work should start when it is queued.",
                docs="synchronization",
            ),
        },
    ),
    CauseEntry(
        "underfilled",
        "host_overhead",
        "launch overhead",
        "#f8c709",
        "underfilled",
        {"": Lever(
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
            docs="underfilled",
        )},
        host_side=True,
    ),
    CauseEntry(
        "underfilled",
        "launch_latency",
        "launch latency",
        "#d2a964",
        "underfilled",
        {
            "": Lever(
                title="Underfilled: the device waits inside slow launch calls",
                summary="Launch calls were still running when the device ran dry: fewer, cheaper launches.",
                steps=(
                    "Capture the steady part of the step in a CUDA graph (torch.compile(mode='reduce-overhead') or torch.cuda.graphs): one launch replaces many.",
                    "Fuse small kernels (torch.compile) so fewer launches are needed.",
                    "If single launches take tens of microseconds, check for launch-time argument packing (large kernel arguments) or a contended driver (several processes on one GPU).",
                ),
                code="model = torch.compile(model, mode='reduce-overhead')  # CUDA graphs: one launch per step",
                verify="Re-profile: the launch calls named in the evidence should be shorter or fewer, and the device should find work queued.",
                docs="underfilled",
            ),
        },
        host_side=True,
    ),
    CauseEntry(
        "underfilled",
        "kernel_boundaries",
        "kernel boundaries",
        "#efe497",
        "underfilled",
        {"": Lever(
            title="Underfilled: many tiny kernels, each paying the device's start-up cost",
            summary="Fewer, larger kernels: fuse elementwise chains and use CUDA graphs.",
            steps=(
                "torch.compile(model) fuses elementwise and reduction chains into few kernels.",
                "Use fused implementations (fused optimizers, scaled_dot_product_attention, fused LayerNorm).",
                "Capture static parts with CUDA graphs to remove per-kernel launch gaps.",
            ),
            code="model = torch.compile(model)",
            verify="Re-profile: kernel count per step should fall and the idle between back-to-back kernels shrink.",
            docs="underfilled",
        )},
    ),
    CauseEntry(
        "underfilled",
        "jit_compile",
        "jit compilation",
        "#482800",
        "underfilled",
        {"": Lever(
            title="Underfilled: kernels compiled on first use while the GPU waits (JIT, module loading)",
            summary="The launching thread compiles and loads kernels again and again during the run (NVRTC, CuPy, Triton): compile them once, ahead of the loop, and keep the cache.",
            steps=(
                "Warm up: run every kernel once, with every shape and dtype the loop will use, before the timed or served part.",
                "Keep the compiler's cache on a persistent disk: CuPy's kernel cache (CUPY_CACHE_DIR), Triton's (TRITON_CACHE_DIR, autotuning results included); a fresh container starts cold.",
                "Build a cupy.RawModule / RawKernel once at start-up and reuse it; never build kernel source per call (a new source string is a new compilation).",
                "Compile ahead of time where the toolkit allows it: a cubin/fatbin loaded once (cupy.RawModule(path=...)), Triton's AOT compiler, NVRTC output cached by key.",
            ),
            code=(
                "import cupy as cp\n"
                "# once, at start-up: compile and load, then reuse\n"
                "mod = cp.RawModule(code=KERNEL_SOURCE, options=('--std=c++17',))\n"
                "scale = mod.get_function('scale')\n"
                "for n in SIZES:  # warm-up: each shape the loop will meet\n"
                "    x = cp.empty(n, dtype=cp.float32)\n"
                "    scale(((n + 255) // 256,), (256,), (x, cp.float32(1.0), cp.int32(n)))\n"
                "cp.cuda.Device().synchronize()\n"
                "# shell: export CUPY_CACHE_DIR=/persistent/cupy TRITON_CACHE_DIR=/persistent/triton"
            ),
            verify="Re-profile after warm-up: no nvrtc, cuModuleLoadData or hipModuleLoad calls (and no compiler frames) inside the window.",
            docs="underfilled",
        )},
        host_side=True,
    ),
    CauseEntry(
        "insufficient_demand",
        "idle_host",
        "waiting for requests",
        "#fd7092",
        "insufficient_demand",
        {"": Lever(
            title="Insufficient demand: the server waits for requests while the GPU idles",
            summary="The serving loop was blocked on its request queue: batch concurrent requests and keep several in flight, so the GPU always has queued work.",
            steps=(
                "Use dynamic batching (Triton Inference Server, TorchServe batch_size/max_batch_delay, vLLM continuous batching).",
                "Raise client concurrency or the number of in-flight requests per GPU.",
                "Find the batching settings for your latency percentile: whyidle batching --latency CURVE.csv --rate REQUESTS_PER_S --slo-ms SLO (or --requests LOG; --measure MODULE:FUNCTION times the model; --curve B:MS,... gives the curve inline). From a trace that marks its batches (record_function('serve_batch'), record_shapes=True), the finding fills in the rate and the curve.",
                "From a request log, whyidle serving LOG --trace TRACE tells scarce requests from bad batching and a slow host pipeline.",
            ),
            code=(
                "# TorchServe model-config.yaml\n"
                "batchSize: 16\n"
                "maxBatchDelay: 5   # ms to wait for a fuller batch"
            ),
            verify="Re-profile under production-like load: the host should no longer sit idle between requests and GPU busy time per request should rise.",
            docs="insufficient_demand",
        )},
        host_side=True,
    ),
    CauseEntry(
        "unattributed",
        "untraced_host",
        "untraced host work",
        "#716f6f",
        "unattributed",
        {"": Lever(
            title="Unattributed: the launching thread ran code the trace does not show",
            summary="Capture more context so the cause can be named.",
            steps=(
                "Profile with with_stack=True to get Python lines.",
                "Wrap suspect regions (logging, checkpointing, evaluation) in torch.profiler.record_function('name').",
                "Use Nsight Systems with OS-runtime tracing (nsys profile -t cuda,nvtx,osrt) to see blocking I/O.",
            ),
            code="with torch.profiler.record_function('checkpoint'):\n    save_checkpoint(model)",
            verify="Re-profile: the time should appear under a named range, and whyidle can attribute it.",
            docs="unattributed",
        )},
    ),
    CauseEntry(
        "unattributed",
        "queued_work_waiting",
        "queued work waiting on the device",
        "#aeb6c1",
        "unattributed",
        {"": Lever(
            title="Unattributed: queued work waited on the device",
            summary="Work was already queued but did not start: a device-side dependency the trace cannot name.",
            steps=(
                "Look for cudaStreamWaitEvent / cross-stream dependencies and collectives waiting for other ranks.",
                "Capture with Nsight Systems to see dependencies between streams.",
            ),
            code="# nsys profile -t cuda,nvtx,osrt --cuda-event-trace=true python train.py",
            verify="Re-profile with event tracing to see which stream or event the work waited on.",
            docs="unattributed",
        )},
    ),
    CauseEntry(
        "unattributed",
        "no_launch_info",
        "gaps without a launch record",
        "#535046",
        "unattributed",
        {"": Lever(
            title="Unattributed: device work without a matching host launch",
            summary="The trace lost the launch records, so the host side of these gaps is unknown.",
            steps=("Capture CPU and CUDA activities together: activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA].",),
            code="torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
            verify="Re-profile: the quality notes should report no device events without a launch.",
            docs="unattributed",
        ),
        # The device work after these gaps carries no correlation id in any capture (MTIA DMA
        # requests): asking for another capture would not help, so the lever says what can be read.
        "no_correlation": Lever(
            title="Unattributed: device transfers that no capture links to a launch",
            summary="These gaps end in device work that carries no correlation id (MTIA DMA requests), so no capture option can name the host side.",
            steps=(
                "Open the Perfetto export (whyidle diagnose TRACE -o trace.perfetto.json.gz) and read the host threads during the largest gaps.",
                "Wrap the code that issues the transfers in torch.profiler.record_function ranges so their time is visible on the host.",
            ),
            code='with torch.profiler.record_function("copy_inputs"):\n    batch = batch.to(device)',
            verify="Re-profile: the ranges show how long the host spends issuing the transfers before each gap.",
            docs="unattributed",
        )},
    ),
    CauseEntry(
        "unattributed",
        "cold_start",
        "cold start",
        "#4f4e5a",
        "unattributed",
        {"": Lever(
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
            docs="unattributed",
        )},
        host_side=True,
        artifact=True,
    ),
    CauseEntry(
        "unattributed",
        "capture_boundary",
        "capture boundaries",
        "#d4cdc4",
        "unattributed",
        {
            "": Lever(
                title="Capture artifact: the capture began or ended in the middle of the device's work",
                summary="Device work launched before the capture began (the device was busy, but the trace does not show it) or the profiler's start/stop.",
                steps=(
                    "Start the capture at a step boundary after warm-up (torch.profiler.schedule), so no work from before it is still running.",
                    "Diagnose with --skip-first 1 to leave out the first captured step.",
                ),
                code=_CAPTURE,
                verify="Re-profile after warm-up: the first gap of the window should be no longer than the others.",
                docs="unattributed",
            ),
        },
        artifact=True,
    ),
)

_BY_KEY = {e.key: e for e in CATALOGUE}


def entry(key: str) -> CauseEntry:
    """The catalogue entry of 'group/cause' (KeyError for an unknown cause)."""
    return _BY_KEY[key]
