"""The pipeline: source -> Timeline -> analyses -> findings -> Diagnosis.

``diagnose(path_or_timeline)`` is the whole of ``whyidle diagnose`` without the rendering.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.analyses.context import GapContext, ThreadIndex, brief_context, explaining_ops, gap_context
from whyidle.analyses.gaps import Gaps, find_gaps
from whyidle.analyses.kernels import KernelStats, kernel_stats
from whyidle.analyses.links import Links, link_launches
from whyidle.analyses.quality import Quality, assess_quality
from whyidle.analyses.utilization import Utilization, measure_utilization
from whyidle.analyses.window import Window, select_window
from whyidle.analyses.work import OpKernels, WorkSummary, measure_work, op_kernels
from whyidle.config import AttributionSettings, Config
from whyidle.errors import ArgumentError, require_path
from whyidle.analyses.names import NameTimes, name_times
from whyidle.analyses.strip import DeviceActivity, device_activity
from whyidle.diagnosis import Diagnosis, as_diagnosis
from whyidle.findings.model import rank_key, Finding, GapColumns, GapRecord, Skipped, SourceInfo, WindowInfo
from whyidle.findings.predict import LeverPredictions, PredictionGraph, attach_predictions, levers_of, prediction_graph, predictions_on, replay_ahead
from whyidle.findings.registry import apply_rules
from whyidle.findings.rules import Analyses, capture_advice
from whyidle.findings.settings import RuleSettings
from whyidle.analyses.advice_context import advice_context
from whyidle.parallel import Helpers, small_pages
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Timeline

__all__ = ["diagnose", "analyse"]


def analyse(tl: Timeline, cfg: Config | None = None, links: Links | None = None, window: Window | None = None) -> Analyses:
    """Run every analysis on a timeline (pure: no I/O, no printing). ``links`` and ``window``:
    the timeline's, when already computed."""
    cfg = cfg or Config()
    links = link_launches(tl) if links is None else links
    window = select_window(tl, links, cfg.window) if window is None else window
    return _with_kernels(_measure(tl, cfg, links, window), _kernel_side(tl, links, window, cfg.attribution), cfg)


class _Measured(msgspec.Struct, frozen=True):
    """The analyses that read the gaps."""

    tl: Timeline
    window: Window
    links: Links
    gaps: Gaps
    utilization: Utilization
    quality: Quality


def _measure(tl: Timeline, cfg: Config, links: Links, window: Window) -> _Measured:
    gaps = find_gaps(tl, links, window, cfg.attribution)
    util = measure_utilization(tl, links, window, gaps, cfg.window)
    quality = assess_quality(tl, links, window, gaps, cfg.attribution)
    return _Measured(tl, window, links, gaps, util, quality)


class _KernelSide(msgspec.Struct, frozen=True):
    """The analyses of the kernels that do not read the gaps (a helper makes them meanwhile)."""

    stats: KernelStats
    op_kernels: OpKernels | None  # each kernel's launching op (the work model's; the busy-time rules read it)
    activity: tuple[DeviceActivity, ...]  # the report's activity strip
    name_times: NameTimes  # the report's time per name


def _kernel_side(tl: Timeline, links: Links, window: Window, attribution: AttributionSettings) -> _KernelSide:
    return _KernelSide(
        kernel_stats(tl, links, window, attribution),
        op_kernels(tl, links, window) if links.device_rows.size else None,
        device_activity(tl, links, window),
        name_times(tl, links, window),
    )


def _with_kernels(m: _Measured, k: _KernelSide, cfg: Config) -> Analyses:
    tl, launched_by = m.tl, k.op_kernels
    work = measure_work(tl, m.links, m.window, cfg, launched_by) if launched_by is not None else None
    return Analyses(tl, m.window, m.gaps, m.utilization, k.stats, m.quality, ThreadIndex(tl), m.links, advice_context(tl, m.gaps.workload), work, launched_by)


