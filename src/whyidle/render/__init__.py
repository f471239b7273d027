"""Renderers: a diagnosis (or a feature's result) to terminal text, JSON, HTML, a Perfetto trace or a plot.

Every renderer has one shape, ``render_x(result, **options) -> str | bytes``, and reads nothing
but the result (:class:`whyidle.findings.model.DiagnosisData`): no trace file, no Timeline.
:data:`RENDERERS` declares the formats: the file suffixes (the first is the extension it writes),
whether it is binary, the options its functions take, what the file holds. The functions are a
typed registry by result type and format: the diagnosis's are here, a feature package registers
its own result's on import (``register(MultiRankReport, "html", render_multi_rank_html)``)::

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
    "Renderer", "RENDERERS", "Written", "produce", "render", "save", "save_report", "format_for", "renderer",
    "register", "register_lazy", "register_files", "register_refusal", "formats_for", "RenderFn", "FilesFn", "RefusalFn",
    "title", "busy_finding_stat", "counter_value", "busy_idle_rows", "TITLE_GPU",
]  # fmt: skip

from whyidle.render.helpers import TITLE_GPU, busy_finding_stat, busy_idle_rows, counter_value, title


class Renderer(NamedTuple):
    """One output format: what any result rendered to it looks like on disk."""

    suffixes: tuple[str, ...]  # file names it is chosen for; the first is the extension it writes
    binary: bool  # returns bytes (else str)
    printable: bool  # text a terminal can show (else it must go to a file)
    options: tuple[str, ...]  # the keyword options its functions take
    what: str  # what a file of it holds, as the command line says it


RENDERERS: dict[str, Renderer] = {
    "terminal": Renderer((".txt",), False, True, ("width", "color"), "the terminal report"),
    "json": Renderer((".json",), False, True, ("columns",), "the JSON report"),
    "html": Renderer((".html", ".htm"), False, True, ("bins",), "the HTML report (open it in a browser)"),
    # `-o x.json` stays the JSON report; a gzipped Chrome trace is the Perfetto export.
    "perfetto": Renderer((".json.gz",), True, True, ("gzip",), "the Perfetto trace (open it in ui.perfetto.dev)"),
    "png": Renderer((".png",), True, False, (), "the step plot"),
    "svg": Renderer((".svg",), True, False, (), "the step plot"),
}  # fmt: skip
_OPTIONS = {o for r in RENDERERS.values() for o in r.options}

RenderFn = Callable[..., "str | bytes"]  # fn(result, **options)
# fn(result, path, fmt, inputs) -> every file written: a result written as several files.
FilesFn = Callable[[Any, str, str, Sequence[Any]], "list[Written]"]
# say(fmt, formats it has, whether fmt is written to files only) -> why ``fmt`` is refused.
RefusalFn = Callable[[str, tuple[str, ...], bool], str]

# The typed registry: per (result type, format) the function, or a loader of it (the import
# happens on first use, so `import whyidle.render` stays light). A result type's renderers are
# those of the nearest class in its MRO that registered any; a feature package registers its
# result types' renderers itself (whyidle/ranks/register.py): the core names no feature type.
_FUNCTIONS: dict[tuple[type, str], Callable[[], RenderFn]] = {}
_FILES: dict[tuple[type, str], FilesFn] = {}
_REFUSALS: dict[type, RefusalFn] = {}


def register(cls: type, fmt: str, fn: RenderFn) -> None:
    """Render results of type ``cls`` (and its subclasses) to ``fmt`` with ``fn(result, **options)``."""
    register_lazy(cls, fmt, lambda: fn)


def register_lazy(cls: type, fmt: str, load: Callable[[], RenderFn]) -> None:
    """As :func:`register`, where ``load()`` imports and returns the function on first use."""
    if fmt not in RENDERERS:
        raise ValueError(f"unknown format {fmt!r}")
    _FUNCTIONS[cls, fmt] = load


def register_files(cls: type, fmt: str, write: FilesFn) -> None:
    """Save results of type ``cls`` to ``fmt`` as files of their own (one per rank, say)."""
    _FILES[cls, fmt] = write


def register_refusal(cls: type, say: RefusalFn) -> None:
    """The message for a format results of type ``cls`` have no renderer for."""
    _REFUSALS[cls] = say


def _core() -> type:
    """The diagnosis's own renderers, registered on first use (findings.model imports numpy)."""
    from whyidle.findings.model import DiagnosisData

    if (DiagnosisData, "terminal") not in _FUNCTIONS:
        for fmt, load in _CORE.items():
            register_lazy(DiagnosisData, fmt, load)
    return DiagnosisData


