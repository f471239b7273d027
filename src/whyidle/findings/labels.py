"""Short human names of the causes and busy classes, shared by every output that names them.

Text only: the HTML legend, the comparison verdict ("input starvation removed: -210 ms per
step") and the plots use these, so a cause reads the same everywhere.
"""

from __future__ import annotations

__all__ = ["CAUSE_LABELS", "GROUP_LABELS", "BUSY_LABELS", "cause_label"]

CAUSE_LABELS: dict[str, str] = {
    "starvation/input_pipeline": "input starvation",
    "starvation/h2d_copy": "host-to-device copies",
    "synchronization/host_sync": "host synchronisation",
    "underfilled/host_overhead": "launch overhead",
    "underfilled/kernel_boundaries": "kernel boundaries",
    "insufficient_demand/idle_host": "waiting for requests",
    "unattributed/cold_start": "cold start",
    "unattributed/untraced_host": "untraced host work",
    "unattributed/queued_work_waiting": "queued work waiting on the device",
    "unattributed/no_launch_info": "gaps without a launch record",
}

GROUP_LABELS: dict[str, str] = {
    "starvation": "starvation",
    "underfilled": "underfilled",
    "synchronization": "synchronization",
    "insufficient_demand": "insufficient demand",
    "unattributed": "unattributed",
}

BUSY_LABELS: dict[str, str] = {
    "compute": "compute kernels",
    "communication": "communication (exposed)",
    "copies": "copies and memsets",
}


def cause_label(key: str) -> str:
    """'starvation/input_pipeline' -> 'input starvation' (the key itself when unknown)."""
    return CAUSE_LABELS.get(key, key.split("/", 1)[-1].replace("_", " "))
