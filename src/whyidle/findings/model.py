"""The diagnosis as typed objects: Finding, Evidence, Fix, Skipped, GapRecord, GapColumns, DiagnosisData.

:class:`DiagnosisData` is what every renderer (terminal, JSON, HTML, Perfetto) takes, and all it
takes: besides the findings it holds every gap as columns (:class:`GapColumns`), each device's
busy time (``activity``) and the lanes of the trace, so no output reads the input again. It holds
measured numbers only, in nanoseconds and fractions, never pre-formatted text for an output.

This module imports no renderer: the public :class:`whyidle.Diagnosis` (``whyidle/diagnosis.py``)
is this data with the conveniences that render it (``print(d)``, ``d.save("report.html")``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.timeline.model import Lane

if TYPE_CHECKING:  # annotations only: a Kineto diagnosis need not import the counter analyses
    from whyidle.analyses.advice_context import AdviceContext
    from whyidle.analyses.counters import CounterAnalysis
    from whyidle.analyses.kernels import KernelStats
    from whyidle.analyses.names import NameTimes
    from whyidle.analyses.strip import DeviceActivity
    from whyidle.analyses.utilization import Utilization
    from whyidle.analyses.work import WorkSummary

__all__ = [
    "Prediction", "Fix", "Evidence", "Finding", "Skipped", "GapRecord", "GapColumns", "SourceInfo", "WindowInfo",
    "DiagnosisData",
]  # fmt: skip

I64 = npt.NDArray[np.int64]


class Fix(msgspec.Struct, frozen=True):
    summary: str  # the lever, one sentence
    steps: tuple[str, ...]  # what to change, in order
    code: str  # a short snippet
    verify: str  # how to check that it worked
    expected: str  # the expected effect, from the measured numbers
    docs: str  # a cause page (group name, see whyidle.pages) or a section of the repository docs


class Evidence(msgspec.Struct, frozen=True):
    gap_count: int
    idle_ns: int
    per_step_idle_ns: float | None  # mean over the selected steps
    share_of_step: float | None  # per-step idle of this cause / mean step time
    top_ops: tuple[tuple[str, int, int], ...]  # (op, ns overlapping these gaps, gaps)
    python_lines: tuple[tuple[str, int], ...]  # (file:line in func, gaps)
    examples: tuple[tuple[int, int, int], ...]  # (start_ns, end_ns, ns of this cause)
    facts: tuple[tuple[str, Any], ...] = ()  # other measured values, (name, value)


class Prediction(msgspec.Struct, frozen=True):
    """What the fix is predicted to buy, from a what-if replay of the trace (analyses/whatif.py)."""

    lever: str  # the change replayed, one phrase
    assumption: str  # what the replay assumed, one sentence
    step_ns_before: float  # the replay with no change (the recorded mean step, within 1%)
    step_ns_after: float  # predicted mean step time after the fix
    step_ns_low: float  # the range the assumption allows (low = the most optimistic)
    step_ns_high: float
    batch_factor: float = 1.0  # samples per step after / before
    samples_per_s_before: float | None = None
    samples_per_s_after: float | None = None
    # Why the prediction recovers more than its finding explains, when it does (findings/predict.py
    # says it in words: the edit also shortens time outside the finding's gaps); '' otherwise.
    note: str = ""

    @property
    def recommended(self) -> bool:
        """The replay found a gain (0.5 % of the step or more): a fix predicted to gain nothing or
        to slow the job down is not recommended on this evidence."""
        return self.speedup >= 1.005

    @property
    def speedup(self) -> float:
        """Predicted samples/s after / before (steps/s when the batch is unknown)."""
        return self.batch_factor * self.step_ns_before / self.step_ns_after if self.step_ns_after > 0 else float("nan")

    @property
    def recovered_share(self) -> float:
        """Share of the step time the fix recovers (per sample when the batch changes)."""
        return 1.0 - 1.0 / self.speedup if self.speedup > 0 else 0.0

    def summary(self) -> str:
        """'Predicted with ...: step 18.7 ms -> 5.1 ms (5.0-5.1 ms), samples/s x3.65, 73% of the step recovered'."""
        from whyidle.units import format_ns

        rng = f" ({format_ns(self.step_ns_low)}-{format_ns(self.step_ns_high)})" if self.step_ns_high - self.step_ns_low > 0.01 * self.step_ns_after else ""
        rate = "samples/s" if self.samples_per_s_before is not None else "steps/s"
        if not self.recommended:
            return (
                f"Replayed with {self.lever}: no gain (step {format_ns(self.step_ns_before)} -> {format_ns(self.step_ns_after)}, "
                f"{rate} x{self.speedup:.2f}): not recommended on this trace's evidence"
            )
        per = " per sample" if self.batch_factor != 1 else ""
        return (
            f"Predicted with {self.lever}: step {format_ns(self.step_ns_before)} -> {format_ns(self.step_ns_after)}{rng}, "
            f"{rate} x{self.speedup:.2f}, {self.recovered_share:.0%} of the step{per} recovered"
        )


class Finding(msgspec.Struct, frozen=True):
    id: str
    group: str
    cause: str
    title: str
    idle_ns: int  # device-idle time this cause explains: an upper bound on what the fix recovers
    share_of_idle: float
    share_of_window: float
    evidence: Evidence
    fix: Fix
    variant: str = ""  # e.g. "single_process" for the input pipeline
    affected_busy_ns: int = 0  # for findings about busy time (FP32 math)
    prediction: Prediction | None = None  # what the fix buys, when the trace lets whyidle replay it
    # device time with no kernel running while the device only did this cause's work (an exposed
    # input copy): not idle, but time the compute waited, ranked beside idle time (rank_key)
    compute_wait_ns: int = 0
    # busy time the fix is estimated to save (a busy-time finding's estimate from the roofline,
    # findings/work_rules.py): ranked beside idle time (rank_key); 0 where there is no estimate
    est_saving_ns: int = 0

    @property
    def basis(self) -> str:
        """What ``share_of_idle`` and ``share_of_window`` are of: 'warm ' when a cold start
        dominated the capture and the finding was measured on its warm remainder, else ''."""
        return "warm " if any(k == "warm_window_ns" for k, _ in self.evidence.facts) else ""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


def rank_key(f: Finding) -> tuple[int, int]:
    """Findings rank by the time a fix would recover: the time the device's compute waited on their
    cause (idle time, or an exposed copy) or the busy time a fix is estimated to save, then by the
    busy time they concern."""
    return (-(f.idle_ns + f.compute_wait_ns + f.est_saving_ns), -f.affected_busy_ns)


class Skipped(msgspec.Struct, frozen=True):
    rule: str
    reason: str


class GapRecord(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int
    device: int
    group: str
    cause: str
    causes_ns: tuple[tuple[str, int], ...]  # every cause holding part of the gap, largest first
    next_work: str
    thread: str
    before: str
    during: str
    outermost: str
    innermost: str
    runtime_call: str
    python_line: str
    drained_by_sync: bool

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class GapColumns(msgspec.Struct, frozen=True):
    """Every device-idle gap of the window, one row each, sorted by device then start: the gaps
    of :class:`whyidle.analyses.gaps.Gaps` with the names a renderer shows, not one object each.

    Names are indexes into ``strings``; ``-1`` is "none". ``thread`` indexes the diagnosis's
    ``lanes``. The CPU context columns (``before``, ``python_line``, ``runtime_call``) are
    filled for the ``RenderSettings.context_gaps`` largest gaps only (``-1`` elsewhere: not looked up),
    as looking them up costs about 15 us a gap.
    """

    start_ns: I64
    end_ns: I64
    device: I64
    causes_ns: I64  # shape (n, len(CAUSES)): ns of each gap held by each cause, columns as CAUSES
    drained_by_sync: npt.NDArray[np.bool_]
    host_end_ns: I64  # end of the host-side part [start, host_end) (the next launch, clipped)
    thread: I64  # the launching thread: index into DiagnosisData.lanes (-1: unknown)
    next_work: I64  # the device work that ended the gap (-1: none before the window's end)
    op: I64  # the top-level CPU op on the launching thread overlapping the host part most (-1: none)
    op_start_ns: I64  # that op's start and end (0 when none)
    op_end_ns: I64
    before: I64  # the last top-level op before the gap (-1: not looked up)
    python_line: I64  # the innermost user frame (-1: not looked up)
    runtime_call: I64  # the runtime call open when the gap began (-1: not looked up)
    strings: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    @property
    def primary(self) -> I64:
        """Index into CAUSES of the cause that holds most of each gap."""
        from whyidle.analyses.gaps import primary_causes

        return primary_causes(self.causes_ns)

    def text(self, column: I64, i: int) -> str:
        """The string of row ``i`` of a name column ('' for -1)."""
        k = int(column[i])
        return self.strings[k] if k >= 0 else ""


class SourceInfo(msgspec.Struct, frozen=True):
    path: str
    format: str
    version: str
    devices: tuple[str, ...]
    rank: int | None
    world_size: int | None
    training: bool
    # What kind of job: training, serving, inference, non_pytorch or unknown ('' when the
    # source does not say), and the evidence that decided it (analyses/workload.py).
    workload: str = ""
    workload_evidence: tuple[str, ...] = ()


class WindowInfo(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int
    basis: str
    steps: tuple[int, ...]
    all_steps: tuple[int, ...]

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class DiagnosisData(msgspec.Struct, frozen=True):
    """Everything whyidle found about one profile; the input is not needed again to show it."""

    source: SourceInfo
    window: WindowInfo
    utilization: Utilization
    kernels: KernelStats
    idle_by_cause_ns: dict[str, int]
    gap_count: int
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    gaps: tuple[GapRecord, ...]  # the largest gaps, with their full CPU context
    quality: tuple[str, ...]
    cold_start: bool
    no_device_activity: bool
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    counters: CounterAnalysis | None = None  # GPU counter figures (a counter log, alone or joined)
    # Every gap, each device's busy time and the trace's lanes (None: the input has no events,
    # a counter log or the step tracker, or a report saved before they were recorded).
    gap_columns: GapColumns | None = None
    activity: tuple[DeviceActivity, ...] | None = None
    lanes: tuple[Lane, ...] = ()
    name_times: NameTimes | None = None  # time per kernel and op name in the window (compare)
    # What the job is and already does, as the trace shows it: every fix was chosen from it (None:
    # an input with no events, or a report saved before it was recorded).
    advice: AdviceContext | None = None
    # The useful work inside busy time: FLOPs and bytes per op, the roofline, MFU per step
    # (analyses/work.py; None: an input without events, or a report saved before it was recorded).
    work: WorkSummary | None = None

    @property
    def idle_ns(self) -> int:
        return self.utilization.idle_ns

    @property
    def idle_by_group_ns(self) -> dict[str, int]:
        from whyidle.analyses.causes import GROUPS

        out = {g: 0 for g in GROUPS}
        for key, ns in self.idle_by_cause_ns.items():
            out[key.split("/", 1)[0]] += ns
        return out

    @property
    def artifact_idle_ns(self) -> dict[str, int]:
        """Idle time of the capture artifacts (cold start, capture boundaries), non-zero only."""
        from whyidle.analyses.causes import ARTIFACTS

        return {c.key: self.idle_by_cause_ns[c.key] for c in ARTIFACTS if self.idle_by_cause_ns.get(c.key, 0) > 0}

    @property
    def problems(self) -> tuple[Finding, ...]:
        return self.findings
