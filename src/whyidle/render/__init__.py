"""Renderers: a Report (or a MultiRankReport) to terminal text, JSON, HTML, a Perfetto trace or a plot.

One entry point for the command line and the public ``Report.render`` / ``Report.save``::

    text = render(report, "terminal", width=100)
    path, fmt = save(report, "report.html")          # format from the suffix, written atomically
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["render", "save", "save_multi_rank", "title", "busy_finding_stat", "counter_value", "busy_idle_rows", "MULTI_RANK_FORMATS", "TITLE_GPU"]

MULTI_RANK_FORMATS = ("terminal", "json", "html", "perfetto")  # what a MultiRankReport renders to
TITLE_GPU = "whyidle: why is this GPU idle?"


def _tracked_on_gpu(r: Any) -> bool:
    """A step-tracker report whose busy time is a GPU's (CUDA events), not the host's."""
    return any(d and d != "cpu" for d in r.source.devices) and "CPU-side measurement" not in " ".join(r.quality)


def title(r: Any) -> str:
    """The report's first line; a CPU run of the step tracker has no GPU to ask about."""
    if r.source.format == "whyidle.track" and not _tracked_on_gpu(r):
        return "whyidle: why is this loop waiting? (a CPU run: no GPU here)"
    return TITLE_GPU


def busy_idle_rows(r: Any, fmt_ns: Callable[[float], str]) -> list[tuple[str, str, str]]:
    """The headline's busy and idle figures as (label, value, detail), in the input's own terms:
    a counter log has samples, not gaps; a step tracker on CPU measures the host, not a GPU."""
    u = r.utilization
    busy = f"{u.busy_fraction:.1%}"
    if r.window.basis == "counter log" and r.counters is not None:
        from whyidle.findings.counter_rules import busy_basis_words, idle_words

        if not r.counters.gpus:
            return [("GPU busy", "unknown", "the log has no GPU readings")]
        return [("GPU busy", busy, f"of the log; {busy_basis_words(r.counters)}"), ("GPU idle", fmt_ns(u.idle_ns), idle_words(r.counters))]
    if r.source.format == "whyidle.track":
        what = "device time between step marks (CUDA events)" if _tracked_on_gpu(r) else "host compute between batches (no GPU: CPU run)"
        return [("Busy", busy, f"of the steps: {what}"), ("Waiting", fmt_ns(u.idle_ns), "(data wait, copies, other host time)")]
    return [
        ("GPU busy", busy, f"of the window (kernels only {u.kernel_busy_fraction:.1%}), union over all streams"),
        ("GPU idle", fmt_ns(u.idle_ns), f"in {r.gap_count} gaps"),
    ]


def busy_finding_stat(f: Any, window_ns: int, fmt_ns: Callable[[float], str]) -> str:
    """What a finding about busy time (FP32 math, underfilled kernels) is worth, in the terms the
    idle findings use: time and share of the window, an upper bound on what its fix recovers."""
    ns = f.affected_busy_ns
    share = f" ({ns / window_ns:.0%} of the window)" if window_ns > 0 else ""
    return (
        f"Concerns {fmt_ns(ns)} of device busy time{share}, not idle time: the fix shortens part of it, "
        "so that is an upper bound on what it recovers."
    )


def counter_value(v: float, unit: str) -> str:
    """One GPU counter reading with its unit, as the terminal and HTML reports show it."""
    if unit == "B/s":
        return f"{v / 1e6:.1f} MB/s"
    return (f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.1f} {unit}").replace(" %", "%")


def render(report: Any, fmt: str = "terminal", *, timeline: Any = None, width: int = 80, color: bool = False, gzip: bool = False) -> str | bytes:
    """The report in format ``fmt`` (terminal, json, html, perfetto, png, svg).

    ``timeline`` (the Timeline the report was made from) saves the HTML and Perfetto renderers
    reading the trace again; without it they read ``report.source.path``.
    """
    from whyidle.commands._output import format_for, renderer

    from whyidle.findings.model import MultiRankReport

    fmt = format_for(fmt, None)
    if isinstance(report, MultiRankReport) and fmt not in MULTI_RANK_FORMATS:
        from whyidle.errors import UsageError

        raise UsageError(f"a run folder (one trace per rank) is reported as {' or '.join(MULTI_RANK_FORMATS)}, not {fmt}; diagnose one rank's trace for {fmt}")
    if isinstance(report, MultiRankReport) and fmt == "html":
        from whyidle.render.html_ranks import render_multi_rank_html

        return render_multi_rank_html(report)
    if isinstance(report, MultiRankReport) and fmt == "perfetto":
        from whyidle.errors import UsageError

        raise UsageError("a run folder's Perfetto export is one annotated trace per rank: save it to a file (-o job.json.gz)")
    fn = renderer(fmt)
    if fmt == "terminal":
        return fn(report, width=width, color=color)
    if fmt == "perfetto":
        return fn(report, timeline=timeline, gzip=gzip)
    if fmt == "html":
        return fn(report, timeline=timeline)
    return fn(report)


def save(
    report: Any, path: str | os.PathLike[str], fmt: str | None = None, *, timeline: Any = None, width: int = 80, inputs: Sequence[Any] = ()
) -> tuple[str, str]:
    """Write the report to ``path`` atomically, the format from ``fmt`` or the suffix; -> (path, format).

    ``inputs``: the files the report was made from; an output that is one of them is refused
    (:func:`whyidle.output.write_atomic`)."""
    from whyidle.commands._output import format_for
    from whyidle.output import write_atomic

    from whyidle.findings.model import MultiRankReport

    out = os.fspath(path)
    fmt = format_for(fmt, out)
    if isinstance(report, MultiRankReport) and fmt in ("html", "perfetto"):
        save_multi_rank(report, out, fmt, inputs)
        return out, fmt
    data = render(report, fmt, timeline=timeline, width=width, gzip=out.lower().endswith(".gz"))
    write_atomic(out, data, inputs=inputs)
    return out, fmt


def save_multi_rank(report: Any, path: str, fmt: str, inputs: Sequence[Any] = ()) -> list[str]:
    """A run folder as files: -> the per-rank files written.

    ``html``: the job's page at ``path`` and each rank's own report beside it
    (``<stem>.rank<N>.html``), linked from the job's page. ``perfetto``: one annotated trace per
    rank, ``<stem>.rank<N>.json.gz`` (or ``.json``), each opened on its own in ui.perfetto.dev;
    nothing is written at ``path`` itself.
    """
    from whyidle.output import write_atomic

    folder, name = os.path.split(path)
    lower = name.lower()
    suffix = next((x for x in (".html", ".htm", ".json.gz", ".json") if lower.endswith(x)), "")
    stem = name[: len(name) - len(suffix)] if suffix else name
    written: dict[int, str] = {}
    for e in report.ranks:
        if e.report is None:
            continue
        if fmt == "html":
            from whyidle.render.html import render_html
            from whyidle.render.html_ranks import rank_page_name

            written[e.rank] = rank_page_name(stem, e.rank)
            data: str | bytes = render_html(e.report)
        else:
            from whyidle.render.perfetto import render_perfetto

            written[e.rank] = f"{stem}.rank{e.rank}{suffix or '.json.gz'}"
            data = render_perfetto(e.report, gzip=not suffix or suffix == ".json.gz")
        write_atomic(os.path.join(folder, written[e.rank]), data, inputs=inputs)
    if fmt == "html":
        from whyidle.render.html_ranks import render_multi_rank_html

        write_atomic(path, render_multi_rank_html(report, written), inputs=inputs)
    return [os.path.join(folder, p) for p in written.values()]
