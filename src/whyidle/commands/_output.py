"""What the commands print on stderr: the files written, the progress indicators.

Choosing formats and rendering: :mod:`whyidle.render`; writing files: :mod:`whyidle.output`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

from whyidle.output import clean

__all__ = ["say_written", "progress", "progress_bar"]


def say_written(path: str | os.PathLike[str], what: str) -> None:
    """One line on stderr naming what was written where, and its size (stdout stays the report's)."""
    size = os.path.getsize(path)
    shown = f"{size / 1024:,.0f} KB" if size >= 1024 else f"{size} bytes"
    print(f"whyidle: wrote {what} to {clean(os.fspath(path), newlines=False)} ({shown})", file=sys.stderr)


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
