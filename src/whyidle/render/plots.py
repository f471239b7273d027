"""Static plots for slides: the per-step breakdown as stacked bars, PNG or SVG (matplotlib extra).

``whyidle diagnose trace -o steps.png`` (or ``.svg``) writes the plot; ``step_figure(report)``
returns the matplotlib Figure for a notebook. matplotlib is imported only here, lazily, and its
absence raises :class:`~whyidle.errors.MissingExtraError` with the install command.

Each bar is one step, split without double counting into compute, exposed communication, copies
and idle by cause (the same figures as the JSON report's ``steps``). A trace without step
markers gets one bar for the whole window.
"""

from __future__ import annotations

import io
from typing import Any

from whyidle.analyses import causes as C
from whyidle.errors import MissingExtraError
from whyidle.findings.labels import BUSY_LABELS, cause_label
from whyidle.findings.model import DiagnosisData

__all__ = ["step_figure", "render_png", "render_svg", "step_rows"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("Step plots (PNG/SVG)", "plot", "matplotlib") from exc
    return plt


def step_rows(report: DiagnosisData) -> tuple[list[str], list[tuple[str, str, list[float]]]]:
    """(bar labels, [(key, label, ms per bar)]) for the classes that occur, bottom to top."""
    from whyidle.render.html import BUSY_COLORS, CAUSE_COLORS

    u = report.utilization
    if u.steps:
        labels = [str(s.number) for s in u.steps]
        busy = {
            "compute": [s.compute_ns for s in u.steps],
            "communication": [s.communication_ns for s in u.steps],
            "copies": [s.memcpy_ns + s.memset_ns for s in u.steps],
        }
        idle = {c.key: [s.idle_by_cause_ns[i] for s in u.steps] for i, c in enumerate(C.CAUSES)}
    else:
        labels = ["window"]
        busy = {"compute": [u.compute_ns], "communication": [u.communication_ns], "copies": [u.memcpy_ns + u.memset_ns]}
        idle = {c.key: [report.idle_by_cause_ns.get(c.key, 0)] for c in C.CAUSES}
    rows: list[tuple[str, str, list[float]]] = []
    for k, v in busy.items():
        if any(v):
            rows.append((BUSY_COLORS[k], BUSY_LABELS[k], [x / 1e6 for x in v]))
    for k, v in idle.items():
        if any(v):
            rows.append((CAUSE_COLORS[k], f"idle: {cause_label(k)}", [x / 1e6 for x in v]))
    return labels, rows


def step_figure(report: DiagnosisData) -> Any:
    """A matplotlib Figure of the per-step breakdown."""
    plt = _pyplot()
    labels, rows = step_rows(report)
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 1.2 + 0.55 * len(labels))), 4.2), dpi=150)
    bottom = [0.0] * len(labels)
    x = list(range(len(labels)))
    for color, label, values in rows:
        ax.bar(x, values, bottom=bottom, color=color, label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(x)
    step_every = max(1, len(labels) // 30)
    ax.set_xticklabels([lb if i % step_every == 0 else "" for i, lb in enumerate(labels)])
    ax.set_xlabel("step" if report.utilization.steps else "")
    devs = report.utilization.n_devices
    ax.set_ylabel("ms" + (f" (summed over {devs} devices)" if devs > 1 else ""))
    name = report.source.path.rsplit("/", 1)[-1]
    ax.set_title(f"Device time per step: busy {report.utilization.busy_fraction:.1%}  ({name})", fontsize=10, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="y", color="#e3e6ec", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def _render(report: DiagnosisData, fmt: str) -> bytes:
    plt = _pyplot()
    fig = step_figure(report)
    buf = io.BytesIO()
    # Fixed metadata so the same report gives the same bytes.
    meta = {"Software": "whyidle"} if fmt == "png" else {"Creator": "whyidle", "Date": None}
    fig.savefig(buf, format=fmt, metadata=meta, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def render_png(report: DiagnosisData) -> bytes:
    return _render(report, "png")


def render_svg(report: DiagnosisData) -> bytes:
    return _render(report, "svg")
