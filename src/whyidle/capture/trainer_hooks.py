"""Step tracking driven by a trainer's callbacks: the core of the Lightning and Hugging Face callbacks.

A trainer owns its loop, so the tracker cannot wrap the DataLoader; it sees the loop from the
hooks the trainer calls instead::

    step ends (hook)   other work ends (log, eval, checkpoint hooks)   batch ready (hook)   step ends
    |--------------------------------|-------------------------------------|----- compute ------|
                                     ^ the data wait: from here ............^

The data wait runs from the end of the last thing the trainer reported (the step, a log, an
evaluation, a checkpoint) to the hook that receives the next batch: the trainer fetched the batch
in between (Lightning prefetches one batch and moves it to the device there; Hugging Face fetches
all micro-batches of an optimizer step there). Time between the end of a step and the end of the
other work stays in the step as time the tracker cannot attribute. Device time is read from CUDA
events where there is a GPU, as for ``whyidle.track``.

At the end of training :meth:`TrainerHooks.finish` builds the Report, writes ``whyidle.html`` and
``whyidle.json`` into the run's folder, and returns it with the headline figures for the
trainer's loggers (:func:`headline`). Nothing here raises into training: a failure becomes a
warning and the run goes on.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from whyidle.config import Config
from whyidle.diagnosis import Report

__all__ = ["TrainerHooks", "HookedCallback", "headline", "REPORT_FILES"]

REPORT_FILES = ("whyidle.html", "whyidle.json")  # written into the run's folder at the end of fit


def headline(report: Report) -> dict[str, float]:
    """The report's headline figures as numbers, named for a logger (``whyidle/...``)."""
    u = report.utilization
    out: dict[str, float] = {"whyidle/busy_fraction": round(u.busy_fraction, 4)}
    if u.steps:
        out["whyidle/step_ms"] = round(float(u.step_times_ns.mean()) / 1e6, 3)
    if u.samples_per_s is not None:
        out["whyidle/samples_per_s"] = round(u.samples_per_s, 2)
    if u.idle_ns > 0:
        for group, ns in report.idle_by_group_ns.items():
            if ns > 0:
                out[f"whyidle/idle_share/{group}"] = round(ns / u.idle_ns, 4)
    out["whyidle/findings"] = float(len(report.findings))
    if report.findings:
        out["whyidle/top_finding_share_of_window"] = round(report.findings[0].share_of_window, 4)
    return out


class TrainerHooks:
    """One training run seen through a trainer's hooks. See the module docstring."""

    def __init__(self, where: str, *, skip_first: int = 1, device: Any = "auto", config: Config | None = None, profile: bool = False, width: int = 100) -> None:
        self.where = where  # the trainer's loop, named in the report where a Python line would be
        self.skip_first = skip_first
        self.device = device
        self.config = config
        self.profile = profile
        self.width = width
        self.tracker: Any = None
        self.report: Report | None = None
        self.paths: list[str] = []
        self._idle_since = 0
        self._prof: Any = None
        self.profiler_handler: Any = None

    def _warn(self, what: str, exc: BaseException) -> None:
        warnings.warn(f"whyidle: {what} failed ({type(exc).__name__}: {exc}); training continues", RuntimeWarning, stacklevel=3)

    def start(self, loader: Iterable[Any] | None, batch_size: int | None = None, out_dir: str | os.PathLike[str] | None = None) -> None:
        """Training begins: track steps, reading the DataLoader's settings from ``loader``."""
        try:
            from whyidle.capture.tracker import track

            self.tracker = track(loader, batch_size=batch_size, skip_first=self.skip_first, device=self.device, where=self.where)
            self.tracker.start()
            self._idle_since = self.tracker.now()
            if self.profile:
                self._start_profiler(Path(out_dir or ".") / "whyidle-traces")
        except Exception as exc:
            self._warn("starting the step tracker", exc)
            self.tracker = None

    def _start_profiler(self, trace_dir: Path) -> None:
        import torch

        from whyidle.capture.profiler import handler, schedule

        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler_handler = handler(trace_dir, report="write", config=self.config, width=self.width)
        self._prof = torch.profiler.profile(activities=acts, schedule=schedule(), on_trace_ready=self.profiler_handler, with_stack=True, record_shapes=True)
        self._prof.start()

    def other_work_done(self) -> None:
        """A log, an evaluation or a checkpoint ended: the wait for the next batch starts now."""
        if self.tracker is not None:
            self._idle_since = self.tracker.now()

    def batch_ready(self) -> None:
        """The trainer hands the step its batch: the wait ended."""
        if self.tracker is not None:
            self.tracker.waited(self._idle_since, self.tracker.now())

    def step_done(self, batch: object = None, samples: int | None = None) -> None:
        """The optimizer step ended."""
        if self.tracker is None:
            return
        self.tracker.step(batch, samples)
        self._idle_since = self.tracker.now()
        if self._prof is not None:
            try:
                self._prof.step()
            except Exception as exc:
                self._warn("stepping the profiler", exc)
                self._prof = None

    def finish(self, out_dir: str | os.PathLike[str] | None, *, write: bool = True, stream: Any = None) -> dict[str, float]:
        """Training ended: build the report, print it, write it; -> the headline figures ({} on failure)."""
        if self._prof is not None:
            try:
                self._prof.stop()
            except Exception as exc:
                self._warn("stopping the profiler", exc)
            self._prof = None
        if self.tracker is None:
            return {}
        try:
            self.report = self.tracker.report(self.config)
            assert self.report is not None
            if write and out_dir is not None:
                d = Path(out_dir)
                d.mkdir(parents=True, exist_ok=True)
                self.paths = [str(d / name) for name in REPORT_FILES]
                for path in self.paths:
                    self.report.save(path)
            if write:
                out = stream or sys.stdout
                from whyidle.render.terminal import render_terminal

                out.write(render_terminal(self.report, width=self.width) + "\n")
                if self.paths:
                    out.write(f"whyidle: wrote {' and '.join(self.paths)}\n")
            return headline(self.report)
        except Exception as exc:
            self._warn("building the report", exc)
            return {}


class HookedCallback:
    """What the Lightning and Hugging Face callbacks share: their hooks, settings and results."""

    def _setup(self, where: str, *, skip_first: int, profile: bool, config: Config | None, write: bool, width: int) -> None:
        self.hooks = TrainerHooks(where, skip_first=skip_first, config=config, profile=profile, width=width)
        self.write = write
        self.figures: dict[str, float] = {}  # the headline figures logged at the end (empty before)

    @property
    def report(self) -> Report | None:
        """The Report, once training has ended (None before)."""
        return self.hooks.report

    @property
    def paths(self) -> list[str]:
        """The files written at the end of training."""
        return self.hooks.paths
