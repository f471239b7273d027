"""The multi-rank branch of ``whyidle diagnose RUN_DIR``: options, progress bar, dispatch."""

from __future__ import annotations

import argparse
from pathlib import Path

from whyidle.commands._output import progress_bar
from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.diagnosis import MultiRankReport

__all__ = ["is_run_dir", "run_ranks"]


def is_run_dir(path: str) -> bool:
    """A folder holding more than one trace: one per rank."""
    from whyidle.sources import find_traces

    p = Path(path)
    return p.is_dir() and len(find_traces(p)) > 1


def run_ranks(args: argparse.Namespace, cfg: Config) -> MultiRankReport:
    from whyidle.ranks import diagnose_ranks

    for opt in ("jobs", "workers"):
        v = getattr(args, opt, None)
        if v is not None and v <= 0:
            raise UsageError(f"--{opt} must be a positive number of processes")
    if args.scheduler and args.workers:
        raise UsageError("pass either --scheduler (an existing Dask cluster) or --workers (a local one), not both")
    from whyidle.render import MULTI_RANK_FORMATS, format_for

    fmt = "json" if args.json and not args.output else format_for(args.format, args.output)

    if fmt not in MULTI_RANK_FORMATS:
        raise UsageError(f"a run folder (one trace per rank) is reported as {', '.join(MULTI_RANK_FORMATS)}, not {fmt}; diagnose one rank's trace for {fmt}")
    with progress_bar(f"whyidle: ranks in {args.trace}") as update:
        return diagnose_ranks(args.trace, cfg, jobs=args.jobs, workers=args.workers, scheduler=args.scheduler, progress=update)
