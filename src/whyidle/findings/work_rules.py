"""The busy-time findings from the work model: fusion candidates, GEMM shapes, unfused attention.

Each reads the window's kernels with the op that launched each (``analyses/work.py:op_kernels``),
finds its pattern (``analyses/sequences.py``, ``analyses/gemm_shapes.py``) and reports the busy
time it concerns (``affected_busy_ns``) and the time its fix is estimated to save
(``est_saving_ns``, from the roofline: an estimate, and the text says so). Findings rank with the
idle findings by that saving (``findings.model.rank_key``) and fire, like them, when it reaches
``FindingSettings.min_finding_share_of_window`` of the window. The fix is the catalogue's lever
(``catalogue.BUSY_FINDINGS``) fitted to the job's idiom and what it already does.
"""

from __future__ import annotations

from typing import Any

from whyidle.analyses.gemm_shapes import GemmShape, gemm_shapes
from whyidle.analyses.sequences import Attention, fusion_chains, fusible_kernels, unfused_attention
from whyidle.analyses.work import OpKernels, op_kernels
from whyidle.findings.settings import RuleSettings
from whyidle.findings.advice import fit_lever, for_idiom
from whyidle.findings.analyses import Analyses
from whyidle.findings.levers import lever_for
from whyidle.findings.model import Evidence, Finding, Fix, Skipped
from whyidle.units import format_ns

__all__ = ["work_findings"]

Outcome = list[Finding | Skipped]
_ESTIMATE = "an estimate from the roofline, not a measurement: re-profile to measure the step time saved"


def _finding(a: Analyses, cfg: RuleSettings, cause: str, variant: str, busy_ns: int, saving_ns: int, top: list[tuple[str, int, int]], facts: tuple[tuple[str, Any], ...], expected: str) -> Finding:
    lever = fit_lever(for_idiom(cause, lever_for(cause, variant), a.advice), a.advice, cfg.predictions.whatif_loader_workers)
    window = max(a.window.end_ns - a.window.start_ns, 1)
    steps = len(a.window.steps)
    per_step = f"; {format_ns(saving_ns / steps)} per step over {steps} steps" if steps > 1 else ""
    ev = Evidence(0, 0, None, None, tuple(top[:5]), (), (), facts + (("est_saving_share_of_window", round(saving_ns / window, 4)),))
    return Finding(
        id=cause,
        group="underfilled",
        cause=cause,
        title=lever.title,
        idle_ns=0,
        share_of_idle=0.0,
        share_of_window=0.0,
        evidence=ev,
        fix=Fix(lever.summary, lever.steps, lever.code, lever.verify, f"{expected}{per_step} ({_ESTIMATE})", lever.docs),
        variant=variant,
        affected_busy_ns=busy_ns,
        est_saving_ns=saving_ns,
    )


def _enough(a: Analyses, cfg: RuleSettings, saving_ns: int) -> bool:
    return saving_ns > 0 and saving_ns >= cfg.findings.min_finding_share_of_window * (a.window.end_ns - a.window.start_ns)


def _fusion(a: Analyses, cfg: RuleSettings, ok: OpKernels, eager: Any) -> Outcome:
    peak = a.work.peak if a.work is not None else None
    chains = fusion_chains(a.tl, ok, peak, cfg.attribution, eager)
    busy, est = sum(c.kernel_ns for c in chains), sum(c.est_ns for c in chains)
    if not _enough(a, cfg, busy - est):
        return []
    top = [
        (f"{' -> '.join(c.ops[:6])}{' -> ...' if len(c.ops) > 6 else ''} x{c.count} on {', '.join(c.streams)}{f' at {c.line}' if c.line else ''}", c.kernel_ns, 0)
        for c in chains
    ]
    bw = f"{peak.name}'s {peak.mem_tbps:g} TB/s" if peak is not None else "the best bandwidth the chain's own kernels reached (the device's peak is unknown)"
    n_chains, n_kernels = sum(c.count for c in chains), sum(c.kernels for c in chains)
    facts: tuple[tuple[str, Any], ...] = (
        ("sequences", len(chains)),
        ("chains", n_chains),
        ("kernels", n_kernels),
        ("kernel_ns", busy),
        ("bytes", sum(c.nbytes for c in chains)),
        ("fused_bytes_est", sum(c.fused_nbytes for c in chains)),
        ("fused_ns_est", est),
    )
    expected = (
        f"{n_chains:,} chains of {len(chains)} op sequence{'s' if len(chains) > 1 else ''} ran {n_kernels:,} memory-bound kernels "
        f"for {format_ns(busy)}; fused, each reading its inputs once and writing its output once at {bw}, they would take about "
        f"{format_ns(est)}: {format_ns(busy - est)} saved"
    )
    return [_finding(a, cfg, "fusion_candidates", "", busy, busy - est, top, facts, expected)]


