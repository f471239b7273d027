"""The result of a multi-rank job: one diagnosis per rank beside the cross-rank analysis.

Its renderers and the reader of its saved JSON are registered with the core by
:mod:`whyidle.ranks.register`, which the modules that make one import.
"""

from __future__ import annotations

from typing import Any

import msgspec

from whyidle.diagnosis import Renderable
from whyidle.findings.model import DiagnosisData, Finding

__all__ = ["RankEntry", "MultiRankReport"]


class RankEntry(msgspec.Struct, frozen=True):
    """One rank of a multi-rank run: its own single-rank report, or why it has none."""

    rank: int
    path: str
    report: DiagnosisData | None
    error: str = ""  # why the file could not be read (the run goes on without it)


class MultiRankReport(msgspec.Struct, Renderable, frozen=True):
    """A distributed job: one :class:`~whyidle.Diagnosis` per rank plus the cross-rank analysis
    (:mod:`whyidle.ranks.analysis`). It renders and saves like a diagnosis: the ranks package
    registers its renderers (terminal, json, html; html and perfetto as one file per rank)."""

    run_dir: str
    rank_basis: str  # "distributedInfo", "file name", "file order" or a mix, said in words
    world_size: int | None
    ranks: tuple[RankEntry, ...]
    cross_rank: Any  # whyidle.ranks.analysis.CrossRank
    notes: tuple[str, ...] = ()
    # why the files may not be one job (world sizes, collectives, capture periods disagree):
    # ranks/jobcheck.py; the reports lead with them and then compare no rank with another
    not_one_job: tuple[str, ...] = ()

    @property
    def run_findings(self) -> tuple[Any, ...]:
        """The run's findings, each with its fix: the straggler's cause, the exposed
        communication, the top cause across ranks (:mod:`whyidle.ranks.run_findings`)."""
        from whyidle.ranks.run_findings import run_findings

        return run_findings(self)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for e in self.ranks if e.report is not None for f in e.report.findings)

    def to_dict(self, columns: bool = False) -> dict[str, Any]:
        """The JSON report as plain data (docs/json-schema.md, "Multi-rank"); ``columns``: each
        rank's report in its full form."""
        from whyidle.ranks.codec import encode

        return encode(self, columns)
