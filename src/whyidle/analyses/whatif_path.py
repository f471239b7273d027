"""The critical path of a replayed step (analyses/whatif.py): the chain of waits that decided it.

Walking back from the step's end: device work was held back by its launch or by the work before it
on its stream; host time runs back to the previous anchor, and a sync or blocking copy that waited
goes to the work it waited for.
"""

from __future__ import annotations

import msgspec
import numpy as np

from whyidle.analyses.whatif import Replay
from whyidle.analyses.whatif_graph import ANCHOR_NAMES, Graph

__all__ = ["PathSegment", "critical_path", "path_by_kind", "median_step"]


class PathSegment(msgspec.Struct, frozen=True):
    kind: str  # "device", "launch latency", "host", "loader", "sync", "h2d copy"
    start_ns: int  # replayed times (with no edit: the recorded times)
    end_ns: int
    name: str = ""

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def critical_path(g: Graph, r: Replay, step: int) -> list[PathSegment]:
    """The chain of waits that decided step ``step`` (index in the window), latest first reversed.

    Walk back from the step's end: device work was started either by its launch (go to the host
    at the launch) or by the previous work on its stream (go to that); host time goes back to the
    previous anchor, and a sync or blocking copy that waited goes to the work it waited for.
    """
    lo = int(r.step_starts[step])
    hi = int(r.step_starts[step + 1]) if step + 1 < r.step_starts.size else r.window_end
    segs: list[PathSegment] = []
    # The work that ended last at the step's end, if the step ends on the device.
    ending = np.flatnonzero((r.dev_end <= hi) & (r.dev_end > lo))
    cur_dev = int(ending[np.argmax(r.dev_end[ending])]) if ending.size and int(r.dev_end[ending].max()) >= hi - 1_000 else -1
    t_host = hi  # replayed host time to walk back from, when on the host
    guard = 0
    while guard < 1_000_000:
        guard += 1
        if cur_dev >= 0:
            i = cur_dev
            segs.append(PathSegment("device", int(max(r.dev_start[i], lo)), int(r.dev_end[i]), g.dev_names[i]))
            if r.dev_start[i] <= lo:
                break
            if r.dev_bound[i] == 1:
                p = int(r.dev_prev[i])
                gap_start = int(r.dev_end[p])
                cur_dev = p
                if gap_start <= lo:
                    break
                continue
            if r.dev_bound[i] == 0:
                t_launch = int(r.dev_start[i] - g.dev_lat[i])
                segs.append(PathSegment("launch latency", max(t_launch, lo), int(r.dev_start[i])))
                t_host, cur_dev = t_launch, -1
                if t_host <= lo:
                    break
                continue
            break
        # On the host at replayed time t_host: back to the latest anchor ending by then.
        k = int(np.searchsorted(r.anc_end, t_host, side="right")) - 1
        a_end = int(r.anc_end[k]) if k >= 0 else lo
        if a_end < t_host:
            segs.append(PathSegment("host", max(a_end, lo), t_host))
        if k < 0 or a_end <= lo:
            break
        kind = ANCHOR_NAMES[int(g.anc_kind[k])]
        j = int(r.anc_waited_on[k])
        if j >= 0 and r.dev_end[j] > r.anc_start[k]:
            segs.append(PathSegment(kind, max(int(r.dev_end[j]), lo), a_end))
            cur_dev = j
            continue
        segs.append(PathSegment(kind, max(int(r.anc_start[k]), lo), a_end))
        t_host = int(r.anc_start[k])
        if t_host <= lo:
            break
    segs.reverse()
    return [s for s in segs if s.end_ns > s.start_ns]


def path_by_kind(segs: list[PathSegment]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in segs:
        out[s.kind] = out.get(s.kind, 0) + s.dur_ns
    return out


def median_step(r: Replay) -> int:
    """Index of the step with the median replayed duration."""
    if r.step_ns.size == 0:
        return 0
    order = np.argsort(r.step_ns, kind="stable")
    return int(order[(order.size - 1) // 2])