def _shape_words(s: GemmShape) -> str:
    d = s.dims
    batch = f"{d.batch} x " if d.batch > 1 else ""
    why = []
    if s.misaligned:
        why.append(f"{'/'.join(s.misaligned)} not a multiple of {8 if d.itemsize == 2 else 16}")
    if s.tiny_m:
        why.append(f"M={d.m}")
    return f"{s.name} {batch}[{d.m} x {d.k}] x [{d.k} x {d.n}] {d.precision} x{s.count}: {s.tflops:.3g} TFLOP/s, {s.fraction:.0%} of its {s.bound} bound ({', '.join(why)})"


def _gemms(a: Analyses, cfg: RuleSettings, ok: OpKernels) -> Outcome:
    peak = a.work.peak if a.work is not None else None
    shapes = gemm_shapes(a.tl, ok, peak, cfg.attribution)
    busy, est = sum(s.kernel_ns for s in shapes), sum(s.est_ns for s in shapes)
    if not _enough(a, cfg, busy - est):
        return []
    tiny = sum(s.kernel_ns - s.est_ns for s in shapes if s.tiny_m and not s.misaligned)
    variant = "tiny_m" if 2 * tiny > busy - est else ""
    top = [(_shape_words(s), s.kernel_ns, 0) for s in shapes]
    refs = sorted({(s.dims.precision, s.reference, s.reference_from) for s in shapes})
    ref_words = "; ".join(
        f"{p} at {r:.0%} of the bound, " + ("what the well-shaped GEMMs of that precision reach in this trace" if o == "trace" else "the report's near-roofline line (no well-shaped GEMM of that precision ran)")
        for p, r, o in refs
    )
    facts: tuple[tuple[str, Any], ...] = (
        ("shapes", len(shapes)),
        ("misaligned_shapes", sum(1 for s in shapes if s.misaligned)),
        ("tiny_m_shapes", sum(1 for s in shapes if s.tiny_m)),
        ("kernel_ns", busy),
        ("est_kernel_ns", est),
        *((f"reference_fraction_{p}", round(r, 3)) for p, r, _ in refs),
    )
    expected = (
        f"{len(shapes)} GEMM shape{'s' if len(shapes) > 1 else ''} too small or badly aligned ran {format_ns(busy)} of kernels below the rate of well-shaped GEMMs; "
        f"at the reference rate ({ref_words}) they would take about {format_ns(est)}: {format_ns(busy - est)} saved"
    )
    return [_finding(a, cfg, "gemm_shapes", variant, busy, busy - est, top, facts, expected)]


def _attention(a: Analyses, cfg: RuleSettings, found: tuple[Attention, ...]) -> Outcome:
    busy, est = sum(x.kernel_ns for x in found), sum(x.est_ns for x in found)
    if not _enough(a, cfg, busy - est):
        return []
    top = [(f"{' -> '.join(x.ops)} x{x.count}: {x.shape[0]} heads x [{x.shape[1]} x {x.shape[2]}] scores, head dim {x.shape[3]}, {x.precision}", x.kernel_ns, 0) for x in found]
    occurrences = sum(x.count for x in found)
    facts: tuple[tuple[str, Any], ...] = (
        ("occurrences", occurrences),
        ("kernel_ns", busy),
        ("flops", sum(x.flops for x in found)),
        ("fused_bytes_est", sum(x.fused_nbytes for x in found)),
        ("fused_ns_est", est),
    )
    expected = (
        f"{occurrences:,} attention blocks ran as GEMM, softmax and GEMM for {format_ns(busy)} (forward only); "
        f"one fused kernel per block at {cfg.attribution.roofline_near_fraction:.0%} of its roofline bound would take about {format_ns(est)}: "
        f"{format_ns(busy - est)} saved"
    )
    return [_finding(a, cfg, "unfused_attention", "", busy, busy - est, top, facts, expected)]


def work_findings(a: Analyses, cfg: RuleSettings) -> Outcome:
    """The busy-time findings of the work model (fusion candidates, GEMM shapes, unfused
    attention); one Skipped when the trace recorded no input shapes, which all three need."""
    tl = a.tl
    if not (tl.inputs >= 0).any():
        return [Skipped("underfilled/fusion_candidates", "the trace has no op input shapes (PyTorch: profile with record_shapes=True): no fusion, GEMM-shape or unfused-attention finding")]
    ok = a.op_kernels if a.op_kernels is not None else op_kernels(tl, a.links, a.window)
    if ok.rows.size == 0:
        return []
    eager = fusible_kernels(tl, ok)
    attention, in_attention = unfused_attention(tl, ok, a.work.peak if a.work is not None else None, cfg.attribution, eager)
    return [*_attention(a, cfg, attention), *_fusion(a, cfg, ok, eager & ~in_attention), *_gemms(a, cfg, ok)]
