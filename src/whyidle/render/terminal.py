"""The terminal report: a short headline and the findings, readable in 80 columns.

The only module of the core that imports rich (a feature's terminal renderer draws through :func:`console_text`).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from whyidle.catalogue import warmup_capture
from whyidle.findings.labels import cause_label
from whyidle.findings.model import Finding, DiagnosisData
from whyidle.output import clean
from whyidle.pages import PAGES, explain_command
from whyidle.render.helpers import COMM_HEAD, busy_finding_stat, busy_idle_rows, comm_cells, counter_value, op_roof_cells, rhythm_words, title, work_rows
from whyidle.units import format_ns

__all__ = ["render_terminal", "print_report", "console_text"]

# GPUs named in the header and given a table of counter figures: a log of 5,000 GPUs drew 5,000
# tables (10.7 s, 5 MB of text); the JSON and HTML reports hold every GPU.
_COUNTER_TABLES = 64
_GROUP_STYLE = {
    "starvation": "bold red",
    "underfilled": "bold yellow",
    "synchronization": "bold magenta",
    "insufficient_demand": "bold cyan",
    "unattributed": "bold white",
}


def _headline(r: DiagnosisData) -> Table:
    u = r.utilization
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    names = sorted(set(r.source.devices))
    dev = ", ".join(names[:_COUNTER_TABLES]) + (f" and {len(names) - _COUNTER_TABLES:,} more" if len(names) > _COUNTER_TABLES else "") or "unknown device"
    t.add_row("Trace", f"{r.source.path.rsplit('/', 1)[-1]} ({r.source.format}, {dev})")
    basis = (
        f"steps {r.window.steps[0]}..{r.window.steps[-1]} ({len(r.window.steps)} steps)"
        if r.window.steps
        else r.window.basis
    )
    t.add_row("Window", f"{format_ns(r.window.duration_ns)}, {basis}")
    if r.source.workload:
        why = f" ({r.source.workload_evidence[0]})" if r.source.workload_evidence else ""
        t.add_row("Workload", f"{r.source.workload.replace('_', '-')}{why}")
    if r.advice is not None:
        t.add_row("Seen in trace", "; ".join(r.advice.seen[1:]) or "nothing that changes the advice")
        if r.advice.unknown:
            t.add_row("Not in trace", "; ".join(r.advice.unknown))
    for label, value, detail in busy_idle_rows(r, format_ns):
        t.add_row(label, f"{value}: {detail}" if value == "unknown" else f"{value} {detail}")
    if u.steps:
        times = u.step_times_ns
        t.add_row("Step time", f"mean {format_ns(float(times.mean()))}, max {format_ns(float(times.max()))}")
    if u.steps_per_s is not None:
        sps = f"{u.steps_per_s:.2f} steps/s"
        if u.samples_per_s is not None:
            sps += f", {u.samples_per_s:.1f} samples/s (batch {u.batch_size})"
        t.add_row("Throughput", sps)
    k = r.kernels
    if k.count:
        sm = f", est. SM efficiency {k.sm_efficiency:.0%}" if k.sm_efficiency is not None else ""
        occ = f", est. occupancy {k.achieved_occupancy_pct:.0f}%" if k.achieved_occupancy_pct is not None else ""
        t.add_row("Kernels", f"{k.count} ({k.short_share:.0%} under 10 us){sm}{occ}")
    if k.tensor_core_ns or k.fp32_math_ns:  # the name markers are NVIDIA's: nothing to say on other devices
        fp32 = f"; FP32 GEMM/convolution without them {k.fp32_math_share:.0%}" if k.fp32_math_ns else ""
        t.add_row("Tensor cores", f"{k.tensor_core_share:.0%} of kernel time in tensor-core (MMA) kernels, by kernel name{fp32}")
    if r.work is not None:
        for label, value, detail in work_rows(r.work, format_ns):
            t.add_row(label, f"{value}: {detail}" if value == "unknown" else f"{value} {detail}")
    artifacts = r.artifact_idle_ns
    if artifacts and r.window.duration_ns > 0:
        total = sum(artifacts.values())
        what = ", ".join(f"{cause_label(k)} {format_ns(v)}" for k, v in artifacts.items())
        t.add_row(
            "Capture",
            f"{format_ns(total)} ({total / (r.window.duration_ns * max(u.n_devices, 1)):.0%} of the window) is capture "
            f"artifacts, not the job's idle: {what}. Capture after warm-up ({warmup_capture(r.advice.framework if r.advice else '')}).",
        )
    groups = r.idle_by_group_ns
    if u.idle_ns > 0 and any(groups.values()):
        parts = [f"{g} {ns / u.idle_ns:.0%}" for g, ns in groups.items() if ns > 0]
        t.add_row("Idle by cause", ", ".join(parts))
    return t


def _finding_panel(i: int, f: Finding, window_ns: int) -> Panel:
    e = f.evidence
    style = _GROUP_STYLE.get(f.group, "bold")
    body: list[Text | Table] = [Text(f.title, style=style)]
    if f.idle_ns:
        line = f"explains {format_ns(f.idle_ns)} of device idle ({f.share_of_idle:.0%} of {f.basis}idle, {f.share_of_window:.0%} of the {f.basis}window)"
        if e.per_step_idle_ns is not None:
            line += f"; {format_ns(e.per_step_idle_ns)} per step"
        line += f", {e.gap_count} gaps" if e.gap_count else ""
        body.append(Text(line))
    else:
        body.append(Text(busy_finding_stat(f, window_ns, format_ns)))
        body.append(Text(f.fix.expected))
    label = "CPU" if f.idle_ns else "kernel"
    for name, ns, gaps in e.top_ops[:3]:
        short = name if len(name) <= 70 else name[:67] + "..."
        suffix = f" ({format_ns(ns)} in {gaps} gaps)" if gaps else f" ({format_ns(ns)})"
        body.append(Text(f"  {label}: {short}{suffix}", style="dim"))
    for line_, n in e.python_lines[:2]:
        body.append(Text(f"  at {line_} ({n} gaps)", style="dim"))
    body.append(Text(f"Fix: {f.fix.summary}", style="green"))
    if f.prediction is not None:
        body.append(Text(f.prediction.summary(), style="green" if f.prediction.recommended else "yellow"))
        if f.prediction.note:
            body.append(Text(f"  ({f.prediction.note})", style="dim"))
    for s in f.fix.steps[:4]:
        body.append(Text(f"  - {s}"))
    body.append(Text(f.fix.code, style="cyan"))
    body.append(Text(f"Verify: {f.fix.verify}", style="dim"))
    if f.group in PAGES:
        body.append(Text(f"Docs: {explain_command(f.group)} (how whyidle finds this cause, offline)", style="dim"))
    return Panel(Group(*body), title=Text(f"{i}. {f.group} / {f.cause}", style=style), title_align="left", expand=True)


class _SafeConsole(Console):
    """A Console whose text cannot steer the terminal: trace strings (kernel, op, thread and
    file names) may hold escape sequences; every control character in text is shown escaped
    (rich's own styling and control codes are untouched), and markup is never parsed from them."""

    def _render_buffer(self, buffer: Any) -> str:
        return super()._render_buffer(seg if seg.control else Segment(clean(seg.text), seg.style) for seg in buffer)


def render_terminal(r: DiagnosisData, width: int = 80, color: bool = False) -> str:
    return console_text(lambda console: print_report(r, console), width, color)


def console_text(draw: Callable[[Console], None], width: int = 80, color: bool = False) -> str:
    """What ``draw`` prints on a console of ``width`` columns (trace strings never parsed as
    markup), trailing spaces stripped: the shape of every terminal report."""
    buf = io.StringIO()
    console = _SafeConsole(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False, markup=False, emoji=False)
    draw(console)
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))


