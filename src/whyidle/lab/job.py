"""The flaw lab's training job: a small MLP on synthetic data, with one injected flaw.

Everything is generated in process (no downloads). Each batch is drawn from a generator seeded
by its index, so the data, and on CPU the losses, are the same whatever the DataLoader's worker
count: a fix that changes only the input pipeline changes the speed, not the results.

Flaws (see ``whyidle.lab.check`` for what the diagnosis must say about each):

* ``none``       a well-fed loop: workers prepare batches ahead, pinned memory, async copies;
* ``starvation`` the DataLoader runs in the training process (``num_workers=0``) and each batch
                 waits on (simulated) storage: ``time.sleep`` of ``io_latency_s`` per batch;
* ``h2d``        large batches in pageable memory copied with a blocking ``.to(device)`` (CUDA);
* ``sync``       per-step metrics computed on the CPU (``.cpu()``, ``.item()``) (CUDA);
* ``smallbatch`` batch size 4: each kernel is too short to amortise its launch (CUDA);
* ``launch``     a deep stack of tiny layers and a per-parameter optimizer loop (CUDA).

On a CPU there is no device queue: ``h2d``, ``sync``, ``smallbatch`` and ``launch`` cannot show
(see ``check.GPU_ONLY``); ``none`` and ``starvation`` can, through the step tracker.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from whyidle.capture import require_torch
from whyidle.errors import ArgumentError

__all__ = ["FLAWS", "LabSpec", "LabRun", "spec_for", "run_job", "apply_fix"]

FLAWS = ("none", "starvation", "h2d", "sync", "smallbatch", "launch")


@dataclass(frozen=True)
class LabSpec:
    flaw: str
    device: str  # "cpu" or "cuda"
    steps: int  # tracked steps (the report drops the first)
    profile_steps: int  # profiled steps after the tracked ones (0: no trace)
    batch_size: int
    in_dim: int
    width: int
    depth: int
    classes: int
    io_latency_s: float  # simulated storage latency per batch
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    non_blocking: bool
    cpu_metrics: bool  # the sync flaw
    fused_optimizer: bool
    seed: int = 0

    def loader_kwargs(self) -> dict[str, Any]:
        from whyidle.sweep.trial import dataloader_kwargs

        return dataloader_kwargs(self.num_workers, self.pin_memory, self.persistent_workers, self.prefetch_factor)


def spec_for(flaw: str, device: str, steps: int | None = None, profile_steps: int | None = None) -> LabSpec:
    """The job for ``flaw`` on ``device``, sized so a CPU step takes ~10-20 ms and a GPU step a few ms."""
    if flaw not in FLAWS:
        raise ArgumentError(f"unknown flaw {flaw!r}; expected one of {', '.join(FLAWS)}")
    cuda = device == "cuda"
    if cuda:
        # Big enough that a step's kernels outlast the host's launches even under the profiler
        # (with_stack, record_shapes): at batch 2048 an H200 step was 6.6 ms profiled and the GPU
        # busy only 63% (host-bound: tests/data/h200/measured.json, 2026-11-30), and samples/s
        # still rose 35% from batch 2048 to 8192 (825k samples/s, 9.9 ms a step, 2.9 GB peak).
        # 8 workers keep batches ahead on a GPU machine's cores.
        base = dict(batch_size=8192, in_dim=256, width=8192, depth=3, classes=1000, io_latency_s=0.002)
        workers = 8
    else:
        base = dict(batch_size=128, in_dim=128, width=1024, depth=3, classes=10, io_latency_s=0.003)
        workers = fix_workers()
    # persistent_workers stays off: the lab runs one epoch, where keeping workers alive gains nothing.
    good = dict(num_workers=workers, pin_memory=cuda, persistent_workers=False, prefetch_factor=4, non_blocking=cuda, cpu_metrics=False, fused_optimizer=cuda)
    spec: dict[str, Any] = {**base, **good}
    if flaw == "none" and not cuda:
        # On CPU workers would compete with the compute for the same cores: a batch already in
        # memory (no storage latency) is the well-fed loop there.
        spec.update(num_workers=0, io_latency_s=0.0)
    elif flaw == "starvation":
        # storage wait per batch: about the compute of a step on CPU (~50 ms), ~3x on an H200 (~10 ms)
        spec.update(num_workers=0, io_latency_s=0.030 if cuda else 0.05)
    elif flaw == "h2d":
        # 50 MB of pageable input per step, copied with a blocking .to(): the copy outlasts the compute
        spec.update(in_dim=3 * 128 * 128, batch_size=256, width=4096, pin_memory=False, non_blocking=False, io_latency_s=0.0)
    elif flaw == "sync":
        # logits (batch x 1000) copied to the CPU and reduced there every step
        spec.update(cpu_metrics=True, io_latency_s=0.0)
    elif flaw == "smallbatch":
        spec.update(batch_size=4, width=1024, depth=8, io_latency_s=0.0)
    elif flaw == "launch":
        spec.update(width=64, depth=48, batch_size=32, fused_optimizer=False, io_latency_s=0.0)
    # 60 tracked steps on CUDA: 8 workers' start-up, paid in the first steps, stays a small share
    n = steps if steps is not None else (12 if not cuda else 60)
    p = profile_steps if profile_steps is not None else (3 if cuda else 0)
    return LabSpec(flaw=flaw, device=device, steps=n, profile_steps=p, **spec)


def apply_fix(spec: LabSpec, finding_id: str) -> tuple[LabSpec, str]:
    """The spec with the lever a finding names pulled, and a sentence saying what changed."""
    if finding_id.startswith("input_pipeline"):
        workers = 8 if spec.device == "cuda" else fix_workers()
        fixed = replace(spec, num_workers=workers, prefetch_factor=4, pin_memory=spec.device == "cuda")
        return fixed, f"DataLoader(num_workers={workers}, prefetch_factor=4{', pin_memory=True' if fixed.pin_memory else ''})"
    if finding_id.startswith("h2d_copy"):
        return replace(spec, pin_memory=True, non_blocking=True, num_workers=max(spec.num_workers, 2)), "DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
    if finding_id.startswith("host_sync"):
        return replace(spec, cpu_metrics=False), "metrics kept on the device (no per-step .item()/.cpu())"
    raise ArgumentError(f"the lab has no automatic fix for finding {finding_id!r}")


def fix_workers() -> int:
    """Workers for the input-pipeline fix: 4.

    The lab's loading waits on (simulated) storage, not on the CPU, so 4 workers help even on a
    2-core machine (measured: with 2 workers on 2 busy cores the loop still waited ~2.5 ms of a
    9 ms step); DataLoader's over-subscription warning is silenced inside the lab for that reason.
    """
    return 4


class SyntheticBatches:
    """A map-style dataset whose items are whole batches (use ``DataLoader(batch_size=None)``).

    Item ``i`` is drawn from a generator seeded with ``(seed, i)``: the same in any worker. Each
    item first sleeps ``io_latency_s``, standing in for reading the batch from storage.
    """

    def __init__(self, torch: Any, n: int, batch: int, in_dim: int, classes: int, io_latency_s: float, seed: int) -> None:
        self.torch, self.n, self.batch, self.in_dim, self.classes = torch, n, batch, in_dim, classes
        self.io_latency_s, self.seed = io_latency_s, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if i >= self.n:
            raise IndexError(i)
        if self.io_latency_s > 0:
            time.sleep(self.io_latency_s)
        g = self.torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = self.torch.randn(self.batch, self.in_dim, generator=g)
        y = self.torch.randint(0, self.classes, (self.batch,), generator=g)
        return x, y


class CycleLoader:
    """A few prebuilt batches served ``n`` times (the h2d flaw's loader).

    The batches stay in pageable host memory (the flaw) unless ``pin_memory`` (the fix): then each
    is copied once into page-locked memory, as ``DataLoader(pin_memory=True)`` would do.
    """

    def __init__(self, batches: list[tuple[Any, Any]], n: int, pin_memory: bool = False) -> None:
        if pin_memory:
            batches = [tuple(t.pin_memory() for t in b) for b in batches]
        self.batches, self.n = batches, n
        self.num_workers = 0
        self.pin_memory = pin_memory
        self.batch_size = int(batches[0][0].shape[0])

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for i in range(self.n):
            yield self.batches[i % len(self.batches)]

    def __len__(self) -> int:
        return self.n


def build_model(torch: Any, spec: LabSpec) -> Any:
    torch.manual_seed(spec.seed)
    layers: list[Any] = [torch.nn.Linear(spec.in_dim, spec.width), torch.nn.ReLU()]
    for _ in range(spec.depth - 1):
        layers += [torch.nn.Linear(spec.width, spec.width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(spec.width, spec.classes))
    return torch.nn.Sequential(*layers)


def build_loader(torch: Any, spec: LabSpec, n_batches: int) -> Any:
    ds = SyntheticBatches(torch, n_batches, spec.batch_size, spec.in_dim, spec.classes, spec.io_latency_s, spec.seed)
    if spec.flaw == "h2d":
        return CycleLoader([ds[i] for i in range(2)], n_batches, pin_memory=spec.pin_memory)
    return torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, **spec.loader_kwargs())


@dataclass
class LabRun:
    spec: LabSpec
    losses: list[float]
    tracker_stats: Any  # capture.tracker.TrackerStats, the tracked steps only
    trace_path: Path | None
    trace_report: Any  # Report | None
    wall_s: float


@contextlib.contextmanager
def _threads(torch: Any, n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _optimizer(torch: Any, model: Any, spec: LabSpec) -> Any:
    opt_kw: dict[str, Any] = {"lr": 1e-3}
    if spec.device == "cuda":
        opt_kw["fused" if spec.fused_optimizer else "foreach"] = True if spec.fused_optimizer else False
    return torch.optim.AdamW(model.parameters(), **opt_kw)


class _Profiling:
    """The profiler of a lab run: ``warm`` warm-up then ``n_prof`` active steps after the tracked
    ones, written to ``trace_dir`` (or a temporary folder, deleted by :meth:`cleanup`)."""

    def __init__(self, torch: Any, spec: LabSpec, trace_dir: str | Path | None, warm: int, n_prof: int) -> None:
        import tempfile

        from whyidle.capture.profiler import TraceHandler

        self.tmp_dir = tempfile.TemporaryDirectory(prefix="whyidle-lab-") if trace_dir is None else None
        out_dir = Path(trace_dir) if trace_dir is not None else Path(self.tmp_dir.name)  # type: ignore[union-attr]
        self.handler = TraceHandler(out_dir, f"lab_{spec.flaw}_{spec.device}", report="none", raise_errors=True)
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if spec.device == "cuda" else [])
        self.prof = torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=0, warmup=warm, active=n_prof, repeat=1),
            on_trace_ready=self.handler,
            with_stack=True,
            record_shapes=True,
        )

    def results(self) -> tuple[Path | None, Any]:
        """(the trace's path, its report); the path is None when it went to a temporary folder."""
        h = self.handler
        trace_path = h.paths[-1] if h.paths else None
        trace_report = h.reports[-1] if h.reports else None
        if self.tmp_dir is not None:
            self.tmp_dir.cleanup()
            trace_path = None
        return trace_path, trace_report


def _train_step(torch: Any, spec: LabSpec, model: Any, opt: Any, x: Any, y: Any, copy: Any) -> Any:
    """One training step of the lab model: copy in (inside ``copy``), forward, backward, step."""
    dev = torch.device("cuda" if spec.device == "cuda" else "cpu")
    with copy:
        x = x.to(dev, non_blocking=spec.non_blocking)
        y = y.to(dev, non_blocking=spec.non_blocking)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if spec.device == "cuda" else contextlib.nullcontext()
    with ctx:
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if spec.cpu_metrics:  # the sync flaw: metrics on the CPU, every step
        probs = torch.softmax(logits.detach().float().cpu(), dim=1)
        _ = float(probs.max(dim=1).values.mean().item()), float(loss.item())
    return loss.detach()


def run_job(spec: LabSpec, trace_dir: str | Path | None = None, threads: int | None = 1, tracker: bool = True) -> LabRun:
    """Train ``spec.steps`` tracked steps, then profile ``spec.profile_steps`` more when asked.

    ``threads`` pins torch's intra-op threads on CPU (1 by default: steady step times on a shared
    machine, and the same arithmetic in every run). ``tracker=False`` runs the same loop without
    the step tracker (for the no-behaviour-change test and the overhead benchmark).
    """
    torch = require_torch("whyidle lab")
    from whyidle.capture.tracker import StepTracker, track

    cuda = spec.device == "cuda"
    n_prof = (spec.profile_steps or 3) if trace_dir is not None else spec.profile_steps if cuda else 0
    warm = 1 if n_prof else 0
    total = spec.steps + warm + n_prof
    t_start = time.perf_counter()
    with _threads(torch, None if cuda else threads):
        model = build_model(torch, spec).to(torch.device("cuda" if cuda else "cpu"))
        opt = _optimizer(torch, model, spec)
        quiet = warnings.catch_warnings()
        quiet.__enter__()
        # sleep-bound workers (simulated storage) may outnumber cores: see fix_workers()
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        loader = build_loader(torch, spec, total)
        # device=spec.device: a CPU job on a machine with a GPU is timed on the host, not with
        # CUDA events around no device work (that split a CPU step's time wrongly on the H200)
        tr: StepTracker[Any] | None = track(loader, skip_first=1, device=spec.device) if tracker else None
        batches: Any = tr if tr is not None else loader
        losses: list[Any] = []
        profiling = _Profiling(torch, spec, trace_dir, warm, n_prof) if n_prof else None
        prof = profiling.prof if profiling is not None else None
        started = False
        try:
            for i, (x, y) in enumerate(batches):
                if prof is not None and i == spec.steps:
                    prof.start()  # the tracker has closed exactly spec.steps steps by now
                    started = True
                losses.append(_train_step(torch, spec, model, opt, x, y, tr.copy() if tr is not None else contextlib.nullcontext()))
                if prof is not None and i >= spec.steps:
                    prof.step()
        finally:
            if prof is not None and started:
                prof.stop()
            quiet.__exit__(None, None, None)
        stats = None
        if tr is not None:
            st = tr.stats()
            stats = replace(st, steps=st.steps[: spec.steps])
        values = [float(v) for v in torch.stack(losses).float().cpu().tolist()] if losses else []
        trace_path, trace_report = profiling.results() if profiling is not None else (None, None)
    return LabRun(spec, values, stats, trace_path, trace_report, time.perf_counter() - t_start)
