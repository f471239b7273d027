"""A multi-rank run in the terminal: whether the files are one job, the cross-rank section, a
one-line summary per rank, then the run's findings with their fixes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from whyidle.render.terminal import console_text
from whyidle.units import format_ns

__all__ = ["render_multi_rank_terminal", "print_multi_rank"]


def render_multi_rank_terminal(m: Any, width: int = 80, color: bool = False) -> str:
    return console_text(lambda console: print_multi_rank(m, console), width, color)


def print_multi_rank(m: Any, console: Console) -> None:
    """A multi-rank run: the cross-rank section, then a one-line summary per rank."""
    cr = m.cross_rank
    console.print(Text("whyidle: why are these GPUs idle? (one trace per rank)", style="bold"))
    world = f" of world size {m.world_size}" if m.world_size else ""
    console.print(f"Run {m.run_dir}: {len(m.ranks)} traces{world}; ranks from {m.rank_basis}")
    if m.not_one_job:
        console.print(Text("These files may not be one job; no rank is compared with another in the findings:", style="bold red"))
        for p in m.not_one_job:
            console.print(f"  - {p}")
    if cr.stragglers:
        console.print(Text("Stragglers (the rank the others waited for at collectives):", style="bold red"))
        for s in cr.stragglers:
            why = f"; why: {s.cause.key} (+{format_ns(s.cause.excess_ns_per_step)} per step vs the other ranks)" if s.cause else "; no cause stands out in its own trace"
            steps = f" in step{'s' if len(s.steps) > 1 else ''} {', '.join(map(str, s.steps))}" if s.steps else ""
            console.print(
                f"  rank {s.rank}: last at {s.collectives_last} of {s.collectives_total} collectives{steps}, "
                f"others waited {format_ns(s.lateness_ns)} (max {format_ns(s.max_lateness_ns)}){why}"
            )
    elif cr.collectives:
        console.print(Text("No straggler: no rank kept the others waiting at a collective.", style="bold green"))
    if cr.collective_ns:
        console.print(
            f"Collectives: {format_ns(cr.collective_ns)} over all ranks, {cr.waiting_ns / cr.collective_ns:.0%} waiting for the "
            f"slowest rank, {cr.transfer_ns / cr.collective_ns:.0%} transfer"
        )
    t = Table(title="Per rank", title_justify="left")
    for col in ("rank", "busy", "idle", "top idle cause", "comm exposed", "comm overlap", "waiting"):
        t.add_column(col)
    comm = {c.rank: c for c in cr.comm}
    for e in m.ranks:
        if e.report is None:
            t.add_row(str(e.rank), "unreadable", "", e.error[:40], "", "", "")
            continue
        r = e.report
        top = max(r.idle_by_cause_ns.items(), key=lambda kv: kv[1], default=("", 0))
        c = comm.get(e.rank)
        t.add_row(
            str(e.rank),
            f"{r.utilization.busy_fraction:.0%}",
            format_ns(r.utilization.idle_ns),
            top[0] if top[1] else "-",
            format_ns(c.exposed_ns) if c else "-",
            f"{c.overlap_fraction:.0%}" if c and c.overlap_fraction is not None else "-",
            format_ns(c.waiting_ns) if c else "-",
        )
    console.print(t)
    if cr.mean_step_spread is not None:
        console.print(
            f"Imbalance: step time spread {cr.mean_step_spread:.1%}, compute spread {cr.mean_compute_spread:.1%} "
            "((max - min) / mean across ranks, averaged over steps)"
        )
    _print_run_findings(m, console)
    for n in (*m.notes, *cr.notes):
        console.print(Text(f"Note: {n}", style="yellow"))


def _print_run_findings(m: Any, console: Console) -> None:
    """The run's findings, each with its fix (ranks/run_findings.py)."""
    found = m.run_findings
    if not found:
        console.print("Findings for the run: none (no straggler, communication overlapped, no idle cause)")
        return
    console.print(Text("Findings for the run:", style="bold"))
    for i, f in enumerate(found, 1):
        console.print(Text(f"{i}. {f.title} ({format_ns(f.time_ns)})", style="bold"))
        console.print(Padding(f.what, (0, 0, 0, 3)))
        if f.fix:
            console.print(Padding(f"fix: {f.fix}", (0, 0, 0, 3)))
