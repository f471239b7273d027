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
from whyidle.analyses.hostops import is_dataloader, is_sync_call
from whyidle.analyses.hostwork import WorkClass
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.links import uncorrelated_by_design
from whyidle.analyses.quality import Quality
from whyidle.analyses.utilization import Utilization
from whyidle.analyses.window import Window
from whyidle.config import Config
from whyidle.findings.levers import Lever, lever_for
from whyidle.findings.model import rank_key, Evidence, Finding, Fix, Skipped
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline
from whyidle.units import format_ms

__all__ = ["Analyses", "build_findings", "cause_finding", "capture_advice"]


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
    opt = _optimizer_name(a.tl)
    if opt:
        facts.append(("optimizer", opt))
    return tuple(facts)


# Optimizers with a fused implementation in torch.optim (fused=True; SGD's since PyTorch 2.4);
# any other optimizer class the trace names gets foreach=True.
_FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")


def _optimizer_name(tl: Timeline) -> str:
    """The optimizer class the trace shows (``Optimizer.step#SGD.step``), the most frequent; '' if none."""
    counts: dict[str, int] = {}
    for i, name in enumerate(tl.strings):
        if name.startswith("Optimizer.step#") and name.endswith(".step"):
            cls = name[len("Optimizer.step#") : -len(".step")]
            if cls.isidentifier():
                counts[cls] = counts.get(cls, 0) + int((tl.name == i).sum())
    return max(counts, key=lambda k: counts[k]) if counts else ""


def _host_overhead_code(facts: dict[str, Any], code: str) -> str:
    """The lever's code with the trace's own optimizer class, when the trace names one."""
    opt = facts.get("optimizer")
    generic = "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)"
    if not opt or generic not in code:
        return code
    flag = "fused" if opt in _FUSED_OPTIMIZERS else "foreach"
    return code.replace(generic, f"opt = torch.optim.{opt}(model.parameters(), lr=lr, {flag}=True)  # {opt}, as in this trace")


def _host_overhead_steps(facts: dict[str, Any], base: tuple[str, ...]) -> tuple[str, ...]:
    named = []
    fills = facts.get("zero_grad_fill_ops_per_call")
    if fills:
        named.append(
            f"Seen here: optimizer.zero_grad() fills every gradient with zeros ({fills} fill ops per call); "
            "use zero_grad(set_to_none=True)."
        )
    launches = facts.get("optimizer_step_kernel_launches_per_call")
    opt = facts.get("optimizer")
    if launches and launches >= 50:
        use = f"use {opt}(..., {'fused' if opt in _FUSED_OPTIMIZERS else 'foreach'}=True)" if opt else "use a fused or foreach optimizer (fused=True / foreach=True)"
        named.append(f"Seen here: {opt or 'optimizer'}.step() launches {launches} kernels per call (a per-parameter loop); {use}.")
    short = facts.get("short_kernel_share")
    med, launch = facts.get("median_kernel_ns"), facts.get("mean_launch_call_ns")
    if med is not None and launch is not None and med < launch:
        named.append(
            f"Seen here: the median kernel ({med / 1e3:.1f} us) is shorter than the host time of one launch "
            f"({launch / 1e3:.1f} us); {short:.0%} of kernels are short. Bigger batches or fusion help most."
        )
    # a step named from the trace replaces the generic step it specialises, so no advice is given twice
    if fills:
        base = tuple(b for b in base if "set_to_none" not in b)
    if launches and launches >= 50:
        base = tuple(b for b in base if "optimizers" not in b)
    if opt:
        flag = "fused=True" if opt in _FUSED_OPTIMIZERS else "foreach=True"
        base = tuple(b.replace("torch.optim.AdamW(..., fused=True)", f"torch.optim.{opt}(..., {flag}), as this trace uses {opt}") for b in base)
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


# Causes whose evidence is the innermost Python frame, range or OS call rather than an op.
_CONTEXT_EVIDENCE: dict[C.Cause, tuple[int, ...]] = {
    C.HOST_PREPROCESSING: (WorkClass.DATA, WorkClass.USER),
    C.IDLE_HOST: (WorkClass.WAIT,),
    C.UNTRACED_HOST: (WorkClass.WAIT,),
    C.DEPENDENCY_WAIT: (WorkClass.RANKS,),
}


