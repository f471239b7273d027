"""The flaw lab's self-check: does the diagnosis name the injected flaw?

For each flaw the finding that must come first (the largest device-idle time explained), and for
``none`` that no problem finding appears (``unattributed`` findings say what a trace cannot
explain; they name no flaw, so they do not fail the check).

On a CPU the only device is the host itself: there is no queue for a sync to drain, no copy to a
device, no launch to wait for. The lab checks the flaws a CPU can show (``CPU_FLAWS``) with the
step tracker's report, and says why the others need CUDA (``GPU_ONLY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from whyidle.catalogue import LiveMap, derived, lab_flaw_causes
from whyidle.errors import ArgumentError
from whyidle.findings.model import DiagnosisData
from whyidle.lab.job import FLAWS

__all__ = ["EXPECTED", "CPU_FLAWS", "GPU_ONLY", "CheckResult", "check_report"]

# flaw -> finding keys (group/cause) that may come first; () means "no problem finding". From
# the catalogue: each cause names the flaws that produce it (``CauseEntry.lab_flaws``).
EXPECTED: Mapping[str, tuple[str, ...]] = LiveMap(derived(lambda _: {flaw: lab_flaw_causes(flaw) for flaw in FLAWS}))

CPU_FLAWS = ("none", "starvation")

GPU_ONLY: dict[str, str] = {
    "h2d": "a host-to-device copy needs a device: on CPU .to('cpu') copies nothing",
    "sync": "a host sync drains a device queue: on CPU every op already runs synchronously",
    "smallbatch": "underfilled kernels need a device that outruns the host: on CPU the host does the work",
    "launch": "launch overhead is host time the device waits through: on CPU there is no device waiting",
}

# Groups that name a problem a user should fix.
PROBLEM_GROUPS = ("starvation", "underfilled", "synchronization", "insufficient_demand")


@dataclass(frozen=True)
class CheckResult:
    flaw: str
    passed: bool
    expected: tuple[str, ...]
    found: tuple[str, ...]  # finding keys, largest first
    basis: str  # which report was checked
    message: str


def check_report(flaw: str, report: DiagnosisData, basis: str) -> CheckResult:
    if flaw not in EXPECTED:
        raise ArgumentError(f"unknown flaw {flaw!r}; expected one of {', '.join(EXPECTED)}")
    expected = EXPECTED[flaw]
    found = tuple(f.key for f in report.findings)
    problems = tuple(f.key for f in report.findings if f.group in PROBLEM_GROUPS)
    if not expected:
        ok = not problems and not report.no_device_activity
        msg = (
            "no problem finding, as expected"
            if ok
            else ("the report has no device activity to judge" if report.no_device_activity else f"expected no problem finding, found {', '.join(problems)}")
        )
    else:
        first = problems[0] if problems else None
        ok = first in expected
        want = " or ".join(expected)
        msg = f"the largest finding is {first}, as expected" if ok else f"expected {want} first, found {', '.join(problems) or 'no problem finding'}"
    return CheckResult(flaw, ok, expected, found, basis, msg)
