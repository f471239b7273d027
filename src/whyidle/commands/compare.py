"""whyidle compare BEFORE AFTER: what changed between two runs of the same job, and a verdict.

Each input is a trace (diagnosed here) or a JSON report saved by ``whyidle diagnose -o r.json``.
Exit status 1 when ``--max-regression`` is given and throughput fell by more than it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from whyidle.commands import _types as T
from whyidle.commands._configfile import add_config_option, config_from
from whyidle.commands._output import progress, say_written
from whyidle.errors import UsageError
from whyidle.output import check_not_input, clean, write_atomic, write_stdout

__all__ = ["add_parser", "run"]


EXAMPLES = """\
  whyidle compare before.pt.trace.json.gz after.pt.trace.json.gz
  whyidle compare before.json after.json --max-regression 5%   # CI gate: exit 1 on a 5% slow-down
  whyidle compare before.json after.json -o diff.json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="compare two runs (traces or saved JSON reports): deltas, verdict, CI gate")
    p.add_argument("before", help="the baseline: a trace or a JSON report from whyidle diagnose -o report.json")
    p.add_argument("after", help="the changed run: a trace or a JSON report")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("-o", "--output", help="write the comparison here (.json: JSON, else text)")
    p.add_argument("--max-regression", metavar="PCT", help="exit 1 if throughput fell by more than this (e.g. 5%% or 0.05)")
    p.add_argument("--skip-first", type=T.integer(0), metavar="N", help="drop the first N steps of each trace (default 0)")
    p.add_argument("--batch-size", type=T.integer(1), help="samples per step, when the traces cannot tell")
    p.add_argument("--top", type=T.integer(1), default=10, metavar="N", help="kernels and ops listed (default 10)")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.comparison.render import render_comparison_json, render_text
    from whyidle.comparison.analysis import compare_reports, parse_regression, read_side

    limit = parse_regression(args.max_regression) if args.max_regression is not None else None
    if args.skip_first is not None and args.skip_first < 0:
        raise UsageError("--skip-first must be 0 or more")
    if args.batch_size is not None and args.batch_size <= 0:
        raise UsageError("--batch-size must be a positive number of samples")
    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    cfg = config_from(args, skip_first_steps=args.skip_first, batch_size=args.batch_size)
    if args.output:
        check_not_input(args.output, (args.before, args.after))  # before reading: say it at once
    from whyidle.parallel import Helpers
    from whyidle.sources import ReadAhead

    with ReadAhead() as read_ahead:
        for side in (args.before, args.after):  # both read (and gunzipped) at once, in threads
            read_ahead.start(side, cfg.read.stream_min_bytes, cfg.read)
        with progress(f"whyidle: reading {args.before} and {args.after}"):
            # the command line's own process: a forked child may decode beside it
            before = read_side(args.before, cfg, read_ahead=read_ahead, helpers=Helpers(fork=True))
            after = read_side(args.after, cfg, read_ahead=read_ahead, helpers=Helpers(fork=True))
    c = compare_reports(before, after, limit=args.top)
    as_json = render_comparison_json(c)
    text = render_text(c)
    if args.output:
        is_json = args.output.lower().endswith(".json")
        write_atomic(args.output, as_json if is_json else text, inputs=(args.before, args.after))
        say_written(args.output, "the comparison as JSON" if is_json else "the comparison")
    if args.json:
        write_stdout(as_json)
    elif not args.output:
        write_stdout(clean(text))
    if limit is not None:
        if c.regression is None:
            raise UsageError("--max-regression: neither run has steps or device activity to compare throughput on")
        if c.regression > limit:
            print(
                f"whyidle: gate failed: throughput ({c.throughput_basis}) fell {c.regression:.1%}, "
                f"more than --max-regression {limit:.1%}",
                file=sys.stderr,
            )
            return 1
    return 0
