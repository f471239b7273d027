"""The HTML report: one self-contained, offline file (no network, no CDN) with the data embedded.

Layout: headline figures; idle time by cause; a timeline strip per device (busy and idle, each
idle stretch coloured by its cause); per-step stacked bars; the findings with evidence, code and
how to verify; a sortable table of the largest gaps with the CPU op and Python line before each.

Safety: every string that comes from a trace (kernel, op, file and thread names) is either
escaped here with :func:`html.escape` or placed in the page by the script with ``textContent``.
The embedded JSON escapes ``<``, ``>`` and ``&`` so it cannot close its ``<script>`` block, and a
Content-Security-Policy allows only the report's own script (by hash) and no network access.

Size: the timeline is downsampled to at most ``bins`` bins per device (1,200 by default), stored
as per-mille shares, so the embedded data stays in the hundreds of kilobytes whatever the trace.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping
from typing import Any

import msgspec

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.strip import BUSY_CLASSES, bin_activity
from whyidle.catalogue import BUSY, GROUP_COLOURS, LiveMap, derived, warmup_capture
from whyidle.findings.labels import BUSY_LABELS, GROUP_LABELS, cause_label
from whyidle.findings.model import Finding, GapRecord, DiagnosisData
from whyidle.pages import PAGES, explain_command, page_title
from whyidle.render._contrast import chip_style
from whyidle.render._html_assets import CSS, JS, static_page
from whyidle.render.html_work import work_section
from whyidle.render.helpers import TITLE_GPU, busy_finding_stat, busy_idle_rows, counter_value, rhythm_words, title
from whyidle.render._markdown import page_html
from whyidle.units import format_ns

__all__ = ["render_html", "CAUSE_COLORS", "BUSY_COLORS", "DEFAULT_BINS", "CSS", "static_page", "card_ms"]

DEFAULT_BINS = 1200  # about one bin per pixel of a laptop-wide strip

# Colours come from the cause catalogue: a colour per cause, a hue family per group (see its
# docstring and tests/test_palette.py); blues and green for busy work.
CAUSE_COLORS: Mapping[str, str] = LiveMap(derived(lambda entries: {e.key: e.colour for e in entries}))
BUSY_COLORS: dict[str, str] = {k: colour for k, (_, colour) in BUSY.items()}
GROUP_COLORS: dict[str, str] = dict(GROUP_COLOURS)

_e = html.escape


def card_ms(ns: float | None) -> str:
    """Durations as in the terminal, but whole milliseconds from 10 ms up (compact headline cards)."""
    if ns is not None and 1e7 <= abs(ns) < 1e9:
        return f"{ns / 1e6:.0f} ms"
    return format_ns(ns)


def _classes() -> list[dict[str, str]]:
    out = [{"key": k, "label": BUSY_LABELS[k], "color": BUSY_COLORS[k], "kind": "busy"} for k in BUSY_CLASSES]
    out += [{"key": c.key, "label": cause_label(c.key), "color": CAUSE_COLORS[c.key], "kind": "idle"} for c in C.CAUSES]
    return out


def _permille(parts: Any, bin_ns: float) -> list[int]:
    return [int(round(1000 * float(v) / bin_ns)) if bin_ns > 0 else 0 for v in parts]


def _timeline_data(report: DiagnosisData, bins: int) -> tuple[list[dict[str, Any]], str]:
    if report.no_device_activity or report.window.duration_ns <= 0:
        return [], "No device activity in the window."
    if report.window.basis == "counter log" or report.source.format == "whyidle.track":
        return [], ""  # no events to draw: the counter table and the per-step bars show these inputs
    g, act = report.gap_columns, report.activity
    if g is None or act is None:
        return [], (
            "this JSON report holds the summary, not every gap, so the timeline cannot be drawn; save it in its full form "
            "(whyidle diagnose TRACE -o report.json --full-json, or report.save(path, columns=True)), or diagnose the trace again"
        )
    strips = bin_activity(act, g.start_ns, g.end_ns, g.device, g.causes_ns, report.window.start_ns, report.window.end_ns, bins)
    out = []
    names = report.source.devices
    for s in strips:
        bin_ns = float((s.edges_ns[-1] - s.edges_ns[0]) / s.bins)
        parts: dict[str, list[int]] = {}
        for j, k in enumerate(BUSY_CLASSES):
            if s.busy_ns[:, j].any():
                parts[k] = _permille(s.busy_ns[:, j], bin_ns)
        for j, c in enumerate(C.CAUSES):
            if s.idle_ns[:, j].any():
                parts[c.key] = _permille(s.idle_ns[:, j], bin_ns)
        name = names[s.device] if 0 <= s.device < len(names) and names[s.device] else ""
        label = f"GPU {s.device}" + (f" ({name})" if name else "") + ": all streams"
        out.append({"device": s.device, "label": label, "bins": s.bins, "bin_ns": bin_ns, "parts": parts})
    return out, ""


def _steps_data(report: DiagnosisData) -> list[dict[str, Any]]:
    out = []
    w0 = report.window.start_ns
    for s in report.utilization.steps:
        parts: dict[str, int] = {}
        for k, v in (("compute", s.compute_ns), ("communication", s.communication_ns), ("copies", s.memcpy_ns + s.memset_ns)):
            if v:
                parts[k] = int(v)
        for c, v in zip(C.CAUSES, s.idle_by_cause_ns):
            if v:
                parts[c.key] = int(v)
        out.append({"n": s.number, "s": s.start_ns - w0, "d": s.duration_ns, "parts": parts})
    return out


def _json_for_script(data: Any) -> str:
    text = msgspec.json.encode(data).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


# -- server-rendered parts (all text escaped) --------------------------------------------------


def _card(key: str, value: str, detail: str = "") -> str:
    d = f'<div class="d">{_e(detail)}</div>' if detail else ""
    return f'<div class="wi-card"><div class="k">{_e(key)}</div><div class="v">{_e(value)}</div>{d}</div>'


def _lead(r: DiagnosisData) -> str:
    u = r.utilization
    if r.no_device_activity:
        return "No GPU activity in this trace: nothing to diagnose."
    idle_share = 1 - u.busy_fraction
    subject = "The training loop waited" if title(r) != TITLE_GPU else "The GPU was idle"
    gaps = "" if r.window.basis == "counter log" else f" in {r.gap_count:,} gaps"
    text = f"{subject} {idle_share:.0%} of the window ({card_ms(u.idle_ns)}{gaps})."
    idle_findings = [f for f in r.findings if f.idle_ns > 0]
    avoidable = [f for f in idle_findings if f.group != "unattributed"]

    def where(f: Finding) -> str:
        per = f.evidence.per_step_idle_ns
        return f" ({card_ms(per)} per step)" if per is not None else f" ({card_ms(f.idle_ns)})"

    if idle_findings and idle_findings[0].group == "unattributed":
        f = idle_findings[0]
        text += f" The largest part{where(f)} is one the trace cannot attribute: {f.title}."
    if avoidable:
        f = avoidable[0]
        text += f" The largest avoidable wait is {cause_label(f.key)}{where(f)}: {f.title}."
    elif r.findings and not idle_findings:
        text += f" {r.findings[0].title}."
    elif not r.findings:
        text += " No cause explains 5% or more of the window."
    return text


def _cards(r: DiagnosisData) -> str:
    u = r.utilization
    cards = [_card(label, value, detail) for label, value, detail in busy_idle_rows(r, card_ms)]
    times = u.step_times_ns
    if times.size:
        cards.append(_card("Step time", card_ms(float(times.mean())), f"mean of {times.size} steps; max {card_ms(float(times.max()))}"))
    if u.samples_per_s is not None:
        cards.append(_card("Throughput", f"{u.samples_per_s:,.1f}/s", f"samples per second (batch {u.batch_size})"))
    elif u.steps_per_s is not None:
        cards.append(_card("Throughput", f"{u.steps_per_s:.2f}/s", "steps per second"))
    k = r.kernels
    if k.count:
        sm = f"; est. SM efficiency {k.sm_efficiency:.0%}" if k.sm_efficiency is not None else ""
        cards.append(_card("Kernels", f"{k.count:,}", f"{k.short_share:.0%} shorter than 10 us{sm}"))
    if k.tensor_core_ns or k.fp32_math_ns:  # the name markers are NVIDIA's: nothing to say on other devices
        fp32 = f"; FP32 GEMM/conv without them {k.fp32_math_share:.0%}" if k.fp32_math_ns else ""
        cards.append(_card("Tensor cores", f"{k.tensor_core_share:.0%}", f"of kernel time in tensor-core (MMA) kernels, by kernel name{fp32}"))
    return '<div class="wi-cards">' + "".join(cards) + "</div>"


def _legend(keys: list[tuple[str, str, str]]) -> str:
    items = "".join(f'<span><i class="wi-sw" style="background:{color}"></i>{_e(label)}</span>' for _, label, color in keys)
    return f'<div class="wi-legend">{items}</div>'


def _cause_bar(r: DiagnosisData) -> str:
    idle = sum(r.idle_by_cause_ns.values())
    if idle <= 0:
        return ""
    spans, keys = [], []
    for c in C.CAUSES:
        ns = r.idle_by_cause_ns.get(c.key, 0)
        if ns <= 0:
            continue
        pct = 100 * ns / idle
        label = f"{cause_label(c.key)}: {card_ms(ns)} ({pct:.0f}%)"
        spans.append(f'<span style="width:{pct:.3f}%;background:{CAUSE_COLORS[c.key]}" title="{_e(label)}"></span>')
        keys.append((c.key, label, CAUSE_COLORS[c.key]))
    return (
        "<section><h2>Device idle time by cause</h2>"
        f'<div class="wi-bar" role="img" aria-label="idle time by cause">{"".join(spans)}</div>{_legend(keys)}'
        '<p class="wi-note">Each nanosecond of device idle is attributed to exactly one cause; what the trace cannot explain is unattributed.</p>'
        "</section>"
    )


# Colours of the critical path's segment kinds (analyses/whatif.py).
_PATH_COLORS = {  # the critical path's segment kinds
    "device": "#2e7d32", "launch latency": "#9ccc65", "host": "#f9a825", "loader": "#c62828",
    "sync": "#6a1b9a", "h2d copy": "#ef6c00", "h2d copy sync": "#ef6c00", "d2h copy": "#8e24aa",
}  # fmt: skip


def _critical_path(r: DiagnosisData) -> str:
    """The median step's critical path, drawn to scale, with the time per kind."""
    cp = r.extra.get("critical_path")
    if not cp or not cp.get("duration_ns"):
        return ""
    t0, dur = int(cp["start_ns"]), float(cp["duration_ns"])
    spans = []
    for seg in cp["segments"]:
        left = 100 * (int(seg["start_ns"]) - t0) / dur
        width = 100 * (int(seg["end_ns"]) - int(seg["start_ns"])) / dur
        names = ", ".join(seg["names"])
        label = f"{seg['kind']}: {card_ms(int(seg['end_ns']) - int(seg['start_ns']))}" + (f" ({names})" if names else "")
        color = _PATH_COLORS.get(seg["kind"], "#888")
        spans.append(f'<span style="position:absolute;left:{left:.3f}%;width:{width:.3f}%;background:{color}" title="{_e(label)}"></span>')
    keys = [(k, f"{k}: {card_ms(ns)} ({100 * ns / dur:.0f}%)", _PATH_COLORS.get(k, "#888")) for k, ns in sorted(cp["by_kind_ns"].items(), key=lambda kv: -kv[1])]
    return (
        f"<section><h2>Critical path of the median step (step {int(cp['step'])}, {_e(card_ms(dur))})</h2>"
        f'<div class="wi-bar" style="position:relative" role="img" aria-label="critical path">{"".join(spans)}</div>{_legend(keys)}'
        '<p class="wi-note">The chain of waits that decided the step, from the what-if replay: device work, the launch that '
        "started it, the host time before that, a sync and the work it waited for. Shortening anything off this path does "
        "not shorten the step.</p></section>"
    )


