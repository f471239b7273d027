"""The cause catalogue: one entry per cause of device idle, and every table derived from it.

Each entry holds everything whyidle knows about a cause apart from its detector: the key
(``group/cause``), its short label, a colour, its documentation page, and its levers (title, fix,
code and how to verify; one per variant, and one per idiom for jobs that are not a PyTorch
program). The analyses read only the keys (``analyses/causes.py``), the rules read the levers,
the renderers read labels and colours; nothing else lists causes.

Adding a cause: add an entry here, the detector that fills its column (``analyses/detectors.py``),
and a section in its group's page (``whyidle/data/causes/<group>.md``, see ``whyidle.pages``).
``tests/test_catalogue.py`` fails when an entry misses any of these. A cause from outside the
package (a plug-in, a test) does the same at run time: ``CATALOGUE.register(entry)``,
``analyses.detectors.register(...)``, ``pages.register_section(...)``
(``tests/test_fake_cause.py``). Every table keyed by cause reads the catalogue when it is used
(``derived``, ``LiveMap``, ``LiveSeq``), never a copy taken at import.

Beside the causes: the findings on busy time (``BUSY_FINDINGS``: their levers, replay lever and
sweep knobs) and the fix texts of the Nsight Systems API findings (``API_FIXES``).

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

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar, overload

import msgspec

__all__ = ["Lever", "CauseEntry", "Catalogue", "CATALOGUE", "derived", "LiveMap", "LiveSeq", "replay_lever", "replay_levers", "idiom_levers", "sweep_knobs", "applied_test", "lab_flaw_causes", "SCHEDULE", "SCHEDULE_CALL", "GROUPS", "GROUP_LABELS", "GROUP_COLOURS", "BUSY", "entry", "warmup_capture", "BusyEntry", "BUSY_FINDINGS", "ApiFix", "API_FIXES", "fill"]


class Lever(msgspec.Struct, frozen=True):
    """What to change for a cause: the numbers are filled in by the rules from measurements."""

    title: str
    summary: str
    steps: tuple[str, ...]
    code: str
    verify: str
    docs: str  # the page: a group name (whyidle.pages)
    # Steps and code lines that apply only to some jobs: (condition, text), the condition a name
    # in findings/advice.py CONDITIONS (a test on the diagnosis's advice context). Shown after the
    # unconditional ones, in order, where the condition holds. ``{workers}``, ``{optimizer}`` and
    # ``{optimizer_flag}`` are filled in from the trace and the configuration.
    when_steps: tuple[tuple[str, str], ...] = ()
    when_code: tuple[tuple[str, str], ...] = ()


class CauseEntry(msgspec.Struct, frozen=True):
    group: str
    cause: str
    label: str  # short human name: the HTML legend, the comparison verdict, Perfetto slices
    colour: str  # "#rrggbb"
    docs: str  # its page (whyidle.pages): the group name; whyidle explain prints it
    levers: dict[str, Lever]  # by variant; "" is the default
    # Its levers for jobs that are not a PyTorch program, by idiom (analyses/advice_context.py
    # IDIOMS): "cuda" (CUDA C/C++; HIP programs get the same text with the runtime's names
    # translated), "cupy", "jax" and "engine" (a serving engine: its settings, not a training
    # loop). findings/advice.py chooses among them (``idiom_levers``); a cause without one for an
    # idiom gets its default lever with the PyTorch-only steps and code left out.
    idioms: dict[str, Lever] = msgspec.field(default_factory=dict)
    # The gap's host-side op explains it (Perfetto draws an arrow from the gap to that op).
    host_side: bool = False
    # A capture artifact (cold start, the profiler's start/stop, work launched before the
    # capture): reported in the headline as such, never as a ranked finding of the job.
    artifact: bool = False
    # The what-if replay lever (findings/predict.py LEVERS) that predicts the fix, by variant
    # ("" is the default; a variant absent here takes the default's). Empty: not replayed.
    replay: dict[str, str] = msgspec.field(default_factory=dict)
    # The sweep's knobs that act on it (sweep/trial.py LEVERS), tried first when a report is given.
    sweep: tuple[str, ...] = ()
    # The flaw lab's flaws (lab/job.py) whose diagnosis may name this cause first.
    lab_flaws: tuple[str, ...] = ()
    # The test (findings/applied.py APPLIED) that tells from the diagnoses of two runs whether
    # its lever was applied, before ``whyidle compare`` checks its prediction. Empty: taken as
    # applied when its idle fell (no record of the job names the change, as for host syncs).
    applied: str = ""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class Catalogue(Sequence[CauseEntry]):
    """The causes, in order: the built-in entries, then those registered at run time.

    A sequence of :class:`CauseEntry`; ``version`` grows with every change, so that a table
    derived from it (``derived``) is rebuilt when the catalogue changes and never goes stale.
    """

    def __init__(self, entries: Sequence[CauseEntry]) -> None:
        self._entries: list[CauseEntry] = []
        self._built_in: frozenset[str] = frozenset()
        self.version = 0
        for e in entries:
            self.register(e)
        self._built_in = frozenset(e.key for e in entries)

    @overload
    def __getitem__(self, i: int) -> CauseEntry: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[CauseEntry]: ...
    def __getitem__(self, i: int | slice) -> CauseEntry | Sequence[CauseEntry]:
        return self._entries[i]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[CauseEntry]:
        return iter(tuple(self._entries))

    def get(self, key: str) -> CauseEntry | None:
        return next((e for e in self._entries if e.key == key), None)

    def entry(self, key: str) -> CauseEntry:
        """The entry of 'group/cause' (KeyError naming the known keys for anything else)."""
        e = self.get(key)
        if e is None:
            raise KeyError(f"{key!r} is not in the cause catalogue; known: {', '.join(x.key for x in self._entries)}")
        return e

    def register(self, e: CauseEntry) -> None:
        """Add a cause after the others (its column is the last). A ValueError says what is wrong
        with an entry that cannot be added: an unknown group, a key or cause name already used,
        no default lever."""
        if e.group not in GROUPS:
            raise ValueError(f"cause {e.key!r}: group {e.group!r} is not one of {', '.join(GROUPS)}")
        if any(x.key == e.key or x.cause == e.cause for x in self._entries):
            raise ValueError(f"cause {e.key!r}: a cause named {e.cause!r} is already in the catalogue")
        if "" not in e.levers:
            raise ValueError(f"cause {e.key!r}: expected a default lever (variant \"\") among its levers")
        self._entries.append(e)
        self.version += 1

    def unregister(self, key: str) -> None:
        """Remove a cause added by :meth:`register` (a built-in cause cannot be removed)."""
        if key in self._built_in:
            raise ValueError(f"cause {key!r} is built in; only a registered cause can be removed")
        self._entries.remove(self.entry(key))
        self.version += 1

    @contextmanager
    def registered(self, e: CauseEntry) -> Iterator[CauseEntry]:
        """The catalogue with ``e`` added for the duration of the block."""
        self.register(e)
        try:
            yield e
        finally:
            self.unregister(e.key)


def derived(build: Callable[[Sequence[CauseEntry]], T]) -> Callable[[], T]:
    """A table built from the catalogue, rebuilt when the catalogue has changed since."""
    cache: list[tuple[int, T]] = []

    def get() -> T:
        if not cache or cache[0][0] != CATALOGUE.version:
            cache[:] = [(CATALOGUE.version, build(CATALOGUE))]
        return cache[0][1]

    return get


class LiveMap(Mapping[K, V]):
    """A mapping that reads a derived table each time: a module-level table keyed by cause that
    stays current when a cause is registered."""

    def __init__(self, table: Callable[[], Mapping[K, V]]) -> None:
        self._table = table

    def __getitem__(self, key: K) -> V:
        return self._table()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


class LiveSeq(Sequence[T]):
    """A sequence that reads a derived table each time (see :class:`LiveMap`)."""

    def __init__(self, table: Callable[[], Sequence[T]]) -> None:
        self._table = table

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        return self._table()[i]

    def __len__(self) -> int:
        return len(self._table())

    def __iter__(self) -> Iterator[T]:
        return iter(self._table())


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

# The profiler schedule whyidle advises and whyidle.schedule() uses (wait, warm-up, active,
# repeat): five steps of wait skip the cold start (CUDA context, cuDNN autotuning, allocator
# growth: the first steps of the shared traces ran 2-20x longer than later ones); two of warm-up
# let the profiler's own start-up settle (torch.profiler's documented advice); three active steps
# keep a trace small (a few MB) while showing the step pattern. One number for every text.
SCHEDULE = (5, 2, 3, 1)
SCHEDULE_CALL = f"torch.profiler.schedule(wait={SCHEDULE[0]}, warmup={SCHEDULE[1]}, active={SCHEDULE[2]})"

_CAPTURE = (
    "torch.profiler.profile(\n"
    "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
    "    with_stack=True,  # Python frames: whyidle names the host work\n"
    f"    schedule={SCHEDULE_CALL})"
)


def _lever(title: str, summary: str, steps: tuple[str, ...], code: str, verify: str, docs: str) -> Lever:
    return Lever(title, summary, steps, code, verify, docs)


_NSYS = "nsys profile -t cuda,nvtx,osrt --cuda-graph-trace=node -o run ./app && whyidle diagnose run.nsys-rep"
_STREAMS_CUDA = (
    "cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n"
    "float *h; cudaMallocHost(&h, bytes);          // pinned: the copy runs at link speed, truly async\n"
    "cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s);\n"
    "kernel<<<grid, block, 0, s>>>(d, n);\n"
    "cudaEventRecord(done, s);                      // wait on the event only where the host needs the result"
)
_GRAPH_CUDA = (
    "cudaGraph_t g; cudaGraphExec_t exec;\n"
    "cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);\n"
    "for (int i = 0; i < n_kernels; ++i) step_kernel<<<grid, block, 0, s>>>(args[i]);\n"
    "cudaStreamEndCapture(s, &g);\n"
    "cudaGraphInstantiate(&exec, g, 0);\n"
    "for (int it = 0; it < iters; ++it) cudaGraphLaunch(exec, s);   // one launch per iteration"
)
_GRAPH_CUPY = (
    "s = cupy.cuda.Stream(non_blocking=True)\n"
    "with s:\n"
    "    s.begin_capture()\n"
    "    step(x)                      # the same kernels every iteration\n"
    "    graph = s.end_capture()\n"
    "for _ in range(iters):\n"
    "    graph.launch(s)              # one launch replays them all"
)
_JIT_JAX = (
    "@jax.jit\n"
    "def train_steps(state, batches):            # many steps per dispatch\n"
    "    return jax.lax.scan(train_step, state, batches)\n"
    "state, metrics = train_steps(state, batches)   # no float()/print of arrays inside the loop"
)


_BUILT_IN: tuple[CauseEntry, ...] = (
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
                    "    num_workers={workers}, pin_memory=True,\n"
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
                code="loader = DataLoader(dataset, batch_size=B, num_workers={workers}, pin_memory=True, persistent_workers=True)",
                verify="Re-profile and compare per-step DataLoader time and samples/s (whyidle compare before.json after.json).",
                docs="starvation",
            ),
        },
        host_side=True,
        replay={"": "input_pipeline", "multi_process": "loader_speedup"},
        sweep=("num_workers", "prefetch_factor", "persistent_workers"),
        lab_flaws=("starvation",),
        applied="loader_workers",
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
                    "loader = DataLoader(Batches(), batch_size=None, num_workers={workers}, pin_memory=True)\n"
                    "for x in loader:\n"
                    "    y = model(x.to('cuda', non_blocking=True))"
                ),
                verify="Re-profile: the Python frames named in the evidence should leave the launching thread, and device idle between batches should shrink.",
                docs="starvation",
            ),
        },
        idioms={
            "cuda": _lever(
                "Starvation: the launching thread prepares data while the GPU waits",
                "Move host-side preparation off the thread that launches GPU work, and overlap it with the device.",
                (
                    "Prepare the next batch in a producer thread (or a thread pool) filling a queue a few batches deep.",
                    "Overlap the preparation with the device: launch work asynchronously, then prepare the next input before synchronising.",
                    "Move the preparation itself to the GPU when it is data-parallel.",
                ),
                "std::thread producer([&]{ for (auto& b : batches) queue.push(prepare(b)); });\nfor (;;) {\n    Batch b = queue.pop();          // ready before the GPU needs it\n    cudaMemcpyAsync(d, b.pinned, b.bytes, cudaMemcpyHostToDevice, s);\n    kernel<<<grid, block, 0, s>>>(d, b.n);\n}",
                "Re-capture with nsys: the host time between iterations on the launching thread should shrink.",
                "starvation",
            ),
            "cupy": _lever(
                "Starvation: the launching thread prepares data in Python while the GPU waits",
                "Do the preparation on the GPU with CuPy, or in a background thread a few batches ahead.",
                (
                    "Move NumPy preprocessing to CuPy arrays after the copy (the same API runs on the device).",
                    "Or prepare the next batch in a concurrent.futures thread pool while the GPU computes.",
                ),
                "with concurrent.futures.ThreadPoolExecutor(2) as pool:\n    fut = pool.submit(prepare, 0)\n    for i in range(1, n + 1):\n        x = cupy.asarray(fut.result())\n        if i < n:\n            fut = pool.submit(prepare, i)   # next batch prepared while the GPU computes\n        step(x)",
                "Re-profile: the Python frames named in the evidence should leave the launching thread.",
                "starvation",
            ),
            "jax": _lever(
                "Starvation: the launching thread prepares data in Python while the device waits",
                "Prepare batches in a pipeline with workers and prefetch (tf.data with AUTOTUNE, grain workers).",
                (
                    "Build the input pipeline with grain (worker_count > 0) or tf.data (map(num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)).",
                    "Prefetch batches to the device ahead of the step (flax.jax_utils.prefetch_to_device).",
                ),
                "ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).batch(B).prefetch(tf.data.AUTOTUNE)\nfor batch in ds.as_numpy_iterator():\n    state = train_step(state, batch)",
                "Re-profile: the host should be idle-waiting, not preprocessing, between steps.",
                "starvation",
            ),
            "engine": _lever(
                "Starvation: the engine's host thread prepares inputs while the GPU waits",
                "Input preparation (tokenisation, multimodal preprocessing, scheduling) runs between forward passes: move it off the engine's loop.",
                (
                    "Run tokenisation and multimodal preprocessing in separate processes (vLLM: API server processes with --api-server-count; SGLang's tokenizer manager).",
                    "Keep the scheduler's CPU work small: prefix caching on, fewer tiny requests per step.",
                ),
                "vllm serve MODEL --api-server-count 4   # tokenisation and preprocessing in their own processes",
                "Re-profile: host time between forward passes should shrink.",
                "starvation",
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
                "loader = DataLoader(dataset, batch_size=B, num_workers={workers}, pin_memory=True)\n"
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
                "loader = DataLoader(dataset, batch_size=B, num_workers={workers}, pin_memory=True)\n"
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
        idioms={
            "cuda": _lever(
                "Starvation: host-to-device copies on the critical path",
                "Copy from pinned memory with cudaMemcpyAsync on a stream, double-buffered, so copies overlap compute.",
                (
                    "Allocate host buffers with cudaMallocHost / cudaHostAlloc (or cudaHostRegister an existing buffer): pageable copies are staged and block the host.",
                    "Use cudaMemcpyAsync on a non-default stream, and overlap the next chunk's copy with this chunk's kernels (two buffers, two streams).",
                    "Send less: keep data in a compact type on the host and convert on the device.",
                ),
                _STREAMS_CUDA,
                "Re-capture with nsys: copies should read 'Pinned -> Device' and run beside kernels on another stream.",
                "starvation",
            ),
            "cupy": _lever(
                "Starvation: host-to-device copies on the critical path",
                "Copy from pinned host memory on a separate stream, a batch ahead, so copies overlap compute.",
                (
                    "Allocate host arrays with cupyx.empty_pinned (or numpy arrays over cupy.cuda.alloc_pinned_memory).",
                    "Copy with gpu_array.set(host_array, stream=copy_stream) on a non-blocking stream, a batch ahead.",
                    "Make the compute stream wait on an event recorded after the copy.",
                ),
                "copy_stream = cupy.cuda.Stream(non_blocking=True)\nhost = cupyx.empty_pinned(shape, dtype)\nnxt = cupy.empty(shape, dtype)\nwith copy_stream:\n    nxt.set(host, stream=copy_stream)\n    ready = copy_stream.record()\ncupy.cuda.get_current_stream().wait_event(ready)",
                "Re-profile: copies should read 'Pinned -> Device' and overlap kernels.",
                "starvation",
            ),
            "jax": _lever(
                "Starvation: host-to-device copies on the critical path",
                "Put the next batch on the device while this one computes (jax.device_put ahead of use).",
                (
                    "Prefetch: device_put the next batch before running the current step (flax.jax_utils.prefetch_to_device for a data iterator).",
                    "Keep inputs compact on the host (uint8, int32 ids) and convert inside the jitted step.",
                ),
                "it = iter(batches)\nnxt = jax.device_put(next(it))\nfor batch in it:\n    cur, nxt = nxt, jax.device_put(batch)   # next copy overlaps this step\n    state = train_step(state, cur)",
                "Re-profile: the copies should overlap the previous step's kernels.",
                "starvation",
            ),
        },
        host_side=True,
        replay={"": "h2d_copy"},
        sweep=("pin_memory", "num_workers"),
        lab_flaws=("h2d",),
        applied="copies_pinned",
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
        idioms={
            "cuda": _lever(
                "Synchronization: the host waits for the GPU, draining its queue",
                "Synchronise only where the host needs a result: the device queue empties at every cudaDeviceSynchronize.",
                (
                    "Remove cudaDeviceSynchronize/cudaStreamSynchronize after each kernel: kernels on one stream already run in order.",
                    "Where the host needs a result, record an event on the stream and cudaEventSynchronize on it just before the use.",
                    "Time with cudaEventRecord/cudaEventElapsedTime on the stream instead of synchronising around each kernel.",
                    "Check errors with cudaGetLastError after launches (no sync) and synchronise once per iteration in debug builds only.",
                ),
                "for (int i = 0; i < n; ++i) {\n    kernel<<<grid, block, 0, s>>>(d, i);\n    // no cudaDeviceSynchronize() here: same-stream kernels run in order\n}\ncudaEventRecord(done, s);\ncudaEventSynchronize(done);   // once, where the host reads the result",
                "Re-capture with nsys: cudaDeviceSynchronize/cudaStreamSynchronize calls per iteration should drop to one or none, and kernels should queue ahead.",
                "synchronization",
            ),
            "cupy": _lever(
                "Synchronization: the host waits for the GPU, draining its queue",
                "Keep results on the device: every .get(), cupy.asnumpy(), float(x) or Device.synchronize() waits for the queue to empty.",
                (
                    "Reduce on the device (x.sum(), cupy.count_nonzero) and copy one scalar back every N iterations, not each step.",
                    "Replace Device().synchronize() / stream.synchronize() in the loop with an Event recorded where the result is needed.",
                    "Avoid Python control flow on device values (if float(err) < tol) each iteration: test every N iterations.",
                    "Time with cupyx.profiler.benchmark or cupy.cuda.Event pairs, not with synchronize().",
                ),
                "err = cupy.zeros((), dtype=cupy.float64)\nfor it in range(iters):\n    x = step(x)\n    err += cupy.linalg.norm(x - x_prev)   # stays on the GPU\n    if it % 100 == 0 and float(err) / 100 < tol:   # one sync per 100 iterations\n        break",
                "Re-profile: cudaStreamSynchronize / cudaMemcpy DtoH per iteration should fall, and kernels should queue ahead.",
                "synchronization",
            ),
            "jax": _lever(
                "Synchronization: the host waits for the device, draining its queue",
                "Let JAX dispatch run ahead: block_until_ready, jax.device_get, float(x) and printing arrays each step wait for the device.",
                (
                    "Remove block_until_ready() from the step (keep it only around timing code).",
                    "Fetch metrics every N steps (jax.device_get on a stacked history), not every step.",
                    "Use jax.debug.print inside jitted code instead of printing arrays on the host.",
                ),
                "for step in range(steps):\n    state, loss = train_step(state, batch)   # async dispatch\n    if step % 100 == 0:\n        print(jax.device_get(loss))   # one sync per 100 steps",
                "Re-profile: the host should enqueue the next step before the device finishes the current one.",
                "synchronization",
            ),
            "engine": _lever(
                "Synchronization: the engine's loop waits for the GPU between forward passes",
                "The serving engine reads results back each iteration; keep its asynchronous scheduling on and its CUDA graphs enabled.",
                (
                    "Do not run the engine in eager mode (vLLM: no --enforce-eager; SGLang: no --disable-cuda-graph), so each decode step is one graph launch.",
                    "Keep asynchronous output processing / overlap scheduling on (vLLM's default async output processing; SGLang's overlap scheduler), so sampling results are read while the next step runs.",
                    "Upgrade the engine: host-device overlap in the scheduler is where recent releases gained most.",
                ),
                "vllm serve MODEL            # without --enforce-eager: CUDA graphs for decode\n# SGLang: python -m sglang.launch_server --model-path MODEL   (without --disable-cuda-graph / --disable-overlap-schedule)",
                "Re-profile under the same load: the host-side waits between forward passes should shrink.",
                "synchronization",
            ),
        },
        host_side=True,
        replay={"": "host_sync"},
        lab_flaws=("sync",),
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
            summary="Give the GPU more work per launch: larger batches, fused kernels, CUDA graphs.",
            steps=(
                "Raise the batch size (or micro-batch, or samples per forward pass) if memory allows: the host cost per step stays, the GPU work grows.",
            ),
            code="",
            verify="Re-profile: kernels per step should fall (compile/fusion) or grow longer (batch size), and the host should run ahead of the GPU (launches queued before kernels start).",
            docs="underfilled",
            when_steps=(
                ("eager", "torch.compile(model) fuses small ops and cuts Python dispatch; mode='reduce-overhead' adds CUDA graphs."),
                ("compiled_without_graphs", "The model already runs torch.compile regions: add CUDA graphs with mode='reduce-overhead', and find what still runs eagerly between the regions (graph breaks, recompiles: TORCH_LOGS=graph_breaks,recompiles)."),
                ("compiled_with_graphs", "The model already runs compiled regions and CUDA graphs: the host time left is outside them. Find the eager code between graphs (graph breaks, recompiles: TORCH_LOGS=graph_breaks,recompiles) and the Python work around the model call."),
            ),
            when_code=(
                ("eager", "model = torch.compile(model, mode='reduce-overhead')  # fusion + CUDA graphs"),
                ("compiled_without_graphs", "model = torch.compile(model, mode='reduce-overhead')  # CUDA graphs over the compiled regions\n# TORCH_LOGS=graph_breaks,recompiles python train.py   # what still runs eagerly"),
                ("compiled_with_graphs", "# TORCH_LOGS=graph_breaks,recompiles python train.py   # the eager code between the compiled graphs\nprint(torch._dynamo.explain(model)(example_input).break_reasons)"),
                ("optimizer_per_parameter", "opt = torch.optim.{optimizer}(model.parameters(), lr=lr, {optimizer_flag}=True)  # {optimizer}, as in this trace"),
                ("zero_grad_fills", "opt.zero_grad(set_to_none=True)"),
            ),
        )},
        idioms={
            "cuda": _lever(
                "Underfilled: the GPU outruns the host (launch overhead)",
                "Launch fewer, larger pieces of work: fuse kernels, capture the iteration in a CUDA graph, give each kernel more data.",
                (
                    "Capture the repeated sequence of kernels in a CUDA graph (stream capture) and launch the graph once per iteration.",
                    "Fuse consecutive small kernels into one (each launch costs the host several microseconds).",
                    "Give each kernel more work (batch several problems into one launch, larger tiles).",
                ),
                _GRAPH_CUDA,
                "Re-capture with nsys: cudaLaunchKernel calls per iteration should fall (cudaGraphLaunch instead), and the device should find work queued.",
                "underfilled",
            ),
            "cupy": _lever(
                "Underfilled: the GPU outruns the host (launch and Python overhead)",
                "Launch fewer kernels: fuse elementwise chains (cupy.fuse, ElementwiseKernel), capture the loop body in a CUDA graph, use larger arrays.",
                (
                    "Fuse chains of elementwise operations with @cupy.fuse() or one cupy.ElementwiseKernel / RawKernel.",
                    "Capture the repeated iteration in a CUDA graph (Stream.begin_capture / end_capture) and launch it once per iteration.",
                    "Batch small arrays into one larger array so each kernel has enough work.",
                ),
                _GRAPH_CUPY,
                "Re-profile: kernels per iteration should fall, and the host should stay ahead of the device.",
                "underfilled",
            ),
            "jax": _lever(
                "Underfilled: the device outruns the host (dispatch overhead)",
                "Dispatch more work per call: jit the whole step, loop on the device (lax.scan / fori_loop), avoid retracing.",
                (
                    "jax.jit the whole training or inference step, not small functions called from a Python loop.",
                    "Run several steps per dispatch with jax.lax.scan over a stack of batches.",
                    "Keep shapes and static arguments fixed so the step does not recompile (check with jax.log_compiles).",
                ),
                _JIT_JAX,
                "Re-profile: host dispatch per step should shrink and the device should find the next step queued.",
                "underfilled",
            ),
            "engine": _lever(
                "Underfilled: the GPU outruns the serving engine's host loop",
                "The engine's Python loop and launches cost more than each forward pass: use CUDA graphs and larger batches per step.",
                (
                    "Do not run the engine in eager mode (vLLM: no --enforce-eager; SGLang: no --disable-cuda-graph): each decode step becomes one graph launch.",
                    "Cover the batch sizes you serve with captured graphs (vLLM: cudagraph capture sizes in --compilation-config; SGLang: --cuda-graph-max-bs).",
                    "Raise the number of sequences per step (vLLM --max-num-seqs, SGLang --max-running-requests) so each launch carries more work, within your latency target.",
                    "Keep chunked prefill on (vLLM --enable-chunked-prefill) so prefill and decode share steps.",
                ),
                "vllm serve MODEL --max-num-seqs 256 --enable-chunked-prefill \\\n    --compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8, 16, 32, 64, 128, 256]}'",
                "Re-profile under the same load: host time between forward passes should shrink and GPU busy rise.",
                "underfilled",
            ),
        },
        host_side=True,
        replay={"": "host_overhead"},
        sweep=("compile", "batch_size"),
        lab_flaws=("smallbatch", "launch"),
        applied="launches_batched",
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
                    "If single launches take tens of microseconds, check for launch-time argument packing (large kernel arguments) or a contended driver (several processes on one GPU).",
                ),
                code="",
                when_steps=(
                    ("without_graphs", "Capture the steady part of the step in a CUDA graph (torch.compile(mode='reduce-overhead') or torch.cuda.CUDAGraph): one launch replaces many."),
                    ("eager", "Fuse small kernels (torch.compile) so fewer launches are needed."),
                    ("with_graphs", "CUDA graphs already run: the slow launches are outside them. Move the remaining eager launches into the captured region."),
                ),
                when_code=(
                    ("without_graphs", "model = torch.compile(model, mode='reduce-overhead')  # CUDA graphs: one launch per step"),
                    ("with_graphs", "g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    static_out = model(static_in)   # capture the eager part too\nstatic_in.copy_(x); g.replay()"),
                ),
                verify="Re-profile: the launch calls named in the evidence should be shorter or fewer, and the device should find work queued.",
                docs="underfilled",
            ),
        },
        idioms={
            "cuda": _lever(
                "Underfilled: the device waits inside slow launch calls",
                "Launch calls were still running when the device ran dry: fewer, cheaper launches.",
                (
                    "Capture the iteration in a CUDA graph: one cudaGraphLaunch replaces many cudaLaunchKernel calls.",
                    "Fuse small kernels so fewer launches are needed.",
                    "Keep kernel arguments small (pass pointers to structs in device memory, not large structs by value).",
                ),
                _GRAPH_CUDA,
                "Re-capture with nsys: the launch calls named in the evidence should be fewer or shorter.",
                "underfilled",
            ),
            "cupy": _lever(
                "Underfilled: the device waits inside slow launch calls",
                "Launch calls were still running when the device ran dry: fewer launches (fusion, CUDA graphs).",
                ("Fuse elementwise chains with @cupy.fuse() or an ElementwiseKernel.", "Capture the iteration in a CUDA graph and launch it once."),
                _GRAPH_CUPY,
                "Re-profile: launch calls per iteration should fall.",
                "underfilled",
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
                "Use fused implementations (scaled_dot_product_attention, fused LayerNorm; in training, fused optimizers).",
            ),
            code="",
            when_steps=(
                ("eager", "torch.compile(model) fuses elementwise and reduction chains into few kernels."),
                ("compiled", "Inductor already fuses inside the compiled regions: the tiny kernels run in eager code between them (graph breaks: TORCH_LOGS=graph_breaks) or in ops it does not fuse."),
                ("without_graphs", "Capture static parts with CUDA graphs to remove per-kernel launch gaps."),
            ),
            when_code=(
                ("eager", "model = torch.compile(model)"),
                ("compiled", "# TORCH_LOGS=graph_breaks python run.py   # where the compiled regions end"),
            ),
            verify="Re-profile: kernel count per step should fall and the idle between back-to-back kernels shrink.",
            docs="underfilled",
        )},
        idioms={
            "cuda": _lever(
                "Underfilled: many tiny kernels, each paying the device's start-up cost",
                "Fewer, larger kernels: fuse short kernels and launch them as a CUDA graph.",
                (
                    "Fuse consecutive short kernels that touch the same data into one kernel.",
                    "Launch repeated sequences as a CUDA graph to remove the gaps between kernels.",
                    "Use Programmatic Dependent Launch (Hopper and newer) to overlap a kernel's prologue with the previous kernel's tail.",
                ),
                _GRAPH_CUDA,
                "Re-capture with nsys: kernels per iteration should fall and the gaps between back-to-back kernels shrink.",
                "underfilled",
            ),
            "cupy": _lever(
                "Underfilled: many tiny kernels, each paying the device's start-up cost",
                "Fewer, larger kernels: fuse elementwise chains with cupy.fuse or an ElementwiseKernel.",
                ("Fuse elementwise chains with @cupy.fuse().", "Write the hot loop body as one cupy.RawKernel."),
                "@cupy.fuse()\ndef update(x, g, lr):\n    return x - lr * g * g / (1 + g * g)   # one kernel instead of five",
                "Re-profile: kernels per iteration should fall.",
                "underfilled",
            ),
            "jax": _lever(
                "Underfilled: many tiny kernels, each paying the device's start-up cost",
                "Let XLA fuse: jit the enclosing function so elementwise chains become one kernel.",
                ("Wrap the step in jax.jit (XLA fuses elementwise chains inside one compiled function).", "Avoid jnp calls outside jit in the loop: each runs as its own kernel."),
                "step = jax.jit(step)   # XLA fuses the elementwise chain into few kernels",
                "Re-profile: kernels per step should fall.",
                "underfilled",
            ),
        },
        sweep=("batch_size", "compile"),
        lab_flaws=("smallbatch", "launch"),
    ),
    CauseEntry(
        "underfilled",
        "jit_compile",
        "jit compilation",
        "#482800",
        "underfilled",
        {"": Lever(
            title="Underfilled: kernels compiled on first use while the GPU waits (JIT, module loading)",
            summary="The launching thread compiles and loads kernels again and again during the run (Triton, NVRTC, nvFuser): compile them once, ahead of the loop, and keep the cache.",
            steps=(
                "Warm up: run every kernel once, with every shape and dtype the loop will use, before the timed or served part.",
                "Keep the compilers' caches on a persistent disk (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, autotuning results included); a fresh container starts cold.",
                "Stop recompiling for new shapes: pad to a few fixed sizes, or mark the varying dimension dynamic (torch._dynamo.mark_dynamic) so one kernel serves them.",
            ),
            code=(
                "for n in SIZES:                 # warm-up: each shape the loop will meet\n"
                "    model(torch.empty(n, d, device='cuda'))\n"
                "torch.cuda.synchronize()\n"
                "# shell: export TRITON_CACHE_DIR=/persistent/triton TORCHINDUCTOR_CACHE_DIR=/persistent/inductor"
            ),
            verify="Re-profile after warm-up: no nvrtc, cuModuleLoadData or hipModuleLoad calls (and no compiler frames) inside the window.",
            docs="underfilled",
        )},
        idioms={
            "cupy": Lever(
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
                ),
            "cuda": _lever(
                "Underfilled: kernels compiled on first use while the GPU waits (JIT, module loading)",
                "The program compiles (NVRTC) and loads modules during the run: compile once at start-up, or ahead of time, and reuse the module.",
                (
                    "Compile each kernel source once at start-up (nvrtcCompileProgram, cuModuleLoadData) and keep the CUfunction handles.",
                    "Compile ahead of time (nvcc -cubin / -fatbin) and load the binary once, or cache NVRTC output by a key of source and options.",
                    "Warm up every kernel variant before the timed part.",
                ),
                "// once, at start-up\nnvrtcCompileProgram(prog, nopts, opts);\ncuModuleLoadData(&mod, ptx);\ncuModuleGetFunction(&fn, mod, \"scale\");\n// in the loop: only launches\ncuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr);",
                "Re-capture with nsys: no nvrtc or cuModuleLoadData calls inside the steady-state range.",
                "underfilled",
            ),
        },
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
        idioms={
            "cuda": _lever(
                "Unattributed: the launching thread ran code the trace does not show",
                "Capture more context so the cause can be named: NVTX ranges and OS-runtime calls.",
                ("Mark the program's phases with NVTX ranges (nvtxRangePushA / nvtxRangePop).", "Capture OS-runtime calls to see blocking I/O: nsys profile -t cuda,nvtx,osrt."),
                '#include <nvtx3/nvToolsExt.h>\nnvtxRangePushA("prepare_input");\nprepare_input();\nnvtxRangePop();',
                "Re-capture: the time should appear under a named range.",
                "unattributed",
            ),
            "cupy": _lever(
                "Unattributed: the launching thread ran code the trace does not show",
                "Capture more context: NVTX ranges around the program's phases.",
                ("Wrap phases in cupyx.profiler.time_range('name') (NVTX ranges), then capture with nsys -t cuda,nvtx,osrt.",),
                "with cupyx.profiler.time_range('prepare_input'):\n    x = prepare_input()",
                "Re-capture: the time should appear under a named range.",
                "unattributed",
            ),
            "jax": _lever(
                "Unattributed: the launching thread ran code the trace does not show",
                "Capture more context: named trace annotations around the program's phases.",
                ("Wrap phases in jax.profiler.TraceAnnotation('name') (or StepTraceAnnotation for steps).",),
                "with jax.profiler.TraceAnnotation('prepare_input'):\n    batch = next(it)",
                "Re-profile: the time should appear under a named annotation.",
                "unattributed",
            ),
        },
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
        ),
        # On AMD the capture that names the dependency is rocprofv3's own: its HIP stream and
        # event calls are the records of what queued work waited on.
        "rocprofv3": Lever(
            title="Unattributed: queued work waited on the device",
            summary="Work was already queued but did not start: a device-side dependency the trace cannot name.",
            steps=(
                "Look for hipStreamWaitEvent / cross-stream dependencies and collectives waiting for other ranks.",
                "Record with rocprofv3 --runtime-trace so the HIP stream and event calls (hipStreamWaitEvent, hipEventRecord) are in the capture.",
            ),
            code="rocprofv3 --runtime-trace --output-format json -- python train.py",
            verify="Re-profile: the HIP calls before each gap name the stream or event the work waited on.",
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
        # A rocprofv3 capture recorded with --kernel-trace alone: the HIP calls that launched the
        # kernels were not traced; the option that records them is rocprofv3's own.
        "rocprofv3": Lever(
            title="Unattributed: kernels recorded without their HIP launches",
            summary="The capture traced kernel dispatches but not the HIP API calls that launched them, so the host side of these gaps is unknown.",
            steps=(
                "Record again with HIP API tracing: rocprofv3 --runtime-trace (HIP runtime calls, ROCTx ranges, kernels and copies) instead of --kernel-trace alone.",
                "For a PyTorch job, torch.profiler on ROCm records the same launches with the ops around them: activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA].",
            ),
            code="rocprofv3 --runtime-trace --output-format json -- python train.py",
            verify="Re-profile: the quality notes should no longer say that the capture has no HIP API calls.",
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
                f"Use whyidle.schedule() ({SCHEDULE_CALL}).",
                "If allocator calls (cudaMalloc/cudaFree) stay slow after warm-up, look for torch.cuda.empty_cache() in the loop.",
            ),
            code=(
                "with torch.profiler.profile(\n"
                f"    schedule={SCHEDULE_CALL},\n"
                "    on_trace_ready=torch.profiler.tensorboard_trace_handler('runs/')) as prof:\n"
                "    for step, batch in enumerate(loader):\n"
                "        train_step(batch)\n"
                "        prof.step()"
            ),
            verify="The new trace's quality notes should no longer mention a cold start.",
            docs="unattributed",
        )},
        idioms={
            "cuda": _lever(
                "Cold start: first-call costs dominate the capture",
                "Capture the steady state: warm up first, then record a range of iterations.",
                ("Run a few iterations before the capture (context creation, module loading, allocations happen once).", "Limit the capture to the steady state with cudaProfilerStart/Stop and nsys --capture-range=cudaProfilerApi."),
                "for (int i = 0; i < 3; ++i) iterate();   // warm-up\ncudaProfilerStart();\nfor (int i = 0; i < 20; ++i) iterate();\ncudaProfilerStop();\n// nsys profile --capture-range=cudaProfilerApi ./app",
                "The new capture's quality notes should no longer mention a cold start.",
                "unattributed",
            ),
            "cupy": _lever(
                "Cold start: first-call costs dominate the capture",
                "Capture the steady state: run each kernel once before profiling (CuPy compiles and loads kernels on first use).",
                ("Call the step once or twice before starting the capture.", "Keep CuPy's kernel cache (CUPY_CACHE_DIR) on a persistent disk so later runs skip compilation."),
                "step(x); step(x)                 # warm-up: kernels compiled and loaded\nwith cupyx.profiler.profile():  # nsys --capture-range=cudaProfilerApi\n    for _ in range(20):\n        step(x)",
                "The new capture's quality notes should no longer mention a cold start.",
                "unattributed",
            ),
            "jax": _lever(
                "Cold start: first-call costs dominate the capture",
                "Compile before profiling: the first call of each jitted function traces and compiles it.",
                ("Run the step once (or jax.jit(step).lower(*args).compile()) before jax.profiler.start_trace.", "Keep a persistent compilation cache (jax.config.update('jax_compilation_cache_dir', path))."),
                "state = train_step(state, batch)   # compile outside the trace\njax.profiler.start_trace('/tmp/trace')\nfor _ in range(10):\n    state = train_step(state, batch)\njax.block_until_ready(state)\njax.profiler.stop_trace()",
                "The new trace's quality notes should no longer mention a cold start.",
                "unattributed",
            ),
            "engine": _lever(
                "Cold start: first-call costs dominate the capture",
                "Profile after the engine's warm-up (graph capture, compilation) under steady load.",
                ("Start the engine, send warm-up requests, then start the profiler (vLLM: VLLM_TORCH_PROFILER_DIR with the /start_profile and /stop_profile endpoints).",),
                "VLLM_TORCH_PROFILER_DIR=/tmp/prof vllm serve MODEL &\n# warm up with real traffic, then:\ncurl -X POST localhost:8000/start_profile; sleep 10; curl -X POST localhost:8000/stop_profile",
                "The new trace's quality notes should no longer mention a cold start.",
                "unattributed",
            ),
        },
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


class BusyEntry(msgspec.Struct, frozen=True):
    """A finding on busy time (not a cause of idle: FP32 math, kernels too small to fill the
    device): its levers, by variant ("" the default), and by idiom for jobs that are not a
    PyTorch program, and its ``replay`` lever, ``sweep`` knobs and ``applied`` test, each as in
    :class:`CauseEntry`. A new busy-time finding is one entry here and its rule."""

    cause: str
    levers: dict[str, Lever]
    idioms: dict[str, Lever] = msgspec.field(default_factory=dict)
    replay: dict[str, str] = msgspec.field(default_factory=dict)
    sweep: tuple[str, ...] = ()
    group: str = "underfilled"  # its page: each is work too small or too slow for the device
    applied: str = ""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


_GRID_STEPS = (
    "Launch at least a few blocks per SM: a grid-stride loop in the kernel with a grid of a few times the SM count.",
    "Give each launch more work (batch several problems into one kernel, larger tiles), or run independent small kernels on separate streams.",
)

# Findings on busy time, by finding cause (findings/rules.py, kernel_fill_rules.py).
BUSY_FINDINGS: tuple[BusyEntry, ...] = (
    BusyEntry(
        "fp32_math",
        {
            "": Lever(
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
            "fp16_only": Lever(
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
        },
        idioms={
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
        replay={"": "fp32_math"},
        sweep=("precision",),
        applied="tensor_core_math",
    ),
    BusyEntry(
        "small_grids",
        {
            "": Lever(
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
        },
        idioms={
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
    ),
    # Busy time a fix would shorten, found by the work model (findings/work_rules.py): ranked with
    # the idle findings by the time the fix is estimated to recover.
    BusyEntry(
        "fusion_candidates",
        {
            "": Lever(
                title="Memory-bound chains of small kernels a compiler would fuse",
                summary="Fuse each chain into one kernel that reads its inputs once and writes its output once: torch.compile generates it.",
                steps=(
                    "Compile the module that runs the chains the evidence names (norm + activation, residual add + norm, scale + mask + softmax).",
                    "Where the whole model cannot be compiled, compile the function or submodule that holds the sequence.",
                ),
                code="",
                verify="Re-profile: each sequence should run as one kernel (triton_ names) and this finding's kernel time fall by about the estimate (whyidle compare before after).",
                docs="underfilled",
                when_steps=(
                    ("compiled", "The compiled regions are fused already: these chains run outside them (a graph break or a module left eager). Find the breaks with TORCH_LOGS=graph_breaks and compile that code too."),
                    ("training", "Compile the module, not only its forward: the backward's chains fuse too."),
                    ("not_training", "For inference, torch.compile(model, mode='max-autotune') also captures CUDA graphs."),
                ),
                when_code=(
                    ("eager", "model = torch.compile(model)   # one Triton kernel per elementwise/normalisation chain"),
                    ("compiled", "import torch._dynamo\nprint(torch._dynamo.explain(model)(x))   # the graph breaks that leave ops eager"),
                ),
            ),
        },
        idioms={
            "jax": _lever(
                "Memory-bound chains of small kernels run one by one",
                "Run the step under jax.jit: XLA fuses elementwise and normalisation chains inside a jitted function, so separate kernels mean ops dispatched one by one outside it.",
                ("Wrap the whole step (forward, loss, update) in jax.jit rather than its parts.", "Look for Python loops or host round trips that split the step into many small jitted calls."),
                "train_step = jax.jit(train_step)   # XLA fuses the elementwise chains inside",
                "Re-profile: the chains should appear as XLA fusion kernels and this finding disappear.",
                "underfilled",
            ),
            "cuda": _lever(
                "Memory-bound chains of small kernels a fused kernel would replace",
                "Fuse the chain into one kernel that reads its inputs once and writes its output once; for a GEMM followed by elementwise ops, a CUTLASS epilogue or cuBLASLt epilogue.",
                ("Write one kernel for the chain the evidence names (intermediates stay in registers).", "For bias/activation after a GEMM: cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS / _GELU, or a CUTLASS epilogue."),
                "__global__ void bias_gelu_add(const float* x, const float* b, const float* r, float* y, int n, int c) {\n  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n    y[i] = gelu(x[i] + b[i % c]) + r[i];   // one read, one write\n}",
                "Re-capture: one kernel per chain; kernel time should fall by about the estimate.",
                "underfilled",
            ),
            "cupy": _lever(
                "Memory-bound chains of small kernels run one by one",
                "Fuse the elementwise chain with cupy.fuse or one ElementwiseKernel.",
                ("Decorate the function that holds the chain with @cupy.fuse(), or write it as one cupy.ElementwiseKernel.",),
                "@cupy.fuse()\ndef bias_gelu(x, b):\n    return 0.5 * (x + b) * (1 + cupy.tanh(0.79788456 * (x + b)))",
                "Re-profile: one kernel per chain.",
                "underfilled",
            ),
        },
    ),
    BusyEntry(
        "gemm_shapes",
        {
            "": Lever(
                title="GEMM shapes badly aligned for tensor cores",
                summary="Pad the GEMM dimensions to multiples of 8 (16-bit) or 16 (8-bit) so tensor cores run full tiles.",
                steps=(
                    "Round the dimensions the evidence names up to the multiple: hidden and intermediate sizes, head dims, the vocabulary (pad the embedding and output layer).",
                    "Pad a tokenizer's vocabulary with pad_to_multiple_of (Hugging Face: model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)).",
                ),
                code="model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)",
                verify="Re-profile: the work report's rate for these GEMM shapes should approach that of the well-shaped ones.",
                docs="underfilled",
                when_steps=(("training", "When batch x sequence is the misaligned dim, pad batches to a multiple of 8 (DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8))."),),
                when_code=(("training", "collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)"),),
            ),
            "tiny_m": Lever(
                title="GEMMs with too few rows to fill the device (tiny M)",
                summary="Give each GEMM more rows: more sequences per decode step, more tokens per forward, or small GEMMs batched into one.",
                steps=("Run independent small GEMMs as one (torch.bmm over stacked operands, or concatenate the weights of projections that share an input).",),
                code="qkv = x @ torch.cat([wq, wk, wv], dim=1)   # one GEMM instead of three with the same input",
                verify="Re-profile: the GEMMs should carry more rows and the time per sample (or per token) fall.",
                docs="underfilled",
                when_steps=(
                    ("not_training", "Batch more requests per step: continuous batching with a larger batch (vLLM max_num_seqs, SGLang --max-running-requests)."),
                    ("training", "Raise the micro-batch (and lower gradient accumulation to keep the global batch)."),
                ),
            ),
        },
        idioms={
            "jax": _lever(
                "GEMM shapes too small or badly aligned for the matrix units",
                "Pad the model's dimensions (hidden, vocabulary, heads) to multiples of 8 for 16-bit and 16 for 8-bit math, and batch more rows per matmul.",
                ("Choose layer widths and vocabulary sizes that are multiples of 64 (pad the vocabulary).", "For decode, batch more sequences per step so each matmul has more rows."),
                "vocab = -(-vocab // 64) * 64   # pad the vocabulary to a multiple of 64",
                "Re-profile: the matmuls' rate should approach that of the well-shaped ones.",
                "underfilled",
            ),
            "cuda": _lever(
                "GEMM shapes too small or badly aligned for tensor cores",
                "Pad M, N, K and the leading dimensions to multiples of 8 (16-bit) or 16 (8-bit); batch small GEMMs (cublasGemmStridedBatchedEx, grouped GEMM).",
                ("Allocate operands with leading dimensions rounded up to the multiple and zero the padding.", "Run many small GEMMs as one batched or grouped GEMM (cuBLASLt, CUTLASS grouped GEMM)."),
                "int ld = (k + 7) / 8 * 8;   // 16-bit: a multiple of 8 elements\ncublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_16BF, ld, B, CUDA_R_16BF, ld, &zero, C, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);",
                "Re-capture: the GEMM kernels should be tensor-core kernels and their rate approach the well-shaped ones'.",
                "underfilled",
            ),
        },
    ),
    BusyEntry(
        "unfused_attention",
        {
            "": Lever(
                title="Attention computed op by op, not in a fused kernel",
                summary="Call torch.nn.functional.scaled_dot_product_attention: one flash, memory-efficient or cuDNN kernel instead of bmm, softmax and bmm, without writing the score matrix.",
                steps=(
                    "Replace the matmul-softmax-matmul block with F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal).",
                    "Hugging Face models: load with attn_implementation='sdpa' (or 'flash_attention_2').",
                ),
                code="out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)",
                verify="Re-profile: attention should run as one kernel per layer (flash, fmha or cudnn names) and this finding disappear.",
                docs="underfilled",
                when_steps=(
                    ("training", "Pass the attention dropout to it (dropout_p=p if self.training else 0.0): the fused kernel applies it."),
                    ("compiled", "torch.compile does not turn an explicit softmax attention into a flash kernel in every case: call SDPA in the module's code."),
                ),
            ),
        },
        idioms={
            "jax": _lever(
                "Attention computed op by op, not in a fused kernel",
                "Call jax.nn.dot_product_attention, which runs cuDNN's fused attention on NVIDIA GPUs, instead of einsum, softmax, einsum.",
                ("Replace the einsum-softmax-einsum block with jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal).",),
                "out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation='cudnn')",
                "Re-profile: one fused attention kernel per layer.",
                "underfilled",
            ),
            "cuda": _lever(
                "Attention computed op by op, not in a fused kernel",
                "Use a fused attention kernel (cuDNN's SDPA through cudnn-frontend, or FlashAttention) instead of GEMM, softmax, GEMM.",
                ("Replace the two GEMMs and the softmax with one fused attention call; the score matrix is never written to memory.",),
                "// cudnn-frontend: graph.sdpa(Q, K, V, cudnn_frontend::graph::SDPA_attributes().set_causal_mask(true))",
                "Re-capture: one attention kernel per layer.",
                "underfilled",
            ),
        },
    ),
)

CATALOGUE = Catalogue(_BUILT_IN)


class ApiFix(msgspec.Struct, frozen=True):
    """The fix of a finding the Nsight Systems API rules make (``findings/nsys_rules.py``) about
    the calls behind a cause: text only. The rule writes the measured sentence first, then these
    steps; ``steps``, ``code`` and ``title`` are by case, a name the rule picks from the job (the
    advice context's idiom, the workload; "" is any other), and ``{name}`` is filled in from the
    trace (``fill``)."""

    cause: str  # the cause key the finding refines (its ``part_of``)
    title: dict[str, str]
    summary: str
    steps: dict[str, tuple[str, ...]]
    code: dict[str, str]
    verify: str


_NSYS_VERIFY = "Re-capture with nsys"
_OSRT_CAPTURE = "nsys profile -t cuda,nvtx,osrt --osrt-backtrace-threshold=1000 -o run ./app   # the blocking call's backtrace"

# By finding id.
API_FIXES: dict[str, ApiFix] = {
    "api.pageable_memcpy": ApiFix(
        "starvation/h2d_copy",
        {"": "Async copies from pageable memory block the host"},
        "Copy from pinned memory so the copy is truly asynchronous and overlaps compute.",
        {
            "pytorch": ("PyTorch: DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True).",),
            "": ("Allocate the source buffer pinned (cudaHostAlloc / cudaMallocHost) or register it (cudaHostRegister).",),
        },
        {
            "pytorch": "loader = DataLoader(ds, pin_memory=True, num_workers={workers})\nx = x.to('cuda', non_blocking=True)",
            "cuda": "cudaMallocHost(&h_buf, bytes);   // or cudaHostRegister(existing, bytes, cudaHostRegisterDefault)\ncudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);",
            "cupy": "host = cupyx.empty_pinned(shape, dtype)\nx_gpu.set(host, stream=stream)",
        },
        f"{_NSYS_VERIFY}: the copies should read 'Pinned -> Device' and the gaps before them shrink.",
    ),
    "api.sync_memcpy": ApiFix(
        "synchronization/host_sync",
        {"": "Synchronous cudaMemcpy/cudaMemset stall the device"},
        "Replace synchronous cudaMemcpy/cudaMemset with their Async forms on a stream, from pinned memory.",
        {
            "pytorch": ("Use cudaMemcpyAsync/cudaMemsetAsync on the work stream (PyTorch: .to(device, non_blocking=True) from pinned tensors; avoid .cpu()/.item() inside the loop).",),
            "": ("Use cudaMemcpyAsync/cudaMemsetAsync on the work stream, from pinned host memory.",),
        },
        {"": "cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream);"},
        f"{_NSYS_VERIFY}: cudaMemcpy/cudaMemset should be gone from the CUDA API summary.",
    ),
    "api.sync_calls": ApiFix(
        "synchronization/host_sync",
        {"frequent": "Frequent {apis} ({per_s}/s) drain the GPU queue", "": "{apis} calls drain the GPU queue"},
        "Synchronise less: only where the host needs a result, and not every iteration.",
        {
            "pytorch": ("Remove debugging/timing syncs from the loop (use CUDA events), read scalars (loss.item()) every N steps, and let work queue ahead.",),
            "": ("Remove debugging/timing syncs from the loop (use CUDA events), synchronise only where the host reads a result, and let work queue ahead.",),
        },
        {
            "pytorch": "if step % 50 == 0:\n    print(loss.item())  # not every step",
            "cuda": "for (int i = 0; i < n; ++i) kernel<<<grid, block, 0, s>>>(d, i);   // no sync per kernel\ncudaEventRecord(done, s); cudaEventSynchronize(done);   // once, where the host reads results",
            "cupy": "for it in range(iters):\n    step(x)\n    if it % 50 == 0:\n        cupy.cuda.get_current_stream().synchronize()   # not every iteration",
        },
        f"{_NSYS_VERIFY}: fewer cudaStreamSynchronize/cudaDeviceSynchronize calls and shorter gaps after them.",
    ),
    # The cause it refines depends on the workload: untraced host (idle host when serving); the
    # finding's group too (starvation in training, insufficient demand when serving).
    "api.blocked_host": ApiFix(
        "unattributed/untraced_host",
        {"": "The launching thread was blocked in OS calls while the GPU waited"},
        "The launching thread was blocked in the OS, not computing: feed it sooner.",
        {
            "training": (
                "In training this is the input pipeline or another thread the loop waits on: a lock or queue (futex, "
                "sem_wait, pthread_cond_wait) or a pipe/file read is a starving loader.",
                "Find what the thread waits for (nsys: the call's backtrace), then move that work off the critical path: "
                "DataLoader(num_workers>0, persistent_workers=True, prefetch_factor=...).",
            ),
            "serving": (
                "In a server this is waiting for requests (poll, epoll_wait, accept, recv): too little demand for the GPU.",
                "Batch requests (dynamic batching) or serve more clients per GPU.",
            ),
            "": (
                "The thread waited on something the trace does not show: another thread (a lock or queue), a file, a pipe or "
                "the network. Only a serving loop waiting for requests is short of demand; this workload is {workload}.",
                "Find what the thread waits for (nsys: the call's backtrace) and move it off the launching thread, or overlap it with device work.",
            ),
        },
        {
            "training_pytorch": "loader = DataLoader(ds, num_workers={workers}, persistent_workers=True, pin_memory=True)",
            "": _OSRT_CAPTURE,
        },
        f"{_NSYS_VERIFY} -t cuda,nvtx,osrt: the blocking calls inside the gaps should shrink.",
    ),
}


def fill(text: str, **values: object) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced (other braces, as in C code, kept)."""
    for k, v in values.items():
        text = text.replace("{" + k + "}", str(v))
    return text


def _by_cause(entries: Sequence[CauseEntry]) -> dict[str, CauseEntry | BusyEntry]:
    return {**{b.cause: b for b in BUSY_FINDINGS}, **{e.cause: e for e in entries}}


_BY_CAUSE = derived(_by_cause)


def replay_lever(cause: str, variant: str = "") -> str | None:
    """The replay lever that predicts the fix of a finding on ``cause`` (its name, not the
    group/cause key), in its variant (None: its fix is not replayed)."""
    e = _BY_CAUSE().get(cause)
    if e is None:
        return None
    return e.replay.get(variant) or e.replay.get("")


def idiom_levers(cause: str) -> dict[str, Lever]:
    """The levers of a finding on ``cause`` (its name) for jobs that are not a PyTorch program, by
    idiom: its entry's ``idioms`` (a cause's or a busy-time finding's)."""
    e = _BY_CAUSE().get(cause)
    return e.idioms if e is not None else {}


def replay_levers() -> tuple[str, ...]:
    """Every replay lever a finding can take, once each, in catalogue order."""
    names = [name for e in (*CATALOGUE, *BUSY_FINDINGS) for name in e.replay.values()]
    return tuple(dict.fromkeys(names))


def sweep_knobs(cause: str) -> tuple[str, ...]:
    """The sweep's knobs that act on a finding on ``cause`` (its name), first tried first."""
    e = _BY_CAUSE().get(cause)
    return e.sweep if e is not None else ()


def applied_test(cause: str) -> str:
    """The name of the test (findings/applied.py) that tells whether the lever of a finding on
    ``cause`` (its name) was applied between two runs; "" where there is none."""
    e = _BY_CAUSE().get(cause)
    return e.applied if e is not None else ""


def lab_flaw_causes(flaw: str) -> tuple[str, ...]:
    """The cause keys a lab flaw's diagnosis may name first, in catalogue order."""
    return tuple(e.key for e in CATALOGUE if flaw in e.lab_flaws)


def warmup_capture(framework: str) -> str:
    """How to capture after warm-up, in the job's framework (the advice context's)."""
    if framework == "jax":
        return "start jax.profiler.trace once the first steps have compiled and run"
    return SCHEDULE_CALL


def entry(key: str) -> CauseEntry:
    """The catalogue entry of 'group/cause' (KeyError for an unknown cause)."""
    return CATALOGUE.entry(key)
