"""The JSON report: a stable, versioned schema for scripts and CI (see docs/json-schema.md).

Times are integer nanoseconds (``*_ns``), fractions are 0..1 (``*_fraction``, ``share_*``).
Fields are only added within a major schema version, never renamed or removed.
"""

from __future__ import annotations

import os
import re
from typing import Any

import msgspec
import numpy as np

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.strip import BUSY_CLASSES
from whyidle.findings.model import DiagnosisData, Finding, GapColumns, GapRecord, Prediction

__all__ = ["SCHEMA_VERSION", "report_to_dict", "render_json", "dumps", "to_dict"]

SCHEMA_VERSION = "1.0"


def _pct(values: np.ndarray, q: float) -> int | None:
    return int(np.percentile(values, q, method="nearest")) if values.size else None


def _prediction(p: Prediction | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "lever": p.lever,
        "assumption": p.assumption,
        "step_ns_before": p.step_ns_before,
        "step_ns_after": p.step_ns_after,
        "step_ns_range": [p.step_ns_low, p.step_ns_high],
        "batch_factor": p.batch_factor,
        "samples_per_s_before": p.samples_per_s_before,
        "samples_per_s_after": p.samples_per_s_after,
        "speedup": p.speedup,
        "recovered_share": p.recovered_share,
        "recommended": p.recommended,
        "note": p.note,
    }


def _finding(f: Finding) -> dict[str, Any]:
    e = f.evidence
    return {
        "id": f.id,
        "group": f.group,
        "cause": f.cause,
        "variant": f.variant,
        "title": f.title,
        "idle_ns": f.idle_ns,
        "share_of_idle": f.share_of_idle,
        "share_of_window": f.share_of_window,
        "affected_busy_ns": f.affected_busy_ns,
        "compute_wait_ns": f.compute_wait_ns,
        "est_saving_ns": f.est_saving_ns,
        "upper_bound": True,
        "evidence": {
            "gap_count": e.gap_count,
            "idle_ns": e.idle_ns,
            "per_step_idle_ns": e.per_step_idle_ns,
            "share_of_step": e.share_of_step,
            "top_ops": [{"name": n, "overlap_ns": ns, "gaps": k} for n, ns, k in e.top_ops],
            "python_lines": [{"line": ln, "gaps": k} for ln, k in e.python_lines],
            "examples": [{"start_ns": s, "end_ns": t, "idle_ns": ns} for s, t, ns in e.examples],
            "facts": {k: v for k, v in e.facts},
        },
        "prediction": _prediction(f.prediction),
        "fix": {
            "summary": f.fix.summary,
            "steps": list(f.fix.steps),
            "code": f.fix.code,
            "verify": f.fix.verify,
            "expected": f.fix.expected,
            "docs": f.fix.docs,
        },
    }


def _gap(g: GapRecord) -> dict[str, Any]:
    return {
        "start_ns": g.start_ns,
        "end_ns": g.end_ns,
        "dur_ns": g.dur_ns,
        "device": g.device,
        "group": g.group,
        "cause": g.cause,
        "causes_ns": {k: v for k, v in g.causes_ns},
        "next_work": g.next_work,
        "thread": g.thread,
        "cpu_before": g.before,
        "cpu_during": g.during,
        "cpu_outermost": g.outermost,
        "cpu_innermost": g.innermost,
        "runtime_call": g.runtime_call,
        "python_line": g.python_line,
        "drained_by_sync": g.drained_by_sync,
    }


