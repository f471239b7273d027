"""Renderers: a Report (or a MultiRankReport) to terminal text, JSON, HTML, a Perfetto trace or a plot.

One entry point for the command line and the public ``Report.render`` / ``Report.save``::

    text = render(report, "terminal", width=100)
    path, fmt = save(report, "report.html")          # format from the suffix, written atomically
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["render", "save", "MULTI_RANK_FORMATS"]

MULTI_RANK_FORMATS = ("terminal", "json")  # what a MultiRankReport renders to


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
    fn = renderer(fmt)
    if fmt == "terminal":
        return fn(report, width=width, color=color)
    if fmt == "perfetto":
        return fn(report, timeline=timeline, gzip=gzip)
    if fmt == "html":
        return fn(report, timeline=timeline)
    return fn(report)


def save(report: Any, path: str | os.PathLike[str], fmt: str | None = None, *, timeline: Any = None, width: int = 80) -> tuple[str, str]:
    """Write the report to ``path`` atomically, the format from ``fmt`` or the suffix; -> (path, format)."""
    from whyidle.commands._output import format_for, write_atomic

    out = os.fspath(path)
    fmt = format_for(fmt, out)
    data = render(report, fmt, timeline=timeline, width=width, gzip=out.lower().endswith(".gz"))
    write_atomic(out, data)
    return out, fmt
