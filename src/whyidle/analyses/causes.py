"""The cause keys idle time is attributed to: (group, cause), in the catalogue's order.

Derived from the cause catalogue (``whyidle.catalogue``), which also holds each cause's text,
colour and levers; the analyses use only the keys and the column index of each cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from whyidle.catalogue import GROUPS, CauseEntry, LiveSeq, derived

__all__ = ["Cause", "CAUSES", "GROUPS", "ARTIFACTS", "cause_index", "cause"]


class Cause(NamedTuple):
    group: str
    cause: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


def _causes(entries: Sequence[CauseEntry]) -> tuple[Cause, ...]:
    return tuple(Cause(e.group, e.cause) for e in entries)


# Live views of the catalogue: a cause registered at run time has the last column.
_CAUSES = derived(_causes)
CAUSES: Sequence[Cause] = LiveSeq(_CAUSES)
_BY_KEY_NOW = derived(lambda entries: {c.key: c for c in _causes(entries)})
_INDEX_NOW = derived(lambda entries: {c: i for i, c in enumerate(_causes(entries))})
_BY_KEY = _BY_KEY_NOW()  # the built-in causes, for the shorthands below

INPUT_PIPELINE = _BY_KEY["starvation/input_pipeline"]
HOST_PREPROCESSING = _BY_KEY["starvation/host_preprocessing"]
H2D_COPY = _BY_KEY["starvation/h2d_copy"]
HOST_SYNC = _BY_KEY["synchronization/host_sync"]
DEPENDENCY_WAIT = _BY_KEY["synchronization/dependency_wait"]
HOST_OVERHEAD = _BY_KEY["underfilled/host_overhead"]
IDLE_HOST = _BY_KEY["insufficient_demand/idle_host"]
UNTRACED_HOST = _BY_KEY["unattributed/untraced_host"]
QUEUED_WAITING = _BY_KEY["unattributed/queued_work_waiting"]
NO_LAUNCH_INFO = _BY_KEY["unattributed/no_launch_info"]
COLD_START = _BY_KEY["unattributed/cold_start"]

# Capture artifacts: reported in the headline, never as ranked findings.
ARTIFACTS: Sequence[Cause] = LiveSeq(derived(lambda entries: tuple(Cause(e.group, e.cause) for e in entries if e.artifact)))


def cause_index(c: Cause) -> int:
    return _INDEX_NOW()[c]


def cause(key: str) -> Cause:
    """The cause with catalogue key ``key`` ("group/cause"): a detector of a new cause names it
    this way, so adding one needs no edit here. An unknown key is a KeyError naming the known ones."""
    try:
        return _BY_KEY_NOW()[key]
    except KeyError:
        raise KeyError(f"{key!r} is not in the cause catalogue; known: {', '.join(_BY_KEY_NOW())}") from None
