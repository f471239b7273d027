"""What each idle cause adds to its finding beyond the generic evidence: facts, steps, code.

``DETAILS`` is one table keyed by cause. A cause with no entry gets the generic finding (its
time, the ops and Python lines during its gaps, and the lever from the catalogue); an entry adds
measured facts (``facts``), advice named from them (``steps``), a lever variant
(``variant``), which ops count as its evidence (``op_filter``), or evidence read from the
innermost Python frames, ranges and OS calls instead of ops (``context``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from whyidle.analyses import causes as C
from whyidle.analyses.advice_context import count_in_ranges
from whyidle.analyses.calls import is_kernel_launch
from whyidle.analyses.context import CauseEvidence
from whyidle.analyses.hostops import is_dataloader, is_sync_call
from whyidle.analyses.hostwork import WorkClass
from whyidle.analyses.links import uncorrelated_by_design
from whyidle.findings.settings import RuleSettings
from whyidle.findings.advice import FUSED_OPTIMIZERS
from whyidle.findings.analyses import Analyses
from whyidle.findings.demand import demand_facts, demand_steps
from whyidle.timeline.arrays import one_of, unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Detail", "DETAILS", "Facts", "context_evidence", "uncorrelatable", "with_trace_batch_size"]

Facts = tuple[tuple[str, Any], ...]


class Detail(msgspec.Struct, frozen=True):
    """What one cause adds to the generic finding (every field optional)."""

    facts: Callable[[Analyses, int, RuleSettings], Facts] | None = None  # (analyses, cause index, the rules' settings)
    steps: Callable[[dict[str, Any], tuple[str, ...], RuleSettings], tuple[str, ...]] | None = None  # named from the facts
    variant: Callable[[Analyses, int, CauseEvidence], str] | None = None  # the lever variant
    op_filter: Callable[[str], bool] | None = None  # which ops count as evidence (None: all)
    context: tuple[int, ...] = ()  # evidence from innermost frames/ranges/OS calls of these WorkClasses


def _loader_variant(ev: CauseEvidence) -> str:
    names = " ".join(n for n, _, _ in ev.top_ops)
    if "_SingleProcessDataLoaderIter" in names:
        return "single_process"
    if "_MultiProcessingDataLoaderIter" in names:
        return "multi_process"
    return ""


def _host_overhead_facts(a: Analyses) -> tuple[tuple[str, Any], ...]:
    k = a.kernels
    facts: list[tuple[str, Any]] = [
        ("kernels", k.count),
        ("short_kernel_share", round(k.short_share, 4)),
        ("median_kernel_ns", k.median_ns),
        ("mean_launch_call_ns", k.mean_launch_ns),
    ]
    n_zero, fills = count_in_ranges(a.tl, lambda s: s.startswith("Optimizer.zero_grad"), lambda s: s in ("aten::zero_", "aten::fill_"))
    if n_zero and fills:
        facts.append(("zero_grad_fill_ops_per_call", fills // (2 * n_zero) or fills // n_zero))
    n_step, launches = count_in_ranges(a.tl, lambda s: s.startswith("Optimizer.step"), is_kernel_launch)
    if n_step and launches:
        facts.append(("optimizer_step_kernel_launches_per_call", launches // n_step))
    if a.advice.optimizer:
        facts.append(("optimizer", a.advice.optimizer))
    return tuple(facts)


def _host_overhead_steps(facts: dict[str, Any], base: tuple[str, ...], per_parameter_launches: int) -> tuple[str, ...]:
    named = []
    fills = facts.get("zero_grad_fill_ops_per_call")
    if fills:
        named.append(
            f"Seen here: optimizer.zero_grad() fills every gradient with zeros ({fills} fill ops per call); "
            "use zero_grad(set_to_none=True)."
        )
    launches = facts.get("optimizer_step_kernel_launches_per_call")
    opt = facts.get("optimizer")
    if launches and launches >= per_parameter_launches:
        use = f"use {opt}(..., {'fused' if opt in FUSED_OPTIMIZERS else 'foreach'}=True)" if opt else "use a fused or foreach optimizer (fused=True / foreach=True)"
        named.append(f"Seen here: {opt or 'optimizer'}.step() launches {launches} kernels per call (a per-parameter loop); {use}.")
    short = facts.get("short_kernel_share")
    med, launch = facts.get("median_kernel_ns"), facts.get("mean_launch_call_ns")
    if med is not None and launch is not None and 0 < med < launch:  # kernels recorded with no duration: nothing to compare
        named.append(
            f"Seen here: the median kernel ({med / 1e3:.1f} us) is shorter than the host time of one launch "
            f"({launch / 1e3:.1f} us); {short:.0%} of kernels are short. Bigger batches or fusion help most."
        )
    return tuple(named) + base


def _not_dataloader(name: str) -> bool:
    return not is_dataloader(name)


def context_evidence(a: Analyses, ci: int, classes: tuple[int, ...], limit_gaps: int = 200) -> tuple[tuple[str, int, int], ...]:
    """The innermost Python frames, ranges and OS calls of these classes during the gaps of one cause."""
    g, tl = a.gaps, a.tl
    part = g.slices[:, ci]
    idx = np.flatnonzero(part > 0)
    idx = idx[np.argsort(-part[idx], kind="stable")][:limit_gaps]
    ns_by: dict[str, int] = {}
    gaps_by: dict[str, int] = {}
    for lane in unique_sorted(g.thread_lane[idx]).tolist():
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
    for lane in unique_sorted(g.thread_lane[sel]).tolist():
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
    lanes = unique_sorted(g.thread_lane[(g.slices[:, ci] > 0) & (g.thread_lane >= 0)])
    rows = np.flatnonzero(
        one_of(tl.lane, lanes) & (tl.kind == int(Kind.RUNTIME)) & (tl.start_ns >= w.start_ns) & (tl.start_ns < w.end_ns)
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


def uncorrelatable(a: Analyses, ci: int) -> bool:
    """Every gap of cause ``ci`` ends in device work that no capture links to a launch."""
    rows = a.gaps.next_row[(a.gaps.slices[:, ci] > 0) & (a.gaps.next_row >= 0)]
    return bool(rows.size) and bool(a.tl.name_mask(uncorrelated_by_design, rows).all())


def _loader(a: Analyses, ci: int, ev: CauseEvidence) -> str:
    return _loader_variant(ev)


def _rocprof(a: Analyses, ci: int, ev: CauseEvidence) -> str:
    """The capture advice in rocprofv3's options for a rocprofv3 capture."""
    return "rocprofv3" if a.tl.meta.source_format == "rocprofv3" else ""


