"""What the step tracker records: per-step measurements, the loader's settings, batch sizes.

:class:`StepRecord` is one step on the host clock (data wait, copy time, device time, samples);
:class:`TrackerStats` holds a run's steps with what the tracker learnt about the loader
(:class:`LoaderInfo`) and the device; :func:`batch_samples` counts the samples in a batch.
Plain frozen dataclasses: built once, after the loop, from the tracker's hot-path rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LoaderInfo", "StepRecord", "TrackerStats", "batch_samples", "SOURCE_FORMAT"]

# The source format of what the tracker produces (its Report and its Timeline).
SOURCE_FORMAT = "whyidle.track"


@dataclass(frozen=True)
class LoaderInfo:
    """What the tracker could read off the loader (None: not a DataLoader or not readable)."""

    kind: str  # the loader's class name
    num_workers: int | None
    pin_memory: bool | None
    batch_size: int | None
    prefetch_factor: int | None
    persistent_workers: bool | None

    @classmethod
    def of(cls, loader: object | None) -> LoaderInfo:
        def get(name: str) -> Any:
            try:
                return getattr(loader, name, None)
            except Exception:  # a property that raises: treat as unknown
                return None

        def as_int(v: Any) -> int | None:
            return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

        def as_bool(v: Any) -> bool | None:
            return bool(v) if isinstance(v, bool) else None

        return cls(
            kind=type(loader).__name__ if loader is not None else "",
            num_workers=as_int(get("num_workers")),
            pin_memory=as_bool(get("pin_memory")),
            batch_size=as_int(get("batch_size")),
            prefetch_factor=as_int(get("prefetch_factor")),
            persistent_workers=as_bool(get("persistent_workers")),
        )


@dataclass(frozen=True)
class StepRecord:
    number: int
    start_ns: int  # host clock: the loop asked for this step's batch
    end_ns: int  # host clock: the loop asked for the next batch (or called step())
    data_wait_ns: int  # waiting for the batch
    copy_ns: int  # inside tracker.copy() blocks
    samples: int | None
    device_ns: int | None  # device time between the step's two marks; None if not measured

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class TrackerStats:
    steps: tuple[StepRecord, ...]
    device: str  # "cpu" or "cuda:0 <name>"
    device_timing: bool  # device_ns was measured with device events
    loader: LoaderInfo
    loop_line: str  # "train.py:42 in train": the line of the for-loop, when known
    skip_first: int  # steps the report drops (worker start-up, first calls)
    notes: tuple[str, ...] = ()
    # What the loop waited for before each step: "batch" (a DataLoader's), or "request" (a
    # serving loop's steps are its model calls; the wait between them is time without a request)
    waits_for: str = "batch"

    @property
    def total_ns(self) -> int:
        return sum(s.duration_ns for s in self.steps)

    @property
    def data_wait_ns(self) -> int:
        return sum(s.data_wait_ns for s in self.steps)

    @property
    def copy_ns(self) -> int:
        return sum(s.copy_ns for s in self.steps)

    @property
    def samples(self) -> int | None:
        if not self.steps or any(s.samples is None for s in self.steps):
            return None
        return sum(s.samples or 0 for s in self.steps)

    @property
    def samples_per_s(self) -> float | None:
        n, t = self.samples, self.total_ns
        return n / (t / 1e9) if n is not None and t > 0 else None

    @property
    def steps_per_s(self) -> float | None:
        t = self.total_ns
        return len(self.steps) / (t / 1e9) if self.steps and t > 0 else None

    @property
    def data_wait_share(self) -> float:
        t = self.total_ns
        return self.data_wait_ns / t if t else 0.0

    def selected(self) -> tuple[StepRecord, ...]:
        """The steps the report analyses: all but the first ``skip_first`` (if any remain)."""
        return self.steps[self.skip_first :] if len(self.steps) > self.skip_first else self.steps


def batch_samples(batch: object) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor (or array), searched
    breadth-first through tuples, lists and dicts; a flat list of plain values counts its items."""
    if isinstance(batch, (tuple, list)) and batch:  # fast path: (x, y, ...) with x a tensor
        shape = getattr(batch[0], "shape", None)
        if shape is not None and not isinstance(batch[0], type):
            try:
                return int(shape[0]) if len(shape) else None
            except Exception:
                return None
    seen = 0
    stack: list[object] = [batch]
    while stack and seen < 64:
        seen += 1
        b = stack.pop(0)
        shape = getattr(b, "shape", None)
        if shape is not None and not isinstance(b, type):
            try:
                return int(shape[0]) if len(shape) else None
            except Exception:
                return None
        if isinstance(b, dict):
            stack.extend(b.values())
        elif isinstance(b, (list, tuple)):
            stack.extend(b)
    if isinstance(batch, (list, tuple)) and batch and all(isinstance(v, (int, float, str, bytes)) for v in batch):
        return len(batch)
    return None
