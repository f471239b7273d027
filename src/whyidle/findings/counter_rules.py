"""Findings from GPU counter logs, and the metric explanations the report prints with them.

Rules read a :class:`~whyidle.analyses.counters.CounterAnalysis` (alone, or joined with a trace's
window) and return Findings like the trace rules do. Counter logs cannot see the host, so a
rhythm of pauses is reported as "starvation or synchronization" together with the evidence that
tells them apart; when a trace of the same window is joined, its gap attribution decides.
"""

from __future__ import annotations

from msgspec.structs import replace
from typing import Any

from whyidle.analyses.counters import BurstPattern, CounterAnalysis, GpuCounters
from whyidle.analyses.utilization import Utilization
from whyidle.findings.settings import RuleSettings
from whyidle.findings.model import rank_key, Evidence, Finding, Fix, DiagnosisData, Skipped, WindowInfo
from whyidle.units import COARSE, format_ns

__all__ = [
    "METRIC_EXPLANATIONS",
    "counter_findings",
    "explanations_for",
    "counter_only_report",
    "with_counters",
    "counter_utilization",
    "busy_basis_words",
    "idle_words",
    "NO_GPU_READINGS",
]

NO_GPU_READINGS = (
    "the counter log has no GPU readings (only the host process tree's CPU and memory, or GPU columns that are all "
    "empty): it cannot say whether a GPU was busy; log GPU-Util (whyidle watch with NVML, nvidia-smi, dcgmi)"
)


def busy_basis_words(a: CounterAnalysis) -> str:
    """What a counter report's busy figure measures, in words (the same in every output)."""
    bases = {g.busy_basis for g in a.gpus if g.busy_basis}
    if not bases:
        return "none: the counter log has no GPU-Util or SM activity readings"
    if bases == {"sm_active_pct"}:
        return "time-weighted SM activity (the log has no GPU-Util): the share of SMs in use, not the share of time a kernel ran"
    if bases == {"gpu_util_pct"}:
        return "time-weighted GPU-Util: the share of time a kernel ran"
    return "time-weighted GPU-Util where logged, SM activity for GPUs without it"


def idle_words(a: CounterAnalysis) -> str:
    """What the rest of the span is: time without a kernel, or unused SM time (a kernel may have run)."""
    if any(g.busy_basis == "sm_active_pct" for g in a.gpus):
        return "of unused SM time (SM activity counts SMs in use: a kernel may have run on a few of them)"
    return "without a kernel running"


# What each metric measures, as the playbook defines them (printed beside the numbers).
METRIC_EXPLANATIONS: dict[str, str] = {
    "gpu_util_pct": (
        "GPU-Util (nvidia-smi 'sm', utilization.gpu, DCGM GPUTL) is the share of time at least one kernel was "
        "running, not how much of the GPU it used: one tiny kernel on one SM reads 100%."
    ),
    "mem_util_pct": (
        "Memory utilisation is the share of time device memory was being read or written, not how much VRAM is "
        "allocated (that is 'memory used')."
    ),
    "sm_active_pct": "SM activity (DCGM SMACT) is the share of time-and-SMs with at least one warp resident: the GPU share really in use.",
    "sm_occupancy_pct": "SM occupancy (DCGM SMOCC) is resident warps over the maximum an SM can hold, averaged over time and SMs.",
    "tensor_active_pct": "Tensor activity (DCGM TENSO) is the share of cycles the tensor-core pipes were busy.",
    "dram_active_pct": "DRAM activity (DCGM DRAMA) is the share of cycles the memory interface was sending or receiving data.",
    "pcie_tx_bytes_per_s": "PCIe TX/RX is the data moved over PCIe per second (host<->device copies, peer traffic).",
    "pcie_rx_bytes_per_s": "PCIe TX/RX is the data moved over PCIe per second (host<->device copies, peer traffic).",
    "nvlink_tx_bytes_per_s": "NVLink TX/RX is the data moved over NVLink per second (collectives, peer copies).",
    "nvlink_rx_bytes_per_s": "NVLink TX/RX is the data moved over NVLink per second (collectives, peer copies).",
    "power_w": "Power is the board's draw; a busy GPU sits near its limit, an idle one near its floor.",
    "sm_clock_mhz": "SM clock is the current graphics clock; drops under load mean power or thermal throttling.",
    "mem_clock_mhz": "Memory clock is the current device-memory clock.",
}

