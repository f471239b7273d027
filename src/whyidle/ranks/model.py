"""The result of a multi-rank job, one diagnosis per rank beside the cross-rank analysis, and its
codec: its JSON report (``"kind": "multi_rank"``) written and read back from one field table.

Each rank's report is the single-trace report (:mod:`whyidle.findings.codec`); the cross-rank
analysis is :data:`CROSS_RANK`; the run's findings are derived from the rest, so written, not read
back. The loaded run renders to the same JSON as the original (``tests/test_saved_ranks.py``).
Its renderers and the reader of its saved JSON are registered with the core by
:mod:`whyidle.ranks.register`, which the modules that make one import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from whyidle import __version__
from whyidle.diagnosis import Renderable, as_diagnosis
from whyidle.errors import TraceFormatError
from whyidle.findings.checked import Trail
from whyidle.findings.codec import SCHEMA_VERSION, encode as encode_one
from whyidle.findings.fields import ANY, FLOAT, INT, STR, Dict, Field, Opt, Pairs, Rec, Table, Tup, Value
from whyidle.findings.model import DiagnosisData, Finding
from whyidle.findings.saved import check_schema, report_from_dict
from whyidle.ranks.analysis import CollectiveMatch, CrossRank, RankComm, StepImbalance, Straggler, StragglerCause

if TYPE_CHECKING:
    from whyidle.ranks.run_findings import RunFinding

__all__ = ["RankEntry", "MultiRankReport", "MULTI_RANK", "CROSS_RANK", "encode", "decode"]


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
    cross_rank: CrossRank
    notes: tuple[str, ...] = ()
    # why the files may not be one job (world sizes, collectives, capture periods disagree):
    # ranks/jobcheck.py; the reports lead with them and then compare no rank with another
    not_one_job: tuple[str, ...] = ()

    @property
    def run_findings(self) -> tuple[RunFinding, ...]:
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
        return encode(self, columns)


# -- the codec -----------------------------------------------------------------------------------


class SavedRun(msgspec.Struct, frozen=True):
    """What a run's report is written from: the run and the form of its ranks' reports."""

    run: MultiRankReport
    columns: bool = False


class SavedRank(msgspec.Struct, frozen=True):
    entry: RankEntry
    columns: bool = False


CAUSE = Table(
    StragglerCause,
    Field("cause", STR, attr="key"),
    Field("excess_ns_per_step", FLOAT),
    Field("facts", Pairs(ANY), default=()),
)

STRAGGLER = Table(
    Straggler,
    Field("rank", INT),
    Field("steps", Tup(INT)),
    Field("collectives_last", INT),
    Field("collectives_total", INT),
    Field("lateness_ns", INT),
    Field("max_lateness_ns", INT),
    Field("cause", Opt(Rec(CAUSE)), "that rank's own excess idle cause in those steps"),
    Field("other_causes", Tup(Opt(Rec(CAUSE)))),
    build=lambda v: Straggler(**{**v, "other_causes": tuple(c for c in v["other_causes"] if c is not None)}),
)

COMM = Table(
    RankComm,
    Field("rank", INT),
    Field("collective_ns", INT),
    Field("waiting_ns", INT, "for the slowest rank"),
    Field("transfer_ns", INT),
    Field("exposed_ns", INT),
    Field("hidden_ns", INT),
    Field("overlap_fraction", Opt(FLOAT)),
)

STEP = Table(
    StepImbalance,
    Field("step", INT),
    Field("step_ns", Tup(INT)),
    Field("compute_ns", Tup(INT)),
    Field("slowest_rank", INT),
    Field("step_spread", FLOAT),
    Field("compute_spread", FLOAT),
)

IMBALANCE = Table(
    dict,
    Field("mean_step_spread", Opt(FLOAT)),
    Field("mean_compute_spread", Opt(FLOAT)),
    Field("steps", Tup(Rec(STEP)), "per step"),
    build=lambda v: v,
)

COLLECTIVE = Table(
    CollectiveMatch,
    Field("step", INT),
    Field("name", STR),
    Field("occurrence", INT),
    Field("dur_ns", Tup(INT), "per rank"),
    Field("transfer_ns", INT),
    Field("last_rank", INT),
    Field("lateness_ns", INT),
)

CROSS_RANK = Table(
    CrossRank,
    Field("ranks", Tup(INT), "ranks compared (with device activity), sorted"),
    Field("basis", STR, "what the comparison rests on, in words"),
    Field("collective_ns", INT, "time in matched collectives, summed over ranks", derived=True),
    Field("waiting_ns", INT, "of which waiting for the slowest rank", derived=True),
    Field("transfer_ns", INT, "of which transfer", derived=True),
    Field("unmatched_collectives", INT, "collectives seen on some ranks only"),
    Field("stragglers", Tup(Rec(STRAGGLER)), "per rank that arrived last at collectives"),
    Field("communication", Tup(Rec(COMM)), "per rank", attr="comm"),
    Field("imbalance", Rec(IMBALANCE), get=lambda cr: cr),
    Field("collectives", Tup(Rec(COLLECTIVE)), "each matched collective"),
    Field("notes", Tup(STR), "sentences: what the comparison could not do"),
    build=lambda v: CrossRank(**{k: x for k, x in v.items() if k != "imbalance"}, **v["imbalance"]),
)

RUN_FINDING = Table(
    dict,
    Field("key", STR, "`straggler`, `exposed_communication`, `top_cause`"),
    Field("title", STR),
    Field("time_ns", INT),
    Field("what", STR),
    Field("fix", STR),
    Field("ranks", Tup(INT)),
)


class _Report(Value):
    """A rank's single-trace report, in the run's form (read back by the run, which names the rank)."""

    words = "(the single-rank report above, or null)"


RANK = Table(
    RankEntry,
    Field("rank", INT),
    Field("path", STR),
    Field("error", Opt(STR), "null, or why the file could not be read", get=lambda s: s.entry.error or None, default=None),
    Field("report", _Report(), get=lambda s: None if s.entry.report is None else encode_one(s.entry.report, s.columns), default=None),
    build=lambda v: v,  # completed by the run: a rank's report errors name the rank
    path="entry",
)

MULTI_RANK = Table(
    MultiRankReport,
    Field("schema_version", STR, get=lambda s: SCHEMA_VERSION, derived=True),
    Field("tool", Dict(STR), get=lambda s: {"name": "whyidle", "version": __version__}, derived=True),
    Field("kind", STR, '`"multi_rank"`', get=lambda s: "multi_rank", derived=True),
    Field("run_dir", STR, "the folder", default=""),
    Field("rank_basis", STR, "where the rank numbers came from (`distributedInfo`, file names, file order)", default=""),
    Field("world_size", Opt(INT), "the world size", default=None),
    Field("ranks", Tup(Rec(RANK)), "one entry per rank", get=lambda s: tuple(SavedRank(e, s.columns) for e in s.run.ranks)),
    Field("cross_rank", Rec(CROSS_RANK)),
    Field(
        "not_one_job", Tup(STR),
        "why the files may not be one job (`ranks/jobcheck.py`): world sizes that disagree, collectives on some ranks only or mostly unmatched, "
        "capture windows further apart than the longest of them; empty when they are one job",
        default=(),
    ),  # fmt: skip
    Field(
        "run_findings", Tup(Rec(RUN_FINDING)),
        "the run's findings, each with its fix (`ranks/run_findings.py`; derived from the rest, so not read back); stragglers and exposed "
        "communication are left out when `not_one_job` is not empty",
        derived=True,
    ),  # fmt: skip
    Field("notes", Tup(STR), "missing ranks, ranks without GPU activity, unreadable files, the world size used when they disagree", default=()),
    path="run",
)


def encode(run: MultiRankReport, columns: bool = False) -> dict[str, Any]:
    """A run's JSON report as plain data (``columns``: each rank's report in its full form)."""
    return MULTI_RANK.write(SavedRun(run, columns))


def decode(d: dict[str, Any], where: str = "<dict>") -> MultiRankReport:
    """A multi-rank run from its JSON report's dict (``"kind": "multi_rank"``); raises
    TraceFormatError naming ``where`` (and the rank, or the field) when one is missing or malformed."""
    check_schema(d, where)
    trail = Trail()
    try:
        v = MULTI_RANK.values(trail.wrap(d))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        at = f" at {trail.path}" if trail.path else ""
        raise TraceFormatError(where, f"is a whyidle multi-rank report with a missing or malformed field ({type(exc).__name__}: {exc}){at}") from None
    ranks = tuple(RankEntry(e["rank"], str(e["path"]), _rank_report(e, where), str(e["error"] or "")) for e in v["ranks"])
    return MultiRankReport(**{**v, "ranks": ranks})


def _rank_report(e: dict[str, Any], where: str) -> Any:
    report = e["report"]
    return None if report is None else as_diagnosis(report_from_dict(dict(report), f"{where} (rank {e['rank']})"))
