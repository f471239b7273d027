"""Presentation helpers the renderers share (terminal, HTML): the report's title, the headline's
busy and idle figures in the input's own terms, a busy-time finding's worth, a counter reading,
the work model's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["TITLE_GPU", "title", "busy_idle_rows", "busy_finding_stat", "counter_value", "work_rows", "op_roof_cells", "COMM_HEAD", "comm_cells"]

TITLE_GPU = "whyidle: why is this GPU idle?"


def _tracked_on_gpu(r: Any) -> bool:
    """A step-tracker report whose busy time is a GPU's (CUDA events), not the host's."""
    return any(d and d != "cpu" for d in r.source.devices) and "CPU-side measurement" not in " ".join(r.quality)


def title(r: Any) -> str:
    """The report's first line; a CPU run of the step tracker has no GPU to ask about."""
    if r.source.format == "whyidle.track" and not _tracked_on_gpu(r):
        return "whyidle: why is this loop waiting? (a CPU run: no GPU here)"
    return TITLE_GPU


def busy_idle_rows(r: Any, fmt_ns: Callable[[float], str]) -> list[tuple[str, str, str]]:
    """The headline's busy and idle figures as (label, value, detail), in the input's own terms:
    a counter log has samples, not gaps; a step tracker on CPU measures the host, not a GPU."""
    u = r.utilization
    busy = f"{u.busy_fraction:.1%}"
    if r.window.basis == "counter log" and r.counters is not None:
        from whyidle.findings.counter_rules import busy_basis_words, idle_words

        if not r.counters.gpus:
            return [("GPU busy", "unknown", "the log has no GPU readings")]
        return [("GPU busy", busy, f"of the log; {busy_basis_words(r.counters)}"), ("GPU idle", fmt_ns(u.idle_ns), idle_words(r.counters))]
    if r.source.format == "whyidle.track":
        what = "device time between step marks (CUDA events)" if _tracked_on_gpu(r) else "host compute between batches (no GPU: CPU run)"
        return [("Busy", busy, f"of the steps: {what}"), ("Waiting", fmt_ns(u.idle_ns), "(data wait, copies, other host time)")]
    if u.kernel_busy_ns == 0 and u.busy_ns > 0:  # copies or memsets only: busy, but no compute to judge
        return [
            ("GPU busy", busy, f"of a {fmt_ns(r.window.duration_ns)} window in which no kernel ran (copies and memsets only): no compute to judge"),
            ("GPU idle", fmt_ns(u.idle_ns), f"in {r.gap_count} gaps"),
        ]
    return [
        ("GPU busy", busy, f"of the window (kernels only {u.kernel_busy_fraction:.1%}), union over all streams"),
        ("GPU idle", fmt_ns(u.idle_ns), f"in {r.gap_count} gaps"),
    ]


def busy_finding_stat(f: Any, window_ns: int, fmt_ns: Callable[[float], str]) -> str:
    """What a finding about busy time (FP32 math, underfilled kernels) is worth, in the terms the
    idle findings use: time and share of the window, an upper bound on what its fix recovers."""
    ns = f.affected_busy_ns
    share = f" ({ns / window_ns:.0%} of the window)" if window_ns > 0 else ""
    saving = getattr(f, "est_saving_ns", 0)
    if saving > 0:  # the busy-time findings with an estimate from the roofline rank by it
        return (
            f"Concerns {fmt_ns(ns)} of device busy time{share}, not idle time: the fix is estimated "
            f"(from the roofline) to save {fmt_ns(saving)} of it."
        )
    return (
        f"Concerns {fmt_ns(ns)} of device busy time{share}, not idle time: the fix shortens part of it, "
        "so that is an upper bound on what it recovers."
    )


def counter_value(v: float, unit: str) -> str:
    """One GPU counter reading with its unit, as the terminal and HTML reports show it."""
    if unit == "B/s":
        return f"{v / 1e6:.1f} MB/s"
    return (f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.1f} {unit}").replace(" %", "%")


_BASIS_WORDS = {"gpu_util_pct": "GPU-Util", "sm_active_pct": "SM activity"}


def rhythm_words(p: Any, fmt_ns: Callable[[float], str]) -> str:
    """A counter log's rhythm, saying what 'busy' was read from (the headline's busy share is a
    time-weighted mean; this is the share of samples over the threshold: two different numbers)."""
    metric = _BASIS_WORDS.get(p.basis, p.basis)
    share = f"{metric} at or above {p.busy_min_pct:.0f}% in {p.duty_cycle:.0%} of the samples"
    if p.period_ns is not None and p.regular and p.period_ns > p.mean_pause_ns:
        return f"Rhythm: bursts every {fmt_ns(p.period_ns)}; {share} (regularity {p.regularity:.2f}, {p.pauses} pauses)"
    return f"Rhythm: none regular; {share}"


