"""The levers: for each cause (and variant), the title, the fix, code and how to verify.

Text only; the numbers are filled in by the rules from measurements. All of them are the cause
catalogue's (``whyidle.catalogue``): the idle causes' entries, and its findings on busy time
(``BUSY_FINDINGS``: FP32 math without tensor cores, kernels too small to fill the device); this
module is the lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from whyidle.catalogue import BUSY_FINDINGS, CauseEntry, Lever, LiveMap, derived

__all__ = ["Lever", "LEVERS", "lever_for"]


def _levers(entries: Sequence[CauseEntry]) -> dict[tuple[str, str], Lever]:
    causes = {(e.cause, variant): lever for e in entries for variant, lever in e.levers.items()}
    return causes | {(b.cause, variant): lever for b in BUSY_FINDINGS for variant, lever in b.levers.items()}


# (cause, variant) -> lever: the catalogue's causes (those registered at run time too) and its
# findings on busy time (catalogue.BUSY_FINDINGS).
LEVERS: Mapping[tuple[str, str], Lever] = LiveMap(derived(_levers))


def lever_for(cause: str, variant: str = "") -> Lever:
    return LEVERS.get((cause, variant)) or LEVERS[(cause, "")]