def counters_to_dict(a: Any) -> dict[str, Any]:
    """The counter section: per GPU, time-weighted distributions and the burst/pause rhythm."""
    from whyidle.findings.counter_rules import explanations_for

    metrics = [d.metric for g in a.gpus for d in g.distributions]
    return {
        "source_format": a.source_format,
        "path": a.path,
        "clock": a.clock,
        "interval_ns": a.interval_ns,
        "joined_with_trace": a.joined,
        "notes": list(a.notes),
        "gpus": [
            {
                "gpu": g.gpu,
                "name": g.name,
                "start_ns": g.start_ns,
                "end_ns": g.end_ns,
                "busy_ns": int(g.busy_ns),
                "busy_basis": g.busy_basis,
                "underfilled_ns": g.underfilled_ns,
                "pcie_rx_pause_over_burst": g.pcie_rx_pause_ratio,
                "idle_ns": g.idle_ns,
                "pause_idle_ns": g.pause_idle_ns,
                "host_cpu_pause_pct": g.host_cpu_pause_pct,
                "host_cpu_burst_pct": g.host_cpu_burst_pct,
                "distributions": _dist_dict(g.distributions),
                "pattern": None
                if g.pattern is None
                else {
                    "basis": g.pattern.basis,
                    "busy_threshold_pct": g.pattern.busy_min_pct,
                    "duty_cycle": g.pattern.duty_cycle,
                    "period_ns": g.pattern.period_ns,
                    "regularity": g.pattern.regularity,
                    "regular": g.pattern.regular,
                    "pauses": g.pattern.pauses,
                    "mean_pause_ns": g.pattern.mean_pause_ns,
                },
                "interval_ns": g.interval_ns,
                "has_sm_active": g.has_sm_active,
            }
            for g in a.gpus
        ],
        "host": _dist_dict(a.host),
        "explanations": {m: text for m, text in explanations_for(metrics)},
    }


def _counter_basis(a: Any) -> str:
    from whyidle.findings.counter_rules import busy_basis_words

    return busy_basis_words(a)


def _dist_dict(ds: Any) -> dict[str, Any]:
    return {
        d.metric: {"unit": d.unit, "samples": d.samples, "covered_ns": d.covered_ns, "mean": d.mean, "p5": d.p5, "p50": d.p50, "p95": d.p95, "min": d.min, "max": d.max}
        for d in ds
    }


def _source_dict(r: DiagnosisData) -> Any:
    return {
        "path": r.source.path,
        "format": r.source.format,
        "version": r.source.version,
        "devices": list(r.source.devices),
        "rank": r.source.rank,
        "world_size": r.source.world_size,
        "workload": r.source.workload or ("training" if r.source.training else "inference"),
        "workload_evidence": list(r.source.workload_evidence),
    }


def _utilization_dict(r: DiagnosisData) -> Any:
    u = r.utilization
    return {
        "basis": (
            f"counters: {_counter_basis(r.counters)}, summed over GPUs"
            if r.window.basis == "counter log" and r.counters is not None
            else "device: union of busy time over all streams, per device, summed over devices"
        ),
        "n_devices": u.n_devices,
        "busy_fraction": u.busy_fraction,
        "kernel_busy_fraction": u.kernel_busy_fraction,
        "busy_ns": u.busy_ns,
        "kernel_busy_ns": u.kernel_busy_ns,
        "compute_ns": u.compute_ns,
        "communication_exposed_ns": u.communication_ns,
        "communication_total_ns": u.communication_total_ns,
        "memcpy_ns": u.memcpy_ns,
        "memset_ns": u.memset_ns,
        "idle_ns": u.idle_ns,
    }


def _steps_list(r: DiagnosisData) -> Any:
    u = r.utilization
    return [
        {
            "number": s.number,
            "start_ns": s.start_ns,
            "end_ns": s.end_ns,
            "duration_ns": s.duration_ns,
            "compute_ns": s.compute_ns,
            "communication_ns": s.communication_ns,
            "memcpy_ns": s.memcpy_ns,
            "memset_ns": s.memset_ns,
            "idle_ns": s.idle_ns,
            "idle_by_cause_ns": {c.key: int(v) for c, v in zip(C.CAUSES, s.idle_by_cause_ns) if v},
        }
        for s in u.steps
    ]


