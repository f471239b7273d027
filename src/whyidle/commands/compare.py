"""whyidle compare BEFORE AFTER: what changed between two runs of the same job, and a verdict.

Each input is a trace (diagnosed here) or a JSON report saved by ``whyidle diagnose -o r.json``.
Exit status 1 when ``--max-regression`` is given and throughput fell by more than it.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from typing import Any

from whyidle.commands._output import progress, say_written
from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.output import check_not_input, clean, write_atomic, write_stdout
from whyidle.units import format_ns

__all__ = ["add_parser", "run", "load_side", "render_text"]


EXAMPLES = """\
  whyidle compare before.pt.trace.json.gz after.pt.trace.json.gz
  whyidle compare before.json after.json --max-regression 5%   # CI gate: exit 1 on a 5% slow-down
  whyidle compare before.json after.json -o diff.json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="compare two runs (traces or saved JSON reports): deltas, verdict, CI gate")
    p.add_argument("before", help="the baseline: a trace or a JSON report from whyidle diagnose -o report.json")
    p.add_argument("after", help="the changed run: a trace or a JSON report")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("-o", "--output", help="write the comparison here (.json: JSON, else text)")
    p.add_argument("--max-regression", metavar="PCT", help="exit 1 if throughput fell by more than this (e.g. 5%% or 0.05)")
    p.add_argument("--skip-first", type=int, default=0, metavar="N", help="drop the first N steps of each trace")
    p.add_argument("--batch-size", type=int, help="samples per step, when the traces cannot tell")
    p.add_argument("--top", type=int, default=10, metavar="N", help="kernels and ops listed (default 10)")
    p.set_defaults(run=run)


def load_side(path: str, cfg: Config, read_ahead: Any = None) -> tuple[Any, Any]:
    """(Report, NameTimes or None) for a trace or a saved JSON report."""
    from pathlib import Path

    from whyidle.findings.saved import load_report, looks_like_report

    p = Path(path)
    if p.is_file():
        with p.open("rb") as f:
            head = f.read(1 << 16)
        if head.startswith(b"\x1f\x8b"):  # the first 512 bytes of what it decompresses to
            try:
                head = zlib.decompressobj(wbits=31).decompress(head, 512)
            except zlib.error:
                head = b""  # the reader says what is wrong with it
        if looks_like_report(head[:512]):
            return load_report(p), None
    from whyidle.analyses.links import link_launches
    from whyidle.analyses.names import name_times
    from whyidle.pipeline import analyse, report_from
    from whyidle.sources import load

    tl = load(path, jobs=2, read_ahead=read_ahead)  # the command line's own process: a forked child may decode beside it
    a = analyse(tl, cfg)
    return report_from(a, cfg), name_times(tl, link_launches(tl), a.window)


def _signed(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    return ("\u2212" if ns < 0 else "+") + format_ns(abs(ns))


def _rel(x: float | None) -> str:
    return "" if x is None else f" ({'+' if x >= 0 else chr(0x2212)}{abs(x):.1%})"


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
    row("GPU busy (device basis)", f"{b.before:.1%}", f"{b.after:.1%}", f"{100 * (b.delta or 0):+.1f} points")
    row(f"GPU idle {unit}", format_ns(c.idle_ns.before), format_ns(c.idle_ns.after), _signed(c.idle_ns.delta))
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


def run(args: argparse.Namespace) -> int:
    import msgspec

    from whyidle.tune.compare import compare_reports, parse_regression

    limit = parse_regression(args.max_regression) if args.max_regression is not None else None
    if args.skip_first < 0:
        raise UsageError("--skip-first must be 0 or more")
    if args.batch_size is not None and args.batch_size <= 0:
        raise UsageError("--batch-size must be a positive number of samples")
    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    cfg = Config(skip_first_steps=args.skip_first, batch_size=args.batch_size)
    if args.output:
        check_not_input(args.output, (args.before, args.after))  # before reading: say it at once
    from whyidle.sources._io import ReadAhead

    with ReadAhead() as read_ahead:
        for side in (args.before, args.after):  # both read (and gunzipped) at once, in threads
            read_ahead.start(side, cfg.stream_min_bytes)
        with progress(f"whyidle: reading {args.before} and {args.after}"):
            before, nb = load_side(args.before, cfg, read_ahead)
            after, na = load_side(args.after, cfg, read_ahead)
    c = compare_reports(before, after, nb, na, limit=args.top)
    as_json = msgspec.json.format(msgspec.json.encode(c.to_dict()), indent=2).decode() + "\n"
    text = render_text(c)
    if args.output:
        is_json = args.output.lower().endswith(".json")
        write_atomic(args.output, as_json if is_json else text, inputs=(args.before, args.after))
        say_written(args.output, "the comparison as JSON" if is_json else "the comparison")
    if args.json:
        write_stdout(as_json)
    elif not args.output:
        write_stdout(clean(text))
    if limit is not None:
        if c.regression is None:
            raise UsageError("--max-regression: neither run has steps or device activity to compare throughput on")
        if c.regression > limit:
            print(
                f"whyidle: gate failed: throughput ({c.throughput_basis}) fell {c.regression:.1%}, "
                f"more than --max-regression {limit:.1%}",
                file=sys.stderr,
            )
            return 1
    return 0
