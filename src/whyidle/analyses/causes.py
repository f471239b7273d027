"""The cause keys idle time is attributed to: (group, cause), in the catalogue's order.

Derived from the cause catalogue (``whyidle.catalogue``), which also holds each cause's text,
colour and levers; the analyses use only the keys and the column index of each cause.
"""

from __future__ import annotations

from typing import NamedTuple

from whyidle.catalogue import CATALOGUE, GROUPS

__all__ = ["Cause", "CAUSES", "GROUPS", "ARTIFACTS", "cause_index", "cause"]


class Cause(NamedTuple):
    group: str
    cause: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


CAUSES: tuple[Cause, ...] = tuple(Cause(e.group, e.cause) for e in CATALOGUE)
_BY_KEY = {c.key: c for c in CAUSES}

INPUT_PIPELINE = _BY_KEY["starvation/input_pipeline"]
HOST_PREPROCESSING = _BY_KEY["starvation/host_preprocessing"]
H2D_COPY = _BY_KEY["starvation/h2d_copy"]
HOST_SYNC = _BY_KEY["synchronization/host_sync"]
DEPENDENCY_WAIT = _BY_KEY["synchronization/dependency_wait"]
HOST_OVERHEAD = _BY_KEY["underfilled/host_overhead"]
LAUNCH_LATENCY = _BY_KEY["underfilled/launch_latency"]
KERNEL_BOUNDARIES = _BY_KEY["underfilled/kernel_boundaries"]
IDLE_HOST = _BY_KEY["insufficient_demand/idle_host"]
UNTRACED_HOST = _BY_KEY["unattributed/untraced_host"]
QUEUED_WAITING = _BY_KEY["unattributed/queued_work_waiting"]
NO_LAUNCH_INFO = _BY_KEY["unattributed/no_launch_info"]
COLD_START = _BY_KEY["unattributed/cold_start"]
CAPTURE_BOUNDARY = _BY_KEY["unattributed/capture_boundary"]

# Capture artifacts: reported in the headline, never as ranked findings.
ARTIFACTS: tuple[Cause, ...] = tuple(Cause(e.group, e.cause) for e in CATALOGUE if e.artifact)
_INDEX = {c: i for i, c in enumerate(CAUSES)}


def cause_index(c: Cause) -> int:
    return _INDEX[c]


def cause(key: str) -> Cause:
    """The cause with catalogue key ``key`` ("group/cause"): a detector of a new cause names it
    this way, so adding one needs no edit here. An unknown key is a KeyError naming the known ones."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"{key!r} is not in the cause catalogue; known: {', '.join(_BY_KEY)}") from None