def _kernels_dict(r: DiagnosisData) -> Any:
    k = r.kernels
    return {
        "count": k.count,
        "total_ns": k.total_ns,
        "median_ns": k.median_ns,
        "short_count": k.short_count,
        "short_ns": k.short_ns,
        "short_share": k.short_share,
        "mean_launch_call_ns": k.mean_launch_ns,
        "est_sm_efficiency": k.sm_efficiency,
        "est_achieved_occupancy_pct": k.achieved_occupancy_pct,
        "tensor_core_share": k.tensor_core_share,
        "fp32_math_share": k.fp32_math_share,
        "fill": msgspec.to_builtins(k.fill) if k.fill is not None else None,
        "tensor_core_ns": k.tensor_core_ns,
        "fp32_math_ns": k.fp32_math_ns,
        "top_fp32_kernels": [{"name": n, "ns": ns} for n, ns in k.top_fp32_kernels],
    }


def report_to_dict(r: DiagnosisData, columns: bool = False) -> dict[str, Any]:
    u = r.utilization
    times = u.step_times_ns
    by_group = r.idle_by_group_ns
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "whyidle", "version": __version__},
        "source": _source_dict(r),
        "window": {
            "start_ns": r.window.start_ns,
            "end_ns": r.window.end_ns,
            "duration_ns": r.window.duration_ns,
            "basis": r.window.basis,
            "steps": list(r.window.steps),
            "all_steps": list(r.window.all_steps),
        },
        "utilization": _utilization_dict(r),
        "throughput": {
            "steps_per_s": u.steps_per_s,
            "samples_per_s": u.samples_per_s,
            "batch_size": u.batch_size,
            "batch_size_basis": u.batch_size_basis,
        },
        "step_time": {
            "count": int(times.size),
            "mean_ns": float(times.mean()) if times.size else None,
            "p50_ns": _pct(times, 50),
            "p95_ns": _pct(times, 95),
            "max_ns": int(times.max()) if times.size else None,
        },
        "steps": _steps_list(r),
        "kernels": _kernels_dict(r),
        "advice_context": msgspec.to_builtins(r.advice) if r.advice is not None else None,
        "idle_ns": r.idle_ns,
        "idle_by_group_ns": by_group,
        "idle_by_cause_ns": {key: v for key, v in r.idle_by_cause_ns.items() if v},
        "capture_artifacts_ns": r.artifact_idle_ns,
        "gap_count": r.gap_count,
        "findings": [_finding(f) for f in r.findings],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in r.skipped],
        "gaps": [_gap(g) for g in r.gaps],
        "quality": list(r.quality),
        "cold_start": r.cold_start,
        "no_device_activity": r.no_device_activity,
        **({"extra": r.extra} if r.extra else {}),
        **({"counters": counters_to_dict(r.counters)} if r.counters is not None else {}),
        # Every gap and the busy intervals: large (1 MB for a 35 MB trace), so only on request
        # (columns=True, `--full-json`); a report without them renders the same terminal report.
        "detail": "full" if columns else "summary",
        **({"lanes": [_lane(ln) for ln in r.lanes]} if r.lanes and columns else {}),
        **({"gap_columns": gap_columns_to_dict(r.gap_columns)} if r.gap_columns is not None and columns else {}),
        **({"activity": [_activity(a) for a in r.activity]} if r.activity is not None and columns else {}),
        **({"name_times": _name_times(r.name_times)} if r.name_times is not None else {}),
        **({"work": msgspec.to_builtins(r.work)} if r.work is not None else {}),
    }


def _name_times(n: Any) -> dict[str, Any]:
    # sorted by name: the analysis builds these dicts in an order that may vary between runs
    return {"steps": n.steps, "window_ns": n.window_ns, "kernels_ns": dict(sorted(n.kernels_ns.items())), "ops_ns": dict(sorted(n.ops_ns.items()))}


