"""Short human names of the causes and busy classes, shared by every output that names them.

Text only: the HTML legend, the comparison verdict ("input starvation removed: -210 ms per
step") and the plots use these, so a cause reads the same everywhere. Derived from the cause
catalogue (``whyidle.catalogue``).
"""

from __future__ import annotations

from collections.abc import Mapping

from whyidle.catalogue import BUSY, GROUP_LABELS, LiveMap, derived

__all__ = ["CAUSE_LABELS", "GROUP_LABELS", "BUSY_LABELS", "cause_label"]

CAUSE_LABELS: Mapping[str, str] = LiveMap(derived(lambda entries: {e.key: e.label for e in entries}))
BUSY_LABELS: dict[str, str] = {k: label for k, (label, _) in BUSY.items()}


def cause_label(key: str) -> str:
    """'starvation/input_pipeline' -> 'input starvation' (the key itself when unknown)."""
    return CAUSE_LABELS.get(key, key.split("/", 1)[-1].replace("_", " "))
