"""Choosing output formats, and the progress indicator (writing outputs: :mod:`whyidle.output`)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from whyidle.errors import UsageError
from whyidle.output import clean

__all__ = ["say_written", "format_for", "progress", "RENDERERS"]


def say_written(path: str | os.PathLike[str], what: str) -> None:
    """One line on stderr naming what was written where, and its size (stdout stays the report's)."""
    size = os.path.getsize(path)
    shown = f"{size / 1024:,.0f} KB" if size >= 1024 else f"{size} bytes"
    print(f"whyidle: wrote {what} to {clean(os.fspath(path), newlines=False)} ({shown})", file=sys.stderr)


# format name -> "module:function" rendering a Report to str or bytes
RENDERERS: dict[str, str] = {
    "terminal": "whyidle.render.terminal:render_terminal",
    "json": "whyidle.render.json:render_json",
    "html": "whyidle.render.html:render_html",
    "perfetto": "whyidle.render.perfetto:render_perfetto",
    "png": "whyidle.render.plots:render_png",
    "svg": "whyidle.render.plots:render_svg",
}
_SUFFIXES = {".json": "json", ".txt": "terminal"}
# `-o x.json` stays the JSON report; a gzipped Chrome trace is the annotated Perfetto export.
_SUFFIXES.update({".html": "html", ".htm": "html", ".json.gz": "perfetto", ".png": "png", ".svg": "svg"})


def format_for(fmt: str | None, output: str | None) -> str:
    if fmt:
        if fmt not in RENDERERS:
            raise UsageError(f"unknown format {fmt!r}; expected one of {', '.join(RENDERERS)}")
        return fmt
    if output:
        name = output.lower()
        for suffix, f in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
            if name.endswith(suffix) and f in RENDERERS:
                return f
        raise UsageError(f"cannot tell the output format from {output!r}; pass --format ({', '.join(RENDERERS)})")
    return "terminal"


def renderer(fmt: str) -> Callable[..., str | bytes]:
    import importlib

    mod, fn = RENDERERS[fmt].split(":")
    return getattr(importlib.import_module(mod), fn)  # type: ignore[no-any-return]


@contextlib.contextmanager
def progress(message: str, delay_s: float = 1.0) -> Iterator[None]:
    """A spinner on stderr, shown only if the work takes longer than ``delay_s`` on a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    from rich.markup import escape

    console = Console(stderr=True)
    status = console.status(escape(clean(message, newlines=False)))  # the message names an input
    started = threading.Event()

    def start() -> None:
        started.set()
        status.start()

    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if started.is_set():
            status.stop()


@contextlib.contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback ``(done, total)`` drawing a bar on stderr (only on a terminal)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from rich.markup import escape

    label = escape(clean(label, newlines=False))
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    with bar:

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
