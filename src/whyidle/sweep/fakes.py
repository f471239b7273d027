"""Fakes for the sweep's outside world, shipped so that sweeps are tested without torch or a GPU.

* :class:`FakeRunner` — a :class:`~whyidle.sweep.runner.TrialRunner` answering from a function of
  the trial (``rates``: samples/s by trial, None for out of memory); it records every trial run.
* :class:`FakeClock` — a nanosecond clock that moves only when told (``sleep`` advances it).
* :class:`FakeLauncher` — a :class:`~whyidle.sweep.runner.Launcher` whose processes end after a
  given time with a given exit, optionally writing files first (a result, streamed steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from whyidle.sweep.runner import Exit
from whyidle.sweep.trial import Trial, TrialResult

__all__ = ["FakeRunner", "FakeClock", "FakeLauncher", "FakeProcess"]


class FakeRunner:
    """``rate(trial)`` -> samples/s, None (out of memory) or a TrialResult to return as is."""

    def __init__(self, rate: Callable[[Trial], float | None | TrialResult], losses: Callable[[Trial], list[float]] | None = None) -> None:
        self.rate = rate
        self.losses = losses
        self.calls: list[Trial] = []

    def run(self, trial: Trial) -> TrialResult:
        self.calls.append(trial)
        v = self.rate(trial)
        if isinstance(v, TrialResult):
            return v
        if v is None:
            return TrialResult(trial=trial, status="oom", message="OutOfMemoryError: fake")
        losses = self.losses(trial) if self.losses is not None else []
        return TrialResult(trial=trial, status="ok", samples_per_s=v, samples_per_s_min=v, samples_per_s_max=v, steady=True, measured_steps=10, losses=losses)


@dataclass
class FakeClock:
    now_ns: int = 0

    def __call__(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1e9)


@dataclass
class FakeProcess:
    clock: FakeClock
    ends_at_ns: int
    exit: Exit
    stopped: bool = False

    def poll(self) -> Exit | None:
        return self.exit if self.clock() >= self.ends_at_ns else None

    def stop(self) -> Exit:
        self.stopped = True
        return Exit(None, 15, self.exit.peak_rss_bytes)


@dataclass
class FakeLauncher:
    """Each start() runs ``on_start(argv, env)`` (to write what the process would), then the
    process ends ``runs_for_s`` later (on the fake clock) with ``exit``."""

    clock: FakeClock
    runs_for_s: float
    exit: Exit
    on_start: Callable[[Sequence[str], dict[str, str]], None] | None = None
    started: list[list[str]] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)

    def start(self, argv: Sequence[str], env: dict[str, str], log: Path) -> FakeProcess:
        self.started.append(list(argv))
        log.write_text("")
        if self.on_start is not None:
            self.on_start(argv, env)
        p = FakeProcess(self.clock, self.clock() + int(self.runs_for_s * 1e9), self.exit)
        self.processes.append(p)
        return p
