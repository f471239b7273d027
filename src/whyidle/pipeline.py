"""The pipeline: source -> Timeline -> analyses -> findings -> Report.

``diagnose(path_or_timeline)`` is the whole of ``whyidle diagnose`` without the rendering.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from whyidle.analyses import causes as C
from whyidle.analyses.context import ThreadIndex, gap_context
from whyidle.analyses.gaps import find_gaps
from whyidle.analyses.kernels import kernel_stats
from whyidle.analyses.links import link_launches
from whyidle.analyses.quality import assess_quality
from whyidle.analyses.utilization import measure_utilization
from whyidle.analyses.window import select_window
from whyidle.config import Config
from whyidle.findings.model import rank_key, GapRecord, Report, SourceInfo, WindowInfo
from whyidle.findings.predict import attach_predictions
from whyidle.findings.registry import apply_rules
from whyidle.findings.rules import Analyses, capture_advice
from whyidle.timeline.model import Timeline

__all__ = ["diagnose", "analyse"]


def analyse(tl: Timeline, cfg: Config | None = None) -> Analyses:
    """Run every analysis on a timeline (pure: no I/O, no printing)."""
    cfg = cfg or Config()
    links = link_launches(tl)
    window = select_window(tl, links, cfg)
    gaps = find_gaps(tl, links, window, cfg)
    util = measure_utilization(tl, links, window, gaps, cfg)
    kern = kernel_stats(tl, links, window, cfg)
    quality = assess_quality(tl, links, window, gaps, cfg)
    return Analyses(tl, window, gaps, util, kern, quality, ThreadIndex(tl))


def _gap_records(a: Analyses, cfg: Config) -> tuple[GapRecord, ...]:
    g = a.gaps
    if len(g) == 0:
        return ()
    order = np.argsort(-g.dur_ns, kind="stable")[: cfg.report_top_gaps]
    out = []
    for i in order:
        i = int(i)
        parts = [(C.CAUSES[c].key, int(ns)) for c, ns in enumerate(g.slices[i]) if ns > 0]
        parts.sort(key=lambda kv: -kv[1])
        primary = C.CAUSES[int(np.argmax(g.slices[i]))]
        ctx = gap_context(a.tl, g, i, a.index)
        nxt = a.tl.name_of(int(g.next_row[i])) if g.next_row[i] >= 0 else ""
        out.append(
            GapRecord(
                start_ns=int(g.start_ns[i]),
                end_ns=int(g.end_ns[i]),
                device=int(g.device[i]),
                group=primary.group,
                cause=primary.cause,
                causes_ns=tuple(parts),
                next_work=nxt,
                thread=ctx.thread,
                before=ctx.before,
                during=ctx.during,
                outermost=ctx.outermost,
                innermost=ctx.innermost,
                runtime_call=ctx.runtime_call,
                python_line=ctx.python_line,
                drained_by_sync=bool(g.drained_by_sync[i]),
            )
        )
    return tuple(out)


def report_from(a: Analyses, cfg: Config) -> Report:
    findings, skipped = apply_rules(a, cfg)
    findings = tuple(sorted(findings, key=rank_key))
    findings, path = attach_predictions(a.tl, a.window, findings, a.utilization.batch_size, cfg)
    tl = a.tl
    totals = a.gaps.total_by_cause()
    idle_by_cause = {c.key: int(totals[i]) for i, c in enumerate(C.CAUSES)}
    devices = tuple(str(d.get("name", "")) for d in tl.meta.devices)
    return Report(
        source=SourceInfo(
            path=tl.meta.path,
            format=tl.meta.source_format,
            version=tl.meta.source_version,
            devices=devices,
            rank=tl.meta.rank,
            world_size=tl.meta.world_size,
            training=a.gaps.training,
            workload=a.gaps.workload.kind,
            workload_evidence=a.gaps.workload.evidence,
        ),
        window=WindowInfo(
            a.window.start_ns,
            a.window.end_ns,
            a.window.basis,
            tuple(s.number for s in a.window.steps),
            a.window.all_step_numbers,
        ),
        utilization=a.utilization,
        kernels=a.kernels,
        idle_by_cause_ns=idle_by_cause,
        gap_count=len(a.gaps),
        findings=findings,
        skipped=skipped,
        gaps=_gap_records(a, cfg),
        quality=a.quality.notes + capture_advice(a, cfg),
        cold_start=a.quality.cold_start,
        no_device_activity=a.quality.no_device_activity,
        extra={"critical_path": path} if path is not None else {},
    )


def diagnose(
    source: str | os.PathLike[str] | Timeline,
    config: Config | None = None,
    counters: str | os.PathLike[str] | None = None,
    **overrides: object,
) -> Report:
    """Diagnose a profile (a path to any supported input, or a Timeline) and return the Report.

    Keyword overrides replace fields of ``config``: ``diagnose(path, skip_first_steps=2)``.
    ``counters``: a GPU counter log joined with the trace by wall-clock time as extra evidence.
    A counter log given as ``source`` gives a report of the counter analyses alone.
    """
    cfg = config or Config()
    if overrides:
        cfg = replace(cfg, **overrides)  # type: ignore[arg-type]
    if isinstance(source, Timeline):
        tl = source
    else:
        from whyidle.sources import load

        tl = load(source, step_pattern=cfg.step_range)
    if tl.meta.counters is not None and len(tl) == 0:
        return _counter_report(tl, cfg)
    a = analyse(tl, cfg)
    report = report_from(a, cfg)
    if counters is not None:
        report = _join_counters(report, a, counters, cfg)
    return report


def _counter_report(tl: Timeline, cfg: Config) -> Report:
    from whyidle.analyses.counters import analyse_counters
    from whyidle.findings.counter_rules import counter_only_report
    from whyidle.sources.counters import load_counters

    log = tl.meta.counters
    if (cfg.counters_utc_offset_min is not None or cfg.counters_interval_ms is not None) and tl.meta.path:
        log = load_counters(tl.meta.path, utc_offset_min=cfg.counters_utc_offset_min, interval_ms=cfg.counters_interval_ms)
    return counter_only_report(report_from(analyse(tl, cfg), cfg), analyse_counters(log, cfg), cfg)


def _join_counters(report: Report, a: Analyses, path: str | os.PathLike[str], cfg: Config) -> Report:
    from whyidle.analyses.counters import join_counters
    from whyidle.findings.counter_rules import with_counters
    from whyidle.sources.counters import load_counters
    from whyidle.timeline.model import LaneKind

    log = load_counters(os.fspath(path), utc_offset_min=cfg.counters_utc_offset_min, interval_ms=cfg.counters_interval_ms)
    devices = sorted({ln.device for ln in a.tl.lanes if ln.kind is LaneKind.GPU_STREAM})
    joined = join_counters(log, (a.window.start_ns, a.window.end_ns), a.tl.meta.devices, devices, cfg)
    return with_counters(report, joined, cfg)
