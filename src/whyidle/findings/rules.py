"""Rules: analysis results -> ranked findings, with evidence and the lever to pull.

Each rule states the data it needs; when that data is missing the rule is skipped with a reason
instead of returning nothing silently. Findings are ranked by the device-idle time they explain,
which is an upper bound on what fixing the cause can recover (removing one wait can expose the
next one).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from whyidle.analyses import causes as C
from whyidle.analyses.context import CauseEvidence, ThreadIndex, cause_evidence
from whyidle.analyses.gaps import Gaps
from whyidle.analyses.hostops import is_dataloader
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.quality import Quality
from whyidle.analyses.utilization import Utilization
from whyidle.analyses.window import Window
from whyidle.config import Config
from whyidle.findings.levers import Lever, lever_for
from whyidle.findings.model import Evidence, Finding, Fix, Skipped
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline
from whyidle.units import format_ms

__all__ = ["Analyses", "build_findings", "cause_finding"]


class Analyses(msgspec.Struct, frozen=True):
    """Everything the rules read."""

    tl: Timeline
    window: Window
    gaps: Gaps
    utilization: Utilization
    kernels: KernelStats
    quality: Quality
    index: ThreadIndex


def _fix(lever: Lever, expected: str) -> Fix:
    return Fix(lever.summary, lever.steps, lever.code, lever.verify, expected, lever.docs)


def _evidence(a: Analyses, cause: C.Cause, ev: CauseEvidence, idle_ns: int, facts: tuple[tuple[str, Any], ...] = ()) -> Evidence:
    steps = a.utilization.steps
    per_step = share = None
    if steps:
        ci = C.cause_index(cause)
        per = [s.idle_by_cause_ns[ci] for s in steps]
        per_step = float(np.mean(per))
        mean_step = float(np.mean([s.duration_ns for s in steps]))
        share = per_step / mean_step if mean_step else None
    return Evidence(
        gap_count=ev.gap_count,
        idle_ns=idle_ns,
        per_step_idle_ns=per_step,
        share_of_step=share,
        top_ops=ev.top_ops,
        python_lines=ev.python_lines,
        examples=ev.examples,
        facts=facts,
    )


def _loader_variant(ev: CauseEvidence) -> str:
    names = " ".join(n for n, _, _ in ev.top_ops)
    if "_SingleProcessDataLoaderIter" in names:
        return "single_process"
    if "_MultiProcessingDataLoaderIter" in names:
        return "multi_process"
    return ""


def _count_in_ranges(tl: Timeline, range_pred: Any, op_pred: Any) -> tuple[int, int]:
    """(number of ranges matching range_pred, ops matching op_pred inside them on the same thread)."""
    ranges = np.flatnonzero(tl.name_mask(range_pred) & np.isin(tl.kind, (int(Kind.CPU_OP), int(Kind.ANNOTATION))))
    if ranges.size == 0:
        return 0, 0
    ops = np.flatnonzero(tl.name_mask(op_pred) & np.isin(tl.kind, (int(Kind.CPU_OP), int(Kind.RUNTIME))))
    total = 0
    # Per thread: ops sorted by start; the ones inside a range are those starting in it and
    # ending by its end (binary search for the candidates, then a check on the few found).
    for lane in unique_sorted(tl.lane[ranges]):
        on = ops[tl.lane[ops] == lane]  # timeline rows are sorted by start
        starts = tl.start_ns[on]
        for r in ranges[tl.lane[ranges] == lane]:
            a = int(np.searchsorted(starts, tl.start_ns[r], side="left"))
            b = int(np.searchsorted(starts, tl.end_ns[r], side="right"))
            total += int((tl.end_ns[on[a:b]] <= tl.end_ns[r]).sum())
    return int(ranges.size), total


def _host_overhead_facts(a: Analyses) -> tuple[tuple[str, Any], ...]:
    k = a.kernels
    facts: list[tuple[str, Any]] = [
        ("kernels", k.count),
        ("short_kernel_share", round(k.short_share, 4)),
        ("median_kernel_ns", k.median_ns),
        ("mean_launch_call_ns", k.mean_launch_ns),
    ]
    n_zero, fills = _count_in_ranges(a.tl, lambda s: s.startswith("Optimizer.zero_grad"), lambda s: s in ("aten::zero_", "aten::fill_"))
    if n_zero and fills:
        facts.append(("zero_grad_fill_ops_per_call", fills // (2 * n_zero) or fills // n_zero))
    n_step, launches = _count_in_ranges(a.tl, lambda s: s.startswith("Optimizer.step"), lambda s: s.startswith(("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel")))
    if n_step and launches:
        facts.append(("optimizer_step_kernel_launches_per_call", launches // n_step))
    return tuple(facts)


def _host_overhead_steps(facts: dict[str, Any], base: tuple[str, ...]) -> tuple[str, ...]:
    named = []
    fills = facts.get("zero_grad_fill_ops_per_call")
    if fills:
        named.append(
            f"Seen here: optimizer.zero_grad() fills every gradient with zeros ({fills} fill ops per call); "
            "use zero_grad(set_to_none=True)."
        )
    launches = facts.get("optimizer_step_kernel_launches_per_call")
    if launches and launches >= 50:
        named.append(
            f"Seen here: optimizer.step() launches {launches} kernels per call (a per-parameter loop); "
            "use a fused or foreach optimizer (fused=True / foreach=True)."
        )
    short = facts.get("short_kernel_share")
    med, launch = facts.get("median_kernel_ns"), facts.get("mean_launch_call_ns")
    if med is not None and launch is not None and med < launch:
        named.append(
            f"Seen here: the median kernel ({med / 1e3:.1f} us) is shorter than the host time of one launch "
            f"({launch / 1e3:.1f} us); {short:.0%} of kernels are short. Bigger batches or fusion help most."
        )
    return tuple(named) + base


def _not_dataloader(name: str) -> bool:
    return not is_dataloader(name)


# Which ops count as evidence for a cause (None: every op on the launching thread).
_OP_FILTERS = {
    C.INPUT_PIPELINE: is_dataloader,
    C.H2D_COPY: _not_dataloader,
    C.HOST_SYNC: _not_dataloader,
    C.HOST_OVERHEAD: _not_dataloader,
}


def cause_finding(
    cause: C.Cause, lever: Lever, variant: str, idle_ns: int, idle_total_ns: int, window_ns: int, evidence: Evidence, fix: Fix
) -> Finding:
    """The finding for an idle cause: id, group, title and shares, the same for every source."""
    return Finding(
        id=cause.cause if not variant else f"{cause.cause}.{variant}",
        group=cause.group,
        cause=cause.cause,
        title=lever.title,
        idle_ns=idle_ns,
        share_of_idle=idle_ns / idle_total_ns if idle_total_ns else 0.0,
        share_of_window=idle_ns / window_ns if window_ns else 0.0,
        evidence=evidence,
        fix=fix,
        variant=variant,
    )


def build_findings(a: Analyses, cfg: Config) -> tuple[tuple[Finding, ...], tuple[Skipped, ...]]:
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    g = a.gaps
    util = a.utilization
    idle = util.idle_ns
    capacity = util.capacity_ns
    if a.quality.no_device_activity:
        return (), (Skipped("all", "no GPU activity in this trace"),)
    if not g.has_host_events:
        skipped.append(Skipped("starvation, synchronization, underfilled, insufficient_demand", "no CPU-side events: cannot tell host sync from starvation"))
    if g.training:
        skipped.append(Skipped("insufficient_demand", "the trace is training (backward or optimizer seen); demand applies to inference"))
    totals = g.total_by_cause()
    threshold = cfg.min_finding_share_of_window * capacity
    for ci, cause in enumerate(C.CAUSES):
        ns = int(totals[ci])
        if ns <= 0:
            continue
        if ns < threshold:
            continue
        if a.quality.cold_start and cause is not C.COLD_START:
            skipped.append(Skipped(cause.key, f"cold start dominates the capture; {format_ms(ns)} of idle not blamed on this cause"))
            continue
        ev = cause_evidence(a.tl, g, ci, a.index, examples=cfg.evidence_examples, op_filter=_OP_FILTERS.get(cause))
        variant = _loader_variant(ev) if cause is C.INPUT_PIPELINE else ""
        lever = lever_for(cause.cause, variant)
        facts: tuple[tuple[str, Any], ...] = ()
        steps = lever.steps
        if cause is C.HOST_OVERHEAD:
            facts = _host_overhead_facts(a)
            steps = _host_overhead_steps(dict(facts), lever.steps)
        if cause is C.HOST_SYNC:
            facts = (("gaps_drained_by_sync", int((g.drained_by_sync & (g.slices[:, ci] > 0)).sum())),)
        evidence = _evidence(a, cause, ev, ns, facts)
        per_step = f", {format_ms(evidence.per_step_idle_ns)} per step" if evidence.per_step_idle_ns is not None else ""
        expected = (
            f"up to {format_ms(ns)} of device idle ({ns / idle:.0%} of idle{per_step}) can be recovered; "
            "an upper bound, since removing this wait may expose the next one"
        )
        fix = _fix(lever, expected)
        if steps is not lever.steps:
            fix = Fix(fix.summary, steps, fix.code, fix.verify, fix.expected, fix.docs)
        findings.append(cause_finding(cause, lever, variant, ns, idle, capacity, evidence, fix))
    fp32 = _fp32_finding(a, cfg) if not a.quality.cold_start else None
    if isinstance(fp32, Finding):
        findings.append(fp32)
    elif fp32 is not None:
        skipped.append(fp32)
    findings.sort(key=lambda f: (-f.idle_ns, -f.affected_busy_ns))
    return tuple(findings), tuple(skipped)


def _fp32_finding(a: Analyses, cfg: Config) -> Finding | Skipped | None:
    k = a.kernels
    if k.fp32_math_ns == 0:
        return None
    cc = a.tl.meta.min_compute_capability
    if cc is None:
        return Skipped("underfilled/fp32_math", "the trace does not give the device's compute capability: cannot tell whether it has tensor cores")
    if cc < (7, 0):
        return None
    if k.fp32_math_share < cfg.fp32_math_min_share_of_kernel_time:
        return None
    # Volta and Turing (7.x) have FP16 tensor cores only; BF16 and TF32 need Ampere (8.0).
    lever = lever_for("fp32_math", "fp16_only" if cc < (8, 0) else "")
    facts: tuple[tuple[str, Any], ...] = (
        ("compute_capability", f"{cc[0]}.{cc[1]}"),
        ("fp32_math_share_of_kernel_time", round(k.fp32_math_share, 4)),
        ("tensor_core_share_of_kernel_time", round(k.tensor_core_share, 4)),
    )
    top_ops = tuple((name, ns, 0) for name, ns in k.top_fp32_kernels)
    ev = Evidence(0, 0, None, None, top_ops, (), (), facts)
    expected = (
        f"{format_ms(k.fp32_math_ns)} of kernel time ({k.fp32_math_share:.0%}) runs FP32 GEMM/convolution "
        f"without tensor cores on compute capability {cc[0]}.{cc[1]}: the share of kernel time that tensor cores "
        "can shorten; re-profile to measure the step time saved"
    )
    return Finding(
        id="fp32_math",
        group="underfilled",
        cause="fp32_math",
        title=lever.title,
        idle_ns=0,
        share_of_idle=0.0,
        share_of_window=0.0,
        evidence=ev,
        fix=_fix(lever, expected),
        variant="fp16_only" if cc < (8, 0) else "",
        affected_busy_ns=k.fp32_math_ns,
    )
