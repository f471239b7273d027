"""Renderers: a diagnosis (or a multi-rank run) to terminal text, JSON, HTML, a Perfetto trace or a plot.

Every renderer has one shape, ``render_x(diagnosis, **options) -> str | bytes``, and reads nothing
but the diagnosis (:class:`whyidle.findings.model.DiagnosisData`): no trace file, no Timeline.
:data:`RENDERERS` is the one registry of them: the function, the file suffixes (the first is the
extension it writes), whether it is binary, the options it takes, what the file holds::

    text = render(diagnosis, "terminal", width=100)
    path, fmt = save(diagnosis, "report.html")        # format from the suffix, written atomically

Annotating the original trace file for Perfetto is not a rendering of the diagnosis: it is
:func:`whyidle.render.perfetto.annotate` (``save(..., original=trace)`` uses it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from whyidle.errors import UsageError

__all__ = [
    "Renderer", "RENDERERS", "MULTI_RANK_FORMATS", "Written", "save_multi_rank", "produce", "render", "save", "save_report", "format_for", "renderer",
    "title", "busy_finding_stat", "counter_value", "busy_idle_rows", "TITLE_GPU",
]  # fmt: skip

TITLE_GPU = "whyidle: why is this GPU idle?"


class Renderer(NamedTuple):
    """One output format."""

    function: str  # "module:function", called as function(diagnosis, **options)
    suffixes: tuple[str, ...]  # file names it is chosen for; the first is the extension it writes
    binary: bool  # returns bytes (else str)
    printable: bool  # text a terminal can show (else it must go to a file)
    options: tuple[str, ...]  # the keyword options the function takes
    what: str  # what a file of it holds, as the command line says it
    multi_rank: str = ""  # "module:function" for a multi-rank run ('' : not rendered as one piece)


RENDERERS: dict[str, Renderer] = {
    "terminal": Renderer("whyidle.render.terminal:render_terminal", (".txt",), False, True, ("width", "color"), "the terminal report", "whyidle.render.terminal:render_terminal"),
    "json": Renderer("whyidle.render.json:render_json", (".json",), False, True, (), "the JSON report", "whyidle.render.json:render_json"),
    "html": Renderer("whyidle.render.html:render_html", (".html", ".htm"), False, True, ("bins",), "the HTML report (open it in a browser)", "whyidle.render.html_ranks:render_multi_rank_html"),
    # `-o x.json` stays the JSON report; a gzipped Chrome trace is the Perfetto export.
    "perfetto": Renderer("whyidle.render.perfetto:render_perfetto", (".json.gz",), True, True, ("gzip",), "the Perfetto trace (open it in ui.perfetto.dev)"),
    "png": Renderer("whyidle.render.plots:render_png", (".png",), True, False, (), "the step plot"),
    "svg": Renderer("whyidle.render.plots:render_svg", (".svg",), True, False, (), "the step plot"),
}  # fmt: skip
_OPTIONS = {o for r in RENDERERS.values() for o in r.options}
# What a multi-rank run renders to (perfetto: one file per rank, through save()).
MULTI_RANK_FORMATS = (*(f for f, r in RENDERERS.items() if r.multi_rank), "perfetto")


class Written(NamedTuple):
    path: str
    what: str  # what the file holds, for the message naming it


def format_for(fmt: str | None, output: str | None) -> str:
    """The format: ``fmt`` when given, else from the output's suffix, else terminal."""
    if fmt:
        if fmt not in RENDERERS:
            raise UsageError(f"unknown format {fmt!r}; expected one of {', '.join(RENDERERS)}")
        return fmt
    if output:
        name = output.lower()
        suffixes = sorted(((x, f) for f, r in RENDERERS.items() for x in r.suffixes), key=lambda kv: -len(kv[0]))
        for suffix, f in suffixes:
            if name.endswith(suffix):
                return f
        raise UsageError(f"cannot tell the output format from {output!r}; pass --format ({', '.join(RENDERERS)})")
    return "terminal"


def _resolve(target: str) -> Callable[..., str | bytes]:
    import importlib

    mod, fn = target.split(":")
    return getattr(importlib.import_module(mod), fn)  # type: ignore[no-any-return]


def renderer(fmt: str) -> Callable[..., str | bytes]:
    """The function of format ``fmt`` (``render_x(diagnosis, **options)``)."""
    return _resolve(RENDERERS[format_for(fmt, None)].function)


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


def render(report: Any, fmt: str = "terminal", **options: Any) -> str | bytes:
    """The diagnosis in format ``fmt`` (see :data:`RENDERERS`).

    ``options`` go to the renderers that take them (``width``, ``color``: terminal; ``gzip``:
    perfetto; ``bins``: html) and are ignored by the others, so one call can serve any format;
    an option no renderer takes is a usage error."""
    from whyidle.findings.model import MultiRankData

    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise UsageError(f"unknown render option {', '.join(unknown)}; the renderers take {', '.join(sorted(_OPTIONS))}")
    fmt = format_for(fmt, None)
    entry = RENDERERS[fmt]
    target = entry.function
    if isinstance(report, MultiRankData):
        if fmt == "perfetto":
            raise UsageError("a run folder's Perfetto export is one annotated trace per rank: save it to a file (-o job.json.gz)")
        if not entry.multi_rank:
            multi = [f for f, r in RENDERERS.items() if r.multi_rank] + ["perfetto"]
            raise UsageError(f"a run folder (one trace per rank) is reported as {' or '.join(multi)}, not {fmt}; diagnose one rank's trace for {fmt}")
        target = entry.multi_rank
    return _resolve(target)(report, **{k: v for k, v in options.items() if k in entry.options})


