"""whyidle watch -- CMD...: run a command, sample the GPU (NVML) and its process tree, summarise.

The exit status is the command's (127 when it cannot be started), so ``whyidle watch`` can wrap a
training job in a script or CI without hiding its failures.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from whyidle.commands._command import cannot_start, command_words
from whyidle.commands import _types as T
from whyidle.errors import OutputError, UsageError
from whyidle.output import write_atomic

__all__ = ["add_parser", "run"]


EXAMPLES = """\
  whyidle watch -- python train.py             # writes watch.<time>.counters.csv
  whyidle watch -o gpu.csv --interval 0.5 -- torchrun --nproc-per-node 8 train.py
  whyidle diagnose gpu.csv                     # then read the log
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="run a command and sample GPU counters (NVML) and its CPU/memory; summarise bursts and pauses",
        description="Run CMD, sample NVML (GPU-Util, memory activity and use, SM clock, power, PCIe) and the "
        "process tree's CPU and memory several times a second, write a counter file (CSV) and summarise. "
        "Example: whyidle watch -o run.counters.csv -- python train.py",
    )
    p.add_argument("-o", "--output", help="counter file to write (default: watch.<time>.counters.csv)")
    p.add_argument("--interval", type=T.number(0, 3600, lo_open=True), default=0.2, metavar="SECONDS", help="time between samples (default 0.2)")
    p.add_argument("--no-pcie", action="store_true", help="skip PCIe throughput (each reading takes ~20 ms per GPU)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command to run, after --")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.capture.watch import default_probes, summarize, to_counter_file, watch

    cmd = command_words(args.cmd, "no command to watch; usage: whyidle watch -- python train.py")
    if not 0.01 <= args.interval <= 60:
        raise UsageError(f"--interval {args.interval}: expected between 0.01 and 60 seconds")
    out = args.output or f"watch.{time.strftime('%Y%m%d-%H%M%S')}.counters.csv"
    try:
        result = watch(cmd, args.interval, probes=lambda pid: default_probes(pid, pcie=not args.no_pcie))
    except (FileNotFoundError, PermissionError) as exc:
        return cannot_start("whyidle watch", cmd, exc)
    for line in summarize(result, cmd):
        print(line, file=sys.stderr)
    if result.rows:
        try:
            write_atomic(out, to_counter_file(result, cmd))
            print(f"  counters written to {out}", file=sys.stderr)
        except OutputError as exc:
            print(f"whyidle watch: {exc}", file=sys.stderr)
    return result.returncode