def _roofline_table(r: DiagnosisData) -> Table:
    """The op shapes with the most kernel time, where each sits on the roofline."""
    assert r.work is not None
    t = Table(title=f"Op shapes by kernel time (top {min(_TOP_OPS, len(r.work.ops))}; rates over their kernels' time):", title_justify="left", box=None, padding=(0, 1))
    for col in ("op and input dims", "dtype", "calls", "TFLOP/s", "TB/s", "roofline"):
        t.add_column(col, justify="left" if col in ("op and input dims", "dtype", "roofline") else "right", overflow="fold")
    for op in r.work.ops[:_TOP_OPS]:
        t.add_row(*op_roof_cells(op))
    return t


_TOP_OPS = 5


def _comms_table(r: DiagnosisData) -> Table:
    """The collectives with the most kernel time: bytes, algorithm and bus bandwidth."""
    assert r.work is not None and r.work.comms is not None
    c = r.work.comms
    link = f", against {c.link.name}'s {c.link.per_direction_gbps:g} GB/s per direction" if c.link is not None else ", no link peak known"
    t = Table(title=f"Collectives by kernel time (top {min(_TOP_OPS, len(c.rates))}; bus bandwidth as nccl-tests{link}):", title_justify="left", box=None, padding=(0, 1))
    keep = [i for i, h in enumerate(COMM_HEAD) if h not in ("dtype", "algbw GB/s")]  # 80 columns: both are in the JSON and HTML
    for i in keep[:-1]:
        t.add_column(COMM_HEAD[i], justify="left" if i == 0 else "right", no_wrap=i == 0, overflow="fold")
    t.add_column("of link", justify="right")
    for rate in c.rates[:_TOP_OPS]:
        cells = comm_cells(rate, c.link, format_ns)
        t.add_row(*(cells[i] for i in keep[:-1]), f"{rate.fraction:.0%}" if rate.fraction is not None else "-")
    return t


