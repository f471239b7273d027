"""Trace-quality notes: what in the capture limits what whyidle can say.

Each note is a sentence for the user; ``cold_start`` is set when first-call costs dominate the
device idle time: the user is told to capture after warm-up, and the findings are measured on the
warm remainder (``findings/rules.py:warm_part``).
"""

from __future__ import annotations

import msgspec
import numpy as np

from whyidle.analyses import causes as C
from whyidle.analyses.gaps import Gaps
from whyidle.analyses.links import Links, uncorrelated_by_design
from whyidle.analyses.trace_checks import clock_skew_notes, step_numbering_notes
from whyidle.analyses.window import Window
from whyidle.catalogue import warmup_capture
from whyidle.config import AttributionSettings
from whyidle.timeline.model import Kind, Timeline
from whyidle.units import format_ns

__all__ = ["Quality", "assess_quality"]


class Quality(msgspec.Struct, frozen=True):
    notes: tuple[str, ...]
    cold_start: bool
    no_device_activity: bool
    has_host_events: bool


def _overlapping_on_stream(tl: Timeline, links: Links) -> int:
    rows = links.device_rows
    if rows.size < 2:
        return 0
    lanes = tl.lane[rows]
    order = np.lexsort((tl.start_ns[rows], lanes))
    r, ln = rows[order], lanes[order]
    same = ln[1:] == ln[:-1]
    # 1 ns of slack: timestamps rounded to microseconds make touching events look overlapping.
    overlap = tl.start_ns[r[1:]] < tl.end_ns[r[:-1]] - 1000
    return int((same & overlap).sum())


def assess_quality(tl: Timeline, links: Links, window: Window, gaps: Gaps, cfg: AttributionSettings) -> Quality:
    notes: list[str] = list(tl.meta.quality)
    notes.extend(window.notes)
    no_device = links.device_rows.size == 0
    has_host = bool((tl.kind == int(Kind.RUNTIME)).any())
    if no_device:
        notes.append("no GPU activity in this trace: it holds no kernels, copies or memsets, so there is no device time to analyse")
        return Quality(tuple(notes), False, True, has_host)
    if not has_host:
        notes.append(
            "no CPU-side launch events: gaps cannot be linked to what the host was doing, so "
            "host sync cannot be told from starvation (the attribution rules were skipped)"
        )
    n_dev = links.device_rows.size
    missing = links.n_device_without_launch
    if has_host and missing:
        unlinked = links.device_rows[links.launch_of < 0]
        mtia_dma = int(tl.name_mask(uncorrelated_by_design, unlinked).sum())
        why = (
            f"{mtia_dma} of them are MTIA DMA requests, which carry no correlation id: no capture option links them"
            if mtia_dma * 2 > missing
            else "dropped CPU events or work launched outside the profiled threads"
        )
        notes.append(f"{missing} of {n_dev} device events ({missing / n_dev:.0%}) have no matching launch on the host ({why})")
    if links.unmatched_launch_rows.size:
        notes.append(
            f"{links.unmatched_launch_rows.size} launch calls have no device work in the trace "
            "(dropped device events, or work that ran after the capture ended)"
        )
    notes.extend(clock_skew_notes(tl, links, cfg))
    notes.extend(step_numbering_notes(window))
    ov = _overlapping_on_stream(tl, links)
    if ov:
        notes.append(f"{ov} device events overlap the previous event on the same stream (clock skew or a corrupt trace)")
    cold_ns = int(gaps.slices[:, C.cause_index(C.COLD_START)].sum()) if len(gaps) else 0
    idle = int(gaps.dur_ns.sum()) if len(gaps) else 0
    cold = idle > 0 and cold_ns / idle > cfg.cold_start_max_share_of_idle
    if cold:
        notes.append(
            f"cold start: first-call costs (CUDA context and module loading, allocator growth, cuDNN "
            f"autotuning, first launches taking milliseconds) hold {format_ns(cold_ns)} ({cold_ns / idle:.0%}) of device idle. "
            f"Capture after warm-up ({warmup_capture('jax' if tl.meta.source_format == 'xplane' else '')}) and diagnose that "
            "trace; the findings are those of its warm remainder (the steps with device work that the cold start "
            "does not dominate; without steps, the gaps it does not)"
        )
    elif cold_ns:
        share = cold_ns / max(idle, 1)
        notes.append(f"cold start costs (module loading, first launches, allocator growth) hold {format_ns(cold_ns)} ({'<1%' if share < 0.005 else f'{share:.0%}'}) of device idle")
    if window.basis == "steps" and len(window.steps) < cfg.min_profiled_steps:
        notes.append(f"only {len(window.steps)} profiled step(s): capture at least {cfg.min_profiled_steps} active steps for stable figures")
    return Quality(tuple(notes), cold, False, has_host)
