"""Saved JSON reports read back into diagnosis data (the inverse of :mod:`whyidle.render.json`).

``whyidle diagnose trace -o report.json`` saves a report; ``load_report("report.json")`` gives
the diagnosis back, every gap, the device activity and the lanes included, so a saved run can be
compared or rendered again (HTML, Perfetto) without its trace: the loaded diagnosis renders to
the same JSON, terminal and HTML reports as the original, counter figures included. Older
reports lack some fields and load without them: before the gap columns (no timeline strip in
their HTML), before the per-name times (compare lists no kernels), before the exact tensor-core
and FP32 times (taken back from their shares). A report of another kind (``"kind"``: a
multi-rank run's) loads through :func:`load_saved` with the reader its package registers
(:func:`register_reader`; :mod:`whyidle.ranks.saved`).
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.advice_context import AdviceContext
from whyidle.analyses.work import WorkSummary
from whyidle.analyses.counters import BurstPattern, CounterAnalysis, Distribution, GpuCounters
from whyidle.analyses.kernel_fill import KernelFill
from whyidle.analyses.names import NameTimes
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Lane, LaneKind
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.utilization import StepFigures, Utilization
from whyidle.analyses.strip import BUSY_CLASSES, DeviceActivity
from whyidle.errors import TraceFormatError
from whyidle.findings.checked import Malformed, Trail, check_struct
from whyidle.findings.model import (
    Prediction,
    Evidence,
    Finding,
    Fix,
    DiagnosisData,
    GapColumns,
    GapRecord,
    Skipped,
    SourceInfo,
    WindowInfo,
)

__all__ = ["looks_like_report", "report_from_dict", "load_report", "load_saved", "check_schema", "register_reader"]

_SUPPORTED_MAJOR = "1"

# Readers of the reports of other kinds (the JSON's "kind"), registered by the package whose
# result it is when it is imported: reader(dict, where) -> the result.
_READERS: dict[str, Callable[[dict[str, Any], str], object]] = {}


def register_reader(kind: str, read: Callable[[dict[str, Any], str], object]) -> None:
    """Read saved reports whose ``"kind"`` is ``kind`` with ``read(d, where)``."""
    _READERS[kind] = read


def looks_like_report(head: bytes) -> bool:
    """Whether the first bytes of a (decompressed) file are a whyidle JSON report."""
    h = head.lstrip()
    return h.startswith(b"{") and b'"schema_version"' in h[:200] and b'"traceEvents"' not in h[:200]


def _i64(v: Any) -> int:
    """An integer field within +-2**62 (146 years of nanoseconds), so that sums and differences
    still fit int64: larger numbers (or inf) are malformed, not a crash later."""
    i = int(v)
    if not -(2**62) <= i < 2**62:
        raise ValueError(f"{str(v)[:40]} is out of range")
    return i


def _strs(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{what} is not a list of strings")
    return tuple(v)


def _batch(v: Any) -> int | None:
    if v is None:
        return None
    if type(v) is not int or not 0 < v < 2**40:
        raise ValueError(f"batch_size {str(v)[:40]!r} is not a positive integer of a plausible size")
    return v


class _PathSegment(msgspec.Struct):
    kind: str
    start_ns: int
    end_ns: int
    names: list[str]
    count: int = 1


class _CriticalPath(msgspec.Struct):
    """The shape of ``extra["critical_path"]`` (findings/critical_path.py), which the HTML page draws."""

    step: int
    start_ns: int
    duration_ns: int
    by_kind_ns: dict[str, int]
    segments: list[_PathSegment]
    segments_left_out: int = 0


def _extra(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Malformed("extra", f"expected a mapping, found {type(v).__name__}")
    if v.get("critical_path") is not None:
        try:
            msgspec.convert(v["critical_path"], _CriticalPath)
        except msgspec.ValidationError as exc:
            raise Malformed("extra.critical_path", str(exc)) from None
    return dict(v)


def _finding(d: dict[str, Any]) -> Finding:
    e, f = d["evidence"], d["fix"]
    return Finding(
        id=d["id"],
        group=d["group"],
        cause=d["cause"],
        title=d["title"],
        idle_ns=_i64(d["idle_ns"]),
        share_of_idle=float(d["share_of_idle"]),
        share_of_window=float(d["share_of_window"]),
        evidence=Evidence(
            gap_count=_i64(e["gap_count"]),
            idle_ns=_i64(e["idle_ns"]),
            per_step_idle_ns=e.get("per_step_idle_ns"),
            share_of_step=e.get("share_of_step"),
            top_ops=tuple((o["name"], _i64(o["overlap_ns"]), _i64(o["gaps"])) for o in e.get("top_ops", ())),
            python_lines=tuple((p["line"], _i64(p["gaps"])) for p in e.get("python_lines", ())),
            examples=tuple((_i64(x["start_ns"]), _i64(x["end_ns"]), _i64(x["idle_ns"])) for x in e.get("examples", ())),
            facts=tuple((k, v) for k, v in e.get("facts", {}).items()),
        ),
        fix=Fix(f["summary"], tuple(f.get("steps", ())), f.get("code", ""), f.get("verify", ""), f.get("expected", ""), f.get("docs", "")),
        variant=d.get("variant", ""),
        affected_busy_ns=_i64(d.get("affected_busy_ns", 0)),
        compute_wait_ns=_i64(d.get("compute_wait_ns", 0)),
        est_saving_ns=_i64(d.get("est_saving_ns", 0)),
        prediction=_prediction(d.get("prediction")),
    )


def _prediction(d: dict[str, Any] | None) -> Prediction | None:
    if not d:
        return None
    lo, hi = d["step_ns_range"]
    return Prediction(
        lever=d["lever"],
        assumption=d.get("assumption", ""),
        step_ns_before=float(d["step_ns_before"]),
        step_ns_after=float(d["step_ns_after"]),
        step_ns_low=float(lo),
        step_ns_high=float(hi),
        batch_factor=float(d.get("batch_factor", 1.0)),
        samples_per_s_before=d.get("samples_per_s_before"),
        samples_per_s_after=d.get("samples_per_s_after"),
        note=str(d.get("note", "")),
    )


def _gap(d: dict[str, Any]) -> GapRecord:
    return GapRecord(
        start_ns=_i64(d["start_ns"]),
        end_ns=_i64(d["end_ns"]),
        device=_i64(d["device"]),
        group=d["group"],
        cause=d["cause"],
        causes_ns=tuple((k, _i64(v)) for k, v in d.get("causes_ns", {}).items()),
        next_work=d.get("next_work", ""),
        thread=d.get("thread", ""),
        before=d.get("cpu_before", ""),
        during=d.get("cpu_during", ""),
        outermost=d.get("cpu_outermost", ""),
        innermost=d.get("cpu_innermost", ""),
        runtime_call=d.get("runtime_call", ""),
        python_line=d.get("python_line", ""),
        drained_by_sync=bool(d.get("drained_by_sync", False)),
    )


def _step(d: dict[str, Any]) -> StepFigures:
    by = d.get("idle_by_cause_ns", {})
    return StepFigures(
        number=_i64(d["number"]),
        start_ns=_i64(d["start_ns"]),
        end_ns=_i64(d["end_ns"]),
        compute_ns=_i64(d["compute_ns"]),
        communication_ns=_i64(d["communication_ns"]),
        memcpy_ns=_i64(d["memcpy_ns"]),
        memset_ns=_i64(d["memset_ns"]),
        idle_ns=_i64(d["idle_ns"]),
        idle_by_cause_ns=tuple(_i64(by.get(c.key, 0)) for c in C.CAUSES),
    )


def _share_to_ns(share: Any, total: int) -> int:
    return int(round(float(share) * total)) if share is not None else 0


def _col(v: Any, n: int | None, what: str, lo: int = -(2**62)) -> npt.NDArray[np.int64]:
    """A column of integers (of length ``n`` when given), each within [lo, 2**62)."""
    if not isinstance(v, list) or not all(type(x) is int for x in v):
        raise ValueError(f"{what} is not a list of integers")
    a = np.array(v, dtype=np.int64) if v else np.zeros(0, dtype=np.int64)
    if n is not None and a.size != n:
        raise ValueError(f"{what} has {a.size} values, expected {n}")
    if a.size and (int(a.min()) < lo or int(a.max()) >= 2**62):
        raise ValueError(f"{what} holds a value out of range")
    return a


def _gap_columns(d: dict[str, Any], n_lanes: int) -> GapColumns:
    n = _i64(d["count"])
    strings = _strs(d["strings"], "gap_columns.strings")

    def names(key: str) -> npt.NDArray[np.int64]:
        a = _col(d[key], n, f"gap_columns.{key}", lo=-1)
        if a.size and int(a.max()) >= len(strings):
            raise ValueError(f"gap_columns.{key} points past the string table")
        return a

    causes = np.zeros((n, len(C.CAUSES)), dtype=np.int64)
    known = {c.key: i for i, c in enumerate(C.CAUSES)}
    for key, col in d["causes_ns"].items():
        if key not in known:
            raise ValueError(f"gap_columns.causes_ns names the cause {key!r}, which this whyidle does not know (a newer whyidle wrote it)")
        causes[:, known[key]] = _col(col, n, f"gap_columns.causes_ns[{key}]", lo=0)
    thread = _col(d["thread"], n, "gap_columns.thread", lo=-1)
    if thread.size and int(thread.max()) >= n_lanes:
        raise ValueError("gap_columns.thread points past the lanes")
    return GapColumns(
        start_ns=_col(d["start_ns"], n, "gap_columns.start_ns"),
        end_ns=_col(d["end_ns"], n, "gap_columns.end_ns"),
        device=_col(d["device"], n, "gap_columns.device", lo=0),
        causes_ns=causes,
        drained_by_sync=_col(d["drained_by_sync"], n, "gap_columns.drained_by_sync", lo=0).astype(np.bool_),
        host_end_ns=_col(d["host_end_ns"], n, "gap_columns.host_end_ns"),
        thread=thread,
        next_work=names("next_work"),
        op=names("cpu_op"),
        op_start_ns=_col(d["cpu_op_start_ns"], n, "gap_columns.cpu_op_start_ns"),
        op_end_ns=_col(d["cpu_op_end_ns"], n, "gap_columns.cpu_op_end_ns"),
        before=names("cpu_before"),
        python_line=names("python_line"),
        runtime_call=names("runtime_call"),
        strings=strings,
    )


def _intervals(d: dict[str, Any], what: str) -> Intervals:
    s = _col(d["start_ns"], None, f"{what}.start_ns")
    e = _col(d["end_ns"], s.size, f"{what}.end_ns")
    if s.size and (np.any(e <= s) or np.any(s[1:] < e[:-1])):
        raise ValueError(f"{what} is not a sorted list of disjoint intervals")
    return Intervals(s, e)


def _activity(v: Any) -> tuple[DeviceActivity, ...]:
    out = []
    for a in v:
        sets = [_intervals(a[k], f"activity.{k}") for k in BUSY_CLASSES]
        out.append(DeviceActivity(_i64(a["device"]), *sets))
    return tuple(out)


def _name_times(v: dict[str, Any]) -> NameTimes:
    def per_name(x: Any, what: str) -> dict[str, int]:
        if not isinstance(x, dict):
            raise ValueError(f"name_times.{what} is not an object")
        return {str(k): _i64(n) for k, n in x.items()}

    return NameTimes(per_name(v["kernels_ns"], "kernels_ns"), per_name(v["ops_ns"], "ops_ns"), _i64(v["steps"]), _i64(v["window_ns"]))


def _distributions(v: dict[str, Any]) -> tuple[Distribution, ...]:
    return tuple(
        Distribution(str(m), str(x["unit"]), _i64(x["samples"]), _i64(x["covered_ns"]), *(float(x[k]) for k in ("mean", "p5", "p50", "p95", "min", "max")))
        for m, x in v.items()
    )


def _counters(d: dict[str, Any]) -> CounterAnalysis:
    """The counter section back (``render.json.counters_to_dict``); the per-GPU sampling interval and
    whether SM activity was logged were added later: older reports take the log's interval and
    read the second from the distributions."""
    gpus = []
    for g in d["gpus"]:
        p = g.get("pattern")
        pattern = None
        if p is not None:
            period = p["period_ns"]
            pattern = BurstPattern(
                str(p["basis"]), float(p["busy_threshold_pct"]), float(p["duty_cycle"]), None if period is None else _i64(period),
                float(p["regularity"]), _i64(p["pauses"]), float(p["mean_pause_ns"]), bool(p["regular"]),
            )  # fmt: skip
        dists = _distributions(g["distributions"])
        gpus.append(
            GpuCounters(
                gpu=str(g["gpu"]),
                name=str(g["name"]),
                start_ns=_i64(g["start_ns"]),
                end_ns=_i64(g["end_ns"]),
                interval_ns=_i64(g.get("interval_ns", d["interval_ns"])),
                distributions=dists,
                pattern=pattern,
                underfilled_ns=_i64(g["underfilled_ns"]),
                busy_ns=float(g["busy_ns"]),
                busy_basis=str(g["busy_basis"]),
                has_sm_active=bool(g.get("has_sm_active", any(x.metric == "sm_active_pct" for x in dists))),
                pcie_rx_pause_ratio=g.get("pcie_rx_pause_over_burst"),
                pause_idle_ns=_i64(g.get("pause_idle_ns", 0)),
                host_cpu_pause_pct=g.get("host_cpu_pause_pct"),
                host_cpu_burst_pct=g.get("host_cpu_burst_pct"),
            )
        )
    return CounterAnalysis(
        source_format=str(d["source_format"]),
        path=str(d["path"]),
        clock=str(d["clock"]),
        interval_ns=_i64(d["interval_ns"]),
        gpus=tuple(gpus),
        joined=bool(d["joined_with_trace"]),
        notes=_strs(d.get("notes", []), "counters.notes"),
        host=_distributions(d.get("host", {})),
    )


def _lanes(v: Any) -> tuple[Lane, ...]:
    return tuple(Lane(LaneKind(x["kind"]), _i64(x["device"]), str(x["pid"]), str(x["tid"]), str(x.get("name", ""))) for x in v)


def check_schema(d: dict[str, Any], where: str) -> None:
    """Raise TraceFormatError naming ``where`` unless ``d`` is a whyidle report of a schema read here."""
    version = str(d.get("schema_version", ""))
    if not version:
        raise TraceFormatError(where, "is JSON but not a whyidle report (no 'schema_version')")
    if version.split(".", 1)[0] != _SUPPORTED_MAJOR:
        raise TraceFormatError(where, f"is a whyidle report of schema {version}; this whyidle reads schema {_SUPPORTED_MAJOR}.x")


def report_from_dict(d: dict[str, Any], where: str = "<dict>") -> DiagnosisData:
    """Diagnosis data from the JSON report's dict; raises TraceFormatError naming ``where`` when it is not one."""
    check_schema(d, where)
    if d.get("kind") == "multi_rank":
        n = len(d["ranks"]) if isinstance(d.get("ranks"), list) else "several"
        raise TraceFormatError(
            where,
            f"is a multi-rank report ({n} ranks) where one trace's report was expected; compare runs rank by rank "
            "(each rank's trace, or whyidle.load_report(path).ranks[i].report)",
        )
    trail = Trail()  # which field each read took: what a failure names
    try:
        data = _built(trail.wrap(d))
        check_struct(data)  # every field as its type declares: nothing malformed reaches a renderer
    except Malformed as exc:
        raise TraceFormatError(where, f"is a whyidle report whose field {exc.field} is malformed: {exc.problem}") from None
    except RecursionError:
        raise TraceFormatError(where, "is a whyidle report nested too deeply to be one") from None
    except KeyError as exc:
        raise TraceFormatError(where, f"is a whyidle report without the field {trail.path or exc}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        detail = str(exc) if len(str(exc)) <= 120 else str(exc)[:117] + "..."
        raise TraceFormatError(where, f"is a whyidle report whose field {trail.path} is malformed ({detail})") from None
    return data


def _built(d: dict[str, Any]) -> DiagnosisData:
    """The diagnosis data a report's dict describes (KeyError, TypeError, ValueError where it is not one)."""
    src, win, u, th, k = d["source"], d["window"], d["utilization"], d["throughput"], d["kernels"]
    window_ns = _i64(win["duration_ns"])
    kernels = KernelStats(
        count=_i64(k["count"]),
        total_ns=_i64(k["total_ns"]),
        median_ns=k.get("median_ns"),
        short_count=_i64(k["short_count"]),
        short_ns=_i64(k["short_ns"]),
        mean_launch_ns=k.get("mean_launch_call_ns"),
        sm_efficiency=k.get("est_sm_efficiency"),
        achieved_occupancy_pct=k.get("est_achieved_occupancy_pct"),
        tensor_core_ns=_i64(k["tensor_core_ns"]) if "tensor_core_ns" in k else _share_to_ns(k.get("tensor_core_share"), _i64(k["total_ns"])),
        fp32_math_ns=_i64(k["fp32_math_ns"]) if "fp32_math_ns" in k else _share_to_ns(k.get("fp32_math_share"), _i64(k["total_ns"])),
        top_fp32_kernels=tuple((str(x["name"]), _i64(x["ns"])) for x in k.get("top_fp32_kernels", ())),
        fill=msgspec.convert(k["fill"], KernelFill) if k.get("fill") else None,
    )
    util = Utilization(
        window_ns=window_ns,
        n_devices=_i64(u["n_devices"]),
        busy_ns=_i64(u["busy_ns"]),
        kernel_busy_ns=_i64(u["kernel_busy_ns"]),
        compute_ns=_i64(u["compute_ns"]),
        communication_ns=_i64(u["communication_exposed_ns"]),
        communication_total_ns=_i64(u["communication_total_ns"]),
        memcpy_ns=_i64(u["memcpy_ns"]),
        memset_ns=_i64(u["memset_ns"]),
        idle_ns=_i64(u["idle_ns"]),
        steps=tuple(_step(s) for s in d.get("steps", ())),
        batch_size=_batch(th.get("batch_size")),
        batch_size_basis=th.get("batch_size_basis", ""),
    )
    by_cause = {c.key: _i64(d.get("idle_by_cause_ns", {}).get(c.key, 0)) for c in C.CAUSES}
    lanes = _lanes(d.get("lanes", ()))
    data = DiagnosisData(
        source=SourceInfo(
            path=src.get("path", ""),
            format=src.get("format", ""),
            version=src.get("version", ""),
            devices=_strs(src.get("devices", ()), "devices"),
            rank=src.get("rank"),
            world_size=src.get("world_size"),
            training=src.get("workload", "training") == "training",
            workload=str(src.get("workload", "")),
            workload_evidence=tuple(str(e) for e in src.get("workload_evidence", ())),
        ),
        window=WindowInfo(_i64(win["start_ns"]), _i64(win["end_ns"]), win.get("basis", ""), tuple(win.get("steps", ())), tuple(win.get("all_steps", ()))),
        utilization=util,
        kernels=kernels,
        idle_by_cause_ns=by_cause,
        gap_count=_i64(d["gap_count"]),
        findings=tuple(_finding(f) for f in d.get("findings", ())),
        skipped=tuple(Skipped(s["rule"], s["reason"]) for s in d.get("skipped", ())),
        gaps=tuple(_gap(g) for g in d.get("gaps", ())),
        quality=tuple(d.get("quality", ())),
        cold_start=bool(d.get("cold_start", False)),
        no_device_activity=bool(d.get("no_device_activity", False)),
        extra=_extra(d.get("extra", {})),
        gap_columns=_gap_columns(d["gap_columns"], len(lanes)) if d.get("gap_columns") is not None else None,
        activity=_activity(d["activity"]) if d.get("activity") is not None else None,
        lanes=lanes,
        name_times=_name_times(d["name_times"]) if d.get("name_times") is not None else None,
        counters=_counters(d["counters"]) if d.get("counters") is not None else None,
        advice=msgspec.convert(d["advice_context"], AdviceContext) if d.get("advice_context") is not None else None,
        work=msgspec.convert(d["work"], WorkSummary) if d.get("work") is not None else None,
    )
    return data


def load_report(path: str | os.PathLike[str]) -> DiagnosisData:
    """Read a JSON report saved by ``whyidle diagnose -o report.json`` (plain or gzipped)."""
    p, d = _decode(path)
    return report_from_dict(d, str(p))


def load_saved(path: str | os.PathLike[str]) -> object:
    """A saved JSON report: one trace's (DiagnosisData), or another kind's by its registered
    reader (a multi-rank run's, ``whyidle diagnose RUN_DIR -o run.json``: a MultiRankReport)."""
    p, d = _decode(path)
    kind = d.get("kind")
    if kind is None:
        return report_from_dict(d, str(p))
    read = _READERS.get(str(kind))
    if read is None:
        check_schema(d, str(p))
        raise TraceFormatError(p, f"is a whyidle report of kind {kind!r}, which no imported package reads (whyidle.load_report reads every kind)")
    return read(d, str(p))


def _decode(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    from whyidle.sources import read_bytes

    p = Path(path)
    raw = read_bytes(p)
    try:
        d = msgspec.json.decode(raw)
    except RecursionError:
        raise TraceFormatError(p, "has JSON nested too deeply to be a whyidle report") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(p, f"is not valid JSON ({exc}); expected a whyidle JSON report") from None
    if not isinstance(d, dict):
        raise TraceFormatError(p, "is JSON but not a whyidle report (expected an object)")
    return p, d
