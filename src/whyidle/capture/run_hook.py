"""The instrumentation ``whyidle run`` puts into a Python process once it has imported torch.

:func:`activate` (called by :mod:`whyidle.capture.run_boot` right after ``import torch``) installs:

* **step marks**: torch's global optimizer hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``) ends a step at every
  ``optimizer.step()`` of the first optimizer that steps; until an optimizer has stepped (or in a
  program without one), each ``next()`` on a DataLoader iterator ends the step the previous
  batch began. ``next()`` on any DataLoader iterator is timed (the data wait), by wrapping
  ``_BaseDataLoaderIter.__next__`` once for the class;
* **the step tracker** (:class:`whyidle.capture.tracker.StepTracker`, explicit form): every
  step's data wait, compute and samples;
* **a torch.profiler session** over a few steady-state steps: CPU (and CUDA when torch sees a
  GPU) activities, ``with_stack`` and ``record_shapes``, the schedule docs/capture.md recommends
  (wait 5, warm up 2, record 3 steps), started at the first step boundary and stopped when its
  trace is written; or, with ``--window START+LENGTH``, over a time window measured from the
  import of torch (a process that serves requests and never steps an optimizer). With
  ``--window``, global module forward hooks (:mod:`whyidle.capture.run_calls`) also make each
  top-level model call a step in a process without optimizer steps or DataLoader batches: the
  time between two calls is the wait for a request;
* **an exit hook** (``atexit``) that ends the profiler (a partial trace when the program ended,
  or was interrupted, while it recorded) and writes ``<worker>.steps.json`` into the run folder.

Nothing here touches a batch, a tensor or the program's output; a failure stops measuring and is
written into the record (``notes``), never raised into the program. The hook times its own
bookkeeping (``overhead_ns``) so that ``whyidle run`` can print what it cost.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from whyidle.capture.run_env import ENV_DIR, ENV_OPTIONS, STEPS_SUFFIX, HookOptions, note, worker_name

__all__ = ["Recorder", "activate", "is_launcher"]

_ACTIVE: list[Recorder] = []  # the process's recorder: one at most


def is_launcher(argv: list[str]) -> bool:
    """torchrun (or ``python -m torch.distributed.run/launch``) starts the ranks: not a rank itself."""
    if not argv:
        return False
    first = argv[0].replace(os.sep, "/")
    return os.path.basename(first) == "torchrun" or first.endswith(("distributed/run.py", "distributed/launch.py"))


def _in_worker_process() -> bool:
    """A multiprocessing child (a DataLoader worker started with spawn): its parent records."""
    mp = sys.modules.get("multiprocessing")
    try:
        return mp is not None and mp.parent_process() is not None
    except Exception:  # pragma: no cover
        return False


def activate(torch: ModuleType) -> Recorder | None:
    """Instrument this process (see the module docstring); None when it is not one to record."""
    run_dir = os.environ.get(ENV_DIR)
    if not run_dir or _ACTIVE or is_launcher(sys.argv) or _in_worker_process():
        return None
    rec = Recorder(torch, HookOptions.from_json(os.environ.get(ENV_OPTIONS, "")), Path(run_dir))
    rec.install()
    _ACTIVE.append(rec)
    return rec


@dataclass
class _Overhead:
    """The hook's own bookkeeping time, timed by itself, split by whether the profiler was on."""

    outside_ns: int = 0  # steps without a profiler session (before it, after it, or --no-profiler)
    outside_steps: int = 0
    outside_step_ns: list[int] = field(default_factory=list)  # per such step (the first 10,000)
    profiled_ns: int = 0  # steps with one, and the first step (it creates the tracker)


@dataclass
class _State:
    steps: int = 0
    open: bool = False  # a step is open (a batch was delivered, its step not ended)
    samples: int | None = None
    optimizer: Any = None  # weakref to the optimizer whose steps end steps
    where: str = ""
    profiler: str = "off"  # off | waiting | recording | done
    traces: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: bool = False