def _context_evidence(a: Analyses, ci: int, classes: tuple[int, ...], limit_gaps: int = 200) -> tuple[tuple[str, int, int], ...]:
    """The innermost Python frames, ranges and OS calls of these classes during the gaps of one cause."""
    g, tl = a.gaps, a.tl
    part = g.slices[:, ci]
    idx = np.flatnonzero(part > 0)
    idx = idx[np.argsort(-part[idx], kind="stable")][:limit_gaps]
    ns_by: dict[str, int] = {}
    gaps_by: dict[str, int] = {}
    for lane in np.unique(g.thread_lane[idx]).tolist():
        ctx = g.contexts.get(lane)
        if ctx is None or ctx.seg_start.size == 0:
            continue
        keep = np.isin(ctx.seg_class, classes)
        seg_s, seg_e, names = ctx.seg_start[keep], ctx.seg_end[keep], tl.name[ctx.seg_row[keep]]
        for i in idx[g.thread_lane[idx] == lane].tolist():
            lo, hi = int(g.start_ns[i]), int(g.host_end_ns[i])
            j0, j1 = int(np.searchsorted(seg_e, lo, side="right")), int(np.searchsorted(seg_s, hi, side="left"))
            ov = np.minimum(seg_e[j0:j1], hi) - np.maximum(seg_s[j0:j1], lo)
            seen: set[str] = set()
            for n, o in zip(names[j0:j1].tolist(), ov.tolist()):
                if o <= 0:
                    continue
                name = tl.strings[n]
                ns_by[name] = ns_by.get(name, 0) + int(o)
                if name not in seen:
                    gaps_by[name] = gaps_by.get(name, 0) + 1
                    seen.add(name)
    top = sorted(ns_by.items(), key=lambda kv: -kv[1])[:5]
    return tuple((name, ns, gaps_by[name]) for name, ns in top)


def _on_cpu_facts(a: Analyses, ci: int) -> tuple[tuple[str, Any], ...]:
    """Where the capture has thread scheduling (nsys): how much of this cause's host time the
    launching thread spent running (untraced code) rather than scheduled out (blocked)."""
    g = a.gaps
    sel = np.flatnonzero(g.slices[:, ci] > 0)
    total = off = 0
    for lane in np.unique(g.thread_lane[sel]).tolist():
        ctx = g.contexts.get(lane)
        if ctx is None or not ctx.has_sched:
            continue
        i = sel[g.thread_lane[sel] == lane]
        total += int((g.host_end_ns[i] - g.start_ns[i]).sum())
        off += int(ctx.off_cpu.overlap(g.start_ns[i], g.host_end_ns[i]).sum())
    if total <= 0:
        return ()
    return (("thread_on_cpu_share", round(1 - off / total, 3)), ("thread_scheduled_out_ns", off))


def _sync_facts(a: Analyses, ci: int) -> tuple[tuple[str, Any], ...]:
    """How often the launching threads synchronised: calls per step and per second, and per kernel."""
    g, tl, w = a.gaps, a.tl, a.window
    lanes = np.unique(g.thread_lane[(g.slices[:, ci] > 0) & (g.thread_lane >= 0)])
    rows = np.flatnonzero(
        np.isin(tl.lane, lanes) & (tl.kind == int(Kind.RUNTIME)) & (tl.start_ns >= w.start_ns) & (tl.start_ns < w.end_ns)
    )
    rows = rows[tl.name_mask(is_sync_call, rows)]
    names: dict[str, int] = {}
    for n in tl.name[rows].tolist():
        names[tl.strings[n]] = names.get(tl.strings[n], 0) + 1
    facts: list[tuple[str, Any]] = [("gaps_drained_by_sync", int((g.drained_by_sync & (g.slices[:, ci] > 0)).sum()))]
    if rows.size:
        facts.append(("sync_calls", int(rows.size)))
        facts.append(("sync_call_names", ", ".join(f"{k} x{v}" for k, v in sorted(names.items(), key=lambda kv: -kv[1])[:3])))
        if w.steps:
            facts.append(("sync_calls_per_step", round(rows.size / len(w.steps), 1)))
        if w.duration_ns > 0:
            facts.append(("sync_calls_per_s", round(rows.size / (w.duration_ns / 1e9), 1)))
        if a.kernels.count:
            facts.append(("kernels_per_sync", round(a.kernels.count / rows.size, 1)))
    return tuple(facts)


