"""The comparison of two runs (:func:`whyidle.comparison.analysis.compare_reports`) as text."""

from __future__ import annotations

from typing import Any

from whyidle.units import format_ns

__all__ = ["render_text", "render_comparison_json"]


def render_comparison_json(c: Any) -> str:
    """The comparison as indented JSON."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(c.to_dict()), indent=2).decode() + "\n"


def _signed(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    return ("\u2212" if ns < 0 else "+") + format_ns(abs(ns))


def _rel(x: float | None) -> str:
    return "" if x is None else f" ({'+' if x >= 0 else chr(0x2212)}{abs(x):.1%})"


def _share(x: float | None, fmt: str) -> str:
    """A share as a percentage; n/a when a run cannot tell (a comparison read back from a file may say so)."""
    return "n/a" if x is None else format(x, fmt)


def _cut(s: str, n: int = 58) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def render_text(c: Any) -> str:
    from whyidle.findings.labels import GROUP_LABELS, cause_label

    unit = c.basis
    lines = [
        "whyidle compare",
        f"  before  {c.before_path}",
        f"  after   {c.after_path}",
        "",
        f"Verdict: {c.verdict}.",
        "",
        f"  {'':<36}{'before':>12}{'after':>12}   change",
    ]

    def row(label: str, b: str, a: str, d: str) -> None:
        lines.append(f"  {label:<36}{b:>12}{a:>12}   {d}")

    st = c.step_time_ns
    if st.before is not None or st.after is not None:
        row("step time (mean)", format_ns(st.before), format_ns(st.after), _signed(st.delta) + _rel(st.relative))
    sp = c.samples_per_s
    if sp.before is not None and sp.after is not None:
        row("samples/s", f"{sp.before:,.1f}", f"{sp.after:,.1f}", f"{sp.delta:+,.1f}{_rel(sp.relative)}")
    elif c.steps_per_s.before is not None and c.steps_per_s.after is not None:
        s = c.steps_per_s
        row("steps/s", f"{s.before:.2f}", f"{s.after:.2f}", f"{s.delta:+.2f}{_rel(s.relative)}")
    b = c.busy_fraction
    row("GPU busy (device basis)", _share(b.before, ".1%"), _share(b.after, ".1%"), f"{100 * (b.delta or 0):+.1f} points")
    row(f"GPU idle {unit}", format_ns(c.idle_ns.before), format_ns(c.idle_ns.after), _signed(c.idle_ns.delta))
    m = c.mfu
    if m.before is not None and m.after is not None:
        row("MFU (model FLOPs / peak)", f"{m.before:.1%}", f"{m.after:.1%}", f"{100 * (m.delta or 0):+.1f} points")
    for name, ch in c.kernel_split.items():
        row(f"  kernel time {name.replace('_', '-')}", _share(ch.before, ".0%"), _share(ch.after, ".0%"), f"{100 * (ch.delta or 0):+.0f} points")
    lines.append("")
    lines.append(f"  Idle by group, {unit}")
    for g, ch in c.idle_by_group_ns.items():
        row("  " + GROUP_LABELS.get(g, g), format_ns(ch.before), format_ns(ch.after), _signed(ch.delta))
    lines.append(f"  Idle by cause, {unit}")
    for k, ch in sorted(c.idle_by_cause_ns.items(), key=lambda kv: kv[1].delta or 0.0):
        row("  " + cause_label(k), format_ns(ch.before), format_ns(ch.after), _signed(ch.delta))
    for title, items in ((f"Kernels and copies whose time changed most, {unit}", c.kernels), (f"CPU ops whose time changed most, {unit}", c.ops)):
        if items:
            lines.append("")
            lines.append(f"  {title}")
            for x in items:
                lines.append(f"    {_signed(x.delta_ns):>10}  {format_ns(x.before_ns):>9} -> {format_ns(x.after_ns):<9} {_cut(x.name)}")
    if c.names_note:
        lines += ["", f"  Note: {c.names_note}"]
    for n in c.notes:
        lines.append(f"  Note: {n}")
    pc = c.prediction
    if pc is not None:
        rng = f" (range {format_ns(pc.low)}-{format_ns(pc.high)})" if pc.high - pc.low > 0.01 * pc.predicted else ""
        lines += [
            "",
            f"Prediction check: the fix applied looks like {cause_label(pc.cause)} (its idle fell most).",
            f"  predicted from the before run ({pc.lever}): step time {format_ns(pc.predicted)}{rng}",
            f"  measured: step time {format_ns(pc.measured)}; error {pc.error:+.1%}",
        ]
    if c.regression is not None:
        word = "slower" if c.regression > 0 else "faster"
        lines += ["", f"Throughput ({c.throughput_basis}): {abs(c.regression):.1%} {word}."]
    return "\n".join(lines) + "\n"
