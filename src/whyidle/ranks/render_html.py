"""The HTML report of a multi-rank run (one trace per rank): the job on one page.

* whether the files are one job, then the run's findings, each with its fix (the straggler's
  cause, the exposed communication, the top idle cause across ranks);
* per rank, side by side: one bar over the window, busy time then idle time by cause, with the
  figures and a link to that rank's own report page;
* the stragglers: which rank the others waited for, how often, by how much and why;
* the straggler timeline: every matched collective in order, one row per rank, each cell shaded by
  how long that rank waited in it, the rank that arrived last marked;
* communication per rank: exposed vs hidden behind compute, waiting vs transfer.

No script: the page is static HTML with the single-rank report's stylesheet, so it needs nothing
but a browser. Rank pages (``<stem>.rank<N>.html``) are written beside it by
:func:`whyidle.ranks.files.save_rank_files`, each a full single-rank report.
"""

from __future__ import annotations

import html
from typing import Any

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.findings.labels import cause_label
from whyidle.ranks.model import MultiRankReport
from whyidle.render.html import BUSY_COLORS, CAUSE_COLORS, card_ms, static_page
from whyidle.units import format_ns

__all__ = ["render_multi_rank_html", "rank_page_name", "MAX_COLLECTIVES_SHOWN"]

MAX_COLLECTIVES_SHOWN = 120  # columns of the straggler timeline; the most delayed are kept beyond it

_CSS = """
.wi .wi-rankbar{display:flex;height:16px;min-width:360px;border-radius:4px;overflow:hidden;background:#eef0f4}
.wi .wi-rankbar span{display:block;height:100%}
.wi table.wi-ranks td{vertical-align:middle}
.wi .wi-coll{border-collapse:separate;border-spacing:1px;width:auto}
.wi .wi-coll td{height:16px;padding:0;border:0}
.wi .wi-coll td.wi-last{outline:2px solid #1d2330;outline-offset:-2px}
.wi .wi-coll th{padding:0 6px 0 0;font-weight:600;border:0}
.wi .wi-legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:var(--muted);margin:8px 0 0}
.wi .wi-legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def rank_page_name(stem: str, rank: int) -> str:
    """The file name of one rank's page beside the job's page ``<stem>.html``."""
    return f"{stem}.rank{rank}.html"


def _rank_bar(report: Any) -> str:
    """Busy time, then idle by cause, as shares of the rank's window."""
    win = report.window.duration_ns
    if win <= 0:
        return ""
    u = report.utilization
    parts: list[tuple[str, int, str]] = [("busy", u.busy_ns, BUSY_COLORS["compute"])]
    for c in C.CAUSES:
        ns = report.idle_by_cause_ns.get(c.key, 0)
        if ns > 0:
            parts.append((cause_label(c.key), ns, CAUSE_COLORS[c.key]))
    spans = "".join(
        f'<span style="width:{100 * ns / win:.3f}%;background:{col}" title="{_e(label)}: {_e(card_ms(ns))} ({ns / win:.0%})"></span>'
        for label, ns, col in parts
        if ns > 0
    )
    return f'<div class="wi-rankbar" role="img" aria-label="busy and idle by cause">{spans}</div>'


def _ranks_table(m: MultiRankReport, links: dict[int, str]) -> str:
    comm = {c.rank: c for c in m.cross_rank.comm}
    rows = []
    for e in m.ranks:
        link = f'<a href="{_e(links[e.rank])}">rank {e.rank}</a>' if e.rank in links else f"rank {e.rank}"
        if e.report is None:
            rows.append(f'<tr><td>{link}</td><td colspan="7">unreadable: {_e(e.error)}</td></tr>')
            continue
        r = e.report
        top = max(r.idle_by_cause_ns.items(), key=lambda kv: kv[1], default=("", 0))
        c = comm.get(e.rank)
        cells = [
            link,
            _rank_bar(r),
            f"{r.utilization.busy_fraction:.0%}",
            _e(card_ms(r.utilization.idle_ns)),
            _e(cause_label(top[0])) if top[1] else "-",
            _e(card_ms(c.exposed_ns)) if c else "-",
            _e(card_ms(c.hidden_ns)) if c else "-",
            _e(card_ms(c.waiting_ns)) if c else "-",
        ]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    heads = ("rank", "busy, then idle by cause (over its window)", "busy", "idle", "top idle cause", "comm exposed", "comm hidden", "waiting for the slowest")
    th = "".join(f"<th>{_e(h)}</th>" for h in heads)
    causes = {k for e in m.ranks if e.report is not None for k, ns in e.report.idle_by_cause_ns.items() if ns > 0}
    legend = [("busy", BUSY_COLORS["compute"])] + [(cause_label(c.key), CAUSE_COLORS[c.key]) for c in C.CAUSES if c.key in causes]
    keys = "".join(f'<span><i style="background:{col}"></i>{_e(label)}</span>' for label, col in legend)
    return (
        "<section><h2>Per rank: busy and idle by cause</h2>"
        f'<div class="wi-table-wrap"><table class="wi-ranks"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
        f'<div class="wi-legend">{keys}</div>'
        '<p class="wi-note">Each bar is one rank\'s window: busy time (the union over its streams), then its idle time by cause. '
        "Communication is exposed when no compute runs beside it, hidden when compute overlaps it; waiting is the part of its "
        "collectives spent waiting for the slowest rank. Follow a rank's link for its full report.</p></section>"
    )


