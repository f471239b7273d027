"""whyidle batching: the dynamic-batching settings that carry the most traffic within a latency SLO.

    whyidle batching --latency curve.csv --rate 120 --slo-ms 50
    whyidle batching --latency curve.csv --requests access.jsonl --slo-ms 50 --percentile 95
    whyidle batching --measure mypkg.models:make --device cuda --rate 120 --slo-ms 50

The latency curve is a CSV/JSON file or is measured here on the user's model
(``--measure MODULE:FUNCTION``: the function returns ``(model, example_input)``, one request's input
with a leading batch dimension of 1). The traffic is a request log (its gaps replayed, at its own
rate or ``--rate``) or a rate with a burstiness (gamma renewal; 1 = Poisson).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from whyidle.commands import _types as T
from whyidle.commands._configfile import add_config_option, config_from
from whyidle.errors import UsageError
from whyidle.output import write_atomic, write_stdout

__all__ = ["add_parser", "run"]


EXAMPLES = """\
  whyidle batching --latency curve.csv --rate 120 --slo-ms 50
  whyidle batching --latency curve.csv --requests access.jsonl --slo-ms 50 --percentile 95
  whyidle batching --measure mypkg.models:make --device cuda --rate 120 --slo-ms 50
  whyidle batching --curve 1:3.5:3.7,8:4.1:4.5 --rate 139 --slo-ms 20
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("batching", help="dynamic-batching settings that maximise throughput within a latency SLO")
    src = p.add_argument_group("the model's latency per batch size (one of)")
    src.add_argument("--latency", metavar="FILE", help="CSV (batch_size, latency_ms[, latency_ms_p90]) or JSON rows")
    src.add_argument("--curve", metavar="B:MS[:P90],...", help="inline: batch size:median ms[:p90 ms] pairs, e.g. 1:3.5,8:4.1 (what a trace's demand finding writes)")
    src.add_argument("--measure", metavar="MODULE:FUNCTION", help="measure it: FUNCTION() returns (model, example_input with batch dim 1)")
    p.add_argument("--device", help="with --measure: cpu or cuda (default: the model's)")
    p.add_argument("--batch-sizes", type=T.integers(1, 65_536), default="1,2,4,8,16,32,64,128,256", help="with --measure: sizes to time")
    p.add_argument("--save-latency", metavar="FILE", help="with --measure: also write the measured curve here (JSON)")
    tr = p.add_argument_group("the traffic (a log, or a rate)")
    tr.add_argument("--requests", metavar="LOG", help="a request log (JSON lines, CSV, Triton trace): its gaps are replayed")
    tr.add_argument("--rate", type=T.number(1e-6, 1e9), help="requests/s (with --requests: scale the log to this rate)")
    tr.add_argument("--burstiness", type=T.number(1e-3, 1e3), default=1.0, help="squared coefficient of variation of the gaps (1 Poisson, >1 bursty; default 1)")
    p.add_argument("--slo-ms", type=T.MS, required=True, help="the latency objective, ms")
    p.add_argument("--percentile", type=T.number(0, 100, lo_open=True), default=99.0, help="the percentile the SLO is about (default 99)")
    p.add_argument("--instances", type=T.integer(1, 4096), default=1, help="model instances sharing the queue (default 1)")
    p.add_argument("--max-batch", type=T.integers(1, 65_536), help="candidate max batch sizes, e.g. 8,16,32 (default: the measured sizes)")
    p.add_argument("--delays-ms", type=T.numbers(0, 86_400_000), help="candidate max queue delays in ms, e.g. 0,1,2,5 (default: fractions of the SLO)")
    p.add_argument("--preferred", type=T.integers(1, 65_536), help="Triton preferred batch sizes applied to every candidate, e.g. 8,16")
    p.add_argument("--no-jitter", action="store_true", help="use the median latency only (default: draw the p90 spread when known)")
    p.add_argument("--requests-per-run", type=T.integer(1, 100_000_000), help="requests simulated per run (default 20,000)")
    p.add_argument("--seed", type=T.integer(0, 2**32 - 1), default=0, help="the random seed of the simulated traffic (default 0)")
    p.add_argument("--gpu", help="GPU model for MIG advice (default: the measured device)")
    p.add_argument("--memory-gb", type=T.number(0, 1e6, lo_open=True), help="memory one instance holds, GB (default: measured with --measure on CUDA)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-o", "--output", help="write the result here (.json, .html, else text)")
    add_config_option(p)
    p.set_defaults(run=run)


