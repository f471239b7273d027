"""The HTML report's roofline plot: inline SVG, one log-log chart per precision, drawn from the
diagnosis alone (``WorkSummary.ops``, analyses/work.py); no script, no network.

Each chart is one precision's roofline of the device: the memory slope ``intensity x bandwidth``
up to the ridge point ``peak / bandwidth``, the compute ceiling ``peak`` after it. Each op shape
with FLOPs in that precision is a point at (arithmetic intensity, achieved TFLOP/s), its area
proportional to its kernel time, coloured by its bound; hovering it shows the SVG ``<title>``: op
name, input dims and dtypes, rates and the fraction of the bound reached. Without a known peak the
charts have points only, and say so. Ops that only move data (no FLOPs) have no place on a FLOP
roofline: their TB/s stays in the table below the plot.

    TFLOP/s (log)
       |            ______________ peak (compute ceiling)
       |          / .   o
       |        /  o      ridge = peak / bandwidth
       |      / o
       |    /  slope = intensity x bandwidth
       +------------------------------------ FLOP/byte (log)
"""

from __future__ import annotations

import math
from html import escape

import msgspec

from whyidle.analyses.peaks import DevicePeak
from whyidle.analyses.work import OpRoof, WorkSummary
from whyidle.render.helpers import op_roof_cells

__all__ = ["roofline_svg", "BOUND_COLORS"]

# Okabe and Ito's colour-blind-safe blue and vermillion; grey where no bound is known.
BOUND_COLORS = {"compute": "#0072b2", "memory": "#d55e00", "": "#777777"}

_W, _H = 560, 300  # the viewBox, in its own units
_L, _R, _T, _B = 58, 14, 14, 40  # margins for the axes' labels
_MAX_R = 16.0  # the radius of the op shape with the most kernel time
_MIN_R = 2.5
_FIGURE_STYLE = "display:inline-block;width:600px;max-width:100%;margin:0 12px 12px 0;vertical-align:top"


def _decades(lo: float, hi: float) -> tuple[float, float]:
    """Whole powers of ten around [lo, hi] (log10 bounds)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return float(a), float(b if b > a else a + 1)


class _Axes:
    """Log-log mapping of (FLOP/byte, TFLOP/s) into the chart's viewBox."""

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        self.x0, self.x1 = _decades(min(xs), max(xs))
        self.y0, self.y1 = _decades(min(ys), max(ys))

    def x(self, v: float) -> float:
        return _L + (math.log10(v) - self.x0) / (self.x1 - self.x0) * (_W - _L - _R)

    def y(self, v: float) -> float:
        return _H - _B - (math.log10(v) - self.y0) / (self.y1 - self.y0) * (_H - _T - _B)

    def grid(self) -> str:
        out = [f'<rect x="{_L}" y="{_T}" width="{_W - _L - _R}" height="{_H - _T - _B}" fill="none" stroke="#bbb"/>']
        for e in range(int(self.x0), int(self.x1) + 1):
            x = self.x(10.0**e)
            out.append(f'<line x1="{x:.1f}" y1="{_T}" x2="{x:.1f}" y2="{_H - _B}" stroke="#eee"/>')
            out.append(f'<text x="{x:.1f}" y="{_H - _B + 14}" text-anchor="middle" font-size="10">{_tick(e)}</text>')
        for e in range(int(self.y0), int(self.y1) + 1):
            y = self.y(10.0**e)
            out.append(f'<line x1="{_L}" y1="{y:.1f}" x2="{_W - _R}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{_L - 4}" y="{y + 3:.1f}" text-anchor="end" font-size="10">{_tick(e)}</text>')
        out.append(f'<text x="{(_L + _W - _R) / 2:.0f}" y="{_H - 6}" text-anchor="middle" font-size="11">arithmetic intensity (FLOP/byte)</text>')
        out.append(f'<text transform="translate(12 {(_T + _H - _B) / 2:.0f}) rotate(-90)" text-anchor="middle" font-size="11">TFLOP/s</text>')
        return "".join(out)


def _tick(e: int) -> str:
    return f"{10.0**e:g}" if -3 <= e <= 4 else f"1e{e}"