_DOCS = "docs/inputs.md#gpu-counter-logs"


def explanations_for(metrics: list[str]) -> tuple[tuple[str, str], ...]:
    seen: dict[str, str] = {}
    for m in metrics:
        text = METRIC_EXPLANATIONS.get(m)
        if text and text not in seen.values():
            seen[m] = text
    return tuple(seen.items())


def _ev(facts: tuple[tuple[str, Any], ...]) -> Evidence:
    return Evidence(0, 0, None, None, (), (), (), facts)


def _underfilled(g: GpuCounters, cfg: RuleSettings, capacity: int) -> Finding | None:
    if not g.has_sm_active or g.underfilled_ns <= 0 or g.underfilled_ns < cfg.findings.min_finding_share_of_window * g.span_ns:
        return None
    sm = g.dist("sm_active_pct")
    util = g.dist("gpu_util_pct")
    facts: tuple[tuple[str, Any], ...] = (
        ("gpu", g.gpu),
        ("underfilled_ns", g.underfilled_ns),
        ("share_of_log", round(g.underfilled_ns / g.span_ns, 4)),
        ("mean_gpu_util_pct", round(util.mean, 1) if util else None),
        ("mean_sm_active_pct", round(sm.mean, 1) if sm else None),
    )
    return Finding(
        id="counters.underfilled",
        group="underfilled",
        cause="counters_underfilled",
        title="GPU-Util reads busy while few SMs work: kernels too small to fill the GPU",
        idle_ns=0,
        share_of_idle=0.0,
        share_of_window=g.underfilled_ns / capacity if capacity else 0.0,
        evidence=_ev(facts),
        fix=Fix(
            summary="Give each kernel more parallel work: larger batches, fused ops, fewer tiny launches.",
            steps=(
                f"For {format_ns(g.underfilled_ns, COARSE)} GPU {g.gpu} had GPU-Util >= {cfg.attribution.counter_busy_min_pct:.0f}% but SM activity "
                f"below {cfg.attribution.counter_sm_active_low_pct:.0f}%: a kernel was running, on a small part of the GPU.",
                "Raise the batch size (or micro-batch), fuse elementwise chains (torch.compile), use CUDA graphs for "
                "launch-bound loops.",
                "Capture a trace (torch.profiler or nsys) to see the kernels' grid sizes and durations.",
            ),
            code="model = torch.compile(model)  # fuses small kernels; and try a larger batch",
            verify="Log DCGM SM activity again (dcgmi dmon -e 203,1002): SM activity should rise toward GPU-Util.",
            expected=f"up to {format_ns(g.underfilled_ns, COARSE)} of busy time at low SM activity could do more work per second",
            docs=_DOCS,
        ),
        affected_busy_ns=g.underfilled_ns,
    )


def _every(p: BurstPattern) -> str:
    """' every 500 ms' where the rhythm is regular and its period holds a pause; else '' (a period
    shorter than the mean pause would contradict it)."""
    if p.regular and p.period_ns and p.period_ns > p.mean_pause_ns:
        return f" every {format_ns(p.period_ns, COARSE)}"
    return ""