class _Strings:
    """A string table built as names are added: name -> index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def add(self, name: str) -> int:
        return self.index.setdefault(name, len(self.index))

    def table(self) -> tuple[str, ...]:
        return tuple(self.index)


def _gap_tables(a: Analyses, cfg: Config) -> tuple[GapColumns, tuple[GapRecord, ...]]:
    """Every gap as columns, and the largest ones as records with their full CPU context.

    The context is looked up once for the ``max(context_gaps, report_top_gaps)`` largest gaps
    (largest first, stable on ties): the columns keep its op before, Python line and open
    runtime call, the records all of it."""
    g, tl = a.gaps, a.tl
    n = len(g)
    strings = _Strings()
    i64 = np.int64
    names = np.full(len(tl.strings), -1, dtype=i64)  # timeline string -> table index, on demand

    def name_col(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        out = np.full(rows.size, -1, dtype=i64)
        ok = rows >= 0
        for k in unique_sorted(tl.name[rows[ok]].astype(i64)) if ok.any() else ():
            names[k] = strings.add(tl.strings[int(k)])
        out[ok] = names[tl.name[rows[ok]]]
        return out

    next_work = name_col(g.next_row)
    ops = explaining_ops(tl, g, a.index)
    op = name_col(ops)
    op_start = np.where(ops >= 0, tl.start_ns[np.maximum(ops, 0)], 0).astype(i64) if n else np.zeros(0, dtype=i64)
    op_end = np.where(ops >= 0, tl.end_ns[np.maximum(ops, 0)], 0).astype(i64) if n else np.zeros(0, dtype=i64)
    before, line, runtime = (np.full(n, -1, dtype=i64) for _ in range(3))
    order = np.argsort(-g.dur_ns, kind="stable")[: max(cfg.render.context_gaps, cfg.render.report_top_gaps)]
    records = []
    for rank, i in enumerate(order.tolist()):
        if rank < cfg.render.report_top_gaps:
            ctx = gap_context(tl, g, i, a.index)
            records.append(_gap_record(a, i, ctx, next_work, strings))
            brief = (ctx.before, ctx.python_line, ctx.runtime_call)
        else:
            brief = brief_context(tl, g, i, a.index)
        if rank < cfg.render.context_gaps:
            before[i], line[i], runtime[i] = (strings.add(x) for x in brief)
    columns = GapColumns(
        start_ns=g.start_ns,
        end_ns=g.end_ns,
        device=g.device,
        causes_ns=g.slices,
        drained_by_sync=g.drained_by_sync,
        host_end_ns=g.host_end_ns,
        thread=g.thread_lane,
        next_work=next_work,
        op=op,
        op_start_ns=op_start,
        op_end_ns=op_end,
        before=before,
        python_line=line,
        runtime_call=runtime,
        strings=strings.table(),
    )
    a.index.release()  # the last reader of the gaps' contexts: what follows needs none (2 GB trace: ~100 MB)
    return columns, tuple(records)


def _gap_record(a: Analyses, i: int, ctx: GapContext, next_work: npt.NDArray[np.int64], strings: _Strings) -> GapRecord:
    g = a.gaps
    parts = [(C.CAUSES[c].key, int(ns)) for c, ns in enumerate(g.slices[i]) if ns > 0]
    parts.sort(key=lambda kv: -kv[1])
    primary = C.CAUSES[int(np.argmax(g.slices[i]))]
    return GapRecord(
        start_ns=int(g.start_ns[i]),
        end_ns=int(g.end_ns[i]),
        device=int(g.device[i]),
        group=primary.group,
        cause=primary.cause,
        causes_ns=tuple(parts),
        next_work=a.tl.name_of(int(g.next_row[i])) if g.next_row[i] >= 0 else "",
        thread=ctx.thread,
        before=ctx.before,
        during=ctx.during,
        outermost=ctx.outermost,
        innermost=ctx.innermost,
        runtime_call=ctx.runtime_call,
        python_line=ctx.python_line,
        drained_by_sync=bool(g.drained_by_sync[i]),
    )


def report_from(a: Analyses, cfg: Config) -> Diagnosis:
    """The Diagnosis of the analyses."""
    rules = RuleSettings.of(cfg)
    findings, skipped = _ranked_findings(a, rules)
    drawn = (device_activity(a.tl, a.links, a.window), name_times(a.tl, a.links, a.window))
    return _with_predictions(a, _report(a, cfg, rules, findings, skipped, *drawn), rules, None)


def _with_predictions(a: Analyses, report: Diagnosis, rules: RuleSettings, predictions: LeverPredictions | None) -> Diagnosis:
    findings, path = attach_predictions(
        a.tl, a.window, report.findings, a.utilization.batch_size, rules, predictions, a.links, framework=a.advice.framework if a.advice else ""
    )
    return msgspec.structs.replace(report, findings=findings, extra={"critical_path": path} if path is not None else {})


def _ranked_findings(a: Analyses, rules: RuleSettings) -> tuple[tuple[Finding, ...], tuple[Skipped, ...]]:
    """The rules' findings, most important first, and the rules skipped."""
    findings, skipped = apply_rules(a, rules)
    return tuple(sorted(findings, key=rank_key)), skipped


