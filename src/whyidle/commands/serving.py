"""whyidle serving LOG: why a serving GPU is idle, from a request log (demand, batching or host pipeline).

    whyidle serving requests.jsonl --trace server_trace.json.gz
    whyidle serving triton_trace.json --device-busy 0.12 --max-batch 32

The device's busy share, needed to tell a slow host pipeline from the rest, comes from a trace or
GPU counter log of the same period (``--trace``, diagnosed here and joined with the log by time:
a trace that does not overlap the log is refused unless ``--assume-same-period``), or is given
(``--device-busy``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from whyidle.commands import _types as T
from whyidle.commands._configfile import add_config_option, config_from
from whyidle.errors import UsageError
from whyidle.output import write_atomic, write_stdout

__all__ = ["add_parser", "run"]


EXAMPLES = """\
  whyidle serving requests.jsonl --trace server_trace.json.gz
  whyidle serving triton_trace.json --device-busy 0.12 --max-batch 32
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serving", help="why a serving GPU is idle, from a request log: demand, batching or host pipeline")
    p.add_argument("log", help="request log: JSON lines, JSON list, CSV, or a Triton trace (arrival, start, finish per request)")
    p.add_argument("--trace", help="a trace or GPU counter log of the same period: the device's busy share over the time it overlaps the log")
    p.add_argument("--assume-same-period", action="store_true", help="use --trace even when it cannot be joined with the log by time (its busy share taken as the log's)")
    p.add_argument("--device-busy", type=T.FRACTION, metavar="FRACTION", help="the device's busy share over the log's window (0..1)")
    p.add_argument("--max-batch", type=T.integer(1, 65_536), help="the server's configured max batch size (default: the largest batch in the log)")
    p.add_argument("--slo-ms", type=T.MS, help="the latency objective, ms (written into the suggested tuner command)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("-o", "--output", help="write the diagnosis here (.json: JSON, .html: a page, else text)")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from whyidle.serving.requestlog import load_requests
    from whyidle.serving.requests import diagnose_requests

    if args.trace and args.device_busy is not None:
        raise UsageError("give the device's busy share once: --trace or --device-busy")
    if args.device_busy is not None and not 0 <= args.device_busy <= 1:
        raise UsageError("--device-busy is a fraction between 0 and 1")
    cfg = config_from(args)
    log = load_requests(args.log)
    busy, basis = args.device_busy, "given" if args.device_busy is not None else ""
    if args.trace:
        from whyidle.pipeline import diagnose
        from whyidle.serving.join import device_busy_over_log

        busy, basis = device_busy_over_log(diagnose(args.trace, cfg), log, args.trace, assume_same_period=args.assume_same_period)
    d = diagnose_requests(log, device_busy_share=busy, device_busy_basis=basis, slo_ms=args.slo_ms, max_batch=args.max_batch, cfg=cfg)
    from whyidle.serving.report import serving_html, serving_text

    out = args.output or ""
    if args.json or out.endswith(".json"):
        text = json.dumps(d.to_dict(), indent=1) + "\n"
    elif out.endswith((".html", ".htm")):
        text = serving_html(d)
    else:
        text = serving_text(d)
    if out:
        write_atomic(out, text, inputs=(args.log, args.trace))
    else:
        write_stdout(text)
    return 0
