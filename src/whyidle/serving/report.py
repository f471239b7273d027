"""Text, JSON and HTML for the batching tuner and the request-log diagnosis (presentation only)."""

from __future__ import annotations

import html
import json
from typing import Any

from whyidle.catalogue import GROUP_COLOURS
from whyidle.serving.batching import BatchingResult, Candidate
from whyidle.serving.instances import InstanceAdvice
from whyidle.serving.latency import LatencyProfile
from whyidle.serving.servers import all_servers
from whyidle.serving.requests import ServingDiagnosis
from whyidle.serving.saved import BatchingReport

__all__ = ["batching_text", "batching_dict", "batching_html", "serving_text", "serving_html", "frontier_svg"]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _cand_row(c: Candidate) -> str:
    st = c.settings
    at = c.at_rate
    tail = f"{_ms(at.objective_ns):>10} {at.mean_batch:>7.1f} {at.busy_share:>6.0%}" if at else ""
    return f"  {st.max_batch:>9} {st.max_delay_ns / 1e6:>10.2f} {c.capacity_per_s:>14,.0f}  {tail}"


def batching_text(res: BatchingResult, profile: LatencyProfile, advice: InstanceAdvice | None) -> str:
    q = f"p{res.percentile:g}"
    out = [
        f"Latency curve: {profile.source} ({', '.join(f'{b}: {_ms(m)}' for b, m in zip(profile.batch_sizes, profile.median_ns))})",
        f"Traffic: {res.traffic_source}, burstiness {res.burstiness:.2f}"
        + (f", observed {res.rate_per_s:,.1f} requests/s" if res.rate_per_s else ""),
        f"Objective: {q} <= {_ms(res.slo_ns)}; {res.simulations} simulations of {res.requests_per_run:,} requests in {res.seconds:.2f} s",
        f"Service-time spread: {res.jitter}",
        *(f"Warning: {n}" for n in profile.notes),
        "",
        "  max batch  delay (ms)  capacity (/s)" + (f"  {q} now  batch   busy" if res.rate_per_s else ""),
    ]
    out += [_cand_row(c) for c in res.frontier]
    out.append("")
    base = res.baseline
    if res.best is None:
        out.append(f"No setting meets {q} <= {_ms(res.slo_ns)}, even at a trickle: the model alone takes too long for this SLO.")
        return "\n".join(out) + "\n"
    b = res.best
    gain = b.capacity_per_s / base.capacity_per_s if base.capacity_per_s else float("inf")
    out.append(
        f"Recommended: max batch {b.settings.max_batch}, max queue delay {b.settings.max_delay_ns / 1e6:.2f} ms: "
        f"{b.capacity_per_s:,.0f} requests/s within the SLO, {gain:.1f}x without batching ({base.capacity_per_s:,.0f}/s)."
    )
    if b.at_rate is not None and base.at_rate is not None:
        out.append(
            f"At the observed rate: {q} {_ms(b.at_rate.objective_ns)} (without batching {_ms(base.at_rate.objective_ns)}), "
            f"mean batch {b.at_rate.mean_batch:.1f}, instance busy {b.at_rate.busy_share:.0%}."
        )
        if res.rate_per_s and res.rate_per_s > b.capacity_per_s:
            out.append("The observed rate exceeds this capacity: one instance cannot meet the SLO at it.")
    out.append("")
    for name, text in all_servers(b.settings).items():
        out.append(f"{name}:")
        out += [f"    {line}" for line in text.rstrip().splitlines()]
    if advice is not None:
        out.append("")
        out.append("Instances:" if advice.on_cpu else "Instances, MPS and MIG:")
        out += [f"  - {line}" for line in advice.lines]
    return "\n".join(out) + "\n"


def batching_dict(res: BatchingResult, profile: LatencyProfile, advice: InstanceAdvice | None) -> dict[str, Any]:
    """The ``whyidle batching`` JSON (:data:`whyidle.serving.saved.BATCHING`)."""
    return BatchingReport(res, profile, advice).to_dict()


