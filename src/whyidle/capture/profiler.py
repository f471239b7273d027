"""torch.profiler integration: a schedule, an ``on_trace_ready`` handler, and a one-liner.

::

    with torch.profiler.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=whyidle.schedule(),              # skip the cold start, then a few steps
        on_trace_ready=whyidle.handler("runs/"),  # save (gzipped), diagnose, print the report
        with_stack=True, record_shapes=True,      # Python lines and the batch size
    ) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

    report = whyidle.profile_steps(lambda: train_step(next(it)), n=3)

The handler has the shape of ``torch.profiler.tensorboard_trace_handler``: it is called with the
profiler when a trace is ready. It never raises into the training loop; a failure to save or
diagnose becomes a warning (``profile_steps``, which is not in a training loop, raises instead).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from whyidle.capture._torch import require_torch
from whyidle.catalogue import SCHEDULE
from whyidle.config import Config
from whyidle.diagnosis import Report
from whyidle.errors import ArgumentError, CaptureError

__all__ = ["schedule", "handler", "TraceHandler", "profile_steps", "DEFAULT_SCHEDULE"]

# wait, warmup, active, repeat: the catalogue's, which every capture advice quotes (why those numbers: there).
DEFAULT_SCHEDULE = SCHEDULE


def schedule(wait: int = DEFAULT_SCHEDULE[0], warmup: int = DEFAULT_SCHEDULE[1], active: int = DEFAULT_SCHEDULE[2], repeat: int = DEFAULT_SCHEDULE[3]) -> Any:
    """``torch.profiler.schedule`` with defaults that skip the cold start: 5 wait, 2 warm-up, 3 active.

    The first trace is ready after ``wait + warmup + active`` calls to ``prof.step()``.
    """
    if min(wait, warmup) < 0 or active <= 0 or repeat < 0:  # checked first: a wrong argument needs no torch to say so
        raise ArgumentError(f"whyidle.schedule(wait={wait}, warmup={warmup}, active={active}, repeat={repeat}): expected wait, warmup >= 0, active > 0, repeat >= 0")
    torch = require_torch("whyidle.schedule()")
    return torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)


class TraceHandler:
    """``on_trace_ready`` callback: save the trace gzipped, diagnose it, print and/or write the report.

    ``report``: "print" (to ``stream``, default stdout), "write" (``<trace>.whyidle.json`` and
    ``.whyidle.txt`` next to the trace), "both" or "none". Every Report is kept in ``reports`` and
    every trace path in ``paths``.
    """

    def __init__(
        self,
        dir_name: str | os.PathLike[str],
        worker_name: str | None = None,
        *,
        report: str = "both",
        config: Config | None = None,
        stream: TextIO | None = None,
        width: int = 100,
        raise_errors: bool = False,
    ) -> None:
        if report not in ("print", "write", "both", "none"):
            raise ArgumentError(f"whyidle.handler(report={report!r}): expected print, write, both or none")
        self.dir = Path(dir_name)
        self.worker_name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        self.report_mode = report
        self.config = config
        self.stream = stream
        self.width = width
        self.raise_errors = raise_errors
        self.reports: list[Report] = []
        self.paths: list[Path] = []

    def trace_path(self) -> Path:
        return self.dir / f"{self.worker_name}.{time.time_ns() // 1_000_000}.pt.trace.json.gz"

    def __call__(self, prof: Any) -> None:
        try:
            self._handle(prof)
        except Exception as exc:
            if self.raise_errors:
                raise
            warnings.warn(f"whyidle.handler could not save or diagnose the trace ({type(exc).__name__}: {exc}); training continues", RuntimeWarning, stacklevel=2)

    def _handle(self, prof: Any) -> None:
        from whyidle.output import write_atomic
        from whyidle.pipeline import diagnose

        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.trace_path()
        prof.export_chrome_trace(str(path))  # torch gzips when the name ends in .gz
        self.paths.append(path)
        report = diagnose(path, self.config)
        self.reports.append(report)
        if self.report_mode in ("write", "both"):
            from whyidle.render.json import render_json
            from whyidle.render.terminal import render_terminal

            stem = str(path)[: -len(".pt.trace.json.gz")]
            write_atomic(f"{stem}.whyidle.json", render_json(report))
            write_atomic(f"{stem}.whyidle.txt", render_terminal(report, width=self.width))
        if self.report_mode in ("print", "both"):
            from whyidle.render.terminal import render_terminal

            out = self.stream or sys.stdout
            out.write(render_terminal(report, width=self.width, color=bool(getattr(out, "isatty", lambda: False)())))
            out.write(f"(trace saved to {path})\n")


def handler(dir_name: str | os.PathLike[str] = "runs", worker_name: str | None = None, **kwargs: Any) -> TraceHandler:
    """The ``on_trace_ready`` handler: ``torch.profiler.profile(..., on_trace_ready=whyidle.handler("runs/"))``."""
    return TraceHandler(dir_name, worker_name, **kwargs)


def profile_steps(
    step_fn: Callable[[], object],
    n: int = 3,
    *,
    wait: int = 1,
    warmup: int = 2,
    dir_name: str | os.PathLike[str] | None = None,
    with_stack: bool = True,
    record_shapes: bool = True,
    config: Config | None = None,
    report: str = "none",
) -> Report:
    """Profile ``n`` calls of ``step_fn`` (after ``wait`` + ``warmup`` calls) and return the Report.

    The trace is saved under ``dir_name`` (default: a temporary folder, removed afterwards).
    """
    if n <= 0:
        raise ArgumentError(f"whyidle.profile_steps(n={n}): expected at least one step to profile")
    torch = require_torch("whyidle.profile_steps()")
    import tempfile

    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory(prefix="whyidle-") as tmp:
        h = TraceHandler(dir_name if dir_name is not None else tmp, report=report, config=config, raise_errors=True)
        with torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=n, repeat=1),
            on_trace_ready=h,
            with_stack=with_stack,
            record_shapes=record_shapes,
        ) as prof:
            for _ in range(wait + warmup + n):
                step_fn()
                prof.step()
        if not h.reports:
            raise CaptureError("whyidle.profile_steps: the profiler produced no trace")
        return h.reports[-1]