def _no_correlation(a: Analyses, ci: int, ev: CauseEvidence) -> str:
    return "no_correlation" if uncorrelatable(a, ci) else _rocprof(a, ci, ev)


DETAILS: dict[C.Cause, Detail] = {
    C.INPUT_PIPELINE: Detail(variant=_loader, op_filter=is_dataloader),
    C.H2D_COPY: Detail(op_filter=_not_dataloader),
    C.HOST_SYNC: Detail(
        facts=lambda a, ci, cfg: _sync_facts(a, ci),
        steps=lambda facts, base, cfg: _sync_steps(facts, base),
        op_filter=_not_dataloader,
    ),
    C.HOST_OVERHEAD: Detail(
        facts=lambda a, ci, cfg: _host_overhead_facts(a),
        steps=lambda facts, base, cfg: _host_overhead_steps(facts, base, cfg.findings.optimizer_step_per_parameter_min_launches),
        op_filter=_not_dataloader,
    ),
    C.HOST_PREPROCESSING: Detail(context=(WorkClass.DATA, WorkClass.USER)),
    C.IDLE_HOST: Detail(
        facts=lambda a, ci, cfg: _on_cpu_facts(a, ci) + demand_facts(a.tl, cfg),
        steps=lambda facts, base, cfg: demand_steps(facts, base),
        context=(WorkClass.WAIT,),
    ),
    C.UNTRACED_HOST: Detail(facts=lambda a, ci, cfg: _on_cpu_facts(a, ci), context=(WorkClass.WAIT,)),
    C.DEPENDENCY_WAIT: Detail(facts=lambda a, ci, cfg: _dependency_facts(a, ci), context=(WorkClass.RANKS,)),
    C.NO_LAUNCH_INFO: Detail(variant=_no_correlation),
    C.QUEUED_WAITING: Detail(variant=_rocprof),
}


def with_trace_batch_size(code: str, batch_size: int | None) -> str:
    """A lever's code with the batch size the trace shows in place of the placeholder ``B``
    (``batch_size=B`` -> ``batch_size=32``), so the snippet is this job's, not a template."""
    if batch_size is None or batch_size <= 0 or "batch_size=B," not in code and "batch_size=B)" not in code:
        return code
    return code.replace("batch_size=B,", f"batch_size={batch_size},").replace("batch_size=B)", f"batch_size={batch_size})")
