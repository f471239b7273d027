"""The diagnosis of a ``whyidle run`` of one process: the profiler's trace or the step tracker's steps.

Which report leads: the trace's diagnosis when its device was busy at all (a CUDA run: the gaps,
their causes and the Python lines before them); otherwise, on CPU where the trace has no device
to be idle, the step tracker's report (its "device" is the host, its starvation finding names
the program's loop). The other is still in the run folder. The lines around the report
(:func:`summary_lines`) say what was recorded, what was switched on, and the hook's overhead.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import msgspec.structs

from whyidle.capture.launch import Launched, ProcessRecord
from whyidle.capture.tracker_records import TrackerStats
from whyidle.config import Config
from whyidle.diagnosis import Diagnosis

__all__ = ["RunDiagnosis", "diagnose_process", "main_record", "overhead_line", "summary_lines", "nsys_command"]


@dataclass
class RunDiagnosis:
    """The report to print and save, which input it came from, and the other one (if any)."""

    report: Diagnosis | None
    basis: str  # "trace" | "tracker" | ""
    trace: Path | None = None
    notes: list[str] = field(default_factory=list)


def main_record(records: Sequence[ProcessRecord]) -> ProcessRecord | None:
    """The process the report is about: rank 0, else the one with the most steps."""
    if not records:
        return None
    ranked = [r for r in records if r.rank == 0]
    return ranked[0] if ranked else max(records, key=lambda r: r.steps)


def _on_lines(rec: ProcessRecord) -> list[str]:
    d = rec.data
    opts = d.get("options") or {}
    wait, warmup, active = (opts.get("schedule") or (5, 2, 3))[:3]
    window = opts.get("window")
    prof = (
        "off (--no-profiler)"
        if not opts.get("profiler", True)
        else (f"a time window ({window[0]:g} s after import torch, for {window[1]:g} s)" if window else f"wait {wait}, warm up {warmup}, record {active} steps")
    )
    return [
        f"whyidle run: steps from {d.get('step_source') or 'nothing (no optimizer step, no DataLoader batch)'}",
        f"whyidle run: step tracker {'on' if opts.get('tracker', True) else 'off (--no-tracker)'}; profiler {prof}",
    ]


def tracker_report(rec: ProcessRecord, config: Config | None = None) -> Diagnosis | None:
    """The step tracker's report from a process record (None when the tracker was off)."""
    from whyidle.capture.tracker_report import report_from_tracker

    raw = rec.data.get("tracker")
    if not raw:
        return None
    stats = msgspec.convert(raw, TrackerStats)
    notes = (*stats.notes, *_on_lines(rec), *(f"whyidle run: {n}" for n in rec.data.get("notes") or ()))
    stats = replace(stats, notes=notes)
    d = report_from_tracker(stats, config)
    argv = " ".join(rec.data.get("argv") or ())
    src = msgspec.structs.replace(d.source, path=f"whyidle run: {argv} ({rec.name})", rank=rec.rank, world_size=rec.data.get("world_size"))
    return msgspec.structs.replace(d, source=src)


def diagnose_process(rec: ProcessRecord, run_dir: Path, config: Config | None = None) -> RunDiagnosis:
    """The report for one process: its trace's diagnosis when the device was busy, else its tracker's."""
    from whyidle.pipeline import diagnose

    out = RunDiagnosis(None, "")
    traces = [run_dir / t for t in rec.data.get("traces") or ()]
    if traces and traces[-1].is_file():
        out.trace = traces[-1]
        try:
            d = diagnose(out.trace, config)
            if not d.no_device_activity:
                out.report, out.basis = d, "trace"
                return out
            out.notes.append(f"the profiler's trace ({out.trace.name}) has no GPU activity: the report is the step tracker's")
        except Exception as exc:  # a partial trace (interrupted while writing): say so, use the tracker
            out.notes.append(f"the profiler's trace {out.trace.name} could not be diagnosed ({type(exc).__name__}: {exc})")
    out.report = tracker_report(rec, config)
    out.basis = "tracker" if out.report is not None else ""
    return out


def overhead_line(rec: ProcessRecord) -> str:
    """The hook's own cost outside the profiled steps: the median per step (a preempted step on a
    busy machine moves the mean, not the median), the mean, and the median against the median step."""
    cost = rec.data.get("overhead") or {}
    n = int(cost.get("outside_steps") or 0)
    per_step = cost.get("outside_step_ns") or ()
    if not n or not per_step:
        return "whyidle run: overhead not measured (no step outside the profiled ones)"
    median_us = statistics.median(per_step) / 1000
    mean_us = cost.get("outside_ns", 0) / n / 1000
    steps = ((rec.data.get("tracker") or {}).get("steps")) or ()
    durations = [s["end_ns"] - s["start_ns"] for s in steps if isinstance(s, dict)]
    share = ""
    if durations and statistics.median(durations) > 0:
        step_us = statistics.median(durations) / 1000
        share = f" = {100 * median_us / step_us:.3f}% of the median step ({step_us / 1000:.1f} ms)"
    return (
        f"whyidle run: overhead outside the profiled steps {median_us:.1f} us per step{share}; mean {mean_us:.1f} us "
        f"over {n} steps (the hook's bookkeeping, timed by itself)"
    )


def nsys_command(cmd: Sequence[str]) -> str | None:
    """The Nsight Systems command to run instead, when ``nsys`` is on the PATH."""
    if shutil.which("nsys") is None:
        return None
    import shlex

    return f"nsys profile -t cuda,nvtx,osrt -o whyidle-run -- {shlex.join(cmd)}   # then: whyidle diagnose whyidle-run.nsys-rep"


def summary_lines(launched: Launched, cmd: Sequence[str], main: ProcessRecord | None) -> list[str]:
    """What was recorded, in a few lines (before the report)."""
    lines: list[str] = []
    status = launched.returncode
    lines.append(f"whyidle run: {cmd[0]} exited with status {status} after {launched.wall_s:.1f} s" + (" (interrupted)" if launched.interrupted else ""))
    if main is None:
        lines.append("whyidle run: no Python process of the command imported torch and stepped: the start-up hook recorded nothing")
        nsys = nsys_command(cmd)
        lines.append(f"whyidle run: for a CUDA program that is not PyTorch, run it under Nsight Systems: {nsys}" if nsys else "whyidle run: for a CUDA program that is not PyTorch, install Nsight Systems and run it under `nsys profile`, then `whyidle diagnose` its report")
    else:
        d = main.data
        lines.append(f"whyidle run: {main.name} recorded {main.steps} steps" + (f", loop at {d['where']}" if d.get("where") else ""))
        lines += _on_lines(main)
        lines.append(overhead_line(main))
    lines += [f"whyidle run: {n}" for n in launched.notes]
    return lines
