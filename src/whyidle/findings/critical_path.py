"""The critical path of a window's median step, for the JSON report (from the what-if replay)."""

from __future__ import annotations

from typing import Any

import msgspec.structs
import numpy as np

from whyidle.analyses import whatif as W
from whyidle.analyses import whatif_path as WP
from whyidle.analyses.window import Window
from whyidle.timeline.model import Kind, Timeline

__all__ = ["critical_path_summary"]


def _host_op_names(tl: Timeline, segs: list[WP.PathSegment], limit: int = 3) -> list[WP.PathSegment]:
    """Host and loader segments named by the CPU ops that overlap them most (recorded times: the
    path of the replay with no edit)."""
    rows = np.flatnonzero(tl.kind == int(Kind.CPU_OP))
    if rows.size == 0:
        return segs
    s0, s1 = tl.start_ns[rows], tl.end_ns[rows]
    order = np.argsort(s0, kind="stable")
    rows, s0, s1 = rows[order], s0[order], s1[order]
    longest = int((s1 - s0).max())
    out = []
    for seg in segs:
        if seg.kind not in ("host", "loader") or seg.name:
            out.append(seg)
            continue
        lo = int(np.searchsorted(s0, seg.start_ns - longest, side="left"))
        hi = int(np.searchsorted(s0, seg.end_ns, side="left"))
        ov = np.minimum(s1[lo:hi], seg.end_ns) - np.maximum(s0[lo:hi], seg.start_ns)
        best = np.argsort(-ov, kind="stable")[:limit]
        names = [tl.name_of(int(rows[lo + b])) for b in best if ov[b] > 0]
        out.append(msgspec.structs.replace(seg, name=", ".join(dict.fromkeys(names))))
    return out


def critical_path_summary(g: W.Graph, r: W.Replay, window: Window, max_segments: int = 200, tl: Timeline | None = None) -> dict[str, Any]:
    """The median step's critical path for the JSON report: time by kind and the segments, with
    consecutive segments of one kind merged (their names joined when few). With ``tl`` (and a
    replay with no edit), host segments are named by the CPU ops that ran in them."""
    i = WP.median_step(r)
    segs = WP.critical_path(g, r, i)
    if tl is not None and r.edit == W.NO_EDIT:
        segs = _host_op_names(tl, segs)
    merged: list[list[Any]] = []
    for s in segs:
        if merged and merged[-1][0] == s.kind and merged[-1][2] >= s.start_ns - 1:
            merged[-1][2] = s.end_ns
            merged[-1][4] += 1
            if s.name and s.name not in merged[-1][3] and len(merged[-1][3]) < 3:
                merged[-1][3].append(s.name)
        else:
            merged.append([s.kind, s.start_ns, s.end_ns, [s.name] if s.name else [], 1])
    step = window.steps[i]
    by_kind = WP.path_by_kind(segs)
    return {
        "step": step.number,
        "start_ns": int(r.step_starts[i]),
        "duration_ns": int(r.step_ns[i]),
        "by_kind_ns": by_kind,
        "segments": [
            {"kind": k, "start_ns": a, "end_ns": b, "names": names, "count": c} for k, a, b, names, c in merged[:max_segments]
        ],
        "segments_left_out": max(len(merged) - max_segments, 0),
    }
