"""Running trials: each in a fresh process, with a time limit, whatever happens inside.

Two runners share one protocol, ``run(trial) -> TrialResult``:

* :class:`FunctionRunner` — the Python form (``whyidle sweep sweep.py:make``): the trial process
  is ``python -m whyidle.sweep.child``, which measures the workload itself (sweep/measure.py).
* :class:`CommandRunner` — the plain form (``whyidle sweep -- python train.py --bs {batch_size}``):
  any command whose loop uses ``whyidle.track``; the tracker streams its steps to a file named
  by ``WHYIDLE_SWEEP_STEPS`` and this runner applies the warm-up and steady-state rules to them,
  stopping the command once steady.

The outside world is injected: the process launcher (:class:`Launcher`, real one
:class:`PosixLauncher`), the clock and the sleep. sweep/fakes.py ships fakes for all of them.

Outcomes: a result file → its status (``ok``, ``oom``, ``error``); a process killed by a signal
→ ``killed`` (SIGKILL is what the kernel's out-of-memory killer sends, and the message says so);
past the time limit → ``timeout`` (the process group is stopped: SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from whyidle.config import SweepConfig
from whyidle.errors import UsageError
from whyidle.sweep.trial import Trial, TrialResult

__all__ = [
    "TrialRunner",
    "Exit",
    "TrialProcess",
    "Launcher",
    "PosixLauncher",
    "FunctionRunner",
    "CommandRunner",
    "STEPS_ENV",
    "measure_records",
]

STEPS_ENV = "WHYIDLE_SWEEP_STEPS"  # the step tracker streams its steps to this file when set
TRIAL_ENV = "WHYIDLE_SWEEP_TRIAL"  # the trial's configuration as JSON, for commands that want it
_POLL_S = 0.05
_TERM_GRACE_S = 2.0


class TrialRunner(Protocol):
    def run(self, trial: Trial) -> TrialResult: ...


@dataclass(frozen=True)
class Exit:
    code: int | None  # exit status, None when killed by a signal
    signal: int | None
    peak_rss_bytes: int | None


class TrialProcess(Protocol):
    def poll(self) -> Exit | None:
        """The exit, once the process has ended (and been reaped); None while it runs."""

    def stop(self) -> Exit:
        """End the process and everything it started (SIGTERM, then SIGKILL); its exit."""


class Launcher(Protocol):
    def start(self, argv: Sequence[str], env: dict[str, str], log: Path) -> TrialProcess: ...


class _PosixProcess:
    def __init__(self, pid: int, sleep: Callable[[float], None]) -> None:
        self.pid = pid
        self._sleep = sleep
        self._exit: Exit | None = None

    def poll(self) -> Exit | None:
        if self._exit is not None:
            return self._exit
        pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        self._exit = Exit(code, sig, int(ru.ru_maxrss) * 1024)
        self._kill_group(signal.SIGKILL)  # DataLoader workers left behind, if any
        return self._exit

    def _kill_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self) -> Exit:
        if self._exit is not None:
            return self._exit
        self._kill_group(signal.SIGTERM)
        waited = 0.0
        while waited < _TERM_GRACE_S:
            ex = self.poll()
            if ex is not None:
                return ex
            self._sleep(_POLL_S)
            waited += _POLL_S
        self._kill_group(signal.SIGKILL)
        while True:
            ex = self.poll()
            if ex is not None:
                return ex
            self._sleep(_POLL_S)


class PosixLauncher:
    """Starts the trial in its own session (process group), output to ``log``."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep

    def start(self, argv: Sequence[str], env: dict[str, str], log: Path) -> TrialProcess:
        import subprocess

        with open(log, "wb") as out:
            try:
                p = subprocess.Popen(list(argv), env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                raise UsageError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from exc
        # Popen is only used to start it: the exit is reaped with os.wait4 for the peak RSS.
        p.returncode = 0  # keeps Popen.__del__ from warning about a process it did not wait for
        return _PosixProcess(p.pid, self._sleep)


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


def _died(trial: Trial, ex: Exit, log: Path, wall_ns: int) -> TrialResult:
    if ex.signal is not None:
        name = signal.Signals(ex.signal).name if ex.signal in {int(s) for s in signal.Signals} else str(ex.signal)
        why = f"killed by {name}"
        if ex.signal == signal.SIGKILL:
            why += " (the kernel's out-of-memory killer sends SIGKILL: check `dmesg`)"
        return TrialResult(trial=trial, status="killed", message=why, peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall_ns)
    tail = _tail(log)
    return TrialResult(trial=trial, status="error", message=f"exited with status {ex.code} without a result" + (f": {tail}" if tail else ""), peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall_ns)


@dataclass
class _Limits:
    warmup: int
    max_steps: int
    time_limit_s: float


class _ProcessRunner:
    """What both runners hold: the limits, the rules and the injected launcher, clock and sleep."""

    def __init__(
        self,
        *,
        warmup: int,
        max_steps: int,
        time_limit_s: float,
        config: SweepConfig | None = None,
        launcher: Launcher | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.limits = _Limits(warmup, max_steps, time_limit_s)
        self.config = config or SweepConfig()
        self.launcher = launcher or PosixLauncher(sleep)
        self.clock, self.sleep = clock, sleep


class FunctionRunner(_ProcessRunner):
    """The Python form: ``python -m whyidle.sweep.child`` measures ``target(trial)`` in a new process."""

    def __init__(self, target: str, *, python: str = sys.executable, **kw: Any) -> None:
        super().__init__(**kw)
        self.target, self.python = target, python

    def run(self, trial: Trial) -> TrialResult:
        from whyidle.sweep.child import Request

        lim = self.limits
        # measuring stops short of the limit, so the child can still write its result
        budget_ns = int(lim.time_limit_s * 0.8 * 1e9)
        req = Request(target=self.target, trial=trial, warmup=lim.warmup, max_steps=lim.max_steps, budget_ns=budget_ns, config=self.config)
        with tempfile.TemporaryDirectory(prefix="whyidle-trial-") as tmp:
            d = Path(tmp)
            (d / "request.json").write_bytes(msgspec.json.encode(req))
            res_path = d / "result.json"
            argv = [self.python, "-m", "whyidle.sweep.child", str(d / "request.json"), str(res_path)]
            t0 = self.clock()
            proc = self.launcher.start(argv, dict(os.environ), d / "log.txt")
            ex = _wait(proc, t0, lim.time_limit_s, self.clock, self.sleep, None)
            wall = self.clock() - t0
            if ex is None:
                ex = proc.stop()
                return TrialResult(trial=trial, status="timeout", message=f"still running after the {lim.time_limit_s:g} s time limit; stopped", peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall)
            if res_path.is_file():
                res = msgspec.json.decode(res_path.read_bytes(), type=TrialResult)
                peak = max(res.peak_host_bytes or 0, ex.peak_rss_bytes or 0) or None
                return msgspec.structs.replace(res, peak_host_bytes=peak, wall_ns=wall)
            return _died(trial, ex, d / "log.txt", wall)


def _wait(
    proc: TrialProcess,
    t0: int,
    limit_s: float,
    clock: Callable[[], int],
    sleep: Callable[[float], None],
    enough: Callable[[], bool] | None,
) -> Exit | None:
    """Poll until the process exits (its Exit) or the limit passes or ``enough()`` says stop (None)."""
    while True:
        ex = proc.poll()
        if ex is not None:
            return ex
        if clock() - t0 >= limit_s * 1e9 or (enough is not None and enough()):
            return None
        sleep(_POLL_S)


# -- the plain-command form ---------------------------------------------------------------------


def format_command(template: Sequence[str], trial: Trial) -> list[str]:
    """``template`` with ``{batch_size}``-style placeholders filled from the trial's fields."""
    fields = msgspec.structs.asdict(trial)
    fields["effective_batch"] = trial.effective_batch
    out = []
    for arg in template:
        try:
            out.append(arg.format(**{k: ("" if v is None else v) for k, v in fields.items()}))
        except (KeyError, IndexError, ValueError) as exc:
            raise UsageError(f"command argument {arg!r}: unknown placeholder {exc}; expected one of {', '.join('{' + k + '}' for k in fields)}") from exc
    return out


def read_steps(path: Path) -> tuple[list[list[int]], int | None]:
    """The streamed steps ``[start_ns, end_ns, data_wait_ns, copy_ns, samples]`` and the peak
    device memory last reported (complete lines only: the writer may be mid-line)."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], None
    rows: list[list[int]] = []
    peak: int | None = None
    for line in data.split(b"\n")[:-1]:
        try:
            v = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if isinstance(v, list) and len(v) == 5:
            rows.append(v)
        elif isinstance(v, dict) and isinstance(v.get("peak_device_bytes"), int):
            peak = v["peak_device_bytes"]
    return rows, peak


def measure_records(rows: list[list[int]], warmup: int, max_steps: int, cfg: SweepConfig) -> Any:
    """The windows and steady state of streamed steps (the same rules as sweep/measure.py, with
    each window running from the end of the previous window's last step to its own)."""
    from whyidle.sweep.measure import Measurement, is_steady

    m = Measurement()
    if len(rows) <= warmup:
        return m
    m.warmup_steps = warmup
    m.warmup_ns = rows[warmup][0] - rows[0][0] if warmup else 0
    meas = rows[warmup:]
    t_prev = meas[0][0]
    start = 0
    for i in range(len(meas)):
        if i + 1 - start < cfg.window_steps or meas[i][1] - t_prev < cfg.window_min_ns:
            continue
        win = meas[start : i + 1]
        start = i + 1
        t_end = win[-1][1]
        samples = sum(r[4] or 0 for r in win)
        if t_end > t_prev and samples:
            m.window_rates.append(samples / ((t_end - t_prev) / 1e9))
        t_prev = t_end
        m.step_ns.extend(r[1] - r[0] for r in win)
        m.data_wait_ns += sum(r[2] for r in win)
        m.measured_ns = t_end - meas[0][0]
        if is_steady(m.window_rates, cfg):
            m.steady = True
            break
        if start >= max_steps and len(m.window_rates) >= cfg.steady_windows:
            m.capped = True
            break
    return m


class CommandRunner(_ProcessRunner):
    """The plain form: run the command with the trial's values, measure it with the step tracker."""

    def __init__(self, template: Sequence[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.template = list(template)

    def run(self, trial: Trial) -> TrialResult:
        lim, cfg = self.limits, self.config
        argv = format_command(self.template, trial)
        with tempfile.TemporaryDirectory(prefix="whyidle-trial-") as tmp:
            d = Path(tmp)
            steps_path = d / "steps.jsonl"
            env = dict(os.environ)
            env[STEPS_ENV] = str(steps_path)
            env[TRIAL_ENV] = trial.key()
            t0 = self.clock()
            proc = self.launcher.start(argv, env, d / "log.txt")

            def enough() -> bool:
                m = measure_records(read_steps(steps_path)[0], lim.warmup, lim.max_steps, cfg)
                return bool(m.steady or m.capped)

            ex = _wait(proc, t0, lim.time_limit_s, self.clock, self.sleep, enough)
            stopped = ex is None
            if ex is None:
                ex = proc.stop()
            wall = self.clock() - t0
            rows, peak = read_steps(steps_path)
            m = measure_records(rows, lim.warmup, lim.max_steps, cfg)
            if m.window_rates:
                return TrialResult(trial=trial, status="ok", peak_device_bytes=peak, peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall, **m.summary())
            if stopped and self.clock() - t0 >= lim.time_limit_s * 1e9:
                return TrialResult(trial=trial, status="timeout", message=f"{len(rows)} tracked step(s) within the {lim.time_limit_s:g} s time limit, too few to measure", peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall)
            if ex.signal is not None:
                return _died(trial, ex, d / "log.txt", wall)
            oom = "out of memory" in _tail(d / "log.txt", 20).lower()
            if oom:
                return TrialResult(trial=trial, status="oom", message=_tail(d / "log.txt", 1), peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall)
            tail = _tail(d / "log.txt")
            why = (
                f"the command ended (status {ex.code}) after {len(rows)} tracked step(s); it needs at least "
                f"{lim.warmup + cfg.window_steps} and must iterate its loader through whyidle.track(...)"
            )
            return TrialResult(trial=trial, status="error", message=why + (f": {tail}" if tail and ex.code else ""), peak_host_bytes=ex.peak_rss_bytes, wall_ns=wall)
