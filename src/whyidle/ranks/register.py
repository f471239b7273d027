"""What the core asks of the ranks package, registered with it: the renderers of a
:class:`~whyidle.ranks.model.MultiRankReport` by type and format (terminal, json, html; html and
perfetto saved as one file per rank) with :mod:`whyidle.render`, and the reader of its saved JSON
(``"kind": "multi_rank"``) with :mod:`whyidle.findings.saved`. The core imports no feature package;
the modules that make a MultiRankReport (:mod:`~whyidle.ranks.run`) and ``whyidle.load_report``
import this one. The renderers themselves import on first use.
"""

from __future__ import annotations

from typing import Any

from whyidle.findings.saved import register_reader
from whyidle.ranks.model import MultiRankReport
from whyidle.render import RenderFn, Written, register_files, register_lazy, register_refusal

__all__: list[str] = []


def _terminal() -> RenderFn:
    from whyidle.ranks.render_terminal import render_multi_rank_terminal

    return render_multi_rank_terminal


def _json() -> RenderFn:
    from whyidle.ranks.render_json import render_multi_rank_json

    return render_multi_rank_json


def _html() -> RenderFn:
    from whyidle.ranks.render_html import render_multi_rank_html

    return render_multi_rank_html


def _files(report: Any, path: str, fmt: str, inputs: Any) -> list[Written]:
    from whyidle.ranks.files import save_rank_files

    return save_rank_files(report, path, fmt, inputs)


def _refusal(fmt: str, formats: tuple[str, ...], to_file: bool) -> str:
    if to_file:
        return f"a run folder's {fmt.capitalize()} export is one annotated trace per rank: save it to a file (-o job.json.gz)"
    return f"a run folder (one trace per rank) is reported as {' or '.join(formats)}, not {fmt}; diagnose one rank's trace for {fmt}"


def _read(d: dict[str, Any], where: str) -> object:
    from whyidle.ranks.model import decode

    return decode(d, where)


register_lazy(MultiRankReport, "terminal", _terminal)
register_lazy(MultiRankReport, "json", _json)
register_lazy(MultiRankReport, "html", _html)
register_files(MultiRankReport, "html", _files)
register_files(MultiRankReport, "perfetto", _files)
register_refusal(MultiRankReport, _refusal)
register_reader("multi_rank", _read)

