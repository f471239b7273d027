"""A small DSL for timelines with exactly known timing (microseconds in, nanoseconds out)."""

from __future__ import annotations

from typing import Any

import msgspec.structs
import numpy as np

from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

US = 1000


class TL:
    """``t = TL(); t.kernel(0, 100); t.launch(...)``; all times in microseconds."""

    def __init__(self, devices: int = 1) -> None:
        self.b = TimelineBuilder(TimelineMeta(source_format="test", devices=[{"name": "GPU", "computeMajor": 8, "computeMinor": 0}]))
        self.main = self.b.lane_id(LaneKind.CPU_THREAD, -1, "1", "1", "main")
        self.streams = {}
        self._corr = 0

    def stream(self, s: int = 7, device: int = 0) -> int:
        key = (device, s)
        if key not in self.streams:
            self.streams[key] = self.b.lane_id(LaneKind.GPU_STREAM, device, str(device), str(s))
        return self.streams[key]

    def host(self, name: str, start: float, end: float, kind: Kind = Kind.CPU_OP, lane: int | None = None, stack: str | None = None) -> None:
        self.b.add(int(start * US), int(end * US), self.main if lane is None else lane, kind, name, stack=stack)

    def step(self, n: int, start: float, end: float) -> None:
        self.host(f"ProfilerStep#{n}", start, end, Kind.STEP)

    def work(
        self,
        name: str,
        start: float,
        end: float,
        launch_at: float | None = None,
        launch_dur: float = 5,
        kind: Kind = Kind.KERNEL,
        stream: int = 7,
        device: int = 0,
        lane: int | None = None,
        launch_name: str = "cudaLaunchKernel",
        nbytes: int = -1,
    ) -> None:
        """Device work [start, end), launched at ``launch_at`` (None: no launch record)."""
        corr = -1
        if launch_at is not None:
            self._corr += 1
            corr = self._corr
            self.b.add(int(launch_at * US), int((launch_at + launch_dur) * US), self.main if lane is None else lane, Kind.RUNTIME, launch_name, corr=corr)
        self.b.add(int(start * US), int(end * US), self.stream(stream, device), kind, name, corr=corr, nbytes=nbytes)

    def build(self) -> Timeline:
        return self.b.build()


def causes(report: Any) -> dict[str, int]:
    """A report's idle by cause in whole microseconds, the causes that hold any."""
    return {k: v // US for k, v in report.idle_by_cause_ns.items() if v}


def py(t: TL, name: str, start: float, end: float) -> None:
    """A Python frame on the main thread."""
    t.host(name, start, end, kind=Kind.PYTHON)


def assert_same_timeline(a: Timeline, b: Timeline) -> None:
    """Two timelines hold the same rows, lanes, strings and source notes (dtypes included)."""
    for c in Timeline.COLUMNS:
        x, y = getattr(a, c), getattr(b, c)
        assert x.dtype == y.dtype, c
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), c
    assert a.lanes == b.lanes
    assert a.strings == b.strings
    # The ignored-category note lists ties in set order in memory; compare its items.
    qa = [sorted(q.split(": ")[-1].split(", ")) if "ignored" in q else q for q in a.meta.quality]
    qb = [sorted(q.split(": ")[-1].split(", ")) if "ignored" in q else q for q in b.meta.quality]
    assert qa == qb
    assert msgspec.structs.replace(a.meta, quality=[]) == msgspec.structs.replace(b.meta, quality=[])