class Recorder:
    """The hook's state in one process; its methods are what the patched calls invoke."""

    def __init__(self, torch: Any, options: HookOptions, run_dir: Path, clock: Any = time.perf_counter_ns) -> None:
        self.torch = torch
        self.options = options
        self.run_dir = run_dir
        self.clock = clock
        self.pid = os.getpid()
        rank = os.environ.get("RANK")
        self.rank = int(rank) if rank and rank.isdigit() else None
        world = os.environ.get("WORLD_SIZE")
        self.world_size = int(world) if world and world.isdigit() else None
        self.name = worker_name(self.rank, self.pid)
        self.state = _State()
        self.cost = _Overhead()
        self.tracker: Any = None
        self.prof: Any = None
        self._undo: list[Any] = []
        whyidle_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._skip_dirs = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, whyidle_dir + os.sep)
        self.broken = False
        self._step_cost = 0  # the hook's time in the open step
        self.started_ns = clock()  # import torch: --window is measured from here
        self.loader_seen = False  # a DataLoader delivered a batch (its batches are the steps)
        self.model_call_steps = False  # steps are top-level model calls (a serving loop)
        self._last_call_end = 0
        self.backward_ns: dict[int, tuple[int, int]] = {}  # step -> (start, duration) of its last backward
        self.profiled_steps: list[int] = []  # steps the profiler slowed (left out of the tracker's figures)
        self._profiled_step = False  # the profiler was started, stepped or stopped in it

    # -- installing ---------------------------------------------------------------------------------
    def install(self) -> None:
        import importlib

        torch, rec = self.torch, self
        optim = importlib.import_module("torch.optim.optimizer")
        handle = optim.register_optimizer_step_post_hook(lambda opt, args, kwargs: rec.on_optimizer_step(opt))
        self._undo.append(handle.remove)
        base = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
        real_next = base.__next__

        def __next__(it: Any) -> Any:
            t0 = rec.clock()
            rec.before_next(t0)
            batch = real_next(it)
            rec.after_next(it, t0, rec.clock(), batch)
            return batch

        base.__next__ = __next__
        self._undo.append(lambda: setattr(base, "__next__", real_next))
        if (self.world_size or 1) > 1:
            self._time_backward()
        atexit.register(self.finish)
        if self.options.window is not None:
            from whyidle.capture.run_calls import install_model_calls

            self._undo.append(install_model_calls(self))

    def _time_backward(self) -> None:
        """Under torch.distributed: time each step's (last) backward call, which holds DDP's
        gradient all-reduce. The last rank to reach it waits least: the cross-rank report reads
        the straggler from these durations (as ranks.analysis does from collective kernels)."""
        autograd, real, rec = self.torch.autograd, self.torch.autograd.backward, self

        def backward(*args: Any, **kwargs: Any) -> Any:
            t0 = rec.clock()
            try:
                return real(*args, **kwargs)
            finally:
                if os.getpid() == rec.pid and len(rec.backward_ns) < 100_000:
                    rec.backward_ns[rec.state.steps] = (t0, rec.clock() - t0)

        autograd.backward = backward
        self._undo.append(lambda: setattr(autograd, "backward", real))

    def uninstall(self) -> None:
        """Remove every patch (tests; the process's own exit does not need it)."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        atexit.unregister(self.finish)

    # -- the patched calls --------------------------------------------------------------------------
    def before_next(self, t0: int) -> None:
        if self.broken or os.getpid() != self.pid:
            return
        if self.state.optimizer is None and self.state.open:  # no optimizer: a batch ends a step
            self._guard(self._end_step, t0)

    def after_next(self, it: Any, t0: int, t1: int, batch: Any) -> None:
        if self.broken or os.getpid() != self.pid:
            return
        self._guard(self._delivered, it, t0, t1, batch)

    def on_optimizer_step(self, opt: Any) -> None:
        if self.broken or os.getpid() != self.pid:
            return
        t0 = self.clock()
        st = self.state
        if st.optimizer is None:
            st.optimizer = weakref.ref(opt)
        if st.optimizer() is opt:
            self._guard(self._end_step, t0)

    def call_started(self, args: Any) -> None:
        """A top-level model call begins (run_calls): the window's clock; a step opens when the
        process has no other steps (no optimizer stepped, no DataLoader batch)."""
        if self.broken or os.getpid() != self.pid:
            return
        t0 = self.clock()
        self._guard(self.window_tick, t0)
        st = self.state
        if st.optimizer is None and not self.loader_seen:
            self._guard(self._call_started, t0, args)

    def _call_started(self, t0: int, args: Any) -> None:
        from whyidle.capture.tracker_records import batch_samples

        self.model_call_steps = True
        if self.tracker is None and self.options.tracker:
            self._new_tracker(None)
        if self.tracker is not None:
            self.tracker.waited(self._last_call_end or t0, t0)
        self.state.open = True
        self.state.samples = batch_samples(args)
        self._charge(t0)

    def call_ended(self) -> None:
        if self.broken or os.getpid() != self.pid or not (self.model_call_steps and self.state.open):
            return
        if self.state.optimizer is None and not self.loader_seen:
            self._guard(self._end_step, self.clock())
            self._last_call_end = self.clock()

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # stop measuring; the program goes on unchanged
            self.broken = True
            self.state.notes.append(f"whyidle run stopped measuring ({type(exc).__name__}: {exc})")

    # -- steps --------------------------------------------------------------------------------------
    def _delivered(self, it: Any, t0: int, t1: int, batch: Any) -> None:
        from whyidle.capture.tracker_records import batch_samples

        self.loader_seen = True
        if self.tracker is None and self.options.tracker:
            self._new_tracker(_loader_of(it))
        if self.tracker is not None:
            self.tracker.waited(t0, t1)
        self.state.open = True
        self.state.samples = batch_samples(batch)
        self._charge(t1)

    def _new_tracker(self, loader: Any) -> None:
        from whyidle.capture.tracker import track

        self.state.where = self._user_line()
        self.tracker = track(loader, where=self.state.where, clock=self.clock)
        if loader is not None:  # the settings were read off the iterator: name the loader's class
            self.tracker._info = replace(self.tracker._info, kind="DataLoader")

    def _end_step(self, t0: int) -> None:
        st = self.state
        if self.tracker is None and self.options.tracker:
            self._new_tracker(None)
        if self.tracker is not None:
            self.tracker.step(samples=st.samples)
        st.open = False
        st.steps += 1
        if self.options.profiler and self.options.window is None:
            self._profiler_step()
        self.window_tick(t0)
        self._charge(t0, step=True)
        if self.options.steps and st.steps >= self.options.steps and not st.stopped:
            st.stopped = True
            st.notes.append(f"stopped after {st.steps} steps (--steps {self.options.steps}): SIGINT sent to the program")
            signal.raise_signal(signal.SIGINT)

    def _charge(self, t0: int, step: bool = False) -> None:
        """Add the hook's time since ``t0`` to the step's cost; at a step's end, book the step:
        outside the profiler (no session yet or any more, and not the first step, which pays for
        creating the tracker) or with it (started, stepped or stopped in this step)."""
        self._step_cost += self.clock() - t0
        if not step:
            return
        profiled = self._profiled_step or self.state.profiler in ("waiting", "recording")
        if profiled:
            self.profiled_steps.append(self.state.steps - 1)  # the tracker's number of the step
        if profiled or self.state.steps <= 1:
            self.cost.profiled_ns += self._step_cost
        else:
            self.cost.outside_ns += self._step_cost
            self.cost.outside_steps += 1
            if len(self.cost.outside_step_ns) < 10_000:
                self.cost.outside_step_ns.append(self._step_cost)
        self._step_cost, self._profiled_step = 0, False

    def _user_line(self) -> str:
        """The innermost frame outside torch and whyidle: the program's loop (``train.py:42 in main``)."""
        f: Any = sys._getframe(1)
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith(self._skip_dirs) and not name.startswith("<"):
                return f"{os.path.basename(name)}:{f.f_lineno} in {f.f_code.co_name}"
            f = f.f_back
        return ""

    # -- the profiler -------------------------------------------------------------------------------
    def _new_profiler(self, schedule: Any) -> Any:
        tp = self.torch.profiler
        acts = [tp.ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            acts.append(tp.ProfilerActivity.CUDA)
        return tp.profile(activities=acts, schedule=schedule, on_trace_ready=self._trace_ready, with_stack=True, record_shapes=True)

    def _profiler_step(self) -> None:
        st = self.state
        self._profiled_step = st.profiler != "done"
        if st.profiler == "off":
            wait, warmup, active = self.options.schedule
            self.prof = self._new_profiler(self.torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1))
            self.prof.start()
            st.profiler = "waiting"
        elif st.profiler in ("waiting", "recording"):
            self.prof.step()
            wait, warmup, _ = self.options.schedule
            if st.profiler == "waiting" and st.steps > wait + warmup:
                st.profiler = "recording"
        if st.traces and st.profiler != "done":
            self.prof.stop()
            self.prof = None
            st.profiler = "done"

    def _trace_ready(self, prof: Any) -> None:
        path = self.run_dir / "traces" / f"{self.name}.{time.time_ns() // 1_000_000}.pt.trace.json.gz"
        try:
            path.parent.mkdir(exist_ok=True)
            prof.export_chrome_trace(str(path))  # gzipped: the name ends in .gz
            self.state.traces.append(f"traces/{path.name}")
        except Exception as exc:
            self.state.notes.append(f"the profiler's trace could not be written ({type(exc).__name__}: {exc})")

    def window_tick(self, now: int) -> None:
        """``--window START+LENGTH``: start or stop the profiler when the window opens or closes,
        measured from ``import torch``. Called at model calls and step ends, in the program's own
        thread (torch.profiler records the thread that starts it: a timer thread would record
        nothing of the program's)."""
        if self.options.window is None or not self.options.profiler:
            return
        start_s, length_s = self.options.window
        elapsed_s = (now - self.started_ns) / 1e9
        if self.state.profiler == "off" and elapsed_s >= start_s:
            self.prof = self._new_profiler(None)
            self.prof.start()
            self.state.profiler = "recording"
            self._profiled_step = True
        elif self.state.profiler == "recording" and elapsed_s >= start_s + length_s:
            self._stop_window()
            self._profiled_step = True

    def _stop_window(self) -> None:
        if self.state.profiler == "recording" and self.prof is not None:
            self.prof.stop()  # without a schedule, stop() hands the trace to _trace_ready
            self.prof = None
            self.state.profiler = "done"

    # -- the end ------------------------------------------------------------------------------------
    def finish(self) -> None:
        """At exit: end the profiler (a trace of what it recorded) and write the record."""
        if os.getpid() != self.pid:
            return
        st = self.state
        try:
            with warnings.catch_warnings():  # the program's stderr stays its own
                warnings.simplefilter("ignore")
                self._stop_profiler()
        except Exception as exc:
            st.notes.append(f"the profiler could not be stopped ({type(exc).__name__}: {exc})")
        self.write()

    def _stop_profiler(self) -> None:
        st = self.state
        if self.options.window is not None:
            self._stop_window()
        elif self.prof is not None and st.profiler in ("waiting", "recording"):
            self.prof.stop()  # in its recording steps: torch writes what it recorded
            self.prof = None
            if not st.traces:
                wait, warmup, active = self.options.schedule
                st.notes.append(
                    f"the program ended after {st.steps} steps, before the profiler recorded (wait {wait}, warm up {warmup}, record {active} steps): no trace"
                )

    def record(self) -> dict[str, Any]:
        """What this process recorded, as JSON data (``<worker>.steps.json``)."""
        stats = None
        if self.tracker is not None:
            import msgspec

            stats = msgspec.to_builtins(self._tracker_stats())
        return {
            "version": 1,
            "pid": self.pid,
            "rank": self.rank,
            "world_size": self.world_size,
            "argv": list(sys.argv),
            "options": asdict(self.options),
            "steps": self.state.steps,
            "step_source": self._step_source(),
            "where": self.state.where,
            "profiler": self.state.profiler,
            "traces": list(self.state.traces),
            "overhead": asdict(self.cost),
            "notes": list(self.state.notes),
            "tracker": stats,
            "backward": [[k, *v] for k, v in sorted(self.backward_ns.items())],
        }

    def _tracker_stats(self) -> Any:
        """The tracker's steps without those the profiler ran in (its start-up, recording and
        export slow them; the trace covers them), unless no other step is left."""
        stats = self.tracker.stats(wait=True)
        if self.model_call_steps:
            stats = replace(stats, waits_for="request")
        profiled = set(self.profiled_steps)
        keep = tuple(s for s in stats.steps if s.number not in profiled)
        if keep and len(keep) < len(stats.steps):
            n = len(stats.steps) - len(keep)
            note = f"{n} step(s) with the profiler on are left out of the step figures (the profiler's trace covers them)"
            stats = replace(stats, steps=keep, notes=(*stats.notes, note))
        return stats

    def _step_source(self) -> str:
        if self.state.optimizer is not None:
            return "optimizer.step()"
        if self.model_call_steps:
            return "model calls (no optimizer step, no DataLoader: a serving loop)"
        return "DataLoader batches" if self.state.steps else ""

    def write(self) -> None:
        st = self.state
        if not (st.steps or st.traces or st.notes):
            return  # imported torch, never stepped: nothing to say (e.g. a helper process)
        try:
            data = json.dumps(self.record())
            tmp = self.run_dir / f".{self.name}{STEPS_SUFFIX}.tmp"
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, self.run_dir / f"{self.name}{STEPS_SUFFIX}")
        except Exception as exc:
            note(f"{self.name}: the record could not be written ({type(exc).__name__}: {exc})")


def _loader_of(it: Any) -> Any:
    """The settings of the DataLoader behind an iterator, for LoaderInfo (the iterator keeps them)."""
    sampler = getattr(it, "_index_sampler", None)
    return SimpleNamespace(
        num_workers=getattr(it, "_num_workers", None),
        pin_memory=getattr(it, "_pin_memory", None),
        batch_size=getattr(sampler, "batch_size", None),
        prefetch_factor=getattr(it, "_prefetch_factor", None),
        persistent_workers=getattr(it, "_persistent_workers", None),
    )