def save(report: Any, path: str | os.PathLike[str], fmt: str | None = None, *, width: int = 80, inputs: Sequence[Any] = (), original: Any = None) -> tuple[str, str]:
    """Write the diagnosis to ``path`` atomically, the format from ``fmt`` or the suffix; -> (path, format).

    See :func:`save_report` for ``inputs`` and ``original``."""
    out = os.fspath(path)
    fmt = format_for(fmt, out)
    save_report(report, out, fmt, width=width, inputs=inputs, original=original)
    return out, fmt


def save_report(report: Any, path: str, fmt: str, *, width: int = 80, inputs: Sequence[Any] = (), original: Any = None) -> list[Written]:
    """Write the diagnosis to ``path`` in format ``fmt``; -> every file written, with what it holds.

    ``inputs``: the files the diagnosis was made from; an output that is one of them is refused
    (:func:`whyidle.output.write_atomic`). ``original``: the input itself (a trace's path, or
    the Timeline read from it): a Perfetto output then annotates it (:func:`~whyidle.render.perfetto.annotate`:
    the original events with the whyidle track) rather than drawing the diagnosis alone. A
    multi-rank run as HTML or Perfetto is one file per rank (:func:`save_multi_rank`)."""
    from whyidle.findings.model import MultiRankData
    from whyidle.output import write_atomic

    if isinstance(report, MultiRankData) and fmt in ("html", "perfetto"):
        return save_multi_rank(report, path, fmt, inputs)
    data, what = produce(report, fmt, original=original, width=width, gzip=path.lower().endswith(".gz"))
    write_atomic(path, data, inputs=inputs)
    return [Written(path, what)]


def produce(report: Any, fmt: str, *, original: Any = None, **options: Any) -> tuple[str | bytes, str]:
    """(the output of format ``fmt``, what it holds): :func:`render`, except that a Perfetto
    output annotates ``original`` (a trace's path or Timeline, :func:`~whyidle.render.perfetto.annotate`)
    when one is given."""
    if fmt == "perfetto" and original is not None:
        from whyidle.render.perfetto import annotate

        return annotate(original, report, gzip=bool(options.get("gzip", False))), "the annotated trace (open it in ui.perfetto.dev)"
    return render(report, fmt, **options), RENDERERS[fmt].what


def save_multi_rank(report: Any, path: str, fmt: str, inputs: Sequence[Any] = ()) -> list[Written]:
    """A run folder as files: -> the files written, the job's page first.

    ``html``: the job's page at ``path`` and each rank's own report beside it
    (``<stem>.rank<N>.html``), linked from the job's page. ``perfetto``: one trace per rank,
    ``<stem>.rank<N>.json.gz`` (or ``.json``), each opened on its own in ui.perfetto.dev: the
    rank's own trace annotated when it is a Kineto file still there, else drawn from its
    diagnosis; nothing is written at ``path`` itself.
    """
    from whyidle.output import write_atomic

    folder, name = os.path.split(path)
    lower = name.lower()
    suffix = next((x for x in (".html", ".htm", ".json.gz", ".json") if lower.endswith(x)), "")
    stem = name[: len(name) - len(suffix)] if suffix else name
    written: dict[int, str] = {}
    out: list[Written] = []
    for e in report.ranks:
        if e.report is None:
            continue
        if fmt == "html":
            from whyidle.render.html import render_html
            from whyidle.render.html_ranks import rank_page_name

            written[e.rank] = rank_page_name(stem, e.rank)
            data: str | bytes = render_html(e.report)
            what = f"rank {e.rank}'s HTML report, linked from the job's page"
        else:
            from whyidle.render.perfetto import annotate, render_perfetto

            written[e.rank] = f"{stem}.rank{e.rank}{suffix or '.json.gz'}"
            gz = not suffix or suffix == ".json.gz"
            src = e.report.source
            if src.format == "kineto" and src.path and os.path.isfile(src.path):
                data = annotate(src.path, e.report, gzip=gz)
                what = "one rank's annotated trace (open it in ui.perfetto.dev)"
            else:
                data = render_perfetto(e.report, gzip=gz)
                what = "one rank's Perfetto trace (open it in ui.perfetto.dev)"
        write_atomic(os.path.join(folder, written[e.rank]), data, inputs=inputs)
        out.append(Written(os.path.join(folder, written[e.rank]), what))
    if fmt == "html":
        from whyidle.render.html_ranks import render_multi_rank_html

        write_atomic(path, render_multi_rank_html(report, written), inputs=inputs)
        out.insert(0, Written(path, RENDERERS["html"].what))
    return out
