"""whyidle convert TRACE -o OUT.parquet: parse once, analyse many times.

Writes the normalised Timeline as Parquet (columns documented in whyidle.sources.parquet and
docs/scale.md); ``whyidle diagnose OUT.parquet`` reads it without parsing the trace again, and
DuckDB, Polars or pandas can query it directly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from whyidle.commands._configfile import add_config_option, config_from
from whyidle.commands._output import progress, progress_bar
from whyidle.config import ReadSettings
from whyidle.errors import OutputError, UsageError
from whyidle.output import check_not_input

__all__ = ["add_parser", "run"]


EXAMPLES = """\
  whyidle convert trace.pt.trace.json.gz -o trace.parquet
  whyidle diagnose trace.parquet
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("convert", help="write a trace's normalised timeline as Parquet (parse once, analyse many)")
    p.add_argument("trace", help="a PyTorch profiler trace (.json, .json.gz) or any input whyidle reads")
    p.add_argument("-o", "--output", required=True, help="the Parquet file to write (.parquet)")
    p.add_argument("--stream", choices=("auto", "always", "never"), default="auto", help="read Kineto traces in chunks (default: above the size threshold)")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.sources import load
    from whyidle.sources.parquet import require_pyarrow, write_parquet

    out = Path(args.output)
    if out.suffix != ".parquet":
        raise UsageError(f"-o {args.output}: expected a file name ending in .parquet")
    if not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise OutputError(out, f"cannot be written: the folder {out.parent} does not exist")
    check_not_input(out, (args.trace,))
    settings = config_from(args).read  # the reading limits ([read]): gzip caps, the size read in chunks
    from whyidle.sources import kineto_stream

    require_pyarrow()  # the extra is needed: say so before parsing a large trace
    big = kineto_stream.should_stream(Path(args.trace), settings=settings)
    if args.stream == "always" or (args.stream == "auto" and big):
        with progress_bar(f"whyidle: reading {Path(args.trace).name}") as update:
            tl = kineto_stream.parse_kineto_stream(args.trace, progress=update, settings=settings)
    else:
        with progress(f"whyidle: reading {args.trace}"):
            tl = _load_in_memory(args.trace, settings) if big else load(args.trace, settings=settings)
    with progress(f"whyidle: writing {out}"):
        write_parquet(tl, out, inputs=(args.trace,))
    print(f"whyidle: wrote {len(tl)} events, {len(tl.lanes)} lanes to {out}", file=sys.stderr)
    return 0


def _load_in_memory(path: str, settings: ReadSettings) -> Any:
    from whyidle.sources import read_bytes
    from whyidle.sources.kineto import load_kineto

    return load_kineto(Path(path), read_bytes(Path(path), settings=settings))