def _sync_steps(facts: dict[str, Any], base: tuple[str, ...]) -> tuple[str, ...]:
    n, per_kernel = facts.get("sync_calls"), facts.get("kernels_per_sync")
    if not n:
        return base
    where = f" ({facts['sync_calls_per_step']} per step)" if "sync_calls_per_step" in facts else ""
    pattern = f"one every {per_kernel} kernels" if per_kernel is not None else f"{facts.get('sync_calls_per_s')} per second"
    if per_kernel is not None and per_kernel <= 2.5:
        pattern = f"a device sync after every kernel or two ({per_kernel} kernels per sync)"
    seen = (
        f"Seen here: {n:,} synchronising calls{where}, {pattern}: {facts['sync_call_names']}. The host work after each one "
        "(the evidence) cannot overlap the device until the sync is removed."
    )
    return (seen,) + base


def _dependency_facts(a: Analyses, ci: int) -> tuple[tuple[str, Any], ...]:
    """What queued work waited for: stream-wait calls, collectives, MPI calls."""
    g, tl = a.gaps, a.tl
    sel = np.flatnonzero(g.slices[:, ci] > 0)
    nxt = g.next_row[sel]
    coll = int(((nxt >= 0) & (tl.kind[np.maximum(nxt, 0)] == int(Kind.COLLECTIVE))).sum())
    facts: list[tuple[str, Any]] = [("gaps", int(sel.size))]
    if coll:
        facts.append(("before_a_collective", coll))
    queued = sel[(g.launch_row[sel] >= 0) & (g.host_end_ns[sel] <= g.start_ns[sel])]
    if queued.size:
        facts.append(("queued_behind_a_stream_wait", int(queued.size) - coll if int(queued.size) > coll else 0))
    return tuple(facts)


def _uncorrelatable(a: Analyses, ci: int) -> bool:
    """Every gap of cause ``ci`` ends in device work that no capture links to a launch."""
    rows = a.gaps.next_row[(a.gaps.slices[:, ci] > 0) & (a.gaps.next_row >= 0)]
    return bool(rows.size) and bool(a.tl.name_mask(uncorrelated_by_design, rows).all())


