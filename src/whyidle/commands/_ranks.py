"""The multi-rank branch of ``whyidle diagnose RUN_DIR``: options, progress bar, dispatch."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from whyidle.commands._output import progress_bar
from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.ranks import is_run_dir

if TYPE_CHECKING:
    from whyidle.ranks.model import MultiRankReport

__all__ = ["is_run_dir", "run_ranks"]


def run_ranks(args: argparse.Namespace, cfg: Config) -> MultiRankReport:
    from whyidle.ranks.model import MultiRankReport
    from whyidle.ranks.run import diagnose_ranks

    for opt in ("jobs", "workers"):
        v = getattr(args, opt, None)
        if v is not None and v <= 0:
            raise UsageError(f"--{opt} must be a positive number of processes")
    if args.scheduler and args.workers:
        raise UsageError("pass either --scheduler (an existing Dask cluster) or --workers (a local one), not both")
    from whyidle.render import format_for, formats_for

    fmt = "json" if args.json and not args.output else format_for(args.format, args.output)
    formats = formats_for(MultiRankReport)
    if fmt not in formats:
        raise UsageError(f"a run folder (one trace per rank) is reported as {', '.join(formats)}, not {fmt}; diagnose one rank's trace for {fmt}")
    with progress_bar(f"whyidle: ranks in {args.trace}") as update:
        return diagnose_ranks(args.trace, cfg, jobs=args.jobs, workers=args.workers, scheduler=args.scheduler, progress=update)
