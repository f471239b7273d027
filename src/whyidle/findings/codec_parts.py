"""The field tables of a saved diagnosis's parts: findings, gaps, steps, kernels, counters, lanes,
and the columns of the full form (assembled by :mod:`whyidle.findings.codec`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.counters import BurstPattern, CounterAnalysis, Distribution, GpuCounters
from whyidle.analyses.kernel_fill import KernelFill
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.names import NameTimes
from whyidle.analyses.strip import BUSY_CLASSES, DeviceActivity
from whyidle.analyses.utilization import StepFigures
from whyidle.findings.checked import Malformed
from whyidle.findings.fields import ANY, BOOL, FLOAT, INT, STR, Dict, Field, Opt, Pairs, Rec, Rows, Struct, Table, Tup, Value
from whyidle.findings.model import Evidence, Finding, Fix, GapColumns, GapRecord, Prediction, Skipped, SourceInfo, WindowInfo
from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import Lane, LaneKind

__all__ = ["FINDING", "SKIPPED", "GAP", "STEP", "KERNELS", "COUNTERS", "LANE", "NAME_TIMES", "SOURCE", "WINDOW", "GapColumnsValue", "ActivityValue"]


def _without(v: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: x for k, x in v.items() if k not in keys}


class _Range(Value):
    """A (low, high) pair saved as a list of two numbers."""

    words = "[low, high]"

    def enc(self, v: Any) -> Any:
        return list(v)

    def dec(self, v: Any) -> Any:
        lo, hi = v
        return (FLOAT.dec(lo), FLOAT.dec(hi))


PREDICTION = Table(
    Prediction,
    Field("lever", STR),
    Field("assumption", STR, default=""),
    Field("step_ns_before", FLOAT),
    Field("step_ns_after", FLOAT),
    Field("step_ns_range", _Range(), get=lambda p: (p.step_ns_low, p.step_ns_high)),
    Field("batch_factor", FLOAT, default=1.0),
    Field("samples_per_s_before", Opt(FLOAT), default=None),
    Field("samples_per_s_after", Opt(FLOAT), default=None),
    Field("speedup", FLOAT, derived=True),
    Field("recovered_share", FLOAT, derived=True),
    Field("recommended", BOOL, "false when the replay finds no gain: the fix is not recommended on this evidence", derived=True),
    Field("note", STR, "why the prediction recovers more than the finding explains, when it does: the edit also shortens time outside its gaps; '' otherwise", default=""),
    build=lambda v: Prediction(**_without(v, "step_ns_range"), step_ns_low=v["step_ns_range"][0], step_ns_high=v["step_ns_range"][1]),
)

EVIDENCE = Table(
    Evidence,
    Field("gap_count", INT),
    Field("idle_ns", INT),
    Field("per_step_idle_ns", Opt(FLOAT), default=None),
    Field("share_of_step", Opt(FLOAT), default=None),
    Field("top_ops", Rows(("name", STR), ("overlap_ns", INT), ("gaps", INT)), default=()),
    Field("python_lines", Rows(("line", STR), ("gaps", INT)), default=()),
    Field("examples", Rows(("start_ns", INT), ("end_ns", INT), ("idle_ns", INT)), default=()),
    Field("facts", Pairs(ANY), "other measured values: name -> value", default=()),
)

FIX = Table(
    Fix,
    Field("summary", STR),
    Field("steps", Tup(STR), default=()),
    Field("code", STR, default=""),
    Field("verify", STR, default=""),
    Field("expected", STR, default=""),
    Field("docs", STR, "the cause page: a group name, which `whyidle explain` prints, or for findings about an input format a section of whyidle's docs such as `docs/inputs.md#nsight-systems`", default=""),
)

FINDING = Table(
    Finding,
    Field("id", STR),
    Field("group", STR),
    Field("cause", STR),
    Field("variant", STR, default=""),
    Field("title", STR),
    Field("idle_ns", INT),
    Field("share_of_idle", FLOAT),
    Field("share_of_window", FLOAT),
    Field("affected_busy_ns", INT, default=0),
    Field("compute_wait_ns", INT, "device time with no kernel running while only this cause's work ran, e.g. an exposed input copy; findings rank by `idle_ns + compute_wait_ns`", default=0),
    Field(
        "est_saving_ns", INT,
        "for a finding on busy time (fusion candidates, GEMM shapes, unfused attention): the kernel time its fix is estimated to save, "
        "from the roofline (an estimate, never measured); findings rank by `idle_ns + compute_wait_ns + est_saving_ns`; written when not 0",
        since="1.1", default=0, when=lambda f: f.est_saving_ns != 0,
    ),  # fmt: skip
    Field("upper_bound", BOOL, get=lambda f: True, derived=True),
    Field("evidence", Rec(EVIDENCE)),
    Field("prediction", Opt(Rec(PREDICTION)), "null, or what the fix buys from the what-if replay; docs/metrics.md", default=None),
    Field("fix", Rec(FIX)),
)

SKIPPED = Table(Skipped, Field("rule", STR), Field("reason", STR))

GAP = Table(
    GapRecord,
    Field("start_ns", INT),
    Field("end_ns", INT),
    Field("dur_ns", INT, derived=True),
    Field("device", INT),
    Field("group", STR),
    Field("cause", STR),
    Field("causes_ns", Pairs(INT), default=()),
    Field("next_work", STR, default=""),
    Field("thread", STR, default=""),
    Field("cpu_before", STR, attr="before", default=""),
    Field("cpu_during", STR, attr="during", default=""),
    Field("cpu_outermost", STR, attr="outermost", default=""),
    Field("cpu_innermost", STR, attr="innermost", default=""),
    Field("runtime_call", STR, default=""),
    Field("python_line", STR, default=""),
    Field("drained_by_sync", BOOL, default=False),
)


class _CauseVector(Value):
    """Figures aligned with the causes (analyses.causes.CAUSES), saved as ``"group/cause"`` -> ns, non-zero only."""

    def enc(self, v: Any) -> Any:
        return {c.key: int(x) for c, x in zip(C.CAUSES, v) if x}

    def dec(self, v: Any) -> Any:
        return tuple(INT.dec(v.get(c.key, 0)) for c in C.CAUSES)


STEP = Table(
    StepFigures,
    Field("number", INT),
    Field("start_ns", INT),
    Field("end_ns", INT),
    Field("duration_ns", INT, derived=True),
    Field("compute_ns", INT),
    Field("communication_ns", INT),
    Field("memcpy_ns", INT),
    Field("memset_ns", INT),
    Field("idle_ns", INT),
    Field("idle_by_cause_ns", _CauseVector(), default=(0,) * len(C.CAUSES)),
)


def _kernels(v: dict[str, Any]) -> KernelStats:
    """Reports saved before the exact tensor-core and FP32 times give them back from their shares."""
    total = v["total_ns"]
    for ns, share in (("tensor_core_ns", "tensor_core_share"), ("fp32_math_ns", "fp32_math_share")):
        if v[ns] is None:
            v[ns] = int(round(float(v[share]) * total)) if v[share] is not None else 0
    return KernelStats(**_without(v, "tensor_core_share", "fp32_math_share"))


KERNELS = Table(
    KernelStats,
    Field("count", INT),
    Field("total_ns", INT),
    Field("median_ns", Opt(FLOAT), default=None),
    Field("short_count", INT),
    Field("short_ns", INT),
    Field("short_share", FLOAT, derived=True),
    Field("mean_launch_call_ns", Opt(FLOAT), attr="mean_launch_ns", default=None),
    Field("est_sm_efficiency", Opt(FLOAT), attr="sm_efficiency", default=None),
    Field("est_achieved_occupancy_pct", Opt(FLOAT), attr="achieved_occupancy_pct", default=None),
    Field("tensor_core_share", Opt(FLOAT), default=None),
    Field("fp32_math_share", Opt(FLOAT), default=None),
    Field(
        "fill", Opt(Struct(KernelFill)),
        "null without compute kernels: `kernel_busy_ns`, `kernel_ns`, `known_ns` (kernel time with a launch configuration), `underfilled_ns` "
        "(busy time with fewer blocks running than SMs), `unused_ns` (SM time left idle while kernels ran, in whole-device ns), `low_occupancy_ns`, "
        "`sm_counts` ([device, SMs] pairs), `sm_count_origin`, `top` (per kernel and launch configuration: `name`, `count`, `total_ns`, `unused_ns`, "
        "`grid`, `block`, `blocks_per_sm`, `occupancy_pct`); see `whyidle explain underfilled`",
        default=None,
    ),
    Field("tensor_core_ns", Opt(INT), "the kernel time behind the share, exactly", default=None),
    Field("fp32_math_ns", Opt(INT), "the kernel time behind the share, exactly", default=None),
    Field("top_fp32_kernels", Rows(("name", STR), ("ns", INT)), "the largest FP32 GEMM/conv kernels", default=()),
    build=_kernels,
)


class _Distributions(Value):
    """Per metric (``metric`` -> its figures), time-weighted."""

    words = "(per metric: `unit`, `samples`, `covered_ns`, `mean`, `p5`, `p50`, `p95`, `min`, `max`, time-weighted)"
    _FIGURES = ("mean", "p5", "p50", "p95", "min", "max")

    def enc(self, v: Any) -> Any:
        return {d.metric: {"unit": d.unit, "samples": d.samples, "covered_ns": d.covered_ns, **{k: getattr(d, k) for k in self._FIGURES}} for d in v}

    def dec(self, v: Any) -> Any:
        return tuple(Distribution(str(m), STR.dec(x["unit"]), INT.dec(x["samples"]), INT.dec(x["covered_ns"]), *(FLOAT.dec(x[k]) for k in self._FIGURES)) for m, x in v.items())


DISTRIBUTIONS = _Distributions()

PATTERN = Table(
    BurstPattern,
    Field("basis", STR),
    Field("busy_threshold_pct", FLOAT, attr="busy_min_pct"),
    Field("duty_cycle", FLOAT),
    Field("period_ns", Opt(INT)),
    Field("regularity", FLOAT),
    Field("regular", BOOL),
    Field("pauses", INT),
    Field("mean_pause_ns", FLOAT),
)


class _BusyNs(Value):
    """GPU-Util x time: kept as a float, saved as whole nanoseconds."""

    def enc(self, v: Any) -> Any:
        return int(v)

    def dec(self, v: Any) -> Any:
        return float(v)


GPU = Table(
    GpuCounters,
    Field("gpu", STR),
    Field("name", STR),
    Field("start_ns", INT),
    Field("end_ns", INT),
    Field("busy_ns", _BusyNs()),
    Field("busy_basis", STR, "which counter: GPU-Util or SM activity"),
    Field("underfilled_ns", INT),
    Field("pcie_rx_pause_over_burst", Opt(FLOAT), attr="pcie_rx_pause_ratio", default=None),
    Field("idle_ns", INT, "span less busy", derived=True),
    Field("pause_idle_ns", INT, "the part of `idle_ns` in the pauses", default=0),
    Field("host_cpu_pause_pct", Opt(FLOAT), "the watched process tree's CPU in pauses, when logged", default=None),
    Field("host_cpu_burst_pct", Opt(FLOAT), "... and in bursts", default=None),
    Field("distributions", DISTRIBUTIONS),
    Field("pattern", Opt(Rec(PATTERN)), "the burst/pause rhythm", default=None),
    Field("interval_ns", Opt(INT), "that GPU's sampling interval; reports saved before it: the log's", default=None),
    Field("has_sm_active", Opt(BOOL), "the log has SM activity; reports saved before it: read from the distributions", default=None),
    build=lambda v: v,  # completed by the counter section: a GPU's defaults come from the log
)


def _gpu(v: dict[str, Any], interval_ns: int) -> GpuCounters:
    sm = v["has_sm_active"] if v["has_sm_active"] is not None else any(x.metric == "sm_active_pct" for x in v["distributions"])
    return GpuCounters(**{**v, "interval_ns": v["interval_ns"] if v["interval_ns"] is not None else interval_ns, "has_sm_active": sm})


def _explanations(a: CounterAnalysis) -> dict[str, str]:
    from whyidle.findings.counter_rules import explanations_for

    return {m: text for m, text in explanations_for([d.metric for g in a.gpus for d in g.distributions])}


COUNTERS = Table(
    CounterAnalysis,
    Field("source_format", STR),
    Field("path", STR),
    Field("clock", STR),
    Field("interval_ns", INT),
    Field("joined_with_trace", BOOL, attr="joined"),
    Field("notes", Tup(STR), default=()),
    Field("gpus", Tup(Rec(GPU)), "per GPU"),
    Field("host", DISTRIBUTIONS, "the watched process tree's `host_cpu_pct` and `host_rss_mib`, when logged", default=()),
    Field("explanations", Dict(STR), "of each metric", get=_explanations, derived=True),
    build=lambda v: CounterAnalysis(**{**v, "gpus": tuple(_gpu(g, v["interval_ns"]) for g in v["gpus"])}),
)

LANE = Table(
    Lane,
    Field("kind", STR, "`gpu_stream`, `cpu_thread`, ...", get=lambda ln: ln.kind.value),
    Field("device", INT),
    Field("pid", STR),
    Field("tid", STR),
    Field("name", STR, default=""),
    build=lambda v: Lane(LaneKind(v["kind"]), v["device"], str(v["pid"]), str(v["tid"]), str(v["name"])),
)

NAME_TIMES = Table(
    NameTimes,
    Field("steps", INT),
    Field("window_ns", INT),
    Field("kernels_ns", Dict(INT, order=True), "device work per kernel/copy name"),  # sorted: built in an order that may vary
    Field("ops_ns", Dict(INT, order=True), "CPU ops per name, inclusive"),
)

SOURCE = Table(
    SourceInfo,
    Field("path", STR, default=""),
    Field("format", STR, "`kineto`, ...", default=""),
    Field("version", STR, default=""),
    Field("devices", Tup(STR), "names", default=()),
    Field("rank", Opt(INT), default=None),
    Field("world_size", Opt(INT), default=None),
    Field(
        "workload", STR,
        "`training`, `serving`, `inference`, `non_pytorch`, `unknown`; reports saved before it say `training`/`inference`",
        get=lambda s: s.workload or ("training" if s.training else "inference"), default="",
    ),  # fmt: skip
    Field("workload_evidence", Tup(STR), "sentences: what decided it", default=()),
    build=lambda v: SourceInfo(**v, training=(v["workload"] or "training") == "training"),
)

WINDOW = Table(
    WindowInfo,
    Field("start_ns", INT),
    Field("end_ns", INT),
    Field("duration_ns", INT),  # read back as the utilization's window
    Field("basis", STR, "`steps`, `device activity`, `empty`", default=""),
    Field("steps", Tup(INT), "selected numbers", default=()),
    Field("all_steps", Tup(INT), default=()),
    build=lambda v: (WindowInfo(**_without(v, "duration_ns")), v["duration_ns"]),
)


def _col(v: Any, n: int | None, what: str, lo: int = -(2**62)) -> npt.NDArray[np.int64]:
    """A column of integers (of length ``n`` when given), each within [lo, 2**62)."""
    if not isinstance(v, list) or not all(type(x) is int for x in v):
        raise Malformed(what, "is not a list of integers")
    a = np.array(v, dtype=np.int64) if v else np.zeros(0, dtype=np.int64)
    if n is not None and a.size != n:
        raise Malformed(what, f"has {a.size} values, expected {n}")
    if a.size and (int(a.min()) < lo or int(a.max()) >= 2**62):
        raise Malformed(what, "holds a value out of range")
    return a


_INT_COLUMNS = ("start_ns", "end_ns", "device")
_NAME_COLUMNS = {"next_work": "next_work", "cpu_op": "op", "cpu_before": "before", "python_line": "python_line", "runtime_call": "runtime_call"}


class GapColumnsValue(Value):
    """Every gap as columns (lists of equal length; names index ``strings``, -1 is none)."""

    def enc(self, g: GapColumns) -> Any:
        return {
            "count": len(g),
            **{k: getattr(g, k).tolist() for k in _INT_COLUMNS},
            "causes_ns": {c.key: g.causes_ns[:, i].tolist() for i, c in enumerate(C.CAUSES) if len(g) and g.causes_ns[:, i].any()},
            "drained_by_sync": g.drained_by_sync.astype(np.int8).tolist(),
            "host_end_ns": g.host_end_ns.tolist(),
            "thread": g.thread.tolist(),
            "next_work": g.next_work.tolist(),
            "cpu_op": g.op.tolist(),
            "cpu_op_start_ns": g.op_start_ns.tolist(),
            "cpu_op_end_ns": g.op_end_ns.tolist(),
            **{k: getattr(g, _NAME_COLUMNS[k]).tolist() for k in ("cpu_before", "python_line", "runtime_call")},
            "strings": list(g.strings),
        }

    def dec(self, d: Any) -> Any:
        n = INT.dec(d["count"])
        strings = d["strings"]
        if not isinstance(strings, list) or not all(isinstance(x, str) for x in strings):
            raise Malformed("gap_columns.strings", "is not a list of strings")
        names = {}
        for key, attr in _NAME_COLUMNS.items():
            a = names[attr] = _col(d[key], n, f"gap_columns.{key}", lo=-1)
            if a.size and int(a.max()) >= len(strings):
                raise Malformed(f"gap_columns.{key}", "points past the string table")
        causes = np.zeros((n, len(C.CAUSES)), dtype=np.int64)
        known = {c.key: i for i, c in enumerate(C.CAUSES)}
        for key, col in d["causes_ns"].items():
            if key not in known:
                raise Malformed("gap_columns.causes_ns", f"names the cause {key!r}, which this whyidle does not know (a newer whyidle wrote it)")
            causes[:, known[key]] = _col(col, n, f"gap_columns.causes_ns[{key}]", lo=0)
        return GapColumns(
            **{k: _col(d[k], n, f"gap_columns.{k}", lo=0 if k == "device" else -(2**62)) for k in _INT_COLUMNS},
            causes_ns=causes,
            drained_by_sync=_col(d["drained_by_sync"], n, "gap_columns.drained_by_sync", lo=0).astype(np.bool_),
            host_end_ns=_col(d["host_end_ns"], n, "gap_columns.host_end_ns"),
            thread=_col(d["thread"], n, "gap_columns.thread", lo=-1),
            op_start_ns=_col(d["cpu_op_start_ns"], n, "gap_columns.cpu_op_start_ns"),
            op_end_ns=_col(d["cpu_op_end_ns"], n, "gap_columns.cpu_op_end_ns"),
            strings=tuple(strings),
            **names,
        )


def _intervals(d: Any, what: str) -> Intervals:
    s = _col(d["start_ns"], None, f"{what}.start_ns")
    e = _col(d["end_ns"], s.size, f"{what}.end_ns")
    if s.size and (np.any(e <= s) or np.any(s[1:] < e[:-1])):
        raise Malformed(what, "is not a sorted list of disjoint intervals")
    return Intervals(s, e)


class ActivityValue(Value):
    """Per device: its busy time by class as sorted disjoint intervals."""

    def enc(self, v: Any) -> Any:
        out = []
        for a in v:
            row: dict[str, Any] = {"device": a.device}
            for kind, busy in zip(BUSY_CLASSES, a.sets()):
                row[kind] = {"start_ns": busy.start.tolist(), "end_ns": busy.end.tolist()}
            out.append(row)
        return out

    def dec(self, v: Any) -> Any:
        if not isinstance(v, list):
            raise ValueError(f"expected a list, found {type(v).__name__}")
        return tuple(DeviceActivity(INT.dec(a["device"]), *(_intervals(a[k], f"activity.{k}") for k in BUSY_CLASSES)) for a in v)