def _owner(cls: type) -> type | None:
    """The nearest class of ``cls``'s MRO with renderers of its own."""
    _core()
    owners = {c for c, _ in (*_FUNCTIONS, *_FILES)}
    return next((c for c in cls.__mro__ if c in owners), None)


def formats_for(cls: type) -> tuple[str, ...]:
    """The formats results of type ``cls`` render or save to, in :data:`RENDERERS` order."""
    owner = _owner(cls)
    return tuple(f for f in RENDERERS if (owner, f) in _FUNCTIONS or (owner, f) in _FILES)


def _function(report: Any, fmt: str) -> RenderFn:
    owner = _owner(type(report))
    load = _FUNCTIONS.get((owner, fmt)) if owner is not None else None
    if load is not None:
        return load()
    say = next((_REFUSALS[c] for c in type(report).__mro__ if c in _REFUSALS), None)
    formats = formats_for(type(report))
    if say is None:
        raise UsageError(f"a {type(report).__name__} is rendered as {', '.join(formats) or 'nothing'}, not {fmt}")
    raise UsageError(say(fmt, formats, (owner, fmt) in _FILES))


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


def renderer(fmt: str, cls: type | None = None) -> RenderFn:
    """The function of format ``fmt`` for results of type ``cls`` (default: a diagnosis),
    ``render_x(result, **options)``."""
    fmt = format_for(fmt, None)
    owner = _owner(cls) if cls is not None else _core()
    load = _FUNCTIONS.get((owner, fmt)) if owner is not None else None
    if load is None:
        raise UsageError(f"no {fmt} renderer for {getattr(cls, '__name__', cls)}")
    return load()


def render(report: Any, fmt: str = "terminal", **options: Any) -> str | bytes:
    """The diagnosis in format ``fmt`` (see :data:`RENDERERS`).

    ``options`` go to the renderers that take them (``width``, ``color``: terminal; ``gzip``:
    perfetto; ``bins``: html) and are ignored by the others, so one call can serve any format;
    an option no renderer takes is a usage error."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise UsageError(f"unknown render option {', '.join(unknown)}; the renderers take {', '.join(sorted(_OPTIONS))}")
    fmt = format_for(fmt, None)
    return _function(report, fmt)(report, **{k: v for k, v in options.items() if k in RENDERERS[fmt].options})


def save(
    report: Any, path: str | os.PathLike[str], fmt: str | None = None, *, width: int = 80, inputs: Sequence[Any] = (), original: Any = None, columns: bool = False
) -> tuple[str, str]:
    """Write the diagnosis to ``path`` atomically, the format from ``fmt`` or the suffix; -> (path, format).

    See :func:`save_report` for ``inputs``, ``original`` and ``columns``."""
    out = os.fspath(path)
    fmt = format_for(fmt, out)
    save_report(report, out, fmt, width=width, inputs=inputs, original=original, columns=columns)
    return out, fmt


def save_report(
    report: Any, path: str, fmt: str, *, width: int = 80, inputs: Sequence[Any] = (), original: Any = None, columns: bool = False
) -> list[Written]:
    """Write the diagnosis to ``path`` in format ``fmt``; -> every file written, with what it holds.

    ``inputs``: the files the diagnosis was made from; an output that is one of them is refused
    (:func:`whyidle.output.write_atomic`). ``original``: the input itself (a trace's path, or
    the Timeline read from it): a Perfetto output then annotates it (:func:`~whyidle.render.perfetto.annotate`:
    the original events with the whyidle track) rather than drawing the diagnosis alone.
    ``columns``: a JSON report in its full form (every gap, the busy intervals). A
    result type that saves ``fmt`` as files of its own (:func:`register_files`: a multi-rank
    run's HTML or Perfetto, one file per rank) writes them."""
    from whyidle.output import write_atomic

    owner = _owner(type(report))
    write = _FILES.get((owner, fmt)) if owner is not None else None
    if write is not None:
        return write(report, path, fmt, inputs)
    data, what = produce(report, fmt, original=original, width=width, gzip=path.lower().endswith(".gz"), columns=columns)
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


def _terminal() -> RenderFn:
    from whyidle.render.terminal import render_terminal

    return render_terminal


def _json() -> RenderFn:
    from whyidle.render.json import render_json

    return render_json


def _html() -> RenderFn:
    from whyidle.render.html import render_html

    return render_html


def _perfetto() -> RenderFn:
    from whyidle.render.perfetto import render_perfetto

    return render_perfetto


def _png() -> RenderFn:
    from whyidle.render.plots import render_png

    return render_png


def _svg() -> RenderFn:
    from whyidle.render.plots import render_svg

    return render_svg


_CORE: dict[str, Callable[[], RenderFn]] = {"terminal": _terminal, "json": _json, "html": _html, "perfetto": _perfetto, "png": _png, "svg": _svg}
