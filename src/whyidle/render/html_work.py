"""The HTML report's work section: MFU, model FLOPs, the roofline split and the op shapes with the
most kernel time (analyses/work.py), drawn from the diagnosis alone."""

from __future__ import annotations

from html import escape

from whyidle.findings.model import DiagnosisData
from whyidle.render.helpers import COMM_HEAD, comm_cells, op_roof_cells, work_rows
from whyidle.render.html_roofline import roofline_svg
from whyidle.units import format_ns

__all__ = ["work_section"]

_HEAD = ("op and input dims", "dtype", "calls", "TFLOP/s", "TB/s", "roofline")


def work_section(r: DiagnosisData) -> str:
    """The section, or "" for a report without a work model."""
    w = r.work
    if w is None:
        return ""
    facts = "".join(f"<tr><th>{escape(label)}</th><td>{escape(value)} {escape(detail)}</td></tr>" for label, value, detail in work_rows(w, format_ns))
    out = [f'<section><h2>Useful work</h2><div class="wi-table-wrap"><table class="wi-work">{facts}</table></div>']
    out.append(roofline_svg(w))
    if w.ops:
        head = "".join(f"<th>{h}</th>" for h in _HEAD)
        rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in op_roof_cells(op)) + "</tr>" for op in w.ops)
        out.append(
            '<p class="wi-note">Op shapes by kernel time; rates over their kernels\' time, the roofline bound from the '
            "device's peak and memory bandwidth.</p>"
            f'<div class="wi-table-wrap"><table class="wi-roofline"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
        )
    c = w.comms
    if c is not None and c.rates:
        head = "".join(f"<th>{h}</th>" for h in COMM_HEAD)
        rows = "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in comm_cells(rate, c.link, format_ns)) + "</tr>" for rate in c.rates)
        unsized = f" {escape(format_ns(c.unsized_ns))} of communication kernels had no recorded size." if c.unsized_ns else ""
        out.append(
            f'<p class="wi-note">Collectives by kernel time: message size, algorithm bandwidth (size / time) and bus bandwidth '
            f"(nccl-tests' factors), against the link in one direction. {escape('; '.join(c.notes))}.{unsized}</p>"
            f'<div class="wi-table-wrap"><table class="wi-comms"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
        )
    if w.unmodelled:
        top = ", ".join(f"{escape(name[:80])} ({escape(format_ns(ns))})" for name, ns in w.unmodelled[:5])
        out.append(f'<p class="wi-note">Unmodelled kernels (no op with recorded inputs launched them), longest: {top}.</p>')
    return "".join(out) + "</section>"
