"""The trial process: ``python -m whyidle.sweep.child REQUEST.json RESULT.json``.

Runs in a fresh interpreter for each trial, so a crash, a hang or an out-of-memory error ends
this process only. It loads the user's ``module:function``, calls it with the :class:`Trial`,
measures the :class:`Workload` (sweep/measure.py) and writes a :class:`TrialResult` as JSON.
An out-of-memory error is a result (status ``oom``: the memory edge), any other exception is
status ``error`` with its one-line message; both still write the result file. A process that
dies without writing one (killed by a signal, ``os._exit``) is recorded by the parent.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from whyidle.config import SweepConfig
from whyidle.sweep.trial import _SCALERS, Trial, TrialResult, Workload

__all__ = ["Request", "load_target", "run_request", "is_oom"]


class Request(msgspec.Struct, kw_only=True):
    target: str  # "path/to/file.py:make" or "package.module:make"
    trial: Trial
    warmup: int
    max_steps: int
    budget_ns: int  # measuring stops once this much time has passed since the trial started
    config: SweepConfig


def load_target(target: str) -> Any:
    """The callable named by ``file.py:function`` or ``module:function``."""
    mod_name, sep, fn_name = target.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(f"{target!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION")
    if mod_name.endswith(".py") or os.sep in mod_name:
        path = Path(mod_name).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{mod_name}: no such file")
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a spec
            raise ImportError(f"{mod_name}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(mod_name)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"{mod_name} has no function {fn_name!r}")
    return fn


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error from torch (CUDA or CPU allocator) or Python."""
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _setup_torch(trial: Trial) -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(trial.seed)
    if trial.precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    if trial.compile != "off":
        torch._dynamo.reset()
        _watch_recompiles(torch)
    return torch


_RECOMPILES: list[str] = []


def _watch_recompiles(torch: Any) -> None:
    """Collect dynamo's recompilation messages (its "recompiles" log artifact) for the result."""
    import logging

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _RECOMPILES.append(record.getMessage())

    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(_Collect())


def _uses_cuda(torch: Any, trial: Trial) -> bool:
    if torch is None or not torch.cuda.is_available():
        return False
    return trial.device == "auto" or trial.device.startswith("cuda")


def _losses(raw: list[Any], torch: Any) -> tuple[list[float], int]:
    vals: list[float] = []
    for v in raw:
        if v is None:
            return [], 0
        if torch is not None and isinstance(v, torch.Tensor):
            vals.append(float(v.detach().float().cpu().item()))
        else:
            vals.append(float(v))
    bad = sum(1 for v in vals if v != v or v in (float("inf"), float("-inf")))
    return vals, bad


def _scaler_skips() -> int | None:
    counts = [getattr(s, "_whyidle_skipped", None) for s in _SCALERS if s.is_enabled()]
    known = [c() for c in counts if c is not None]
    return sum(known) if known else None


def _dynamo(torch: Any) -> dict[str, Any]:
    from torch._dynamo.utils import counters

    c: Any = counters
    breaks: dict[str, int] = dict(c.get("graph_break", {}))
    reasons = sorted({str(k).strip().splitlines()[0] for k in breaks})
    reasons_rc = sorted({ln.strip().lstrip("- ") for m in _RECOMPILES for ln in m.splitlines()[2:] if ln.strip()})
    return {
        "recompilations": len(_RECOMPILES),
        "recompile_reasons": reasons_rc[:10],
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": reasons[:10],
        "compiled_graphs": int(c.get("stats", {}).get("unique_graphs", 0)),
    }


def run_request(req: Request, clock: Any = time.perf_counter_ns) -> TrialResult:
    """Build and measure the trial in this process; failures become a result, never a raise."""
    from whyidle.sweep.measure import cycle, measure_workload

    t0 = clock()
    torch = None
    cuda = False
    fields: dict[str, Any] = {}
    try:
        torch = _setup_torch(req.trial)
        cuda = _uses_cuda(torch, req.trial)
        make = load_target(req.target)
        wl = make(req.trial)
        if not isinstance(wl, Workload):
            raise TypeError(f"{req.target} returned {type(wl).__name__}; expected whyidle.Workload(step=..., loader=...)")
        fields["setup_ns"] = clock() - t0
        sync = torch.cuda.synchronize if cuda and torch is not None else (lambda: None)
        m = measure_workload(
            wl.step,
            cycle(wl.loader),
            wl.samples_per_step,
            warmup=req.warmup,
            max_steps=req.max_steps,
            budget_ns=req.budget_ns - (clock() - t0),
            cfg=req.config,
            clock=clock,
            sync=sync,
        )
        fields.update(m.summary())
        if not m.window_rates:
            raise RuntimeError(f"no measured window: the loader ran out after {m.warmup_steps + m.steps} step(s)")
        losses, bad = _losses(m.losses, torch)
        fields.update(losses=losses, nonfinite_losses=bad, scaler_skipped_steps=_scaler_skips())
        if req.trial.compile != "off" and torch is not None:
            fields.update(_dynamo(torch))
        status: str = "ok"
    except BaseException as exc:  # the result file must be written whatever happened
        if isinstance(exc, KeyboardInterrupt):
            raise
        status = "oom" if is_oom(exc) else "error"
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        fields["message"] = f"{type(exc).__name__}: {first}"
    if cuda and torch is not None:
        try:
            fields["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
        except Exception:  # pragma: no cover - CUDA in a broken state after an error
            pass
    fields["peak_host_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    fields["wall_ns"] = clock() - t0
    return TrialResult(trial=req.trial, status=status, **fields)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    req_path, res_path = argv[1], argv[2]
    req = msgspec.json.decode(Path(req_path).read_bytes(), type=Request)
    res = run_request(req)
    tmp = res_path + ".tmp"
    Path(tmp).write_bytes(msgspec.json.encode(res))
    os.replace(tmp, res_path)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a subprocess by sweep/runner.py
    sys.stdout.flush()
    rc = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # DataLoader workers and compile threads need no orderly teardown