def _report(
    a: Analyses,
    cfg: Config,
    rules: RuleSettings,
    findings: tuple[Finding, ...],
    skipped: tuple[Skipped, ...],
    activity: tuple[DeviceActivity, ...],
    times: NameTimes,
) -> Diagnosis:
    """The Diagnosis of the analyses and their findings, without predictions or critical path;
    ``activity`` and ``times``: the timeline's :func:`device_activity` and :func:`name_times`."""
    tl = a.tl
    totals = a.gaps.total_by_cause()
    idle_by_cause = {c.key: int(totals[i]) for i, c in enumerate(C.CAUSES)}
    devices = tuple(str(d.get("name", "")) for d in tl.meta.devices)
    columns, records = _gap_tables(a, cfg)
    return Diagnosis(
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
        advice=a.advice if len(tl) else None,  # a counter log has no events to read the job from
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
        gaps=records,
        quality=a.quality.notes + capture_advice(a, rules),
        cold_start=a.quality.cold_start,
        no_device_activity=a.quality.no_device_activity,
        gap_columns=columns,
        activity=activity,
        lanes=tuple(tl.lanes),
        name_times=times,
        work=a.work,
    )


def diagnose(
    source: str | os.PathLike[str] | Timeline,
    config: Config | None = None,
    counters: str | os.PathLike[str] | None = None,
    *,
    jobs: int = 1,
    **overrides: object,
) -> Diagnosis:
    """Diagnose a profile (a path to any supported input, or a Timeline) and return the Diagnosis.

    Keyword overrides replace fields of ``config``: ``diagnose(path, skip_first_steps=2)``.
    ``counters``: a GPU counter log joined with the trace by wall-clock time as extra evidence.
    A counter log given as ``source`` gives a report of the counter analyses alone.
    ``jobs`` >= 2 lets forked processes help (Linux, two usable cores; :mod:`whyidle.parallel`):
    one decodes part of a Kineto trace; another makes the kernel statistics and the what-if graph
    while this process runs the other analyses, and replays the levers the findings name (the
    same report either way). Forking is the caller's choice: not in a process whose other threads
    hold native locks (a training job's CUDA or OpenMP threads).
    """
    require_path(source, "source", (Timeline,))
    if counters is not None:
        require_path(counters, "counters")
    if config is not None and not isinstance(config, Config):
        raise ArgumentError(f"config must be a whyidle.Config, not {type(config).__name__}", field="config")
    cfg = config or Config()
    if overrides:
        cfg = cfg.with_overrides(**overrides)
    with small_pages():  # numpy's arrays in small memory pages for this call (whyidle.parallel.pages)
        if isinstance(source, Timeline):
            tl = source
        else:
            from whyidle.sources import load

            tl = load(source, jobs=jobs, settings=cfg.read)
        if tl.meta.counters is not None and len(tl) == 0:
            return _counter_report(tl, cfg)
        report, a = _diagnose(tl, cfg, Helpers(fork=jobs >= 2))
        if counters is not None:
            report = _join_counters(report, a, counters, cfg)
        return report


