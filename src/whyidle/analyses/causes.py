"""The cause keys idle time is attributed to: (group, cause).

The groups are exactly the five the report uses. The text and fixes for each cause live in
``whyidle.findings.levers``; this module only names them so that analyses stay free of prose.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Cause", "CAUSES", "GROUPS", "cause_index"]

GROUPS = ("starvation", "underfilled", "synchronization", "insufficient_demand", "unattributed")


class Cause(NamedTuple):
    group: str
    cause: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


INPUT_PIPELINE = Cause("starvation", "input_pipeline")
H2D_COPY = Cause("starvation", "h2d_copy")
HOST_SYNC = Cause("synchronization", "host_sync")
HOST_OVERHEAD = Cause("underfilled", "host_overhead")
KERNEL_BOUNDARIES = Cause("underfilled", "kernel_boundaries")
IDLE_HOST = Cause("insufficient_demand", "idle_host")
COLD_START = Cause("unattributed", "cold_start")
UNTRACED_HOST = Cause("unattributed", "untraced_host")
QUEUED_WAITING = Cause("unattributed", "queued_work_waiting")
NO_LAUNCH_INFO = Cause("unattributed", "no_launch_info")

CAUSES: tuple[Cause, ...] = (
    INPUT_PIPELINE,
    H2D_COPY,
    HOST_SYNC,
    HOST_OVERHEAD,
    KERNEL_BOUNDARIES,
    IDLE_HOST,
    COLD_START,
    UNTRACED_HOST,
    QUEUED_WAITING,
    NO_LAUNCH_INFO,
)
_INDEX = {c: i for i, c in enumerate(CAUSES)}


def cause_index(c: Cause) -> int:
    return _INDEX[c]
