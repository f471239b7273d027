"""The multi-rank branch of ``whyidle diagnose RUN_DIR``: options, progress bar, dispatch."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.findings.model import MultiRankReport

__all__ = ["is_run_dir", "run_ranks", "progress_bar"]


def is_run_dir(path: str) -> bool:
    """A folder holding more than one trace: one per rank."""
    from whyidle.sources import find_traces

    p = Path(path)
    return p.is_dir() and len(find_traces(p)) > 1


@contextlib.contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback ``(done, total)`` drawing a bar on stderr (only on a terminal)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    with bar:

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def run_ranks(args: argparse.Namespace, cfg: Config) -> MultiRankReport:
    from whyidle.ranks import diagnose_ranks

    for opt in ("jobs", "workers"):
        v = getattr(args, opt, None)
        if v is not None and v <= 0:
            raise UsageError(f"--{opt} must be a positive number of processes")
    if args.scheduler and args.workers:
        raise UsageError("pass either --scheduler (an existing Dask cluster) or --workers (a local one), not both")
    with progress_bar(f"whyidle: ranks in {args.trace}") as update:
        return diagnose_ranks(args.trace, cfg, jobs=args.jobs, workers=args.workers, scheduler=args.scheduler, progress=update)