def _diagnose(tl: Timeline, cfg: Config, helpers: Helpers) -> tuple[Diagnosis, Analyses]:
    """:func:`report_from` of :func:`analyse`, with a helper's work beside it (:class:`_Beside`).
    Read as if sequential: with ``Helpers()`` every step below runs here, in this order."""
    links = link_launches(tl)
    window = select_window(tl, links, cfg.window)
    rules = RuleSettings.of(cfg)  # what the rules and predictions read of the settings
    errand = _Beside(tl, window, rules, links)
    # Not when there is no what-if graph to build (no steps or no device work): a live child costs
    # this process 1.5 ms to fork and 5-6 ms of copy-on-write faults (B200 trace: 21 -> 29 ms).
    with (helpers if errand.worth_a_helper() else Helpers()).beside(errand) as helper:
        measured = _measure(tl, cfg, links, window)
        side = helper.early()
        a = _with_kernels(measured, side, cfg)
        findings, skipped = _ranked_findings(a, rules)
        helper.ask(levers_of(findings))
        report = _report(a, cfg, rules, findings, skipped, side.activity, side.name_times)
        return _with_predictions(a, report, rules, helper.result()), a


class _Beside(msgspec.Struct, frozen=True):
    """What a helper does beside the diagnosis (an :class:`~whyidle.parallel.Errand`): the kernel
    statistics and each kernel's launching op first (the gaps are found meanwhile), then the what-if graph while the analyses and
    rules run, the replays of every lever while it waits, and last the predictions of the levers
    the findings name (asked while the report is assembled)."""

    tl: Timeline
    window: Window
    rules: RuleSettings
    links: Links

    def worth_a_helper(self) -> bool:
        return bool(self.window.steps) and self.links.device_rows.size > 0

    def early(self) -> _KernelSide:
        return _kernel_side(self.tl, self.links, self.window, self.rules.attribution)

    def prepare(self) -> PredictionGraph:
        return prediction_graph(self.tl, self.window, self.rules, self.links)

    def idle(self, prepared: PredictionGraph) -> Iterator[None]:
        return replay_ahead(prepared, self.rules)

    def answer(self, prepared: PredictionGraph, question: tuple[str, ...]) -> LeverPredictions:
        return predictions_on(prepared, question, self.rules)


def _counter_report(tl: Timeline, cfg: Config) -> Diagnosis:
    from whyidle.analyses.counters import analyse_counters
    from whyidle.findings.counter_rules import counter_only_report

    log = tl.meta.counters  # read with the caller's clock settings (see diagnose)
    # a counter log has samples, not events: no gap columns or device activity to draw
    base = msgspec.structs.replace(report_from(analyse(tl, cfg), cfg), gap_columns=None, activity=None, lanes=(), name_times=None)
    return as_diagnosis(counter_only_report(base, analyse_counters(log, cfg.attribution), RuleSettings.of(cfg)))


def _join_counters(report: Diagnosis, a: Analyses, path: str | os.PathLike[str], cfg: Config) -> Diagnosis:
    from whyidle.analyses.counters import join_counters
    from whyidle.findings.counter_rules import with_counters
    from whyidle.sources.counters import load_counters
    from whyidle.timeline.model import LaneKind

    log = load_counters(os.fspath(path), utc_offset_min=cfg.read.counters_utc_offset_min, interval_ms=cfg.read.counters_interval_ms, settings=cfg.read)
    devices = sorted({ln.device for ln in a.tl.lanes if ln.kind is LaneKind.GPU_STREAM})
    joined = join_counters(log, (a.window.start_ns, a.window.end_ns), a.tl.meta.devices, devices, cfg.attribution)
    return as_diagnosis(with_counters(report, joined, RuleSettings.of(cfg)))
