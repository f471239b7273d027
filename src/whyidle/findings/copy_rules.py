"""The exposed-copy finding: the device's compute waited while it only copied input in.

It reads :class:`~whyidle.analyses.copies.ExposedCopies`. The time is not device idle (the copy
engine was busy), so ``idle_ns`` is 0; it is time the device's compute waited on the input, which
is what the starvation fix recovers, so the finding carries it as ``compute_wait_ns`` and ranks
by it beside the idle findings (``findings.model.rank_key``).
"""

from __future__ import annotations

from whyidle.analyses.copies import ExposedCopies
from whyidle.findings.settings import RuleSettings
from whyidle.analyses.advice_context import AdviceContext
from whyidle.findings.advice import fit_lever, for_idiom
from whyidle.findings.levers import lever_for
from whyidle.findings.model import Evidence, Finding, Fix
from whyidle.units import format_ns

__all__ = ["exposed_copy_finding"]


def exposed_copy_finding(ex: ExposedCopies, window_capacity_ns: int, cfg: RuleSettings, ctx: AdviceContext | None = None) -> Finding | None:
    """A finding when exposed H2D copy time holds at least ``min_finding_share_of_window`` of the window."""
    capacity = max(window_capacity_ns, 1)
    share = ex.exposed_ns / capacity
    if ex.exposed_ns <= 0 or share < cfg.findings.min_finding_share_of_window:
        return None
    steps = [n for n in ex.per_step_ns]
    per_step = sum(steps) / len(steps) if steps else None
    pageable = ex.pageable_ns / ex.exposed_ns
    rate = f", {ex.nbytes / (ex.copy_ns / 1e9) / 1e9:.1f} GB/s while copying" if ex.nbytes > 0 and ex.copy_ns > 0 else ""
    seen = (
        f"Seen here: for {format_ns(ex.exposed_ns)} ({share:.0%} of the window) the device copied input from the host "
        f"with no kernel running ({ex.copies} host-to-device copies{rate}); {pageable:.0%} of that time was copies "
        "from pageable memory, which the host must stage and wait for."
    )
    lever = fit_lever(for_idiom("h2d_copy", lever_for("h2d_copy", "exposed"), ctx), ctx, cfg.predictions.whatif_loader_workers)
    expected = (
        f"up to {format_ns(ex.exposed_ns)} of the window ({share:.0%}): pinned memory makes the copy faster and lets "
        "the host run ahead; a copy on a side stream, issued a batch ahead, hides it behind compute. An upper bound."
    )
    facts = (
        ("exposed_h2d_ns", ex.exposed_ns),
        ("exposed_pageable_ns", ex.pageable_ns),
        ("h2d_copy_ns", ex.copy_ns),
        ("h2d_copies", ex.copies),
        ("h2d_bytes", ex.nbytes),
        ("basis", "host-to-device copy time with no kernel running on the same device, in the window"),
    )
    return Finding(
        id="h2d_copy.exposed",
        group="starvation",
        cause="h2d_copy",
        title=lever.title,
        idle_ns=0,
        share_of_idle=0.0,
        share_of_window=share,
        evidence=Evidence(0, 0, per_step, None, (), (), (), facts),
        fix=Fix(lever.summary, (seen, *lever.steps), lever.code, lever.verify, expected, lever.docs),
        variant="exposed",
        affected_busy_ns=ex.exposed_ns,
        compute_wait_ns=ex.exposed_ns,
    )