def _lane(ln: Any) -> dict[str, Any]:
    return {"kind": ln.kind.value, "device": ln.device, "pid": ln.pid, "tid": ln.tid, "name": ln.name}


def gap_columns_to_dict(g: GapColumns) -> dict[str, Any]:
    """Every gap as columns (lists of equal length; names index ``strings``, -1 is none)."""
    return {
        "count": len(g),
        "start_ns": g.start_ns.tolist(),
        "end_ns": g.end_ns.tolist(),
        "device": g.device.tolist(),
        "causes_ns": {c.key: g.causes_ns[:, i].tolist() for i, c in enumerate(C.CAUSES) if len(g) and g.causes_ns[:, i].any()},
        "drained_by_sync": g.drained_by_sync.astype(np.int8).tolist(),
        "host_end_ns": g.host_end_ns.tolist(),
        "thread": g.thread.tolist(),
        "next_work": g.next_work.tolist(),
        "cpu_op": g.op.tolist(),
        "cpu_op_start_ns": g.op_start_ns.tolist(),
        "cpu_op_end_ns": g.op_end_ns.tolist(),
        "cpu_before": g.before.tolist(),
        "python_line": g.python_line.tolist(),
        "runtime_call": g.runtime_call.tolist(),
        "strings": list(g.strings),
    }


def _activity(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"device": a.device}
    for kind, busy in zip(BUSY_CLASSES, a.sets()):
        out[kind] = {"start_ns": busy.start.tolist(), "end_ns": busy.end.tolist()}
    return out


def to_dict(r: Any, columns: bool = False) -> dict[str, Any]:
    """The JSON report of a diagnosis, as plain data (``columns``: every gap and each device's
    busy intervals too, the full form)."""
    return report_to_dict(r, columns)


# The columns (every gap, the busy intervals) are long lists of numbers: one line each, not one
# line per number, so the file stays readable and a golden diff shows a column as one line.
_COLUMN_KEYS = ("gap_columns", "activity", "lanes")


def _compact(d: Any, found: list[bytes], nonce: str) -> Any:
    """``d`` with each column list (and each lane) replaced by a placeholder string (``nonce``
    and a number: no trace string can be mistaken for one); the compact JSON of what was
    replaced is appended to ``found``."""

    def hole(v: Any) -> str:
        found.append(msgspec.json.encode(v))
        return f"{nonce}{len(found) - 1}"

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list) and (not v or not isinstance(v[0], (dict, list))):
            return hole(v)
        if isinstance(v, list) and isinstance(v[0], dict) and "pid" in v[0]:
            return [hole(x) for x in v]  # lanes: one line each
        return [walk(x) for x in v] if isinstance(v, list) else v

    if isinstance(d, dict) and "ranks" in d and isinstance(d["ranks"], list):
        return {**d, "ranks": [{**e, "report": _compact(e["report"], found, nonce)} if e.get("report") else e for e in d["ranks"]]}
    if not isinstance(d, dict):
        return d
    return {k: (walk(v) if k in _COLUMN_KEYS else v) for k, v in d.items()}


def render_json(r: DiagnosisData, columns: bool = False) -> str:
    """The JSON report: the summary, findings, steps and largest gaps by default; with ``columns``
    also every gap and the busy intervals (what a saved report needs to draw the HTML strip and
    the Perfetto trace)."""
    return dumps(to_dict(r, columns))


def dumps(report: dict[str, Any]) -> str:
    """A JSON report's dict as the file's text: indented, each column on one line (the reports
    of a ``"ranks"`` list too: a multi-rank run's)."""
    found: list[bytes] = []
    nonce = f"whyidle-column-{os.urandom(8).hex()}-"
    data = _compact(report, found, nonce)
    text = msgspec.json.format(msgspec.json.encode(data), indent=2)
    if found:
        text = re.sub(b'"' + nonce.encode() + rb'(\d+)"', lambda m: found[int(m.group(1))], text)
    return text.decode() + "\n"
