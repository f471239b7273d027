"""The idle-cause rule and the FP32 rule: analysis results -> findings, with evidence and the lever.

``idle_cause_findings`` gives one finding per cause of the catalogue that explains at least
``FindingSettings.min_finding_share_of_window`` of the window (of its warm part, outside the gaps a cold
start holds, when first-call costs dominate the capture); what a cause adds beyond the generic
evidence (facts, named steps, a lever variant) is its entry in ``findings/cause_details.py``.
When data is missing a rule says so with a ``Skipped`` instead of returning nothing silently.
Findings are ranked (by the pipeline) by the device-idle time they explain, which is an upper
bound on what fixing the cause can recover (removing one wait can expose the next one). The
rules are declared, with what they need, in ``findings/registry.py``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.context import CauseEvidence, cause_evidence
from whyidle.findings.settings import RuleSettings
from whyidle.findings.analyses import Analyses
from whyidle.findings.cause_details import DETAILS, Detail, context_evidence, uncorrelatable, with_trace_batch_size
from whyidle.findings.advice import fit_lever, for_idiom
from whyidle.findings.levers import Lever, lever_for
from whyidle.findings.model import Evidence, Finding, Fix, Skipped
from whyidle.timeline.model import Kind
from whyidle.units import format_ns

__all__ = ["Analyses", "idle_cause_findings", "fp32_findings", "cause_finding", "capture_advice"]

_GENERIC = Detail()


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


def capture_advice(a: Analyses, cfg: RuleSettings) -> tuple[str, ...]:
    """A note naming the capture option that would let whyidle attribute what it could not.

    Said when unattributed time (not counting capture artifacts) is over
    ``FindingSettings.unattributed_note_min_share_of_idle`` of device idle.
    """
    g, tl = a.gaps, a.tl
    idle = a.utilization.idle_ns
    if len(g) == 0 or idle <= 0:
        return ()
    totals = g.total_by_cause()
    parts = {c: int(totals[C.cause_index(c)]) for c in (C.UNTRACED_HOST, C.QUEUED_WAITING, C.NO_LAUNCH_INFO)}
    unattributed = sum(parts.values())
    if unattributed <= cfg.findings.unattributed_note_min_share_of_idle * idle:
        return ()
    if tl.meta.source_format == "rocprofv3":
        options = _rocprof_options(parts, uncorrelatable(a, C.cause_index(C.NO_LAUNCH_INFO)))
    else:
        options = _options(parts, a)
    if not options:
        return (
            f"{unattributed / idle:.0%} of device idle is unattributed: it ends in device work that carries no "
            "correlation id (MTIA DMA requests), which no capture option links to a launch",
        )
    return (
        f"{unattributed / idle:.0%} of device idle is unattributed; to attribute it, capture with "
        + "; or ".join(options),
    )


def _rocprof_options(parts: dict[C.Cause, int], uncorrelatable_work: bool) -> list[str]:
    """The rocprofv3 options that record what a rocprofv3 capture lacked."""
    options: list[str] = []
    if parts[C.UNTRACED_HOST]:
        options.append("ROCTx ranges (roctxRangePush/roctxRangePop) around the work between steps, recorded by rocprofv3 --marker-trace")
    if parts[C.QUEUED_WAITING]:
        options.append("rocprofv3 --runtime-trace, whose HIP stream and event calls (hipStreamWaitEvent) show what queued work waited on")
    if parts[C.NO_LAUNCH_INFO] and not uncorrelatable_work:
        options.append("rocprofv3 --runtime-trace (the HIP API calls that launch the kernels, joined to them by correlation id)")
    return options


def _options(parts: dict[C.Cause, int], a: Analyses) -> list[str]:
    """The profiler or Nsight Systems options that record what the capture lacked."""
    tl = a.tl
    nsys = tl.meta.source_format == "nsys"
    options: list[str] = []
    if parts[C.UNTRACED_HOST]:
        if nsys:
            options.append("nsys profile -t cuda,nvtx,osrt (OS-runtime calls) with NVTX ranges around the program's phases")
        elif a.advice is not None and a.advice.framework == "jax":
            options.append("jax.profiler.TraceAnnotation ranges around the work between steps")
        elif not (tl.kind == int(Kind.PYTHON)).any():
            options.append("torch.profiler.profile(with_stack=True) for Python frames, or record_function ranges around untraced work")
        else:
            options.append("torch.profiler.record_function ranges around the work between steps")
    if parts[C.QUEUED_WAITING]:
        options.append("nsys profile --cuda-event-trace=true to see the events and streams queued work waited on" if nsys else "an Nsight Systems capture (nsys profile -t cuda,nvtx) to see the events and streams queued work waited on")
    if parts[C.NO_LAUNCH_INFO] and not uncorrelatable(a, C.cause_index(C.NO_LAUNCH_INFO)):
        options.append("CPU and CUDA activities together (activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])")
    return options


def _scope_skips(a: Analyses) -> list[Skipped]:
    """The causes this input cannot support at all, and why."""
    g = a.gaps
    out = []
    if not g.has_host_events:
        out.append(Skipped("starvation, synchronization, underfilled, insufficient_demand", "no CPU-side events: cannot tell host sync from starvation"))
    if g.workload.kind != "serving":
        out.append(
            Skipped(
                "insufficient_demand",
                f"the workload is {g.workload.kind.replace('_', '-')}: demand applies only to a serving loop seen waiting for requests",
            )
        )
    return out


class _Basis(msgspec.Struct, frozen=True):
    """What a finding's shares are of: the window's idle and capacity, or their warm part."""

    idle_ns: int
    capacity_ns: int
    facts: tuple[tuple[str, Any], ...] = ()


def warm_part(a: Analyses, cfg: RuleSettings) -> tuple[npt.NDArray[np.int64], _Basis]:
    """Idle by cause and the basis of a cold-start capture's warm remainder.

    A capture dominated by first-call costs still has a warm part: its steps that ran device work
    and whose idle the cold start does not dominate (``AttributionSettings.cold_start_max_share_of_idle``, as
    for the capture; a step the profiler's stop cut before any device work says nothing), or,
    without steps, the window less the gaps the cold start holds most of. Its causes are measured
    there, against that warm window, so that a cold start of seconds does not hide a DataLoader
    that starves every warm step; the first step's other first-time costs stay out of it.
    """
    ci = C.cause_index(C.COLD_START)
    steps = a.utilization.steps
    if steps:
        n_dev = max(a.utilization.n_devices, 1)
        warm_steps = [
            s for s in steps if s.idle_ns < s.duration_ns * n_dev and s.idle_by_cause_ns[ci] <= cfg.attribution.cold_start_max_share_of_idle * s.idle_ns
        ]
        by_cause = [s.idle_by_cause_ns for s in warm_steps]
        totals = np.array(by_cause, dtype=np.int64).reshape(len(warm_steps), len(C.CAUSES)).sum(axis=0)
        capacity = sum(s.duration_ns for s in warm_steps) * n_dev
        facts: tuple[tuple[str, Any], ...] = (("warm_window_ns", capacity), ("warm_steps", len(warm_steps)))
    else:
        g = a.gaps
        cold = g.primary == ci if len(g) else np.zeros(0, dtype=np.bool_)
        totals = g.slices[~cold].sum(axis=0, dtype=np.int64) if len(g) else np.zeros(len(C.CAUSES), dtype=np.int64)
        capacity = a.utilization.capacity_ns - int(g.dur_ns[cold].sum()) if len(g) else a.utilization.capacity_ns
        facts = (("warm_window_ns", capacity), ("cold_start_gaps", int(cold.sum())))
    totals[ci] = 0
    return np.asarray(totals, dtype=np.int64), _Basis(int(totals.sum()), capacity, facts)


def _cause_finding(a: Analyses, cfg: RuleSettings, ci: int, ns: int, basis: _Basis | None = None) -> Finding:
    """One idle cause's finding: the generic evidence plus what its DETAILS entry adds."""
    cause = C.CAUSES[ci]
    d = DETAILS.get(cause, _GENERIC)
    if basis is None:
        basis = _Basis(a.utilization.idle_ns, a.utilization.capacity_ns)
    idle, capacity = basis.idle_ns, basis.capacity_ns
    ev = cause_evidence(a.tl, a.gaps, ci, a.index, examples=cfg.findings.evidence_examples, op_filter=d.op_filter)
    variant = d.variant(a, ci, ev) if d.variant else ""
    lever = fit_lever(for_idiom(cause.cause, lever_for(cause.cause, variant), a.advice), a.advice, cfg.predictions.whatif_loader_workers)
    facts = (d.facts(a, ci, cfg) if d.facts else ()) + basis.facts
    steps = d.steps(dict(facts), lever.steps, cfg) if d.steps else lever.steps
    if d.context:
        ev = msgspec.structs.replace(ev, top_ops=context_evidence(a, ci, d.context) or ev.top_ops)
    evidence = _evidence(a, cause, ev, ns, facts)
    per_step = f", {format_ns(evidence.per_step_idle_ns)} per step" if evidence.per_step_idle_ns is not None else ""
    expected = (
        f"up to {format_ns(ns)} of device idle ({ns / idle:.0%} of idle{per_step}) can be recovered; "
        "an upper bound, since removing this wait may expose the next one"
    )
    fix = Fix(lever.summary, steps, with_trace_batch_size(lever.code, a.utilization.batch_size), lever.verify, expected, lever.docs)
    return cause_finding(cause, lever, variant, ns, idle, capacity, evidence, fix)


def idle_cause_findings(a: Analyses, cfg: RuleSettings) -> list[Finding | Skipped]:
    """One finding per idle cause over the threshold; capture artifacts are never ranked."""
    if a.quality.no_device_activity:
        return [Skipped("all", "no GPU activity in this trace")]
    out: list[Finding | Skipped] = list(_scope_skips(a))
    totals = whole = a.gaps.total_by_cause()
    basis = None
    if a.quality.cold_start:  # said in the headline; the warm remainder is still diagnosed
        totals, basis = warm_part(a, cfg)
    capacity = a.utilization.capacity_ns if basis is None else basis.capacity_ns
    threshold = cfg.findings.min_finding_share_of_window * capacity
    for ci, cause in enumerate(C.CAUSES):
        ns = int(totals[ci])
        if cause in C.ARTIFACTS:  # said in the headline
            continue
        if ns > 0 and ns >= threshold:
            out.append(_cause_finding(a, cfg, ci, ns, basis))
        elif basis is not None and whole[ci] >= cfg.findings.min_finding_share_of_window * a.utilization.capacity_ns:
            out.append(Skipped(cause.key, f"cold start dominates the capture; {format_ns(int(whole[ci]))} of idle not blamed on this cause (not enough of its warm remainder)"))
    return out


def fp32_findings(a: Analyses, cfg: RuleSettings) -> list[Finding | Skipped]:
    out = _fp32_finding(a, cfg)
    return [] if out is None else [out]


def _fp32_rate(a: Analyses) -> tuple[tuple[tuple[str, Any], ...], str]:
    """The rate the FP32 GEMMs reached, from the work model (ops with recorded shapes): facts and
    words; nothing when no FP32 op with FLOPs ran kernels."""
    w = a.work
    if w is None:
        return (), ""
    peak = w.peak
    # FP32 convolutions count as TF32 (cuDNN's default); on a device without TF32 they run in FP32
    bins = ("fp32",) if peak is not None and peak.tflops("tf32") else ("fp32", "tf32")
    ns = sum(w.ns_by_precision.get(b, 0) for b in bins)
    if ns <= 0:
        return (), ""
    tflops = sum(w.flops_by_precision.get(b, 0) for b in bins) / ns / 1e3
    facts: tuple[tuple[str, Any], ...] = (("fp32_gemm_tflops", round(tflops, 3)),)
    what = "GEMMs and convolutions" if len(bins) == 2 else "GEMMs"
    words = f" (the FP32 {what} with recorded shapes ran at {tflops:.3g} TFLOP/s"
    fp32, b16 = (peak.tflops("fp32"), peak.tflops("bf16")) if peak is not None else (None, None)
    half = "bf16" if b16 else "fp16"  # Volta and Turing tensor cores take FP16 only
    b16 = b16 or (peak.tflops("fp16") if peak is not None else None)
    if peak is not None and fp32:
        facts += (("fp32_peak_tflops", fp32),)
        words += f", {tflops / fp32:.0%} of the {peak.name}'s {fp32:g} TFLOP/s FP32 peak"
        if b16:
            facts += ((f"{half}_peak_tflops", b16),)
            words += f"; its 16-bit tensor cores peak at {b16:g}"
    return facts, words + ")"


def _fp32_finding(a: Analyses, cfg: RuleSettings) -> Finding | Skipped | None:
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
    if k.fp32_math_share < cfg.findings.fp32_math_min_share_of_kernel_time:
        return None
    # Volta and Turing (7.x) have FP16 tensor cores only; BF16 and TF32 need Ampere (8.0).
    lever = lever_for("fp32_math", "fp16_only" if cc < (8, 0) else "")
    lever = fit_lever(for_idiom("fp32_math", lever, a.advice), a.advice, cfg.predictions.whatif_loader_workers)
    facts: tuple[tuple[str, Any], ...] = (
        ("compute_capability", f"{cc[0]}.{cc[1]}"),
        ("fp32_math_share_of_kernel_time", round(k.fp32_math_share, 4)),
        ("tensor_core_share_of_kernel_time", round(k.tensor_core_share, 4)),
    )
    rate_facts, rate_words = _fp32_rate(a)
    top_ops = tuple((name, ns, 0) for name, ns in k.top_fp32_kernels)
    ev = Evidence(0, 0, None, None, top_ops, (), (), facts + rate_facts)
    expected = (
        f"{format_ns(k.fp32_math_ns)} of kernel time ({k.fp32_math_share:.0%}) runs FP32 GEMM/convolution "
        f"without tensor cores on compute capability {cc[0]}.{cc[1]}: the share of kernel time that tensor cores "
        f"can shorten{rate_words}; re-profile to measure the step time saved"
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
