"""The step tracker: what each training step spent waiting for data, copying and computing.

::

    tracker = whyidle.track(loader)
    for x, y in tracker:                  # times each next(loader): the data wait
        with tracker.copy():              # optional: marks the host->device copy
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = train_step(x, y)
    print(tracker.report())               # the same Report as for a trace file

A step runs from the moment the loop asks for a batch to the moment it asks for the next one::

    host    [wait for batch][copy][launch forward/backward/optimizer ....][wait for batch]...
            ^ step i starts  ^ batch delivered: device mark A   step i ends: mark B ^
    device                          [.......... work queued in step i ..........]

On CUDA the device time of a step is read from two CUDA events (A, B) recorded on the current
stream. Recording an event does not block the host; the tracker reads an event pair only once
``event.query()`` says the device has passed it, so the hot path never synchronises. Pairs still
in flight are read when :meth:`StepTracker.report` is called, after training.

The tracker never raises into the training loop: if measuring fails, it warns once, stops
measuring and keeps yielding the loader's batches unchanged. It never touches the batches, so a
deterministic run computes bitwise the same results with and without it.

The clock and the device timer are injectable (``clock=``, ``device_timer=``) so tests run with a
fake clock and a fake device. The device timer is in :mod:`whyidle.capture.device_timer`, the
records the tracker produces in :mod:`whyidle.capture.tracker_records`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from whyidle.capture.device_timer import CudaEventTimer, DeviceTimer
from whyidle.capture.tracker_records import LoaderInfo, StepRecord, TrackerStats, batch_samples
from whyidle.errors import UsageError

__all__ = [
    "DeviceTimer",
    "CudaEventTimer",
    "LoaderInfo",
    "StepRecord",
    "TrackerStats",
    "StepTracker",
    "track",
    "batch_samples",
]

T = TypeVar("T")


class _Open:
    """The step in progress (a plain slotted class: it is built once per step in the hot path)."""

    __slots__ = ("number", "start_ns", "data_wait_ns", "copy_ns", "samples", "mark_a")

    def __init__(self, number: int, start_ns: int, data_wait_ns: int = 0) -> None:
        self.number = number
        self.start_ns = start_ns
        self.data_wait_ns = data_wait_ns
        self.copy_ns = 0
        self.samples: int | None = None
        self.mark_a: Any = None


# A closed step in the hot path: [number, start_ns, end_ns, wait_ns, copy_ns, samples, device_ns];
# StepRecords are built from these in stats(), outside the loop.
_Row = list[Any]


class _CopyBlock:
    """``with tracker.copy():`` without a generator-based context manager (cheaper per step)."""

    __slots__ = ("_tr", "_t0")

    def __init__(self, tr: StepTracker[Any]) -> None:
        self._tr = tr
        self._t0 = 0

    def __enter__(self) -> None:
        tr = self._tr
        tr._copy_depth += 1
        if tr._copy_depth == 1:
            self._t0 = tr._now()

    def __exit__(self, *exc: object) -> None:
        tr = self._tr
        tr._copy_depth -= 1
        if tr._copy_depth == 0 and not tr._broken:
            tr._safe(tr._copy_done, self._t0, tr._now())


class _SweepSink:
    """Streams closed steps to the file ``whyidle sweep`` names in ``WHYIDLE_SWEEP_STEPS`` (one
    JSON list per line: start, end, data wait, copy, samples), at most every ``every_ns`` and at
    exit, so the sweep can apply its steady-state rule to a running command and stop it."""

    def __init__(self, path: str, every_ns: int = 200_000_000) -> None:
        self._f = open(path, "a", buffering=1 << 16)
        self._rows: list[_Row] = []
        self._every_ns = every_ns
        self._next_ns = 0
        import atexit

        atexit.register(self.flush)

    def add(self, row: _Row, t: int) -> None:
        self._rows.append(row)
        if t >= self._next_ns:
            self._next_ns = t + self._every_ns
            self.flush()

    def flush(self) -> None:
        rows, self._rows = self._rows, []
        lines = [f"[{r[1]},{r[2]},{r[3]},{r[4]},{r[5] if r[5] is not None else 0}]\n" for r in rows]
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                lines.append(f'{{"peak_device_bytes":{int(torch.cuda.max_memory_allocated())}}}\n')
        except Exception:  # never disturb the training loop
            pass
        self._f.write("".join(lines))
        self._f.flush()


class StepTracker(Generic[T]):
    """Per-step data wait, copy time, device time and samples/s. See the module docstring."""

    def __init__(
        self,
        loader: Iterable[T] | None = None,
        *,
        batch_size: int | None = None,
        skip_first: int = 1,
        device_timer: DeviceTimer | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        device: str = "cpu",
        where: str = "",
    ) -> None:
        if batch_size is not None and (type(batch_size) is not int or batch_size <= 0):
            raise UsageError(f"whyidle.track: batch_size={batch_size!r}; expected a positive number of samples per step (or None to read it from each batch)")
        self._loader = loader
        self._iterating = False  # a copy() before the loop's first batch is set-up, not a step
        self._batch_size = batch_size
        self._skip_first = max(int(skip_first), 0)
        self._timer = device_timer
        self._clock = clock
        self._device = device_timer.label if device_timer is not None else device
        self._steps: list[_Row] = []
        self._pending: deque[tuple[_Row, Any, Any]] = deque()
        self._open: _Open | None = None
        self._broken = False
        self._notes: list[str] = []
        self._loop_line = where  # the loop's file:line, found on first use unless given
        self._info = LoaderInfo.of(loader)
        self._copy_depth = 0
        self._sink: _SweepSink | None = None  # set by track() under `whyidle sweep`

    # -- failing open ---------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if not self._broken:
            self._broken = True
            msg = f"whyidle.track stopped measuring ({type(exc).__name__}: {exc}); training continues unchanged"
            self._notes.append(msg)
            _warn(msg, 4)

    @property
    def broken(self) -> bool:
        """True once measuring failed; the loop goes on, the report covers the steps before."""
        return self._broken

    # -- the primitives ---------------------------------------------------------------------------
    def _delivered(self, t0: int, t1: int, batch: object) -> None:
        """A batch arrived at t1 after the loop asked for it at t0: close the previous step at t0."""
        self._close(t0)
        self._open = _Open(number=len(self._steps), start_ns=t0, data_wait_ns=t1 - t0)
        self._open.samples = self._batch_size if self._batch_size is not None else batch_samples(batch)
        if self._timer is not None:
            self._open.mark_a = self._timer.mark()

    def _close(self, t: int) -> None:
        o = self._open
        if o is None:
            return
        self._open = None
        row: _Row = [o.number, o.start_ns, t, o.data_wait_ns, o.copy_ns, o.samples, None]
        self._steps.append(row)
        if self._sink is not None:
            self._sink.add(row, t)
        if self._timer is not None and o.mark_a is not None:
            self._pending.append((row, o.mark_a, self._timer.mark()))
            self._poll(wait=False)

    def _poll(self, wait: bool) -> None:
        """Read finished device-mark pairs, oldest first; without ``wait`` stop at the first unfinished."""
        if self._timer is None:
            return
        while self._pending:
            row, a, b = self._pending[0]
            ns = self._timer.elapsed_ns(a, b, wait)
            if ns is None:
                return
            self._pending.popleft()
            row[6] = int(ns)

    def _where(self, depth: int) -> None:
        if self._loop_line:
            return
        try:
            f = sys._getframe(depth)
            self._loop_line = f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno} in {f.f_code.co_name}"
        except Exception:  # pragma: no cover - frames are always there in CPython
            self._loop_line = ""

    # -- the iterator form ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[T]:
        if self._loader is None:
            raise TypeError("whyidle.track() was given no loader to iterate; use track(loader), or call tracker.step()")
        it = iter(self._loader)
        self._iterating = True
        clock = self._clock
        self._safe(self._where, 3)
        try:
            while True:
                t0 = clock() if not self._broken else 0
                try:
                    batch = next(it)
                except StopIteration:
                    self._safe(self._close, t0)
                    return
                if not self._broken:
                    try:
                        self._delivered(t0, clock(), batch)
                    except Exception as exc:
                        self._fail(exc)
                yield batch
        finally:
            # a `break` out of the loop (or an exception in it): end the step now
            if self._open is not None:
                self._safe(self._close, self._now())

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def _now(self) -> int:
        try:
            return int(self._clock())
        except Exception as exc:
            self._fail(exc)
            return 0

    def _safe(self, fn: Callable[..., None], *args: Any) -> None:
        if self._broken:
            return
        try:
            fn(*args)
        except Exception as exc:
            self._fail(exc)

    # -- the explicit form ------------------------------------------------------------------------
    @contextlib.contextmanager
    def data(self) -> Iterator[None]:
        """Marks waiting for the next batch in the explicit form; starts a step if none is open."""
        t0 = self._now()
        try:
            yield
        finally:
            t1 = self._now()
            self._safe(self._data_done, t0, t1)

    def _data_done(self, t0: int, t1: int) -> None:
        if self._open is None:
            self._open = _Open(number=len(self._steps), start_ns=t0)
        self._open.data_wait_ns += t1 - t0
        if self._timer is not None and self._open.mark_a is None:
            self._open.mark_a = self._timer.mark()

    def now(self) -> int:
        """The tracker's clock in ns: the times to pass to :meth:`waited`."""
        return self._now()

    def waited(self, start_ns: int, end_ns: int) -> None:
        """Explicit form, for trainer callbacks that see the wait only from its two ends: the loop
        waited for data from ``start_ns`` to ``end_ns`` (the tracker's clock, :meth:`now`).

        A step that is not open yet starts where the last one ended (or at ``start_ns`` for the
        first), so time between the two (logging, evaluation, checkpoints) stays in the step as
        time the tracker cannot attribute, rather than dropping out of the window.
        """
        self._safe(self._waited, start_ns, end_ns)

    def _waited(self, start_ns: int, end_ns: int) -> None:
        if self._open is None:
            self._open = _Open(number=len(self._steps), start_ns=self._steps[-1][2] if self._steps else start_ns)
            if self._timer is not None:
                self._open.mark_a = self._timer.mark()
        self._open.data_wait_ns += max(end_ns - start_ns, 0)

    def copy(self) -> _CopyBlock:
        """``with tracker.copy():`` marks a host->device copy; its host time is the step's copy time."""
        # A new block per call: a block kept on the tracker would make a reference cycle, and the
        # loader (with its worker processes) would then outlive the loop until a GC pass.
        return _CopyBlock(self)

    def _copy_done(self, t0: int, t1: int) -> None:
        if self._open is None and self._loader is not None and not self._iterating:
            return  # before the first batch (moving the model, a warm-up copy): no step yet
        if self._open is None:
            self._open = _Open(number=len(self._steps), start_ns=t0)
            if self._timer is not None:
                self._open.mark_a = self._timer.mark()
        self._open.copy_ns += t1 - t0

    def step(self, batch: object = None, samples: int | None = None) -> None:
        """Ends the current step (explicit form): call it once at the end of every training step.

        ``samples`` (or the leading dimension of ``batch``, or ``batch_size``) counts the step's
        samples. The next step starts now.
        """
        t = self._now()
        if self._broken:
            return
        self._safe(self._step, t, batch, samples)

    def _step(self, t: int, batch: object, samples: int | None) -> None:
        self._where(4)
        if self._open is None:  # a step with no data()/copy() mark: it began when the last ended
            start = self._steps[-1][2] if self._steps else self._created
            self._open = _Open(number=len(self._steps), start_ns=start)
            if self._timer is not None:
                self._open.mark_a = self._timer.mark()
        if samples is not None:
            self._open.samples = int(samples)
        elif batch is not None:
            self._open.samples = batch_samples(batch)
        else:
            self._open.samples = self._batch_size
        self._close(t)

    @property
    def _created(self) -> int:
        if not hasattr(self, "_created_ns"):
            self._created_ns = self._now()
        return self._created_ns

    def start(self) -> None:
        """Explicit form: the first step starts now (otherwise at the first data()/copy()/step())."""
        self._created_ns = self._now()

    # -- results --------------------------------------------------------------------------------
    def stats(self, wait: bool = True) -> TrackerStats:
        """The measurements so far. ``wait=True`` (the default) waits for device marks in flight:
        call it after training, not inside the loop."""
        if wait:
            self._safe(self._poll, True)
        notes = list(self._notes)
        if self._timer is None:
            notes.append("no device timing: step compute is the host time between batches (a CPU run, or device_timer=None)")
        steps = tuple(StepRecord(*row) for row in self._steps)
        unread = sum(1 for s in steps if s.device_ns is None) if self._timer is not None else 0
        if unread:
            notes.append(f"{unread} step(s) have no device time (their device marks were not read)")
        return TrackerStats(
            steps=steps,
            device=self._device,
            device_timing=self._timer is not None and unread < len(steps),
            loader=self._info,
            loop_line=self._loop_line,
            skip_first=self._skip_first,
            notes=tuple(notes),
        )

    def timeline(self, wait: bool = True) -> Any:
        """The measurements so far as a :class:`whyidle.Timeline` (see capture.tracker_timeline)."""
        from whyidle.capture.tracker_timeline import tracker_timeline

        return tracker_timeline(self.stats(wait))

    def report(self, config: Any = None) -> Any:
        """The tracker's summary as a :class:`whyidle.Report` (see capture.tracker_report)."""
        from whyidle.capture.tracker_report import report_from_tracker

        return report_from_tracker(self.stats(), config)


