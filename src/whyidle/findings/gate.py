"""The CI gate: the ways a diagnosis fails the limits a config sets (``fail_on_groups``, ``min_busy_fraction``)."""

from __future__ import annotations

from typing import Any

from whyidle.config import FindingSettings

__all__ = ["gate_failures"]


def gate_failures(diagnosis: Any, cfg: FindingSettings) -> list[str]:
    """The gate's failures, as sentences: a finding in a group of ``cfg.fail_on_groups``, a device
    busy fraction below ``cfg.min_busy_fraction`` (``whyidle diagnose --fail-on``, ``--min-busy``)."""
    failures = []
    for f in diagnosis.findings:
        if f.group in cfg.fail_on_groups:
            failures.append(f"finding in group {f.group}: {f.title}")
    busy = diagnosis.utilization.busy_fraction
    if cfg.min_busy_fraction is not None and busy < cfg.min_busy_fraction:
        failures.append(f"device busy {busy:.1%} is below --min-busy {cfg.min_busy_fraction:.1%}")
    return failures