def _rhythm(g: GpuCounters, cfg: RuleSettings, capacity: int, trace_groups: dict[str, int] | None) -> Finding | None:
    p = g.pattern
    if p is None or not p.regular or p.period_ns is None:
        return None
    pause_ns = g.pause_idle_ns  # the idle time inside the pause samples: part of the GPU's idle, never more
    if pause_ns <= 0 or pause_ns < cfg.findings.min_finding_share_of_window * g.span_ns:
        return None
    facts: list[tuple[str, Any]] = [
        ("gpu", g.gpu),
        ("basis", p.basis),
        ("busy_threshold_pct", round(p.busy_min_pct, 1)),
        ("period_ns", p.period_ns),
        ("duty_cycle", round(p.duty_cycle, 4)),
        ("regularity", round(p.regularity, 3)),
        ("pauses", p.pauses),
        ("mean_pause_ns", int(p.mean_pause_ns)),
    ]
    if g.pcie_rx_pause_ratio is not None:
        facts.append(("pcie_rx_pause_over_burst", round(g.pcie_rx_pause_ratio, 3)))
    host_line = ""
    if g.host_cpu_pause_pct is not None and g.host_cpu_burst_pct is not None:
        facts.append(("host_cpu_pause_pct", round(g.host_cpu_pause_pct, 1)))
        facts.append(("host_cpu_burst_pct", round(g.host_cpu_burst_pct, 1)))
        host_line = (
            f"Seen here: the watched process tree used {g.host_cpu_pause_pct:.0f}% CPU during the pauses and "
            f"{g.host_cpu_burst_pct:.0f}% during the bursts (100% = one core)."
        )
    group, cause = "unattributed", "counters_burst_pause"
    title = "GPU busy in bursts with regular pauses: starvation or synchronization"
    lead = ""
    if trace_groups:
        named = {k: v for k, v in trace_groups.items() if k in ("starvation", "synchronization", "underfilled", "insufficient_demand") and v > 0}
        if named:
            group = max(named, key=lambda k: named[k])
            title = f"GPU busy in bursts with regular pauses; the trace attributes the pauses to {group}"
            lead = f"The joined trace attributes most of its device idle to {group}; see that finding for the fix."
            facts.append(("trace_dominant_group", group))
    steps = tuple(
        x
        for x in (
            lead,
            f"GPU {g.gpu} works in bursts{_every(p)} and is paused {1 - p.duty_cycle:.0%} of the time "
            f"({p.pauses} pauses, {format_ns(p.mean_pause_ns, COARSE)} each on average).",
            host_line,
            "Counters cannot see the host. What tells starvation from synchronization: a trace of a few steps "
            "(whyidle diagnose trace.json --counters this.log): pauses inside DataLoader.__next__ or a host-to-device "
            "copy are starvation; pauses that follow cudaStreamSynchronize/.item()/.cpu() are synchronization.",
            "Without a trace: host CPU busy (data-loader workers at 100%) during the pauses points to starvation; "
            "PCIe RX rising in the pauses points to input copies; an idle host points to synchronization or demand.",
        )
        if x
    )
    return Finding(
        id="counters.burst_pause",
        group=group,
        cause=cause,
        title=title,
        idle_ns=pause_ns,
        share_of_idle=0.0,
        share_of_window=pause_ns / capacity if capacity else 0.0,
        evidence=_ev(tuple(facts)),
        fix=Fix(
            summary="Find what the host does during the pauses, then overlap it with GPU work.",
            steps=steps,
            code="whyidle diagnose trace.json --counters gpu.log",
            verify="Log the counters again: the duty cycle should rise and the pauses shrink.",
            expected=f"up to {format_ns(pause_ns)} of idle GPU time in the pauses ({pause_ns / g.span_ns:.0%} of the log) could be recovered; an upper bound",
            docs=_DOCS,
        ),
    )


def _low(g: GpuCounters, cfg: RuleSettings, capacity: int) -> Finding | None:
    util = g.dist("gpu_util_pct")
    if util is None or util.mean >= cfg.findings.counter_low_util_mean_pct or (g.pattern is not None and g.pattern.regular):
        return None
    idle_ns = g.idle_ns
    if idle_ns < cfg.findings.min_finding_share_of_window * g.span_ns:
        return None
    facts: tuple[tuple[str, Any], ...] = (
        ("gpu", g.gpu),
        ("mean_gpu_util_pct", round(util.mean, 2)),
        ("p95_gpu_util_pct", util.p95),
        ("idle_ns", idle_ns),
    )
    return Finding(
        id="counters.low_utilization",
        group="unattributed",
        cause="counters_low_utilization",
        title="The GPU ran no kernel most of the time",
        idle_ns=idle_ns,
        share_of_idle=0.0,
        share_of_window=idle_ns / capacity if capacity else 0.0,
        evidence=_ev(facts),
        fix=Fix(
            summary="Find out what the job does while the GPU waits: capture a trace of a few steps.",
            steps=(
                f"GPU {g.gpu}: mean GPU-Util {util.mean:.1f}% over {format_ns(g.span_ns, COARSE)}, with no regular burst rhythm.",
                "For inference, this is usually too little demand (few requests, batch size 1); for training, a "
                "host-bound loop or a stalled input pipeline.",
                "whyidle diagnose on a torch.profiler or nsys capture names the cause.",
            ),
            code="nsys profile -t cuda,nvtx,osrt -o run python train.py && whyidle diagnose run.nsys-rep",
            verify="Mean GPU-Util rises in the next counter log.",
            expected=f"{format_ns(idle_ns)} without any kernel running ({idle_ns / g.span_ns:.0%} of the log)",
            docs=_DOCS,
        ),
    )


