"""The small-grid finding: the device reads busy while most of its SMs sit idle.

The playbook's "kernels too small to occupy the device" (GPU-Util 100% with idle SMs). It reads
:class:`~whyidle.analyses.kernel_fill.KernelFill` (each kernel's launch configuration against the
device's SM count) and is a finding about busy time, not idle time: ``idle_ns`` is 0 and what it
can recover is the SM time left idle while kernels ran, stated in whole-device time and as a share
of the window so that it reads beside the idle findings.
"""

from __future__ import annotations

from typing import Any

from whyidle.analyses.kernel_fill import KernelConfig, KernelFill
from whyidle.findings.settings import RuleSettings
from whyidle.analyses.advice_context import AdviceContext
from whyidle.findings.advice import fit_lever, for_idiom
from whyidle.findings.levers import lever_for
from whyidle.findings.model import Evidence, Finding, Fix, Skipped
from whyidle.units import format_ns

__all__ = ["RULE", "small_grid_finding", "kernel_config_label"]

RULE = "underfilled/small_grids"


def kernel_config_label(c: KernelConfig) -> str:
    """'grid 2 x 512 threads, 0.02 blocks/SM: saxpy(...)': the launch configuration first, then the kernel."""
    parts = []
    if c.grid > 0:
        parts.append(f"grid {c.grid}" + (f" x {c.block} threads" if c.block > 0 else ""))
    if c.blocks_per_sm is not None:
        parts.append(f"{c.blocks_per_sm:.2f} blocks/SM")
    if c.occupancy_pct is not None:
        parts.append(f"est. occupancy {c.occupancy_pct:.0f}%")
    return f"{', '.join(parts)}: {c.name}" if parts else c.name


def _sms(f: KernelFill) -> str:
    counts = sorted({n for _, n in f.sm_counts})
    return "/".join(str(n) for n in counts) if counts else "?"


def small_grid_finding(fill: KernelFill | None, window_capacity_ns: int, cfg: RuleSettings, ctx: AdviceContext | None = None) -> Finding | Skipped | None:
    """The finding when enough kernel-busy time runs on a part of the device; Skipped without launch configurations."""
    if fill is None or fill.kernel_busy_ns <= 0:
        return None
    if fill.known_ns == 0:
        return Skipped(
            RULE,
            "the trace gives no kernel launch configuration (Kineto 'grid'/'blocks per SM', nsys gridX..Z) or no SM "
            "count: cannot tell whether kernels fill the device",
        )
    grid_limited = fill.unused_share >= cfg.findings.small_grid_min_unused_share
    occ_limited = fill.low_occupancy_share >= cfg.findings.small_grid_min_unused_share
    if not (grid_limited or occ_limited):
        return None
    sms = _sms(fill)
    facts: list[tuple[str, Any]] = [
        ("sm_count", sms),
        ("sm_count_origin", fill.sm_count_origin),
        ("kernel_busy_ns", fill.kernel_busy_ns),
        ("underfilled_ns", fill.underfilled_ns),
        ("underfilled_share_of_kernel_busy", round(fill.underfilled_share, 4)),
        ("unused_sm_ns", fill.unused_ns),
        ("unused_sm_share_of_kernel_busy", round(fill.unused_share, 4)),
        ("low_occupancy_ns", fill.low_occupancy_ns),
        ("launch_config_known_share", round(fill.known_ns / fill.kernel_ns, 4) if fill.kernel_ns else 0.0),
        ("threshold_share_of_kernel_busy", cfg.findings.small_grid_min_unused_share),
        (
            "top_kernels",
            [
                {"name": c.name, "count": c.count, "total_ns": c.total_ns, "unused_sm_ns": c.unused_ns, "grid": c.grid, "block": c.block,
                 "blocks_per_sm": c.blocks_per_sm, "est_occupancy_pct": c.occupancy_pct}  # fmt: skip
                for c in fill.top
            ],
        ),
    ]
    seen: list[str] = []
    if grid_limited:
        seen.append(
            f"Seen here: for {format_ns(fill.underfilled_ns)} ({fill.underfilled_share:.0%} of kernel-busy time) the running "
            f"kernels had fewer blocks than the device's {sms} SMs ({fill.sm_count_origin}); the SMs they left idle add up "
            f"to {format_ns(fill.unused_ns)} of the whole device ({fill.unused_share:.0%} of kernel-busy time, above the "
            f"{cfg.findings.small_grid_min_unused_share:.0%} this finding needs)."
        )
    if occ_limited:
        seen.append(
            f"Seen here: {format_ns(fill.low_occupancy_ns)} ({fill.low_occupancy_share:.0%} of kernel-busy time) ran in kernels "
            f"with an est. achieved occupancy under {cfg.attribution.small_grid_low_occupancy_pct:.0f}%: too few warps per SM to hide latency."
        )
    capacity = max(window_capacity_ns, 1)
    if grid_limited:
        recoverable = fill.unused_ns
        expected = (
            f"up to {format_ns(recoverable)} of device time ({recoverable / capacity:.0%} of the window): the SM time "
            f"left idle while kernels ran, if the same work filled the device; an upper bound, re-profile to measure it"
        )
    else:
        recoverable = fill.low_occupancy_ns
        expected = (
            f"{format_ns(recoverable)} of kernel time ({recoverable / capacity:.0%} of the window) ran with few warps per SM: "
            "more work per kernel can shorten it; how much, only a re-profile measures"
        )
    lever = fit_lever(for_idiom("small_grids", lever_for("small_grids"), ctx), ctx, cfg.predictions.whatif_loader_workers)
    return Finding(
        id="small_grids",
        group="underfilled",
        cause="small_grids",
        title=lever.title,
        idle_ns=0,
        share_of_idle=0.0,
        share_of_window=recoverable / capacity,
        evidence=Evidence(0, 0, None, None, tuple((kernel_config_label(c), c.total_ns, 0) for c in fill.top), (), (), tuple(facts)),
        fix=Fix(lever.summary, (*seen, *lever.steps), lever.code, lever.verify, expected, lever.docs),
        affected_busy_ns=fill.underfilled_ns + (fill.low_occupancy_ns if occ_limited else 0),
    )