def capture_advice(a: Analyses, cfg: Config) -> tuple[str, ...]:
    """A note naming the capture option that would let whyidle attribute what it could not.

    Said when unattributed time (not counting capture artifacts) is over
    ``Config.unattributed_note_min_share_of_idle`` of device idle.
    """
    g, tl = a.gaps, a.tl
    idle = a.utilization.idle_ns
    if len(g) == 0 or idle <= 0:
        return ()
    totals = g.total_by_cause()
    parts = {c: int(totals[C.cause_index(c)]) for c in (C.UNTRACED_HOST, C.QUEUED_WAITING, C.NO_LAUNCH_INFO)}
    unattributed = sum(parts.values())
    if unattributed <= cfg.unattributed_note_min_share_of_idle * idle:
        return ()
    nsys = tl.meta.source_format == "nsys"
    options: list[str] = []
    if parts[C.UNTRACED_HOST]:
        if nsys:
            options.append("nsys profile -t cuda,nvtx,osrt (OS-runtime calls) with NVTX ranges around the program's phases")
        elif not (tl.kind == int(Kind.PYTHON)).any():
            options.append("torch.profiler.profile(with_stack=True) for Python frames, or record_function ranges around untraced work")
        else:
            options.append("torch.profiler.record_function ranges around the work between steps")
    if parts[C.QUEUED_WAITING]:
        options.append("nsys profile --cuda-event-trace=true to see the events and streams queued work waited on" if nsys else "an Nsight Systems capture (nsys profile -t cuda,nvtx) to see the events and streams queued work waited on")
    if parts[C.NO_LAUNCH_INFO] and not _uncorrelatable(a, C.cause_index(C.NO_LAUNCH_INFO)):
        options.append("CPU and CUDA activities together (activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])")
    if not options:
        return (
            f"{unattributed / idle:.0%} of device idle is unattributed: it ends in device work that carries no "
            "correlation id (MTIA DMA requests), which no capture option links to a launch",
        )
    return (
        f"{unattributed / idle:.0%} of device idle is unattributed; to attribute it, capture with "
        + "; or ".join(options),
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
    if g.workload.kind != "serving":
        skipped.append(
            Skipped(
                "insufficient_demand",
                f"the workload is {g.workload.kind.replace('_', '-')}: demand applies only to a serving loop seen waiting for requests",
            )
        )
    totals = g.total_by_cause()
    threshold = cfg.min_finding_share_of_window * capacity
    for ci, cause in enumerate(C.CAUSES):
        ns = int(totals[ci])
        if ns <= 0 or cause in C.ARTIFACTS:  # artifacts are said in the headline, never ranked
            continue
        if ns < threshold:
            continue
        if a.quality.cold_start:
            skipped.append(Skipped(cause.key, f"cold start dominates the capture; {format_ms(ns)} of idle not blamed on this cause"))
            continue
        ev = cause_evidence(a.tl, g, ci, a.index, examples=cfg.evidence_examples, op_filter=_OP_FILTERS.get(cause))
        variant = _loader_variant(ev) if cause is C.INPUT_PIPELINE else "no_correlation" if cause is C.NO_LAUNCH_INFO and _uncorrelatable(a, ci) else ""
        lever = lever_for(cause.cause, variant)
        facts: tuple[tuple[str, Any], ...] = ()
        steps = lever.steps
        if cause is C.HOST_OVERHEAD:
            facts = _host_overhead_facts(a)
            steps = _host_overhead_steps(dict(facts), lever.steps)
        if cause is C.HOST_SYNC:
            facts = _sync_facts(a, ci)
            steps = _sync_steps(dict(facts), lever.steps)
        if cause in _CONTEXT_EVIDENCE:
            ev = msgspec.structs.replace(ev, top_ops=_context_evidence(a, ci, _CONTEXT_EVIDENCE[cause]) or ev.top_ops)
        if cause is C.DEPENDENCY_WAIT:
            facts = _dependency_facts(a, ci)
        if cause in (C.UNTRACED_HOST, C.IDLE_HOST):
            facts = _on_cpu_facts(a, ci)
        evidence = _evidence(a, cause, ev, ns, facts)
        per_step = f", {format_ms(evidence.per_step_idle_ns)} per step" if evidence.per_step_idle_ns is not None else ""
        expected = (
            f"up to {format_ms(ns)} of device idle ({ns / idle:.0%} of idle{per_step}) can be recovered; "
            "an upper bound, since removing this wait may expose the next one"
        )
        fix = _fix(lever, expected)
        if steps is not lever.steps:
            fix = Fix(fix.summary, steps, _host_overhead_code(dict(facts), fix.code), fix.verify, fix.expected, fix.docs)
        findings.append(cause_finding(cause, lever, variant, ns, idle, capacity, evidence, fix))
    fp32 = _fp32_finding(a, cfg) if not a.quality.cold_start else None
    if isinstance(fp32, Finding):
        findings.append(fp32)
    elif fp32 is not None:
        skipped.append(fp32)
    findings.sort(key=rank_key)
    return tuple(findings), tuple(skipped)


def _fp32_finding(a: Analyses, cfg: Config) -> Finding | Skipped | None:
    k = a.kernels
    if k.fp32_math_ns == 0:
        return None
    cc = a.tl.meta.min_compute_capability
    if cc is None and a.tl.meta.vendor == "amd":
        return Skipped(
            "underfilled/fp32_math",
            "the device is an AMD GPU: its computeMajor is a GFX architecture, not an NVIDIA compute capability, "
            "and whyidle does not classify matrix-core (MFMA) kernels by name",
        )
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