def _flops_words(flops: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


def work_rows(w: Any, fmt_ns: Callable[[float], str]) -> list[tuple[str, str, str]]:
    """The work model's headline as (label, value, detail): MFU, model FLOPs, and the split of
    kernel time by where each op sits on the roofline (analyses/work.py)."""
    peak = w.peak
    precisions = "/".join(p.upper() for p in w.flops_by_precision) or "no modelled FLOPs"
    if w.mfu is not None and peak is not None:
        mfu = (f"{w.mfu:.1%}", f"of {peak.name}'s {precisions} peak{' x ' + str(w.devices_used) if w.devices_used > 1 else ''} ({peak.source})")
    else:
        mfu = ("unknown", "; ".join(w.notes) or "no FLOPs modelled")
    steps = [s.flops for s in w.steps]
    per = f"{_flops_words(sum(steps) / len(steps))} per step" if steps else f"{_flops_words(w.flops)} in the window"
    rate = w.flops / w.duration_ns / 1e3 if w.duration_ns > 0 else 0.0
    rows = [("MFU", *mfu), ("Model FLOPs", per, f"({rate:.3g} TFLOP/s over the window, {_flops_words(w.flops)} in all)")]
    if w.kernel_ns > 0:
        parts = [
            ("near the roofline", w.near_roofline_ns),
            ("compute-bound, slow", w.compute_slow_ns),
            ("memory-bound", w.memory_bound_ns),
            ("no peak to rate", w.unrated_ns),
            ("unmodelled", w.unmodelled_ns),
        ]
        split = ", ".join(f"{label} {ns / w.kernel_ns:.0%}" for label, ns in parts if ns > 0)
        rows.append(("Kernel time", fmt_ns(w.kernel_ns), f"(summed over streams): {split}"))
    return rows


def _dims_words(d: list[Any]) -> str:
    """One recorded input's dims: ``8x128``, or a tensor list's size (``[3 tensors]``)."""
    return "x".join(map(str, d)) if all(isinstance(x, int) for x in d) else f"[{len(d)} tensors]"


def _runs(words: list[str]) -> list[tuple[str, int]]:
    """Consecutive equal tensor-list words counted (a fused optimizer's lists of one length)."""
    out: list[tuple[str, int]] = []
    for w in words:
        if out and out[-1][0] == w and w.startswith("["):
            out[-1] = (w, out[-1][1] + 1)
        else:
            out.append((w, 1))
    return out


def op_roof_cells(r: Any) -> tuple[str, str, str, str, str, str]:
    """One op shape's row: (op and dims, precision, time, TFLOP/s, TB/s, bound and fraction)."""
    try:
        recorded = msgspec.json.decode(r.inputs)[0]
    except (msgspec.DecodeError, IndexError, TypeError, KeyError):
        recorded = []
    words = [_dims_words(d) for d in recorded if isinstance(d, list) and d and (all(isinstance(x, int) for x in d) or all(isinstance(x, list) for x in d))]
    dims = ", ".join(w if n == 1 else f"{n}x{w}" for w, n in _runs(words))
    where = f"{r.bound}-bound, {r.fraction:.0%}" if r.fraction is not None else "no peak"
    return (f"{r.name} {dims}", r.precision or "bytes", str(r.count), f"{r.tflops:.3g}", f"{r.tbps:.3g}", where)


COMM_HEAD = ("collective", "dtype", "ranks", "size", "calls", "time", "algbw GB/s", "busbw GB/s", "of link")


def _bytes_words(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def comm_cells(c: Any, link: Any, fmt_ns: Callable[[float], str]) -> tuple[str, ...]:
    """One collective shape's row (analyses/collectives.py), as COMM_HEAD: bandwidths in GB/s."""
    busbw = f"{c.busbw_gbps:.3g}" if c.busbw_gbps is not None else "unknown"
    where = f"{c.fraction:.0%} of {link.name}" if c.fraction is not None and link is not None else "no link peak"
    return (c.name, c.dtype, str(c.group_size or "?"), _bytes_words(c.nbytes), str(c.count), fmt_ns(c.kernel_ns), f"{c.algbw_gbps:.3g}", busbw, where)