def _counters_section(r: DiagnosisData) -> Group:
    """GPU counter figures per GPU, with what each metric means (only when the report has counters)."""
    from whyidle.findings.counter_rules import explanations_for

    a = r.counters
    parts: list[Text | Table] = []
    if a is None:
        return Group()
    joined = " over the trace's window" if a.joined else ""
    parts.append(Text(f"GPU counters ({a.source_format}, every {a.interval_ns / 1e6:g} ms{joined}):", style="bold"))
    metrics: list[str] = []
    for g in a.gpus[:_COUNTER_TABLES]:
        t = Table(title=f"GPU {g.gpu}" + (f" ({g.name})" if g.name else ""), title_justify="left", box=None, padding=(0, 1))
        for col in ("metric", "mean", "p5", "median", "p95", "max"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for d in g.distributions:
            from whyidle.timeline.counters import METRICS

            label = METRICS[d.metric].label if d.metric in METRICS else d.metric
            t.add_row(label, *(counter_value(v, d.unit) for v in (d.mean, d.p5, d.p50, d.p95, d.max)))
            metrics.append(d.metric)
        parts.append(t)
        p = g.pattern
        if p is not None:
            parts.append(Text(f"  {rhythm_words(p, format_ns)}"))
    if len(a.gpus) > _COUNTER_TABLES:
        more = len(a.gpus) - _COUNTER_TABLES
        parts.append(Text(f"  ... and {more:,} more GPUs: every GPU's figures are in the JSON and HTML reports (-o report.json, -o report.html)"))
    host = {d.metric: d for d in a.host}
    cpu, rss = host.get("host_cpu_pct"), host.get("host_rss_mib")
    if cpu is not None or rss is not None:
        line = "Host (the watched command's process tree):"
        if cpu is not None:
            line += f" CPU mean {cpu.mean:.0f}%, p95 {cpu.p95:.0f}% (100% = one core)"
        if rss is not None:
            line += f"{';' if cpu is not None else ''} memory max {rss.max:.0f} MiB"
        parts.append(Text(line))
    for _, text in explanations_for(metrics):
        parts.append(Text(f"  {text}", style="dim"))
    return Group(*parts)


def print_report(r: DiagnosisData, console: Console) -> None:
    console.print(Text(title(r), style="bold"))
    console.print(_headline(r))
    if r.counters is not None:
        console.print(_counters_section(r))
    if r.no_device_activity:
        console.print(Text("No GPU activity in this trace: nothing to diagnose.", style="bold yellow"))
    if r.findings:
        console.print()
        console.print(Text("Findings, by device-idle time explained (an upper bound on what each fix recovers):", style="bold"))
        for i, f in enumerate(r.findings, 1):
            console.print(_finding_panel(i, f, r.window.duration_ns))
    elif r.cold_start:
        console.print(Text("No finding: cold start dominates this capture; diagnose a capture taken after warm-up.", style="bold yellow"))
    elif not r.no_device_activity:
        console.print(Text("No problem finding: no cause explains 5% or more of the window.", style="bold green"))
    if r.work is not None and r.work.ops:
        console.print(_roofline_table(r))
    if r.work is not None and r.work.comms is not None and r.work.comms.rates:
        console.print(_comms_table(r))
    unattributed = r.idle_by_group_ns.get("unattributed", 0) - sum(r.artifact_idle_ns.values())
    if unattributed and r.utilization.idle_ns:
        console.print(Text(f"Unattributed: {format_ns(unattributed)} ({unattributed / r.utilization.idle_ns:.0%} of idle) that the trace cannot explain.", style="dim"))
    for s in r.skipped:
        console.print(Text(f"Skipped {s.rule}: {s.reason}", style="dim"))
    for q in r.quality:
        console.print(Text(f"Note: {q}", style="yellow"))
