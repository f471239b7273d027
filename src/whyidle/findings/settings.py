"""What the rules read of the settings: :class:`RuleSettings`, built once per diagnosis from a Config.

A rule (``findings/registry.py``), its helpers (cause details, the busy-time, copy, grid, Nsight
and counter rules) and the predictions its finding gets read three of a Config's sections: the
attribution thresholds (``AttributionSettings``, what the analyses used), the finding thresholds
(``FindingSettings``) and the what-if assumptions (``PredictionSettings``). They get those three
and nothing else: not how the input was read, which steps were chosen, what the report carries
or the serving settings (``ReadSettings``, ``WindowSettings``, ``RenderSettings``,
``ServingSettings`` stay with the layers that read them). The CI gate's fields
(``fail_on_groups``, ``min_busy_fraction``) are in ``FindingSettings`` but read by
``findings/gate.py`` only, after the diagnosis.
"""

from __future__ import annotations

import msgspec

from whyidle.config import AttributionSettings, Config, FindingSettings, PredictionSettings

__all__ = ["RuleSettings"]


class RuleSettings(msgspec.Struct, frozen=True):
    """The sections of a Config that the rules and predictions read."""

    attribution: AttributionSettings = AttributionSettings()
    findings: FindingSettings = FindingSettings()
    predictions: PredictionSettings = PredictionSettings()

    @classmethod
    def of(cls, cfg: Config) -> RuleSettings:
        """The rules' part of ``cfg`` (its section objects, shared, not copied)."""
        return cls(attribution=cfg.attribution, findings=cfg.findings, predictions=cfg.predictions)