def _measure(spec: str, args: argparse.Namespace) -> Any:
    from whyidle.serving.latency import profile_latency

    mod, _, fn = spec.partition(":")
    if not mod or not fn:
        raise UsageError(f"--measure {spec!r}: expected MODULE:FUNCTION")
    try:
        factory = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--measure {spec!r}: cannot import it ({exc})") from None
    model, example = factory()
    sizes = args.batch_sizes
    prof = profile_latency(model, example, sizes, device=args.device)
    if args.save_latency:
        import json

        write_atomic(args.save_latency, json.dumps(prof.to_dict(), indent=1) + "\n", inputs=(args.latency, args.requests))
    return prof


def run(args: argparse.Namespace) -> int:
    from whyidle.serving.batching import Traffic, tune_batching, unit_arrivals
    from whyidle.serving.instances import advise_instances
    from whyidle.serving.latency import load_latency, parse_curve

    if sum(bool(x) for x in (args.latency, args.curve, args.measure)) != 1:
        raise UsageError("give the latency curve: --latency FILE, --curve B:MS,... or --measure MODULE:FUNCTION (one of them)")
    if not args.requests and args.rate is None:
        raise UsageError("give the traffic: --requests LOG or --rate REQUESTS_PER_S")
    if args.rate is not None and args.rate <= 0:
        raise UsageError("--rate must be above 0")
    if args.slo_ms <= 0 or args.instances < 1:
        raise UsageError("--slo-ms must be above 0 and --instances at least 1")
    cfg = config_from(args)
    n = args.requests_per_run or cfg.serving.batching_requests
    cap = cfg.serving.batching_max_batch_size
    profile = load_latency(args.latency, cap) if args.latency else parse_curve(args.curve, cap) if args.curve else _measure(args.measure, args)
    if args.requests:
        from whyidle.serving.requestlog import load_requests
        from whyidle.serving.traffic import traffic_from_log

        traffic = traffic_from_log(load_requests(args.requests), n)
        if args.rate is not None:
            traffic = Traffic(traffic.unit_times_s, args.rate, traffic.burstiness, traffic.source + f", scaled to {args.rate:g}/s")
    else:
        traffic = Traffic(unit_arrivals(n, args.burstiness, args.seed), args.rate, args.burstiness, "poisson" if args.burstiness == 1 else f"gamma renewal (burstiness {args.burstiness:g})")
    sizes = args.max_batch or None
    delays = [int(x * 1e6) for x in args.delays_ms] if args.delays_ms else None
    res = tune_batching(
        profile, traffic, int(args.slo_ms * 1e6), percentile=args.percentile, instances=args.instances,
        max_batches=sizes, delays_ns=delays, jitter=not args.no_jitter, seed=args.seed, cfg=cfg,
        preferred=args.preferred or (),
    )
    mem = int(args.memory_gb * 1e9) if args.memory_gb else None
    advice = advise_instances(res, profile, gpu=args.gpu or "", memory_bytes=mem, cfg=cfg)
    from whyidle.serving.report import batching_dict, batching_html, batching_text

    out = args.output or ""
    if args.json or out.endswith(".json"):
        import json

        text = json.dumps(batching_dict(res, profile, advice), indent=1) + "\n"
    elif out.endswith((".html", ".htm")):
        text = batching_html(res, profile, advice)
    else:
        text = batching_text(res, profile, advice)
    if out:
        write_atomic(out, text, inputs=(args.latency, args.requests))
    else:
        write_stdout(text)
    return 0