def _stragglers(m: MultiRankReport) -> str:
    cr = m.cross_rank
    if not cr.collectives:
        return '<section><h2>Stragglers</h2><p class="wi-empty">No collective was matched across ranks.</p></section>'
    if not cr.stragglers:
        return '<section><h2>Stragglers</h2><p>No straggler: no rank kept the others waiting at a collective.</p></section>'
    items = []
    for s in cr.stragglers:
        why = (
            f"; why: {cause_label(s.cause.key) if s.cause.key in CAUSE_COLORS else s.cause.key} "
            f"(+{format_ns(s.cause.excess_ns_per_step)} per step against the other ranks)"
            if s.cause
            else "; no cause stands out in its own trace"
        )
        items.append(
            f"<li><b>rank {s.rank}</b> arrived last at {s.collectives_last} of {s.collectives_total} collectives; the others "
            f"waited {_e(format_ns(s.lateness_ns))} in all (at most {_e(format_ns(s.max_lateness_ns))}){_e(why)}</li>"
        )
    waited = f"{cr.waiting_ns / cr.collective_ns:.0%}" if cr.collective_ns else "0%"
    return (
        "<section><h2>Stragglers: the rank the others waited for</h2>"
        f"<ul>{''.join(items)}</ul>"
        f'<p class="wi-note">Of {_e(format_ns(cr.collective_ns))} in collectives over all ranks, {waited} was waiting for the slowest rank, '
        "the rest transfer.</p></section>"
    )


def _collective_timeline(m: MultiRankReport) -> str:
    cr = m.cross_rank
    if not cr.collectives:
        return ""
    calls = list(cr.collectives)
    note = f"All {len(calls)} matched collectives, in order."
    if len(calls) > MAX_COLLECTIVES_SHOWN:
        keep = sorted(sorted(range(len(calls)), key=lambda i: -calls[i].lateness_ns)[:MAX_COLLECTIVES_SHOWN])
        calls = [calls[i] for i in keep]
        note = f"The {MAX_COLLECTIVES_SHOWN} most delayed of {len(cr.collectives)} matched collectives, in order."
    worst = max((max(c.dur_ns) - c.transfer_ns for c in calls), default=0) or 1
    width = min(40, max(8, 960 // len(calls)))  # px per collective: the timeline spans about 960 px
    rows = []
    for j, rank in enumerate(cr.ranks):
        cells = []
        for c in calls:
            wait = c.dur_ns[j] - c.transfer_ns
            level = wait / worst
            shade = f"rgba(213,94,0,{0.08 + 0.92 * level:.3f})"  # the starvation hue, darker = longer wait
            last = c.last_rank == rank
            tip = f"step {c.step}, {c.name} #{c.occurrence}: rank {rank} waited {card_ms(wait)}" + (" (arrived last: the others waited for it)" if last else "")
            cells.append(f'<td class="{"wi-last" if last else ""}" style="width:{width}px;background:{shade}" title="{_e(tip)}"></td>')
        rows.append(f"<tr><th>rank {rank}</th>{''.join(cells)}</tr>")
    return (
        "<section><h2>Straggler timeline: each collective, each rank</h2>"
        f'<div class="wi-table-wrap"><table class="wi-coll"><tbody>{"".join(rows)}</tbody></table></div>'
        f'<p class="wi-note">{_e(note)} A cell is one rank in one collective, darker the longer that rank waited in it '
        f"(at most {_e(card_ms(worst))}); the outlined cell is the rank that arrived last, the one the others waited for. "
        "Hover a cell for its numbers.</p></section>"
    )


def _run_findings(m: MultiRankReport) -> str:
    """The run's findings, each with its fix; first, why the files may not be one job."""
    warn = ""
    if m.not_one_job:
        items = "".join(f"<li>{_e(p)}</li>" for p in m.not_one_job)
        warn = f"<section><h2>These files may not be one job</h2><ul>{items}</ul><p>No rank is compared with another in the findings.</p></section>"
    found = m.run_findings
    if not found:
        return warn + '<section><h2>Findings for the run</h2><p class="wi-empty">None: no straggler, communication overlapped, no idle cause.</p></section>'
    items = "".join(
        f"<li><b>{_e(f.title)}</b> ({_e(format_ns(f.time_ns))}): {_e(f.what)}" + (f"<br><b>Fix:</b> {_e(f.fix)}" if f.fix else "") + "</li>"
        for f in found
    )
    return warn + f"<section><h2>Findings for the run</h2><ol>{items}</ol></section>"


def render_multi_rank_html(m: MultiRankReport, links: dict[int, str] | None = None) -> str:
    """The job's page; ``links`` maps a rank to the (relative) address of its own page."""
    links = links or {}
    cr = m.cross_rank
    world = f" of world size {m.world_size}" if m.world_size else ""
    sub = f"{m.run_dir} · {len(m.ranks)} traces{world} · ranks from {m.rank_basis}"
    imbalance = ""
    if cr.mean_step_spread is not None:
        imbalance = (
            f"<p>Imbalance: step time spread {cr.mean_step_spread:.1%}, compute spread {cr.mean_compute_spread:.1%} "
            "((max - min) / mean across ranks, averaged over steps).</p>"
        )
    notes = "".join(f"<li>{_e(n)}</li>" for n in (*m.notes, *cr.notes))
    body = (
        '<div class="wi">'
        '<h1><span class="wi-brand">whyidle</span> · why are these GPUs idle? (one trace per rank)</h1>'
        f'<p class="wi-sub">{_e(sub)}</p>'
        f"{_run_findings(m)}{_stragglers(m)}{_ranks_table(m, links)}{_collective_timeline(m)}"
        + (f"<section>{imbalance}</section>" if imbalance else "")
        + (f"<section><h2>Notes</h2><ul>{notes}</ul></section>" if notes else "")
        + f'<p class="wi-foot">Generated by whyidle {_e(__version__)}; a self-contained file, no network access needed.</p></div>'
    )
    return static_page(f"whyidle: {_e(m.run_dir)}", body, _CSS)