def frontier_svg(res: BatchingResult, width: int = 560, height: int = 300) -> str:
    """Capacity within the SLO per max batch (each at its best delay), on log-2 x and linear y."""
    pts = [(c.settings.max_batch, c.capacity_per_s) for c in res.frontier]
    if not pts:
        return ""
    import math

    pad = 48
    xs = [math.log2(b) for b, _ in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y1 = max(c for _, c in pts) * 1.1 or 1.0

    def px(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)

    def py(y: float) -> float:
        return height - pad - y / y1 * (height - 2 * pad)

    line = " ".join(f"{px(x):.1f},{py(c):.1f}" for x, (_, c) in zip(xs, pts))
    dots = "".join(f'<circle cx="{px(x):.1f}" cy="{py(c):.1f}" r="3"><title>max batch {b}: {c:,.0f}/s</title></circle>' for x, (b, c) in zip(xs, pts))
    labels = "".join(f'<text x="{px(x):.1f}" y="{height - pad + 16}" text-anchor="middle" font-size="11">{b}</text>' for x, (b, _) in zip(xs, pts))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
        f'<polyline points="{line}" fill="none" stroke="#0072b2" stroke-width="2"/>{dots}{labels}'
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">max batch size</text>'
        f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle" font-size="12">requests/s within the SLO</text>'
        f'<text x="{pad}" y="{pad - 10}" font-size="11">{y1 / 1.1:,.0f}/s</text>'
        "</svg>"
    )


def batching_html(res: BatchingResult, profile: LatencyProfile, advice: InstanceAdvice | None) -> str:
    text = html.escape(batching_text(res, profile, advice))
    data = html.escape(json.dumps(batching_dict(res, profile, advice)))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>whyidle batching</title></head><body>"
        "<h1>Dynamic batching within the latency objective</h1>"
        f"{frontier_svg(res)}<pre>{text}</pre>"
        f"<script type='application/json' id='whyidle-data'>{data}</script></body></html>\n"
    )


def serving_text(d: ServingDiagnosis) -> str:
    st = d.stats
    out = [
        f"{st.requests:,} requests over {_ms(st.window_ns)}: {st.rate_per_s:,.1f}/s (peak {st.peak_rate_per_s:,.0f}/s in {_ms(st.peak_window_ns)}), burstiness {st.burstiness:.2f}",
        f"Latency p50 {_ms(st.latency_p50_ns)}, p90 {_ms(st.latency_p90_ns)}, p95 {_ms(st.latency_p95_ns)}, p99 {_ms(st.latency_p99_ns)}",
        f"In the system: {st.concurrency_mean:.2f} on average (Little's law: {st.littles_law_concurrency:.2f}), at most {st.concurrency_max}",
    ]
    if st.queue_depth_mean is not None:
        out.append(f"Queue depth: {st.queue_depth_mean:.2f} on average, at most {st.queue_depth_max}; wait p50 {_ms(st.wait_p50_ns or 0)}, p99 {_ms(st.wait_p99_ns or 0)}")
        sizes = ", ".join(f"{k}: {v}" for k, v in sorted(st.batch_sizes.items()))
        out.append(f"Batches: {st.batches:,}, mean size {st.mean_batch:.2f} (size: count {sizes})")
        out.append(
            f"Server busy {st.share(st.server_busy_ns):.0%} of the window; idle with no request {st.share(st.idle_no_request_ns):.0%}; "
            f"idle while requests waited (batching delay) {st.share(st.idle_requests_waiting_ns):.0%}"
        )
    if d.device_busy_share is not None:
        out.append(f"Device busy {d.device_busy_share:.0%} ({d.device_busy_basis or 'as given'})")
    out.append("")
    if d.verdict is None:
        out.append("No cause explains 5% of the window or more.")
    else:
        out.append(f"Verdict: {d.verdict.key}, {d.verdict.share_of_window:.0%} of the window")
    for c in d.causes:
        out.append(f"  {c.key:<34} {c.share_of_window:>5.0%}  {c.what}")
        out.append(f"  {'':<34}        fix: {c.lever}")
    for s in d.skipped:
        out.append(f"  skipped: {s}")
    return "\n".join(out) + "\n"


def serving_html(d: ServingDiagnosis) -> str:
    """One offline page: the causes as bars over the window, the text report, the data as JSON."""
    bars = "".join(
        f'<div style="margin:2px 0"><span style="display:inline-block;width:{max(c.share_of_window, 0.002) * 400:.0f}px;'
        f'height:14px;background:{GROUP_COLOURS.get(c.group, "#999")}"></span> {html.escape(c.key)} {c.share_of_window:.0%}</div>'
        for c in d.causes
    )
    data = html.escape(json.dumps(d.to_dict()))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>whyidle serving</title></head><body>"
        "<h1>Why the serving GPU is idle</h1><p>Share of the log's window per cause:</p>"
        f"{bars}<pre>{html.escape(serving_text(d))}</pre>"
        f"<script type='application/json' id='whyidle-data'>{data}</script></body></html>\n"
    )
