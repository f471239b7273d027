"""The insufficient-demand finding's numbers: what ``whyidle batching`` needs, from the trace.

A serving loop that waits for requests leaves the device idle; the lever is dynamic batching,
tuned against a latency percentile by ``whyidle batching``. That command needs the traffic and
the model's latency per batch size. ``analyses/serving_loop.py`` measures both from the loop's
own batch ranges when it can; this module turns them into the finding's facts and a command line
the user can run as it is (only the latency objective, which no trace holds, is theirs to fill
in), and says which number is missing and how to get it when the trace does not hold it.
"""

from __future__ import annotations

from typing import Any

from whyidle.analyses.serving_loop import ServingLoop, serving_loop
from whyidle.findings.settings import RuleSettings
from whyidle.timeline.model import Timeline

__all__ = ["demand_facts", "demand_steps", "batching_command"]

SLO_PLACEHOLDER = "SLO_MS"


def batching_command(loop: ServingLoop) -> str:
    """The ``whyidle batching`` line for this loop: its rate and its curve when the trace has them."""
    rate = loop.arrival_per_s if loop.arrival_per_s is not None else loop.requests_per_s
    traffic = f"--rate {rate:.3g}" if rate is not None else "--requests LOG"
    curve = f"--curve {loop.curve_arg()}" if len(loop.curve) >= 2 else "--measure MODULE:FUNCTION"
    return f"whyidle batching {curve} {traffic} --slo-ms {SLO_PLACEHOLDER}"


def demand_facts(tl: Timeline, cfg: RuleSettings) -> tuple[tuple[str, Any], ...]:
    """Facts for the finding's evidence from the serving loop in the trace (JSON: evidence.facts)."""
    loop = serving_loop(tl, cfg.attribution)
    facts: list[tuple[str, Any]] = [("batch_range", loop.batch_range or None), ("batches", loop.batches)]
    if loop.batches_per_s is not None:
        facts.append(("batches_per_s", round(loop.batches_per_s, 2)))
    if loop.requests is not None:
        facts += [("batch_sizes_from", loop.sizes_from), ("requests", loop.requests), ("mean_batch", round(loop.mean_batch or 0.0, 2))]
        facts.append(("requests_per_s_served", round(loop.requests_per_s or 0.0, 2)))
        facts.append(("arrival_per_s", round(loop.arrival_per_s, 2) if loop.arrival_per_s is not None else None))
        facts += [("arrival_requests", loop.arrival_requests), ("backlog_batches", loop.backlog_batches)]
    if loop.curve:
        facts.append(("latency_curve", [
            {"batch_size": p.batch_size, "batches": p.batches, "latency_ns_median": p.median_ns, "latency_ns_p90": p.p90_ns,
             "device_ns_median": p.device_median_ns} for p in loop.curve
        ]))
    missing = list(loop.missing) + [_SLO_MISSING]
    facts += [("batching_command", batching_command(loop)), ("missing", missing)]
    return tuple(facts)


_SLO_MISSING = f"the latency objective ({SLO_PLACEHOLDER}): no trace holds it; it is the service's own"


def demand_steps(facts: dict[str, Any], base: tuple[str, ...]) -> tuple[str, ...]:
    """"Seen here" lines and the batching command from the facts, before the lever's other steps."""
    seen: list[str] = []
    curve = facts.get("latency_curve")
    if facts.get("requests") is not None and curve:
        rate = facts["arrival_per_s"] if facts.get("arrival_per_s") is not None else facts["requests_per_s_served"]
        backlog = ""
        if facts.get("arrival_per_s") is not None and facts.get("backlog_batches"):
            backlog = (f" ({facts['arrival_requests']} requests once it waited for them; its first {facts['backlog_batches']} batches "
                       f"drained a backlog, {facts['requests_per_s_served']:,.0f}/s served over the whole trace)")
        pts = ", ".join(f"{p['batch_size']}: {p['latency_ns_median'] / 1e6:.2f} ms"
                        + (f" (device {p['device_ns_median'] / 1e6:.2f})" if p["device_ns_median"] is not None else "") for p in curve)
        seen.append(f"Seen here: {facts['batches']} '{facts['batch_range']}' batches holding {facts['requests']} requests "
                    f"(sizes from {facts['batch_sizes_from']}, mean {facts['mean_batch']:.1f}); requests arrive at {rate:,.0f}/s{backlog}; "
                    f"time per batch by size: {pts}.")
    elif facts.get("batches_per_s") is not None:
        seen.append(f"Seen here: {facts['batches']} '{facts['batch_range']}' batches, {facts['batches_per_s']:,.0f} per second.")
    seen.append(f"Tune it (fill in your latency objective): {facts['batching_command']}")
    seen += [f"Missing from the trace: {m}." for m in facts.get("missing", ()) if m != _SLO_MISSING]
    return tuple(seen) + tuple(s for s in base if "whyidle batching" not in s)