def _warn(msg: str, stacklevel: int) -> None:
    """A RuntimeWarning that never becomes an exception in the user's loop, even when warnings
    are errors (``python -W error``, pytest's ``filterwarnings = error``): the message is in the
    report's notes either way."""
    try:
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
    except Exception:
        pass


def track(
    loader: Iterable[T] | None = None,
    *,
    batch_size: int | None = None,
    skip_first: int = 1,
    device: Any = "auto",
    clock: Callable[[], int] = time.perf_counter_ns,
    device_timer: DeviceTimer | None = None,
    where: str = "",
) -> StepTracker[T]:
    """Track a training loop: ``for batch in whyidle.track(loader): ...``.

    ``device="auto"`` times device work with CUDA events when torch sees a GPU, and measures host
    time only otherwise (CPU). ``skip_first`` steps are left out of the report (the first step
    pays for DataLoader worker start-up and first calls). ``batch_size`` overrides the samples
    per step read from each batch. ``where`` names the loop when it is not the caller's own (a
    trainer's loop seen from its callbacks); by default it is the line of the ``for`` loop.
    """
    timer = device_timer
    label = "cpu"
    if timer is None and device not in (None, "cpu"):
        try:
            import torch

            if torch.cuda.is_available() and (device == "auto" or str(device).startswith("cuda")):
                timer = CudaEventTimer(torch, None if device == "auto" else device)
        except ImportError:
            pass
        except Exception as exc:  # CUDA present but unusable: measure host time, say why
            _warn(f"whyidle.track: no device timing ({type(exc).__name__}: {exc})", 3)
    tr = StepTracker(loader, batch_size=batch_size, skip_first=skip_first, device_timer=timer, clock=clock, device=label, where=where)
    sink = os.environ.get("WHYIDLE_SWEEP_STEPS")  # running under `whyidle sweep -- COMMAND`
    if sink:
        try:
            tr._sink = _SweepSink(sink)
        except OSError as exc:
            _warn(f"whyidle.track: cannot stream steps to {sink} ({exc}); the sweep cannot measure this run", 3)
    return tr
