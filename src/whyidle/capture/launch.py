"""The parent side of ``whyidle run -- COMMAND ARGS...``: start the command unchanged, with the
start-up hook (:mod:`whyidle.capture.run_boot`) on its ``PYTHONPATH``, sample it, forward
signals, and collect what its processes wrote into the run folder.

The command inherits stdin, stdout and stderr: whyidle writes nothing to them while it runs.
Signals: SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to whyidle are sent on to the
command. SIGINT (Ctrl-C) from a terminal reaches the command by itself (it is in whyidle's
foreground process group), so whyidle only waits for it to end; a SIGINT sent to whyidle alone
(``kill -INT``, no terminal) is sent on. ``duration_s`` interrupts the command (SIGINT) after that
many seconds, as Ctrl-C would. The private folder holding the ``sitecustomize.py`` is removed
when the command ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whyidle.capture.run_boot import sitecustomize_source
from whyidle.capture.run_env import ENV_DIR, ENV_OPTIONS
from whyidle.capture.run_env import STEPS_SUFFIX, HookOptions
from whyidle.capture.watch import WatchResult, default_probes, watch

__all__ = ["LaunchOptions", "Launched", "ProcessRecord", "launch", "read_records", "FORWARDED"]

FORWARDED = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2") if hasattr(signal, n))


@dataclass(frozen=True)
class LaunchOptions:
    run_dir: Path
    hook: HookOptions | None = HookOptions()  # None: --no-hook, the command runs without sitecustomize
    sampler: bool = True  # NVML and the process tree, for the whole run
    interval_s: float = 0.5
    duration_s: float | None = None


@dataclass(frozen=True)
class ProcessRecord:
    """One instrumented process's ``<worker>.steps.json`` (written by run_hook.Recorder.record)."""

    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.path.name[: -len(STEPS_SUFFIX)]

    @property
    def rank(self) -> int | None:
        r = self.data.get("rank")
        return int(r) if isinstance(r, int) else None

    @property
    def steps(self) -> int:
        return int(self.data.get("steps") or 0)


@dataclass
class Launched:
    """What the run left: the exit status, the records, the traces, the sampler's result."""

    returncode: int
    run_dir: Path
    records: list[ProcessRecord] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)
    sampled: WatchResult | None = None
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False  # SIGINT reached the command (Ctrl-C, --duration, --steps)
    wall_s: float = 0.0


def child_env(options: LaunchOptions, site_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the caller's, with the hook's folder first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    if options.hook is None:
        return env
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(site_dir) + (os.pathsep + old if old else "")
    env[ENV_DIR] = str(options.run_dir.resolve())
    env[ENV_OPTIONS] = options.hook.to_json()
    return env


class _Signals:
    """Forwards signals to the command while it runs; restores the handlers afterwards."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.interrupted = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is not threading.main_thread():  # pragma: no cover - tests in threads
            return self
        for sig in (*FORWARDED, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, sig: int, frame: object) -> None:
        if sig == signal.SIGINT:
            self.interrupted = True
            if _terminal_has_us():  # Ctrl-C: the terminal sent it to the command too
                return
        self.send(sig)

    def send(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except OSError:  # pragma: no cover - it just ended
                pass


def _terminal_has_us() -> bool:
    """True when whyidle runs in the foreground process group of a terminal (so does the command)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def launch(cmd: Sequence[str], options: LaunchOptions, *, popen: Callable[..., Any] = subprocess.Popen) -> Launched:
    """Run ``cmd`` with the hook and the sampler; return what it left in ``options.run_dir``.

    Raises FileNotFoundError / PermissionError when the command cannot be started.
    """
    options.run_dir.mkdir(parents=True, exist_ok=True)
    site_dir = Path(tempfile.mkdtemp(prefix="whyidle-site-"))
    whyidle_parent = str(Path(__file__).resolve().parents[2])
    (site_dir / "sitecustomize.py").write_text(sitecustomize_source(whyidle_parent), encoding="utf-8")
    env = child_env(options, site_dir)
    t0 = time.monotonic()
    sampled: WatchResult | None = None
    with _Signals() as signals:

        def start(argv: list[str]) -> Any:
            signals.proc = popen(argv, env=env)
            if options.duration_s:
                timer = threading.Timer(options.duration_s, lambda: _interrupt(signals))
                timer.daemon = True
                timer.start()
            return signals.proc

        try:
            probes = default_probes if options.sampler else _no_probes
            sampled = watch(cmd, options.interval_s, probes=probes, popen=start)
            rc = sampled.returncode
        finally:
            shutil.rmtree(site_dir, ignore_errors=True)
    out = Launched(rc, options.run_dir, sampled=sampled if options.sampler else None, interrupted=signals.interrupted, wall_s=time.monotonic() - t0)
    out.records, out.traces, out.notes = read_records(options.run_dir)
    return out


def _no_probes(pid: int) -> tuple[list[Any], list[str], dict[str, dict[str, str]]]:
    return [], [], {}


def _interrupt(signals: _Signals) -> None:
    signals.interrupted = True
    signals.send(signal.SIGINT)


def read_records(run_dir: Path) -> tuple[list[ProcessRecord], list[Path], list[str]]:
    """The process records, the profiler traces and the boot notes in a run folder."""
    records: list[ProcessRecord] = []
    notes: list[str] = []
    for p in sorted(run_dir.glob(f"*{STEPS_SUFFIX}")):
        try:
            records.append(ProcessRecord(p, json.loads(p.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as exc:
            notes.append(f"{p.name} could not be read ({exc})")
    for p in sorted(run_dir.glob("boot-*.txt")):
        notes += [f"{p.stem[5:]}: {line}" for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    traces = sorted(run_dir.glob("traces/*.pt.trace.json.gz"))
    return records, traces, notes
