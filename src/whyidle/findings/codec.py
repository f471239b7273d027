"""The codec of a diagnosis: its JSON report written and read back from one field table.

:data:`DIAGNOSIS` lists every field of the report in the order it is written, with its meaning;
:func:`encode` writes a diagnosis (``columns``: the full form, every gap and the busy intervals),
:func:`decode` reads one back (:mod:`whyidle.findings.saved` adds the file, the schema check and
the errors that name the field), and :meth:`DIAGNOSIS.rows <whyidle.findings.fields.Table.rows>` gives docs/json-schema.md its
table (``whyidle schema``).
A new field is one :class:`~whyidle.findings.fields.Field` here (or in
:mod:`whyidle.findings.codec_parts`): writer, reader and doc follow from it.

Times are integer nanoseconds (``*_ns``), fractions are 0..1 (``*_fraction``, ``share_*``).
Fields are only added within a major schema version, never renamed or removed; a field added
after 1.0 says since which version, and reports saved before it load with its default.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.advice_context import AdviceContext
from whyidle.analyses.utilization import Utilization
from whyidle.analyses.work import WorkSummary
from whyidle.findings import codec_parts as P
from whyidle.findings.checked import Malformed
from whyidle.findings.fields import BOOL, FLOAT, INT, STR, Dict, Field, Opt, Rec, Struct, Table, Tup, Value
from whyidle.findings.model import DiagnosisData

__all__ = ["SCHEMA_VERSION", "DIAGNOSIS", "encode", "decode"]

SCHEMA_VERSION = "1.1"  # 1.1: est_saving_ns on findings about busy time


class Saved(msgspec.Struct, frozen=True):
    """What a report is written from: the diagnosis and the form (``columns``: the full one)."""

    data: DiagnosisData
    columns: bool = False


def _counter_basis(d: DiagnosisData) -> str:
    if d.window.basis == "counter log" and d.counters is not None:
        from whyidle.findings.counter_rules import busy_basis_words

        return f"counters: {busy_basis_words(d.counters)}, summed over GPUs"
    return "device: union of busy time over all streams, per device, summed over devices"


UTILIZATION = Table(
    Utilization,
    Field("basis", STR, get=_counter_basis, derived=True),
    Field("n_devices", INT),
    Field("busy_fraction", FLOAT, derived=True),
    Field("kernel_busy_fraction", FLOAT, derived=True),
    Field("busy_ns", INT),
    Field("kernel_busy_ns", INT),
    Field("compute_ns", INT),
    Field("communication_exposed_ns", INT, attr="communication_ns"),
    Field("communication_total_ns", INT),
    Field("memcpy_ns", INT),
    Field("memset_ns", INT),
    Field("idle_ns", INT),
    build=lambda v: v,  # completed with the window, the steps and the throughput
    path="utilization",
)


class _Batch(Value):
    def dec(self, v: Any) -> Any:
        if v is None:
            return None
        if type(v) is not int or not 0 < v < 2**40:
            raise ValueError(f"batch_size {str(v)[:40]!r} is not a positive integer of a plausible size")
        return v


THROUGHPUT = Table(
    Utilization,
    Field("steps_per_s", Opt(FLOAT), derived=True),
    Field("samples_per_s", Opt(FLOAT), derived=True),
    Field("batch_size", _Batch(), default=None),
    Field("batch_size_basis", STR, "null when unknown", default=""),
    build=lambda v: v,
)


def _pct(values: np.ndarray, q: float) -> int | None:
    return int(np.percentile(values, q, method="nearest")) if values.size else None


STEP_TIME = Table(
    dict,
    Field("count", INT, get=lambda t: int(t.size), derived=True),
    Field("mean_ns", Opt(FLOAT), get=lambda t: float(t.mean()) if t.size else None, derived=True),
    Field("p50_ns", Opt(INT), get=lambda t: _pct(t, 50), derived=True),
    Field("p95_ns", Opt(INT), get=lambda t: _pct(t, 95), derived=True),
    Field("max_ns", Opt(INT), get=lambda t: int(t.max()) if t.size else None, derived=True),
)


class _ByCause(Value):
    """``"group/cause"`` -> ns, non-zero causes only (every cause read back, 0 where absent)."""

    def enc(self, v: Any) -> Any:
        return {key: x for key, x in v.items() if x}

    def dec(self, v: Any) -> Any:
        unknown = sorted(set(v) - {c.key for c in C.CAUSES})
        if unknown:  # its idle time would be dropped without a word
            raise ValueError(f"names the cause {unknown[0]!r}, which this whyidle does not know (a newer whyidle wrote it)")
        return {c.key: INT.dec(v.get(c.key, 0)) for c in C.CAUSES}


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


class _Extra(Value):
    def dec(self, v: Any) -> Any:
        if not isinstance(v, dict):
            raise Malformed("extra", f"expected a mapping, found {type(v).__name__}")
        if v.get("critical_path") is not None:
            try:
                msgspec.convert(v["critical_path"], _CriticalPath)
            except msgspec.ValidationError as exc:
                raise Malformed("extra.critical_path", str(exc)) from None
        return dict(v)


_ADVICE_DOC = (
    "what the job is and already does, as the trace shows it, which every fix was chosen from (null for a counter log and for reports saved before it): "
    "`workload`, `framework` (`pytorch`, `jax`, `cupy`, `cuda`, `hip`, `unknown`), `idiom` (the language of the snippets: `pytorch`, `cuda`, `hip`, `cupy`, "
    "`jax`, `engine`), `engine` (a serving engine's name), `compiled`, `compiled_regions`, `cuda_graphs`, `graph_launches`, `module_loads`, `loader` "
    "(`single_process`, `multi_process`, ''), `loader_workers` (null: the trace does not give the count), `pinned_copies`, `pageable_copies`, "
    "`reduced_precision` (`bf16`, `fp16`, ''), `grad_scaler`, `optimizer`, `optimizer_impl` (`fused`, `foreach`, `per_parameter`, ''), `zero_grad_fills` "
    "(null: no zero_grad seen), `vendor`, `generation`, `seen` and `unknown` (sentences: what the report's 'Seen in trace' and 'Not in trace' rows say)"
)

_WORK_DOC = (
    "a trace with device kernels (absent for counter logs, the step tracker, and reports saved before it): the useful work inside busy time "
    "(`analyses/work.py`; formulas in `analyses/flops.py`). `device` (the first device's name), `peak` (null: the device is not in the table of peaks, "
    "so no fraction or MFU is given; else `name`, dense `fp64`, `fp32`, `tf32`, `bf16`, `fp16`, `fp8`, `int8` in TFLOP/s or TOP/s, null where the vendor "
    "document prints none, `mem_tbps`, and `source`: the vendor document), `devices_used` (devices whose kernels ran in the window: the peak is multiplied "
    "by it), `flops` (model FLOPs of the ops whose kernels ran in the window), `nbytes` (their bytes, each tensor touched once), `flops_by_precision` "
    "(`fp32`, `tf32`, `bf16`, ... -> FLOPs), `ns_by_precision` (the kernel time of those ops, by precision), `kernel_ns` (compute kernels' time in the "
    "window, summed over streams), its split `near_roofline_ns` (ops at `AttributionSettings.roofline_near_fraction`, 0.5, of their bound or above), `compute_slow_ns`, "
    "`memory_bound_ns`, `unrated_ns` (modelled, no peak to rate against), `unmodelled_ns` (kernels no modelled op launched; they add up to `kernel_ns`), "
    "`duration_ns` (the window), `mfu` (the time the model FLOPs take at each precision's peak over the window's time; null without a peak for every "
    "precision used), `steps` [{`number`, `duration_ns`, `flops` (of the ops that started in the step on the host), `mfu`}], `ops` (the 25 op shapes with "
    "the most kernel time: `name`, `inputs` (the recorded `[dims, types, concrete inputs, flops, strides]` as JSON text), `family` (`gemm`, `conv`, "
    "`attention`, `elementwise`, `norm`, `softmax`, `reduction`, `embedding`, `copy`, `foreach` (ops on lists of tensors: `_foreach_*`, fused optimizers; "
    "bytes only), `profiler`), `precision` ('' for ops that only move data), `count`, "
    "`flops`, `nbytes`, `kernel_ns`, `tflops` and `tbps` (achieved, over the kernels' time), `intensity` (FLOPs per byte), `bound` (`compute`, `memory`, '' "
    "without a peak), `fraction` (of the bound reached; null without a peak; above 1 where the kernel does less than the formula, e.g. Winograd "
    "convolutions, or reads less than each tensor once from memory), `note` (an assumption made: a stride not recorded)), `unmodelled` ([kernel name, ns] "
    "pairs, the 25 longest), `notes` (sentences: an unknown device, a precision without a peak, a trace without shapes), `comms` (absent when no "
    "communication kernel started in the window; `analyses/collectives.py`): `link` (null: no link bandwidth known for the device; else `name` "
    "(`NVLink 4`, `Infinity Fabric`), `total_gbps` (both directions over all links, as the vendor document prints it) and `source`), `kernel_ns` "
    "(communication kernels that started in the window, summed), `unsized_ns` (of which no record gave the size), `rates` (the 25 collective shapes "
    "with the most kernel time: `name` (`all_reduce`, `all_reduce_in_network` (a multimem all-reduce in the NVLink switch), `all_gather`, "
    "`reduce_scatter`, `all_to_all`, `broadcast`, `reduce`, `send_recv`, or the recorded name), `dtype`, `group_size` (0: not known), `nbytes` (one "
    "call's message size S, as nccl-tests: the larger of input and output), `count`, `kernel_ns`, `algbw_gbps` (S x count / kernel time, GB/s), "
    "`busbw_gbps` (algbw x nccl-tests' factor for the collective and group size; null when either is unknown), `fraction` (bus bandwidth over "
    "`link.total_gbps / 2`, one direction; null without a link), `note` (a group size taken from the world size or from the output/input ratio)), "
    "`notes` (sentences)"
)

_EXTRA_DOC = (
    "a report built by the live step tracker: `tracker` (device, timing basis, loader settings, per-step figures); a trace with step markers and linked "
    "device work: `critical_path`, the median step's critical path from the replay: `step`, `start_ns`, `duration_ns`, `by_kind_ns` (`host`, `loader`, "
    "`sync`, `h2d copy`, `d2h copy`, `launch latency`, `device`), `segments` [{`kind`, `start_ns`, `end_ns`, `names` (device work: its names; host and "
    "loader time: the CPU ops that overlap it most, joined), `count`}] (consecutive segments of one kind merged, at most 200), `segments_left_out`"
)

_GAP_COLUMNS_DOC = (
    "full form only: **every** device-idle gap, as columns of equal length (`count`), sorted by device then start: `start_ns`, `end_ns`, `device`, "
    "`causes_ns` (`\"group/cause\"` -> ns of each gap held by that cause; causes with no time left out), `drained_by_sync` (0/1), `host_end_ns` (end of "
    "the host-side part), `thread` (the launching thread: index into `lanes`, -1 unknown), `next_work`, `cpu_op` (the CPU op that overlapped the host "
    "part most), `cpu_op_start_ns`, `cpu_op_end_ns`, and for the 2,000 largest gaps `cpu_before`, `python_line`, `runtime_call` (-1 elsewhere: not "
    "looked up). Name columns index `strings` (-1: none). Absent for inputs without events (counter logs, the step tracker)"
)

DIAGNOSIS = Table(
    DiagnosisData,
    Field("schema_version", STR, f'`"{SCHEMA_VERSION}"`', get=lambda s: SCHEMA_VERSION, derived=True),
    Field("tool", Dict(STR), "`{name, version}`", get=lambda s: {"name": "whyidle", "version": __version__}, derived=True),
    Field("source", Rec(P.SOURCE)),
    Field("window", Rec(P.WINDOW)),
    Field("utilization", Rec(UTILIZATION), get=lambda s: s.data),
    Field("throughput", Rec(THROUGHPUT), get=lambda s: s.data.utilization),
    Field("step_time", Rec(STEP_TIME), get=lambda s: s.data.utilization.step_times_ns, derived=True),
    Field("steps", Tup(Rec(P.STEP)), "list", get=lambda s: s.data.utilization.steps, default=()),
    Field("kernels", Rec(P.KERNELS)),
    Field("advice_context", Opt(Struct(AdviceContext)), _ADVICE_DOC, attr="advice", default=None),
    Field("idle_ns", INT, "device idle in the window (summed over devices)", derived=True),
    Field("idle_by_group_ns", Dict(INT), "every group: `starvation`, `underfilled`, `synchronization`, `insufficient_demand`, `unattributed`", derived=True),
    Field(
        "idle_by_cause_ns", _ByCause(),
        "`\"group/cause\"` -> ns, non-zero causes only; the causes are the entries of `whyidle/catalogue.py` (`whyidle explain` prints their pages)",
        default=None,
    ),  # fmt: skip
    Field(
        "capture_artifacts_ns", Dict(INT),
        "the part of `idle_by_cause_ns` that is capture artifacts (`unattributed/cold_start`, `unattributed/capture_boundary`), non-zero only; never a ranked finding",
        attr="artifact_idle_ns", derived=True,
    ),  # fmt: skip
    Field("gap_count", INT, "number of device-idle gaps in the window"),
    Field(
        "findings", Tup(Rec(P.FINDING)),
        "ranked by `idle_ns + compute_wait_ns`, then `affected_busy_ns` (upper bound on what the fix recovers)", default=(),
    ),  # fmt: skip
    Field("skipped", Tup(Rec(P.SKIPPED)), "rules that could not run, with the reason", default=()),
    Field("gaps", Tup(Rec(P.GAP)), "the largest gaps (up to 50) with their full CPU context (every gap: `gap_columns`)", default=()),
    Field("quality", Tup(STR), "trace-quality notes (sentences)", default=()),
    Field("cold_start", BOOL, "true when first-call costs dominate device idle", default=False),
    Field("no_device_activity", BOOL, "true when the trace holds no device work", default=False),
    Field("extra", _Extra(), _EXTRA_DOC, when=lambda s: bool(s.data.extra), default={}),
    Field("counters", Opt(Rec(P.COUNTERS)), "a counter log was read (`whyidle diagnose gpu.log`, or `--counters`)", when=lambda s: s.data.counters is not None, default=None),
    Field(
        "detail", STR,
        "`summary` (the default: everything except `lanes`, `gap_columns` and `activity`) or `full` (`whyidle diagnose TRACE -o r.json --full-json`, "
        "`report.save(path, columns=True)`, `to_dict(columns=True)`: those three too; what a saved report needs to draw the HTML timeline strip and "
        "the Perfetto trace). Both load back with `whyidle.load_report`; reports saved before this field were full",
        get=lambda s: "full" if s.columns else "summary", derived=True,
    ),  # fmt: skip
    Field("lanes", Tup(Rec(P.LANE)), "full form only: the trace's lanes", when=lambda s: s.columns and bool(s.data.lanes), default=()),
    Field("gap_columns", Opt(P.GapColumnsValue()), _GAP_COLUMNS_DOC, when=lambda s: s.columns and s.data.gap_columns is not None, default=None),
    Field(
        "activity", Opt(P.ActivityValue()),
        "full form only: per device: `device`, and its busy time as sorted disjoint intervals `compute`, `communication` (exposed), `copies` "
        "(not under kernels), each `{start_ns: [...], end_ns: [...]}`, clipped to the window",
        when=lambda s: s.columns and s.data.activity is not None, default=None,
    ),  # fmt: skip
    Field(
        "name_times", Opt(Rec(P.NAME_TIMES)), "inside the window: what `whyidle compare` lists",
        when=lambda s: s.data.name_times is not None, default=None,
    ),  # fmt: skip
    Field("work", Opt(Struct(WorkSummary)), _WORK_DOC, when=lambda s: s.data.work is not None, default=None),
    path="data",
)


def _built(v: dict[str, Any]) -> DiagnosisData:
    window, window_ns = v["window"]
    util = Utilization(window_ns=window_ns, **v["utilization"], **v["throughput"], steps=v["steps"])
    lanes, columns = v["lanes"], v["gap_columns"]
    if columns is not None and len(columns) and int(columns.thread.max()) >= len(lanes):
        raise Malformed("gap_columns.thread", "points past the lanes")
    by_cause = v["idle_by_cause_ns"] if v["idle_by_cause_ns"] is not None else {c.key: 0 for c in C.CAUSES}
    rest = {k: x for k, x in v.items() if k not in ("window", "utilization", "throughput", "steps", "idle_by_cause_ns", "extra")}
    return DiagnosisData(window=window, utilization=util, idle_by_cause_ns=by_cause, extra=dict(v["extra"]), **rest)


DIAGNOSIS.build = _built


def encode(data: DiagnosisData, columns: bool = False) -> dict[str, Any]:
    """The JSON report of a diagnosis, as plain data (``columns``: the full form)."""
    return DIAGNOSIS.write(Saved(data, columns))


def decode(d: Any) -> DiagnosisData:
    """The diagnosis a report's dict describes (KeyError, TypeError, ValueError or Malformed where it is not one)."""
    out: DiagnosisData = DIAGNOSIS.read(d)
    return out
