"""Run one flaw of the lab end to end: train, measure, diagnose, self-check.

On CUDA the check reads the trace's diagnosis (the profiler saw the device); on CPU it reads the
step tracker's report, and flaws a CPU cannot show are refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec.structs

from whyidle.capture import require_torch
from whyidle.capture.tracker_report import report_from_tracker
from whyidle.config import Config
from whyidle.errors import CaptureError, UsageError
from whyidle.findings.model import DiagnosisData
from whyidle.lab.check import CPU_FLAWS, GPU_ONLY, CheckResult, check_report
from whyidle.lab.job import LabRun, LabSpec, run_job, spec_for

__all__ = ["LabResult", "run_lab", "pick_device", "lab_report"]


@dataclass(frozen=True)
class LabResult:
    run: LabRun
    tracker_report: DiagnosisData | None
    trace_report: DiagnosisData | None
    check: CheckResult

    @property
    def report(self) -> DiagnosisData:
        """The report the check read, with the lab's context in ``extra['lab']``."""
        base = self.trace_report if self.check.basis == "trace" and self.trace_report is not None else self.tracker_report
        assert base is not None
        return lab_report(base, self)

    @property
    def samples_per_s(self) -> float | None:
        st = self.run.tracker_stats
        return st.samples_per_s if st is not None else None


def lab_report(base: DiagnosisData, res: LabResult) -> DiagnosisData:
    s = res.run.spec
    lab = {
        "flaw": s.flaw,
        "device": s.device,
        "check": {"passed": res.check.passed, "expected": list(res.check.expected), "found": list(res.check.found), "basis": res.check.basis, "message": res.check.message},
        "job": {"batch_size": s.batch_size, "width": s.width, "depth": s.depth, "steps": s.steps, "io_latency_s": s.io_latency_s, **s.loader_kwargs()},
        "samples_per_s": res.samples_per_s,
        "trace": str(res.run.trace_path) if res.run.trace_path else None,
        "losses": res.run.losses,
    }
    return msgspec.structs.replace(base, extra={**base.extra, "lab": lab})


def pick_device(requested: str = "auto") -> str:
    torch = require_torch("whyidle lab")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda: torch sees no CUDA device here; use cpu or auto", field="device")
    if requested not in ("cpu", "cuda"):
        raise UsageError(f"device {requested!r}: expected auto, cpu or cuda", field="device")
    return requested


def run_lab(
    flaw: str,
    device: str = "auto",
    *,
    steps: int | None = None,
    trace_dir: str | Path | None = None,
    spec: LabSpec | None = None,
    config: Config | None = None,
) -> LabResult:
    dev = pick_device(device)
    if dev == "cpu" and flaw not in CPU_FLAWS:
        raise UsageError(f"flaw {flaw!r} needs CUDA: {GPU_ONLY[flaw]}; on CPU the lab shows {', '.join(CPU_FLAWS)}")
    spec = spec or spec_for(flaw, dev, steps=steps)
    run = run_job(spec, trace_dir=trace_dir)
    tracker_report = report_from_tracker(run.tracker_stats, config) if run.tracker_stats is not None and run.tracker_stats.steps else None
    trace_report = run.trace_report
    if dev == "cuda" and trace_report is not None:
        chk = check_report(flaw, trace_report, "trace")
    elif tracker_report is not None:
        chk = check_report(flaw, tracker_report, "tracker")
    else:  # pragma: no cover - the lab always tracks
        raise CaptureError("the lab run produced neither a trace nor tracker stats")
    return LabResult(run, tracker_report, trace_report, chk)
