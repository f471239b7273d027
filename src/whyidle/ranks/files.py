"""A multi-rank run saved as files: the job's HTML page with one page per rank beside it, or one
Perfetto trace per rank (``whyidle diagnose RUN_DIR -o job.html``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from whyidle.output import write_atomic
from whyidle.ranks.model import MultiRankReport
from whyidle.ranks.render_html import rank_page_name, render_multi_rank_html
from whyidle.render import RENDERERS, Written

__all__ = ["save_rank_files"]


def save_rank_files(report: MultiRankReport, path: str, fmt: str, inputs: Sequence[Any] = ()) -> list[Written]:
    """A run folder as files: -> the files written, the job's page first.

    ``html``: the job's page at ``path`` and each rank's own report beside it
    (``<stem>.rank<N>.html``), linked from the job's page. ``perfetto``: one trace per rank,
    ``<stem>.rank<N>.json.gz`` (or ``.json``), each opened on its own in ui.perfetto.dev: the
    rank's own trace annotated when it is a Kineto file still there, else drawn from its
    diagnosis; nothing is written at ``path`` itself.
    """
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
        write_atomic(path, render_multi_rank_html(report, written), inputs=inputs)
        out.insert(0, Written(path, RENDERERS["html"].what))
    return out
