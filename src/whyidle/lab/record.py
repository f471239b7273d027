"""Record every lab flaw on a GPU: the real-hardware fixtures for tests/data/ (CUDA only).

``whyidle lab --record-all DIR`` (or scripts/record_lab_traces.sh) runs each flaw with the
profiler, saves its trace gzipped as ``DIR/lab_<flaw>.pt.trace.json.gz`` (few active steps, so
each stays under ``MAX_TRACE_BYTES``), checks the diagnosis of each, checks that the step tracker
adds no host sync (PyTorch's sync debug mode set to "error" around a tracked loop), and writes
``DIR/RECORDED.md``: how, where and when they were recorded, with each check's outcome.
"""

from __future__ import annotations

import datetime
import platform
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whyidle.capture import require_torch
from whyidle.errors import UsageError
from whyidle.lab.job import FLAWS

__all__ = ["MAX_TRACE_BYTES", "Recorded", "record_all", "tracker_adds_no_sync"]

# The budget for a committed fixture: small enough for the repository and for CI.
MAX_TRACE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Recorded:
    name: str
    passed: bool
    message: str
    path: Path | None = None
    size_bytes: int = 0


def tracker_adds_no_sync(torch: Any, steps: int = 20) -> Recorded:
    """A tracked loop of device work under sync debug mode "error": any tracker sync would raise."""
    from whyidle.capture.tracker import track

    dev = torch.device("cuda")
    w = torch.randn(1024, 1024, device=dev)
    host = [torch.randn(256, 1024).pin_memory() for _ in range(steps)]
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("error")
        try:
            tr = track(host, skip_first=0)
            for b in tr:
                with tr.copy():
                    x = b.to(dev, non_blocking=True)
                for _ in range(4):
                    x = torch.relu(x @ w)
        finally:
            torch.cuda.set_sync_debug_mode(prev)
    st = tr.stats()  # reading the last marks may wait for the device: allowed here, after the loop
    ours = [str(m.message) for m in ws if "whyidle" in str(m.message)]
    timed = sum(1 for s in st.steps if s.device_ns is not None)
    ok = not tr.broken and not ours and timed == len(st.steps) == steps
    msg = (
        f"{steps} tracked steps under sync debug mode 'error': no sync, device time read for all {timed}"
        if ok
        else f"tracker broken={tr.broken}, warnings={ours}, device time for {timed}/{len(st.steps)} steps"
    )
    return Recorded("tracker adds no host sync", ok, msg)


def record_all(out_dir: str | Path, flaws: tuple[str, ...] = FLAWS) -> list[Recorded]:
    torch = require_torch("whyidle lab --record-all")
    if not torch.cuda.is_available():
        raise UsageError("--record-all needs CUDA: the fixtures are recordings of real device activity, and torch sees no GPU here")
    from whyidle.lab.run import run_lab

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: list[Recorded] = []
    for flaw in flaws:
        with tempfile.TemporaryDirectory(prefix=f"whyidle-rec-{flaw}-") as tmp:
            try:
                res = run_lab(flaw, "cuda", trace_dir=tmp)
            except Exception as exc:
                results.append(Recorded(flaw, False, f"the run failed: {type(exc).__name__}: {exc}"))
                continue
            if res.run.trace_path is None:
                results.append(Recorded(flaw, False, "no trace was produced"))
                continue
            dest = out / f"lab_{flaw}.pt.trace.json.gz"
            shutil.copyfile(res.run.trace_path, dest)
            size = dest.stat().st_size
            ok = res.check.passed and size <= MAX_TRACE_BYTES
            msg = res.check.message + (f"; trace is {size / 2**20:.2f} MiB, over the {MAX_TRACE_BYTES / 2**20:.0f} MiB budget" if size > MAX_TRACE_BYTES else "")
            sps = res.samples_per_s
            msg += f"; tracker: {sps:.0f} samples/s" if sps else ""
            results.append(Recorded(flaw, ok, msg, dest, size))
    try:
        results.append(tracker_adds_no_sync(torch))
    except Exception as exc:
        results.append(Recorded("tracker adds no host sync", False, f"{type(exc).__name__}: {exc}"))
    _write_note(torch, out, results)
    return results


def _write_note(torch: Any, out: Path, results: list[Recorded]) -> None:
    from whyidle import __version__

    gpu = torch.cuda.get_device_name(0)
    cap = ".".join(map(str, torch.cuda.get_device_capability(0)))
    lines = [
        "# Lab traces recorded on a GPU",
        "",
        f"Recorded {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with `whyidle lab --record-all` "
        f"(whyidle {__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}) "
        f"on {gpu} (compute capability {cap}).",
        "",
        "Each trace is `torch.profiler` (CPU + CUDA activities, with_stack, record_shapes) over the lab job of",
        "`whyidle/lab/job.py` with one injected flaw: 1 warm-up and 3 active steps after the tracked steps.",
        "These are real recordings; nothing in them is generated.",
        "",
        "| check | passed | result | size |",
        "|---|---|---|---|",
    ]
    for r in results:
        size = f"{r.size_bytes / 1024:.0f} KiB" if r.size_bytes else ""
        lines.append(f"| {r.name} | {'yes' if r.passed else 'NO'} | {r.message} | {size} |")
    (out / "RECORDED.md").write_text("\n".join(lines) + "\n")
