"""A sweep's outputs: JSON (schema ``whyidle.sweep/1.0``, :mod:`whyidle.sweep.codec`), the terminal table, and the HTML page.

All three read only the :class:`~whyidle.sweep.search.Sweep`. The HTML page follows the report's
conventions (render/html.py): one offline file, the report's scoped styles, every string
escaped, a Content-Security-Policy with no network access; it needs no script (the plots are
inline SVG drawn here).
"""

from __future__ import annotations

import html
import math
from typing import Any

import msgspec

from whyidle import __version__
from whyidle.config import SweepConfig
from whyidle.sweep.codec import SWEEP_SCHEMA, encode, speedup
from whyidle.sweep.search import Sweep
from whyidle.sweep.trial import Trial, TrialResult

__all__ = ["SWEEP_SCHEMA", "format_rate", "sweep_to_dict", "render_sweep_json", "render_sweep_terminal", "render_sweep_html", "series_of"]



def _e(s: object) -> str:
    return html.escape(str(s))


def sweep_to_dict(sw: Sweep, cfg: SweepConfig | None = None) -> dict[str, Any]:
    """The sweep's JSON as plain data (:mod:`whyidle.sweep.codec`); ``cfg``: the rules to write
    when not the sweep's own."""
    if cfg is not None and cfg != sw.rules:
        sw = msgspec.structs.replace(sw, rules=cfg)
    return encode(sw)


def render_sweep_json(sw: Sweep, cfg: SweepConfig | None = None) -> str:
    return msgspec.json.format(msgspec.json.encode(sweep_to_dict(sw, cfg)), indent=2).decode() + "\n"


