"""The terminal report: a short headline and the findings, readable in 80 columns.

The only module that imports rich.
"""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from whyidle.findings.model import Finding, Report

__all__ = ["render_terminal", "print_report"]

_GROUP_STYLE = {
    "starvation": "bold red",
    "underfilled": "bold yellow",
    "synchronization": "bold magenta",
    "insufficient_demand": "bold cyan",
    "unattributed": "bold white",
}


def _ms(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.1f} us"


def _headline(r: Report) -> Table:
    u = r.utilization
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    dev = ", ".join(sorted(set(r.source.devices))) or "unknown device"
    t.add_row("Trace", f"{r.source.path.rsplit('/', 1)[-1]} ({r.source.format}, {dev})")
    basis = (
        f"steps {r.window.steps[0]}..{r.window.steps[-1]} ({len(r.window.steps)} steps)"
        if r.window.steps
        else r.window.basis
    )
    t.add_row("Window", f"{_ms(r.window.duration_ns)}, {basis}")
    t.add_row(
        "GPU busy",
        f"{u.busy_fraction:.1%} of the window (kernels only {u.kernel_busy_fraction:.1%}), "
        f"union over all streams",
    )
    t.add_row("GPU idle", f"{_ms(u.idle_ns)} in {r.gap_count} gaps")
    if u.steps:
        times = u.step_times_ns
        t.add_row("Step time", f"mean {_ms(float(times.mean()))}, max {_ms(float(times.max()))}")
    if u.steps_per_s is not None:
        sps = f"{u.steps_per_s:.2f} steps/s"
        if u.samples_per_s is not None:
            sps += f", {u.samples_per_s:.1f} samples/s (batch {u.batch_size})"
        t.add_row("Throughput", sps)
    k = r.kernels
    if k.sm_efficiency is not None:
        occ = f", est. occupancy {k.achieved_occupancy_pct:.0f}%" if k.achieved_occupancy_pct is not None else ""
        t.add_row("Kernels", f"{k.count} ({k.short_share:.0%} under 10 us), est. SM efficiency {k.sm_efficiency:.0%}{occ}")
    groups = r.idle_by_group_ns
    if u.idle_ns > 0:
        parts = [f"{g} {ns / u.idle_ns:.0%}" for g, ns in groups.items() if ns > 0]
        t.add_row("Idle by cause", ", ".join(parts))
    return t


def _finding_panel(i: int, f: Finding) -> Panel:
    e = f.evidence
    style = _GROUP_STYLE.get(f.group, "bold")
    body: list[Text | Table] = [Text(f.title, style=style)]
    if f.idle_ns:
        line = f"explains {_ms(f.idle_ns)} of device idle ({f.share_of_idle:.0%} of idle, {f.share_of_window:.0%} of the window)"
        if e.per_step_idle_ns is not None:
            line += f"; {_ms(e.per_step_idle_ns)} per step"
        line += f", {e.gap_count} gaps"
        body.append(Text(line))
    else:
        body.append(Text(f.fix.expected))
    for name, ns, gaps in e.top_ops[:3]:
        short = name if len(name) <= 70 else name[:67] + "..."
        suffix = f" ({_ms(ns)} in {gaps} gaps)" if gaps else f" ({_ms(ns)})"
        body.append(Text(f"  CPU: {short}{suffix}", style="dim"))
    for line_, n in e.python_lines[:2]:
        body.append(Text(f"  at {line_} ({n} gaps)", style="dim"))
    body.append(Text(f"Fix: {f.fix.summary}", style="green"))
    for s in f.fix.steps[:4]:
        body.append(Text(f"  - {s}"))
    body.append(Text(f.fix.code, style="cyan"))
    body.append(Text(f"Verify: {f.fix.verify}", style="dim"))
    return Panel(Group(*body), title=Text(f"{i}. {f.group} / {f.cause}", style=style), title_align="left", expand=True)


def render_terminal(r: Report, width: int = 80, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    print_report(r, console)
    return buf.getvalue()


def print_report(r: Report, console: Console) -> None:
    console.print(Text("whyidle: why is this GPU idle?", style="bold"))
    console.print(_headline(r))
    if r.no_device_activity:
        console.print(Text("No GPU activity in this trace: nothing to diagnose.", style="bold yellow"))
    if r.findings:
        console.print()
        console.print(Text("Findings, by device-idle time explained (an upper bound on what each fix recovers):", style="bold"))
        for i, f in enumerate(r.findings, 1):
            console.print(_finding_panel(i, f))
    elif not r.no_device_activity:
        console.print(Text("No problem finding: no cause explains 5% or more of the window.", style="bold green"))
    unattributed = r.idle_by_group_ns.get("unattributed", 0)
    if unattributed and r.utilization.idle_ns:
        console.print(Text(f"Unattributed: {_ms(unattributed)} ({unattributed / r.utilization.idle_ns:.0%} of idle) that the trace cannot explain.", style="dim"))
    for s in r.skipped:
        console.print(Text(f"Skipped {s.rule}: {s.reason}", style="dim"))
    for q in r.quality:
        console.print(Text(f"Note: {q}", style="yellow"))