def counter_findings(
    a: CounterAnalysis, cfg: RuleSettings, trace_groups: dict[str, int] | None = None
) -> tuple[tuple[Finding, ...], tuple[Skipped, ...]]:
    """Findings per GPU; ``trace_groups`` is the joined trace's idle by group (ns), if any."""
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    capacity = sum(g.span_ns for g in a.gpus)
    any_sm = any(g.has_sm_active for g in a.gpus)
    for g in a.gpus:
        for f in (_underfilled(g, cfg, capacity), _rhythm(g, cfg, capacity, trace_groups), None if trace_groups else _low(g, cfg, capacity)):
            if f is not None:
                findings.append(f)
    if not a.gpus:
        skipped.append(Skipped("counters", NO_GPU_READINGS))
    elif not any_sm:
        skipped.append(
            Skipped("counters.underfilled", "the counter log has no SM activity (DCGM field 1002): GPU-Util alone cannot tell a full GPU from one busy SM")
        )
    findings.sort(key=rank_key)
    return tuple(findings), tuple(skipped)


def counter_utilization(a: CounterAnalysis) -> Utilization:
    """Device busy time as the counters see it: GPU-Util x time, summed over GPUs."""
    span = max((g.span_ns for g in a.gpus), default=0)
    n = max(len(a.gpus), 1)
    busy = int(sum(g.busy_ns for g in a.gpus))
    return Utilization.busy_only(span, n, busy)


def counter_only_report(base: DiagnosisData, a: CounterAnalysis, cfg: RuleSettings) -> DiagnosisData:
    """The report of a counter log read on its own (``whyidle diagnose dmon.log``)."""
    findings, skipped = counter_findings(a, cfg)
    util = counter_utilization(a)
    findings = tuple(replace(f, share_of_idle=f.idle_ns / util.idle_ns if util.idle_ns else 0.0) for f in findings)
    start = min((g.start_ns for g in a.gpus), default=0)
    end = max((g.end_ns for g in a.gpus), default=0)
    names = tuple(g.name or f"GPU {g.gpu}" for g in a.gpus)
    return replace(
        base,
        source=replace(base.source, devices=names, training=False),
        window=WindowInfo(start, end, "counter log", (), ()),
        utilization=util,
        findings=findings,
        skipped=skipped,
        quality=tuple(a.notes) + (() if a.gpus else (NO_GPU_READINGS,)),
        no_device_activity=False,
        counters=a,
    )


def with_counters(report: DiagnosisData, a: CounterAnalysis, cfg: RuleSettings) -> DiagnosisData:
    """A trace's report with a counter log's figures and findings added as extra evidence."""
    findings, skipped = counter_findings(a, cfg, trace_groups=report.idle_by_group_ns if a.joined else None)
    idle = report.utilization.idle_ns
    notes = list(a.notes)
    if a.joined:
        # The trace's gap attribution already accounts for every idle nanosecond of the window; a
        # counter finding is corroborating evidence there, not a second claim on the same idle time,
        # so it is said as a note, never ranked as a finding worth no time.
        notes += [f"GPU-counter evidence over the trace's window ({f.id}): {f.title}. {f.fix.steps[0] if f.fix.steps else ''}".strip() for f in findings]
        findings = ()
    else:
        findings = tuple(replace(f, share_of_idle=min(f.idle_ns / idle, 1.0) if idle else 0.0) for f in findings)
    if a.joined:
        for g in a.gpus:
            util = g.dist("gpu_util_pct")
            if util is not None:
                notes.append(
                    f"over the trace's window GPU {g.gpu}'s counters read a mean GPU-Util of {util.mean:.0f}%; the trace's "
                    f"kernel-busy fraction is {report.utilization.kernel_busy_fraction:.0%} (GPU-Util is sampled by the "
                    "driver, so short windows differ)"
                )
    merged = sorted(report.findings + findings, key=rank_key)
    return replace(
        report,
        findings=tuple(merged),
        skipped=report.skipped + skipped,
        quality=report.quality + tuple(n for n in notes if n not in report.quality),
        counters=a,
    )