def format_rate(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k" if v >= 1e4 else f"{v:.0f}"


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def _peak(r: TrialResult) -> str:
    if r.peak_device_bytes is not None:
        return _mib(r.peak_device_bytes)
    return _mib(r.peak_host_bytes) + (" host" if r.peak_host_bytes is not None else "")


def _summary_lines(sw: Sweep) -> list[str]:
    out = []
    b = sw.batch
    if b.chosen is not None:
        why = "plateau" if b.plateau else f"memory edge at {b.edge}" if b.edge_status in ("oom", "killed") else f"{b.edge_status} at {b.edge}" if b.edge else "the end of the range"
        out.append(f"batch size: {b.chosen} chosen (best samples/s at {b.best}; search ended at {why})")
        out.append(f"rule: {b.rule}")
    if sw.best is not None:
        sp = speedup(sw)
        out.append(f"recommended: {sw.best.trial.label()} -> {format_rate(sw.best.samples_per_s)} samples/s" + (f" ({sp:.2f}x the first configuration)" if sp else ""))
    out.extend(f"note: {n}" for n in sw.notes)
    return out


def _table(heads: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(heads), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def render_sweep_terminal(sw: Sweep, width: int = 100, color: bool = False) -> str:
    """Plain text (no colour): the trials table, the batch outcome, the recommendation as code.
    Decisions and messages go on an indented line under their trial when the table would not fit."""
    heads = ["#", "stage", "configuration", "status", "samples/s", "spread", "step p50 ms", "data wait", "peak memory"]
    rows: list[list[str]] = []
    notes: list[str] = []
    for i, e in enumerate(sw.entries, 1):
        r = e.result
        spread = f"±{(r.samples_per_s_max - r.samples_per_s_min) / 2 / r.samples_per_s:.0%}" if r.samples_per_s and r.samples_per_s_max is not None and r.samples_per_s_min is not None else "-"
        dw = f"{r.data_wait_share:.0%}" if r.data_wait_share is not None else "-"
        status = r.status + (" (cached)" if r.cached else "") + ("" if r.steady or not r.ok else " unsteady")
        decision = ("* " if e.kept else "") + e.decision
        if e.guard is not None:
            decision += f" [quality guard: {e.guard.message}]"
        if r.graph_breaks is not None:
            decision += f" [compile: {r.graph_breaks} graph break(s), {r.compiled_graphs} graph(s), {r.recompilations} recompilation(s), warm-up {r.warmup_ns / 1e9:.1f} s]"
        if not r.ok and r.message:
            decision += f" ({r.message})"
        rows.append([str(i), e.stage, r.trial.label(), status, format_rate(r.samples_per_s), spread, _ms(r.step_ns_p50), dw, _peak(r)])
        notes.append(decision.strip())
    table = _table(heads, rows, {0, 4, 5, 6, 7, 8})
    out = ["whyidle sweep", ""]
    fits = max(len(t) for t in table) + max((len(n) for n in notes), default=0) + 2 <= width
    if fits:
        out += [table[0] + "  decision" if table[0] else "", table[1] + "  --------"]
        out += [f"{t.ljust(len(table[1]))}  {n}".rstrip() for t, n in zip(table[2:], notes)]
    else:
        out += table[:2]
        for t, n in zip(table[2:], notes):
            out.append(t)
            if n:
                out.append(f"      {n}")
    out.append("")
    out += _summary_lines(sw)
    if sw.best is not None:
        out += ["", "as code:", sw.best.trial.as_code()]
    return "\n".join(out) + "\n"


# -- HTML ------------------------------------------------------------------------------------

_PALETTE = ("#3b6fb6", "#e03e2d", "#4f9d69", "#9c5fb5", "#f28e2b", "#1fa3c4", "#d05fae", "#8d8d8d")


def series_of(sw: Sweep) -> dict[str, list[TrialResult]]:
    """Successful trials grouped by everything but the batch size (one plot line each)."""
    out: dict[str, list[TrialResult]] = {}
    for e in sw.entries:
        r = e.result
        if not r.ok:
            continue
        rest = r.trial.changes(Trial(batch_size=r.trial.batch_size, seed=r.trial.seed, device=r.trial.device))
        name = ", ".join(f"{k}={v}" for k, v in rest.items()) or "baseline levers"
        out.setdefault(name, []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r.trial.batch_size)
    return out


def _svg(series: dict[str, list[TrialResult]], value: Any, title: str, fmt: Any) -> str:
    pts = [(r.trial.batch_size, value(r)) for rs in series.values() for r in rs if value(r) is not None]
    if not pts:
        return ""
    w, h, ml, mb, mt, mr = 640, 240, 70, 36, 24, 16
    xs = [math.log2(p[0]) for p in pts]
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = max(p[1] for p in pts) * 1.1 or 1.0

    def X(b: int) -> float:
        return ml + (math.log2(b) - x0) / (x1 - x0) * (w - ml - mr)

    def Y(v: float) -> float:
        return h - mb - v / y1 * (h - mb - mt)

    parts = [f'<svg class="wi-steps-svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{_e(title)}">']
    parts.append(f'<text x="{ml}" y="14" font-size="12">{_e(title)}</text>')
    parts.append(f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" stroke="#999"/><line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" stroke="#999"/>')
    for b in sorted({p[0] for p in pts}):
        parts.append(f'<text x="{X(b):.1f}" y="{h - mb + 14}" font-size="10" text-anchor="middle">{b}</text>')
    for frac in (0.0, 0.5, 1.0):
        v = y1 / 1.1 * frac
        parts.append(f'<text x="{ml - 6}" y="{Y(v) + 3:.1f}" font-size="10" text-anchor="end">{_e(fmt(v))}</text>')
    parts.append(f'<text x="{(ml + w) / 2:.0f}" y="{h - 4}" font-size="10" text-anchor="middle">batch size (log scale)</text>')
    for i, (name, rs) in enumerate(series.items()):
        col = _PALETTE[i % len(_PALETTE)]
        xy = [(X(r.trial.batch_size), Y(value(r))) for r in rs if value(r) is not None]
        if len(xy) > 1:
            parts.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>')
        for x, y in xy:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{col}"><title>{_e(name)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _legend(series: dict[str, list[TrialResult]]) -> str:
    items = "".join(f'<span class="wi-chip"><span class="wi-sw" style="background:{_PALETTE[i % len(_PALETTE)]}"></span>{_e(n)}</span> ' for i, n in enumerate(series))
    return f'<div class="wi-legend">{items}</div>'


def render_sweep_html(sw: Sweep, cfg: SweepConfig | None = None) -> str:
    from whyidle.render.html import static_page

    series = series_of(sw)
    best = sw.best
    sp = speedup(sw)
    cards = ""
    if best is not None:
        cards = (
            '<div class="wi-cards">'
            f'<div class="wi-card"><div class="k">best samples/s</div><div class="v">{_e(format_rate(best.samples_per_s))}</div><div class="d">{_e(best.trial.label())}</div></div>'
            f'<div class="wi-card"><div class="k">vs the first configuration</div><div class="v">{_e(f"{sp:.2f}x" if sp else "-")}</div></div>'
            f'<div class="wi-card"><div class="k">batch size</div><div class="v">{_e(sw.batch.chosen)}</div><div class="d">{_e("plateau" if sw.batch.plateau else "edge or end of range")}</div></div>'
            f'<div class="wi-card"><div class="k">trials</div><div class="v">{len(sw.entries)}</div></div>'
            "</div>"
        )
    rows = []
    for i, e in enumerate(sw.entries, 1):
        r = e.result
        guard = e.guard.message if e.guard else ""
        msg = r.message if not r.ok else ""
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{_e(c)}</td>"
                for c in (i, e.stage, r.trial.label(), r.status, format_rate(r.samples_per_s), _ms(r.step_ns_p50), _ms(r.step_ns_p95), f"{r.data_wait_share:.0%}" if r.data_wait_share is not None else "-", _peak(r), ("kept: " if e.kept else "") + e.decision, guard, msg)
            )
            + "</tr>"
        )
    heads = "".join(f"<th>{h}</th>" for h in ("#", "stage", "configuration", "status", "samples/s", "step p50 ms", "step p95 ms", "data wait", "peak memory", "decision", "quality guard", "message"))
    table = f'<div class="wi-table-wrap"><table class="wi-gaps"><thead><tr>{heads}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    plots = _svg(series, lambda r: r.samples_per_s, "samples/s by batch size", format_rate) + _svg(
        series, lambda r: r.peak_device_bytes if r.peak_device_bytes is not None else r.peak_host_bytes, "peak memory by batch size (device, or host RSS on CPU)", _mib
    )
    code = f"<section><h2>The recommended configuration</h2><pre>{_e(best.trial.as_code())}</pre></section>" if best else ""
    summary = "".join(f"<p>{_e(line)}</p>" for line in _summary_lines(sw))
    body = (
        '<div class="wi">'
        '<h1><span class="wi-brand">whyidle</span> · sweep</h1>'
        f'<p class="wi-sub">{len(sw.entries)} trials, each in a fresh process; warm-up excluded; samples/s is the median over steady windows</p>'
        f"{cards}<section><h2>Throughput and memory</h2>{_legend(series)}{plots}</section>{code}"
        f"<section><h2>Summary</h2>{summary}</section><section><h2>Trials</h2>{table}</section>"
        f'<p class="wi-foot">Generated by whyidle {_e(__version__)}; a self-contained file, no network access needed.</p>'
        "</div>"
    )
    return static_page("whyidle sweep", body)
