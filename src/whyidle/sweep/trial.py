"""One point of a sweep: the configuration a user's ``make`` builds (:class:`Trial`), what it
returns (:class:`Workload`), and what measuring it found (:class:`TrialResult`).

::

    def make(cfg: whyidle.Trial) -> whyidle.Workload:
        model = cfg.compile_model(Net().to(cfg.torch_device()))
        loader = DataLoader(ds, batch_size=cfg.batch_size, **cfg.loader_kwargs())
        def step(batch):
            with cfg.autocast():
                loss = loss_fn(model(batch[0]), batch[1])
            loss.backward(); opt.step(); opt.zero_grad()
            return loss                                   # read by the quality guard
        return whyidle.Workload(step=step, loader=loader, samples_per_step=cfg.batch_size)

The helpers (``autocast``, ``loader_kwargs``, ``compile_model``, ``grad_scaler``, ``checkpoint``)
apply the levers the trial names, so one ``make`` serves every trial. torch is imported only by
them, never by this module's import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

__all__ = ["Trial", "Workload", "TrialResult", "Status", "PRECISIONS", "COMPILE_MODES", "LEVERS", "dataloader_kwargs"]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# torch.compile modes (inductor), plus two backends that compile without code generation
# ("eager": dynamo only, "aot_eager": dynamo and AOTAutograd), quick to try on a CPU.
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "eager", "aot_eager")
# The levers a sweep can pull besides the batch size, in the default order of the search.
LEVERS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "precision", "compile", "accumulation", "checkpointing")

Status = Literal["ok", "oom", "error", "killed", "timeout"]

# The GradScaler made by Trial.grad_scaler() in this process: the trial runner reads its skipped
# steps (a scaler lowers its scale exactly when it skips an optimizer step).
_SCALERS: list[Any] = []


class Trial(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One configuration to measure. Levers the user's ``make`` ignores simply do nothing."""

    batch_size: int
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    precision: str = "fp32"
    compile: str = "off"
    accumulation: int = 1  # micro-batches per optimizer step (batch_size is the micro-batch)
    checkpointing: bool = False  # activation checkpointing
    seed: int = 0
    device: str = "auto"  # auto: cuda when torch sees one, else cpu

    # -- identity ---------------------------------------------------------------------------
    def key(self) -> str:
        """A stable text key of every field (the trial cache's key)."""
        return msgspec.json.encode(msgspec.structs.asdict(self)).decode()

    def changes(self, base: Trial) -> dict[str, Any]:
        """The fields that differ from ``base``."""
        a, b = msgspec.structs.asdict(self), msgspec.structs.asdict(base)
        return {k: v for k, v in a.items() if b.get(k) != v}

    def label(self) -> str:
        """A short label: the batch size and every lever away from its default."""
        d = self.changes(Trial(batch_size=self.batch_size))
        parts = [f"batch {self.batch_size}"] + [f"{k}={_show(v)}" for k, v in d.items() if k not in ("batch_size", "seed", "device")]
        return ", ".join(parts)

    @property
    def effective_batch(self) -> int:
        return self.batch_size * self.accumulation

    # -- helpers for make(cfg) --------------------------------------------------------------
    def torch_device(self) -> Any:
        torch = _torch()
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def loader_kwargs(self) -> dict[str, Any]:
        """``DataLoader`` keyword arguments for the loader levers (only valid combinations)."""
        return dataloader_kwargs(self.num_workers, self.pin_memory, self.persistent_workers, self.prefetch_factor)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for bf16/fp16 on the trial's device; a no-op for fp32 and tf32."""
        if self.precision not in ("bf16", "fp16"):
            return contextlib.nullcontext()
        torch = _torch()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.torch_device().type, dtype=dtype)  # type: ignore[no-any-return]

    def grad_scaler(self) -> Any:
        """A ``torch.amp.GradScaler``, enabled for fp16 only; the sweep counts its skipped steps."""
        torch = _torch()
        scaler = torch.amp.GradScaler(self.torch_device().type, enabled=self.precision == "fp16")
        if scaler.is_enabled():
            _count_skips(scaler)
            _SCALERS.append(scaler)
        return scaler

    def compile_model(self, model: Any) -> Any:
        """``torch.compile(model)`` with the trial's mode (or backend); the model itself when off."""
        if self.compile == "off":
            return model
        torch = _torch()
        if self.compile in ("eager", "aot_eager"):
            return torch.compile(model, backend=self.compile)
        return torch.compile(model, mode=self.compile)

    def checkpoint(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, through activation checkpointing when the trial asks for it."""
        if not self.checkpointing:
            return fn(*args)
        from torch.utils.checkpoint import checkpoint

        return checkpoint(fn, *args, use_reentrant=False)

    def as_code(self) -> str:
        """The configuration as the lines a training script would use."""
        lines = [f"batch_size = {self.batch_size}  # per micro-batch"]
        if self.accumulation > 1:
            lines.append(f"accumulation_steps = {self.accumulation}  # effective batch {self.effective_batch}")
        kw = ", ".join(f"{k}={v!r}" for k, v in self.loader_kwargs().items())
        lines.append(f"loader = DataLoader(dataset, batch_size=batch_size, {kw})")
        if self.precision == "tf32":
            lines.append('torch.set_float32_matmul_precision("high")  # TF32 matmuls')
        elif self.precision in ("bf16", "fp16"):
            dt = "bfloat16" if self.precision == "bf16" else "float16"
            lines.append(f"with torch.autocast(device_type, dtype=torch.{dt}):  # around forward and loss")
            if self.precision == "fp16":
                lines.append("scaler = torch.amp.GradScaler(device_type)  # scaler.scale(loss).backward(); scaler.step(opt); scaler.update()")
        if self.compile in ("eager", "aot_eager"):
            lines.append(f'model = torch.compile(model, backend="{self.compile}")')
        elif self.compile != "off":
            lines.append(f'model = torch.compile(model, mode="{self.compile}")')
        if self.checkpointing:
            lines.append("out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)  # per block")
        return "\n".join(lines)


def dataloader_kwargs(num_workers: int, pin_memory: bool, persistent_workers: bool, prefetch_factor: int | None) -> dict[str, Any]:
    """``DataLoader`` keyword arguments; the worker-only ones only with workers (DataLoader rejects
    ``prefetch_factor`` and ignores ``persistent_workers`` without them)."""
    kw: dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers > 0:
        kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            kw["prefetch_factor"] = prefetch_factor
    return kw


def _count_skips(scaler: Any) -> None:
    """Record the scale after each ``update()`` (a device copy, no sync); a drop is a skipped step."""
    scales: list[Any] = []
    update = scaler.update

    def counted(new_scale: Any = None) -> None:
        update(new_scale)
        scales.append(scaler._scale.detach().clone())

    def skipped() -> int:
        vals = [float(scaler._init_scale)] + [float(s) for s in scales]
        return sum(1 for a, b in zip(vals, vals[1:]) if b < a)

    scaler.update = counted
    scaler._whyidle_skipped = skipped


def _show(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def _torch() -> Any:
    from whyidle.capture import require_torch

    return require_torch("whyidle sweep")


@dataclass
class Workload:
    """What ``make(cfg)`` returns: one training step, its batches, and the samples in a step.

    ``step(batch)`` runs one micro-step and returns its loss (a tensor or a float, read only after
    the measurement; None skips the quality guard). ``loader`` is iterated again when it runs out.
    ``samples_per_step`` defaults to the leading dimension of each batch.
    """

    step: Callable[[Any], Any]
    loader: Iterable[Any]
    samples_per_step: int | None = None


class TrialResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one trial measured. Times are ns, memory bytes, ``*_share`` 0..1."""

    trial: Trial
    status: Status
    message: str = ""  # why it failed, one line
    samples_per_s: float | None = None  # median over the measured windows
    samples_per_s_min: float | None = None
    samples_per_s_max: float | None = None
    steady: bool = False  # the steady-state rule was met before the step or time limit
    warmup_steps: int = 0
    measured_steps: int = 0
    setup_ns: int = 0  # in the trial process: importing torch and the target, and make(cfg)
    warmup_ns: int = 0  # includes compilation when torch.compile is on
    measure_ns: int = 0  # the measured windows
    step_ns_p50: int | None = None
    step_ns_p95: int | None = None
    data_wait_share: float | None = None
    peak_device_bytes: int | None = None
    peak_host_bytes: int | None = None  # peak resident set of the trial's process
    losses: list[float] = []  # the first guard_steps losses, warm-up included
    nonfinite_losses: int = 0
    scaler_skipped_steps: int | None = None
    graph_breaks: int | None = None  # torch.compile only
    graph_break_reasons: list[str] = []
    compiled_graphs: int | None = None
    recompilations: int | None = None  # torch.compile only: dynamo's "Recompiling" events
    recompile_reasons: list[str] = []  # the guard failures that triggered them
    wall_ns: int = 0  # the whole trial, process start to exit
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.samples_per_s is not None