def _fact_name(key: str) -> str:
    for suffix in ("_ns", "_share", "_fraction"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _fact_value(key: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if key.endswith("_ns"):
        return card_ms(float(v))
    if key.endswith(("_share", "_fraction")):
        return f"{float(v):.1%}"
    return f"{v:,}" if isinstance(v, int) else f"{v:,.3g}"


def _finding(i: int, f: Finding, w0: int, window_ns: int) -> str:
    e = f.evidence
    color = GROUP_COLORS.get(f.group, "#888")
    head = f'<h3><span class="wi-chip">{_e(GROUP_LABELS.get(f.group, f.group))}</span>{i}. {_e(f.title)}</h3>'
    if f.idle_ns:
        stat = f"Explains {card_ms(f.idle_ns)} of device idle ({f.share_of_idle:.0%} of {f.basis}idle, {f.share_of_window:.0%} of the {f.basis}window)"
        if e.per_step_idle_ns is not None:
            stat += f"; {card_ms(e.per_step_idle_ns)} per step"
        stat += (f"; {e.gap_count:,} gaps" if e.gap_count else "") + ". An upper bound on what the fix recovers."
    else:
        stat = busy_finding_stat(f, window_ns, card_ms) + " " + f.fix.expected
    body = [head, f'<p class="wi-stat">{_e(stat)}</p>']
    if e.top_ops:
        items = "".join(
            f'<li><code>{_e(n)}</code>: {_e(card_ms(ns))}' + (f" in {k:,} gaps" if k else "") + "</li>" for n, ns, k in e.top_ops
        )
        # an idle finding lists what the CPU did in the gaps; a busy-time finding, the device's own kernels
        body.append(f"<h4>{'On the CPU meanwhile' if f.idle_ns else 'On the GPU: the kernels concerned'}</h4><ul>{items}</ul>")
    if e.python_lines:
        items = "".join(f"<li><code>{_e(ln)}</code> ({k:,} gaps)</li>" for ln, k in e.python_lines)
        body.append(f"<h4>Python lines</h4><ul>{items}</ul>")
    if e.examples:
        items = "".join(
            f"<li>at {(s - w0) / 1e6:,.1f} ms: {_e(card_ms(t - s))} idle, {_e(card_ms(ns))} of it this cause</li>" for s, t, ns in e.examples
        )
        body.append(f"<h4>Examples</h4><ul>{items}</ul>")
    if e.facts:
        items = "".join(f"<li>{_e(_fact_name(str(k)))}: <code>{_e(_fact_value(str(k), v))}</code></li>" for k, v in e.facts)
        body.append(f"<h4>Measured</h4><ul>{items}</ul>")
    steps = "".join(f"<li>{_e(s)}</li>" for s in f.fix.steps)
    fix = [f"<b>Fix:</b> {_e(f.fix.summary)}"]
    if steps:
        fix.append(f"<ol>{steps}</ol>")
    if f.fix.code:
        fix.append(f"<pre><code>{_e(f.fix.code)}</code></pre>")
    if f.fix.expected and f.idle_ns:
        fix.append(f'<div class="wi-verify"><b>Expected:</b> {_e(f.fix.expected)}</div>')
    if f.prediction is not None:
        note = f" {_e(f.prediction.note)}." if f.prediction.note else ""
        fix.append(f'<div class="wi-verify"><b>{_e(f.prediction.summary())}</b>. Assumed: {_e(f.prediction.assumption)}.{note}</div>')
    fix.append(f'<div class="wi-verify"><b>Verify:</b> {_e(f.fix.verify)}</div>')
    body.append('<div class="wi-fix">' + "".join(fix) + "</div>")
    body.append(_docs(f))
    return f'<div class="wi-finding" style="{chip_style(color)}">' + "".join(body) + "</div>"


def _docs(f: Finding) -> str:
    """The finding's cause page, embedded (closed until clicked): the report works offline."""
    if f.group not in PAGES:
        return f'<div class="wi-verify">Docs: <code>{_e(f.fix.docs)}</code></div>' if f.fix.docs else ""
    more = ""
    # a finding about an input format: its section of whyidle's docs (a report saved before the
    # pages shipped names docs/causes/...: the page below is that page)
    if f.fix.docs and f.fix.docs not in PAGES and not f.fix.docs.startswith("docs/causes/"):
        more = f" More in whyidle's documentation: <code>{_e(f.fix.docs)}</code>."
    return (
        f'<details class="wi-docs"><summary>How whyidle finds this cause: {_e(page_title(f.group))}</summary>'
        f'<div class="wi-doc">{page_html(f.group)}'
        f'<p class="wi-verify">The same page in a terminal: <code>{_e(explain_command(f.group))}</code>.{more}</p></div></details>'
    )


def _findings(r: DiagnosisData) -> str:
    w0 = r.window.start_ns
    if r.findings:
        inner = "".join(_finding(i, f, w0, r.window.duration_ns) for i, f in enumerate(r.findings, 1))
    elif r.no_device_activity:
        inner = '<p class="wi-empty">No GPU activity in this trace: nothing to diagnose.</p>'
    elif r.cold_start:
        inner = '<p class="wi-empty">No finding: cold start dominates this capture; diagnose a capture taken after warm-up.</p>'
    else:
        inner = '<p class="wi-empty">No problem finding: no cause explains 5% or more of the window.</p>'
    return f'<section class="wi-findings"><h2>Findings, by device-idle time explained</h2>{inner}</section>'


def _cell(text: str, cls: str = "cut") -> str:
    return f'<td data-v="{_e(text)}"><span class="{cls}" title="{_e(text)}">{_e(text)}</span></td>'


def _gap_row(i: int, g: GapRecord, w0: int) -> str:
    color = CAUSE_COLORS.get(f"{g.group}/{g.cause}", "#888")
    cause = cause_label(f"{g.group}/{g.cause}") + (" (drained by a sync)" if g.drained_by_sync else "")
    return (
        "<tr>"
        f'<td class="num" data-v="{i}">{i}</td>'
        f'<td class="num" data-v="{g.start_ns - w0}">{(g.start_ns - w0) / 1e6:,.1f} ms</td>'
        f'<td class="num" data-v="{g.dur_ns}">{_e(card_ms(g.dur_ns))}</td>'
        f'<td class="num" data-v="{g.device}">{g.device}</td>'
        f'<td data-v="{_e(cause)}"><span class="wi-chip" style="{chip_style(color)}">{_e(cause)}</span></td>'
        + _cell(g.before)
        + _cell(g.during)
        + _cell(g.python_line)
        + _cell(g.next_work)
        + _cell(g.thread)
        + "</tr>"
    )


def _gaps(r: DiagnosisData) -> str:
    if not r.gaps:
        return ""
    w0 = r.window.start_ns
    # (heading, sort kind, share of the table's width): fixed widths keep all ten columns inside
    # the page at any width from the report's minimum (760 px) up; long text is cut with a tooltip
    heads = [
        ("#", "num", 3),
        ("start", "num", 7),
        ("idle", "num", 6),
        ("GPU", "num", 4),
        ("cause", "str", 14),
        ("CPU op before", "str", 14),
        ("CPU op during", "str", 14),
        ("Python line", "str", 14),
        ("next device work", "str", 14),
        ("launching thread", "str", 10),
    ]
    th = "".join(f'<th data-sort="{kind}" style="width:{w}%" title="{_e(h)}">{_e(h)}</th>' for h, kind, w in heads)
    rows = "".join(_gap_row(i, g, w0) for i, g in enumerate(r.gaps, 1))
    return (
        f"<section><h2>The {len(r.gaps)} largest gaps</h2>"
        f'<div class="wi-table-wrap"><table class="wi-gaps"><thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table></div>'
        '<p class="wi-note">Start is relative to the window start. Click a column to sort.</p></section>'
    )


def _counters(r: DiagnosisData) -> str:
    """The GPU counter figures per GPU (a counter log, alone or joined with a trace)."""
    a = r.counters
    if a is None or not a.gpus:
        return ""
    from whyidle.findings.counter_rules import explanations_for
    from whyidle.timeline.counters import METRICS

    joined = " over the trace's window" if a.joined else ""
    out = [f"<section><h2>GPU counters</h2><p class=\"wi-note\">{_e(a.source_format)}, a sample every {a.interval_ns / 1e6:g} ms{_e(joined)}.</p>"]
    metrics: list[str] = []
    for g in a.gpus:
        rows = []
        for d in g.distributions:
            label = METRICS[d.metric].label if d.metric in METRICS else d.metric
            cells = "".join(f'<td class="num">{_e(counter_value(v, d.unit))}</td>' for v in (d.mean, d.p5, d.p50, d.p95, d.max))
            rows.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
            metrics.append(d.metric)
        head = "".join(f"<th>{h}</th>" for h in ("metric", "mean", "p5", "median", "p95", "max"))
        name = f"GPU {g.gpu}" + (f" ({g.name})" if g.name else "")
        out.append(f'<h3>{_e(name)}</h3><div class="wi-table-wrap"><table class="wi-counters"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
        p = g.pattern
        if p is not None:
            out.append(f'<p class="wi-note">{_e(rhythm_words(p, card_ms))}.</p>')
    explained = "".join(f"<li>{_e(text)}</li>" for _, text in explanations_for(metrics))
    if explained:
        out.append(f'<ul class="wi-note">{explained}</ul>')
    return "".join(out) + "</section>"


def _notes(r: DiagnosisData, timeline_note: str) -> str:
    items = []
    artifacts = r.artifact_idle_ns
    if artifacts and r.window.duration_ns:
        total = sum(artifacts.values())
        what = ", ".join(f"{cause_label(k)} {card_ms(v)}" for k, v in artifacts.items())
        items.append(
            f"Capture artifacts: {card_ms(total)} ({total / (r.window.duration_ns * max(r.utilization.n_devices, 1)):.0%} of the window), "
            f"not the job's idle: {what}. Capture after warm-up ({warmup_capture(r.advice.framework if r.advice else '')})."
        )
    unattributed = r.idle_by_group_ns.get("unattributed", 0) - sum(artifacts.values())
    if unattributed and r.utilization.idle_ns:
        items.append(f"Unattributed: {card_ms(unattributed)} ({unattributed / r.utilization.idle_ns:.0%} of idle) that the trace cannot explain.")
    items += [f"Skipped {s.rule}: {s.reason}" for s in r.skipped]
    items += [f"Note: {q}" for q in r.quality]
    if timeline_note:
        items.append(f"Timeline: {timeline_note}")
    if not items:
        return ""
    return "<section><h2>Notes</h2><ul>" + "".join(f"<li>{_e(t)}</li>" for t in items) + "</ul></section>"


def _timeline_section(devices: list[dict[str, Any]]) -> str:
    keys = [(c["key"], c["label"], c["color"]) for c in _classes() if any(c["key"] in d["parts"] for d in devices)]
    basis = "Device time in each bin of the window"
    if devices:
        basis += f" ({devices[0]['bins']:,} bins of {card_ms(devices[0]['bin_ns'])})"
    return (
        '<section><h2>Timeline</h2><div class="wi-timeline"><noscript>The timeline needs JavaScript.</noscript></div>'
        f"{_legend(keys)}"
        f'<p class="wi-note">{_e(basis)}: busy work at the bottom, idle time above it coloured by cause. '
        "Dashed lines mark step starts. Hover for the numbers.</p></section>"
    )


def _steps_section(r: DiagnosisData) -> str:
    if not r.utilization.steps:
        return ""
    keys = [(c["key"], c["label"], c["color"]) for c in _classes()]
    used = {k for s in _steps_data(r) for k in s["parts"]}
    keys = [k for k in keys if k[0] in used]
    devs = r.utilization.n_devices
    basis = "summed over devices; " if devs > 1 else ""
    return (
        '<section><h2>Time per step</h2><div class="wi-steps"><noscript>The chart needs JavaScript.</noscript></div>'
        f"{_legend(keys)}"
        f'<p class="wi-note">Each step split without double counting: compute, exposed communication, copies, then idle by cause ({_e(basis)}device basis).</p></section>'
    )


def render_html(report: DiagnosisData, *, bins: int = DEFAULT_BINS) -> str:
    """The diagnosis as one self-contained HTML document (also embeddable: styles are scoped).

    Everything comes from the diagnosis: the timeline strip is its device activity and gap
    columns in ``bins`` bins per device, so the input file is not needed.
    """
    devices, tl_note = _timeline_data(report, bins)
    data = {
        "classes": _classes(),
        "window": {"start_ns": report.window.start_ns, "duration_ns": report.window.duration_ns},
        "steps": _steps_data(report),
        "devices": devices,
        "timeline_note": tl_note,
    }
    payload = _json_for_script(data)
    root = "wi-" + hashlib.sha256(payload.encode()).hexdigest()[:12]
    script = JS.replace("__ROOT__", root)
    script_hash = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; img-src data:"
    name = report.source.path.rsplit("/", 1)[-1] or "(in memory)"
    dev = ", ".join(sorted(set(d for d in report.source.devices if d))) or "unknown device"
    win = report.window
    basis = f"steps {win.steps[0]}..{win.steps[-1]} ({len(win.steps)} steps)" if win.steps else win.basis
    sub = f"{name} · {report.source.format} {report.source.version} · {dev} · window {card_ms(win.duration_ns)}, {basis}"
    tl_html = _timeline_section(devices) if devices or tl_note else ""
    body = (
        f'<div class="wi" id="{root}">'
        f'<h1><span class="wi-brand">whyidle</span> · {_e(title(report).split(": ", 1)[1])}</h1>'
        f'<p class="wi-sub">{_e(sub)}</p>'
        f'<p class="wi-lead">{_e(_lead(report))}</p>'
        f"{_cards(report)}{_cause_bar(report)}{tl_html}{_steps_section(report)}{_counters(report)}{work_section(report)}{_critical_path(report)}{_findings(report)}{_gaps(report)}"
        f"{_notes(report, tl_note)}"
        f'<p class="wi-foot">Generated by whyidle {_e(__version__)}; a self-contained file, no network access needed. '
        "Device figures are the union of busy time over all streams of each device.</p>"
        f'<script type="application/json" id="{root}-data">{payload}</script>'
        f"<script>{script}</script>"
        "</div>"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp, quote=False)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>whyidle: {_e(name)}</title>"
        f"<style>{CSS}</style></head><body style=\"margin:0\">{body}</body></html>\n"
    )