def _ceiling(ax: _Axes, peak_tflops: float, tbps: float) -> str:
    """The roof: memory slope up to the ridge point, then the compute ceiling; the ridge marked."""
    ridge = peak_tflops / tbps
    lo = 10.0**ax.x0
    start = max(lo, 10.0**ax.y0 / tbps)  # where the slope enters the chart
    pts = [(start, start * tbps), (ridge, peak_tflops), (10.0**ax.x1, peak_tflops)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{ax.x(a):.1f} {ax.y(b):.1f}" for i, (a, b) in enumerate(pts))
    rx, ry = ax.x(ridge), ax.y(peak_tflops)
    return (
        f'<path class="wi-roof" d="{path}" fill="none" stroke="#333" stroke-width="1.5"/>'
        f'<circle class="wi-ridge" cx="{rx:.1f}" cy="{ry:.1f}" r="3" fill="#333"><title>ridge point: {ridge:.3g} FLOP/byte '
        f"(peak {peak_tflops:.4g} TFLOP/s / {tbps:.4g} TB/s)</title></circle>"
        f'<text x="{_W - _R - 4}" y="{ry - 5:.1f}" text-anchor="end" font-size="10">peak {peak_tflops:.4g} TFLOP/s</text>'
    )


def _hover(op: OpRoof) -> str:
    """The point's tooltip: name, dims and dtypes, rates, bound."""
    cells = op_roof_cells(op)
    types = _dtypes(op.inputs)
    where = f"{op.bound}-bound, {op.fraction:.0%} of the roofline" if op.fraction is not None else "no peak known: no fraction"
    return (
        f"{cells[0]}\ndtypes: {types or op.precision}\n{op.tflops:.3g} TFLOP/s, {op.tbps:.3g} TB/s, "
        f"{op.intensity:.3g} FLOP/byte\n{where}\n{op.kernel_ns / 1e6:.3g} ms kernel time over {op.count} call(s)"
    )


def _dtypes(inputs: str) -> str:
    try:
        types = msgspec.json.decode(inputs)[1]
    except (msgspec.DecodeError, IndexError, TypeError, KeyError):
        return ""
    return ", ".join(str(t) for t in types if isinstance(t, str) and t and t != "Scalar") if isinstance(types, list) else ""


def _chart(precision: str, ops: list[OpRoof], peak: DevicePeak | None, longest_ns: int) -> str:
    p = peak.tflops(precision) if peak is not None else None
    if p is None and peak is not None and precision == "tf32":
        p = peak.tflops("fp32")
    xs = [op.intensity for op in ops]
    ys = [op.tflops for op in ops]
    if p is not None and peak is not None:
        xs.append(p / peak.mem_tbps)
        ys.append(p)
    ax = _Axes(xs, ys)
    body = [ax.grid()]
    if p is not None and peak is not None:
        body.append(_ceiling(ax, p, peak.mem_tbps))
    for op in sorted(ops, key=lambda o: -o.kernel_ns):  # the largest first, so small points stay on top
        r = max(_MIN_R, _MAX_R * math.sqrt(op.kernel_ns / longest_ns))
        body.append(
            f'<circle class="wi-op" data-bound="{escape(op.bound)}" cx="{ax.x(op.intensity):.1f}" cy="{ax.y(op.tflops):.1f}" '
            f'r="{r:.1f}" fill="{BOUND_COLORS.get(op.bound, BOUND_COLORS[""])}" fill-opacity="0.6" stroke="#222" stroke-width="0.5">'
            f"<title>{escape(_hover(op))}</title></circle>"
        )
    label = f"{precision.upper()} roofline" + (f" of {peak.name}" if peak is not None and p is not None else ": no peak known, points only")
    if peak is not None and p is not None and peak.tflops(precision) is None:  # TF32 work where the device has no TF32
        label += f" (no {precision.upper()} units: its FP32 peak)"
    return (
        f'<figure class="wi-roofline-chart" data-precision="{escape(precision)}" style="{_FIGURE_STYLE}"><figcaption>{escape(label)}</figcaption>'
        f'<svg viewBox="0 0 {_W} {_H}" width="100%" role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f'{"".join(body)}</svg></figure>'
    )


def roofline_svg(w: WorkSummary) -> str:
    """The charts (one per precision of the ops with FLOPs and kernel time), with a legend and
    what is not drawn; "" when no op shape has FLOPs."""
    rated = [op for op in w.ops if op.flops > 0 and op.kernel_ns > 0 and op.tflops > 0 and op.intensity > 0]
    if not rated:
        return ""
    longest = max(op.kernel_ns for op in rated)
    by_precision: dict[str, list[OpRoof]] = {}
    for op in rated:
        by_precision.setdefault(op.precision or "unknown", []).append(op)
    charts = "".join(_chart(p, ops, w.peak, longest) for p, ops in by_precision.items())
    legend = " ".join(
        f'<span class="wi-sw" style="background:{c}"></span> {escape(label)}'
        for c, label in ((BOUND_COLORS["compute"], "compute-bound"), (BOUND_COLORS["memory"], "memory-bound"), (BOUND_COLORS[""], "no peak to rate"))
    )
    bytes_only = sum(1 for op in w.ops if op.flops == 0)
    why = (
        f"{escape(w.device or 'the device')} is not in whyidle's table of peaks: points only, no roofline. "
        if w.peak is None
        else f"Roofline of {escape(w.peak.name)}: {w.peak.mem_tbps:g} TB/s, peaks from {escape(w.peak.source)}. "
    )
    rest = f"{bytes_only} op shape(s) that only move data have no FLOPs to plot: see the table." if bytes_only else ""
    return (
        f'<div class="wi-roofline-plot"><p class="wi-note">{why}Each point is an op shape, '
        f"its area its kernel time; hover for its dims, dtypes and rates. {legend}. {escape(rest)}</p>"
        f'<div class="wi-roofline-charts">{charts}</div></div>'
    )
