"""A small DSL for timelines with exactly known timing (microseconds in, nanoseconds out)."""

from __future__ import annotations

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
    ) -> None:
        """Device work [start, end), launched at ``launch_at`` (None: no launch record)."""
        corr = -1
        if launch_at is not None:
            self._corr += 1
            corr = self._corr
            self.b.add(int(launch_at * US), int((launch_at + launch_dur) * US), self.main if lane is None else lane, Kind.RUNTIME, launch_name, corr=corr)
        self.b.add(int(start * US), int(end * US), self.stream(stream, device), kind, name, corr=corr)

    def build(self) -> Timeline:
        return self.b.build()
