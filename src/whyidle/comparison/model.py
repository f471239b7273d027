"""The result of ``whyidle compare`` and its codec: its JSON (``"kind": "comparison"``) written and
read back from one field table.

:data:`COMPARISON` lists every field of ``whyidle compare --json`` in the order it is written,
with its meaning: :func:`encode` writes a :class:`Comparison` (``Comparison.to_dict``),
:func:`decode` reads one back (``whyidle.load_report("diff.json")``; the reader is registered
with the core by :mod:`whyidle.comparison.register`), and ``whyidle schema`` prints the table.
Deltas and relative changes are derived from ``before`` and ``after``, so written, not read back.
The comparison itself is computed by :mod:`whyidle.comparison.analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whyidle import __version__
from whyidle.findings.fields import FLOAT, STR, Dict, Field, Opt, Rec, Table, Tup, Value
from whyidle.findings.saved import check_version, read_saved

__all__ = ["Change", "NameChange", "PredictionCheck", "Comparison", "COMPARISON_SCHEMA", "COMPARISON", "CHANGE", "encode", "decode"]


@dataclass(frozen=True)
class Change:
    before: float | None
    after: float | None

    @property
    def delta(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        d = self.delta
        if d is None or not self.before:
            return None
        return d / self.before


@dataclass(frozen=True)
class NameChange:
    name: str
    before_ns: float
    after_ns: float

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns


@dataclass(frozen=True)
class PredictionCheck:
    """The before report's prediction for the fix that was applied, against the after run."""

    cause: str  # the cause whose idle fell most: the fix taken to be applied
    lever: str
    predicted: float  # mean step time, ns
    measured: float
    low: float
    high: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured if self.measured else float("nan")


@dataclass(frozen=True)
class Comparison:
    before_path: str
    after_path: str
    basis: str  # "per step" or "per second of window"
    step_time_ns: Change
    steps_per_s: Change
    samples_per_s: Change
    busy_fraction: Change
    idle_ns: Change  # per basis
    idle_by_group_ns: dict[str, Change]
    idle_by_cause_ns: dict[str, Change]
    kernels: tuple[NameChange, ...]  # largest |delta| first, per basis; () without traces
    ops: tuple[NameChange, ...]
    names_note: str  # why kernels/ops are empty, or ''
    throughput_basis: str
    regression: float | None  # relative throughput drop; negative = faster
    verdict: str
    notes: tuple[str, ...]
    prediction: PredictionCheck | None = None
    # Useful work inside busy time (analyses/work.py), where both runs' traces carry shapes: MFU,
    # and kernel time split into near-roofline / compute-bound-slow / memory-bound / unmodelled,
    # as shares of kernel time.
    mfu: Change = Change(None, None)
    kernel_split: dict[str, Change] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The comparison's JSON as plain data (:data:`COMPARISON`)."""
        return encode(self)


# -- the codec -----------------------------------------------------------------------------------

# The comparison's own schema: fields are only added within a major version.
COMPARISON_SCHEMA = "1.0"

CHANGE = Table(
    Change,
    Field("before", Opt(FLOAT), "null: the run cannot tell"),
    Field("after", Opt(FLOAT)),
    Field("delta", Opt(FLOAT), "after - before", derived=True),
    Field("relative", Opt(FLOAT), "delta / before", derived=True),
)

NAME_CHANGE = Table(
    NameChange,
    Field("name", STR),
    Field("before_ns", FLOAT),
    Field("after_ns", FLOAT),
    Field("delta_ns", FLOAT, derived=True),
)


class _Range(Value):
    """``[low, high]``: the prediction's range of step times."""

    words = "`[low, high]`"

    def enc(self, v: Any) -> Any:
        return list(v)

    def dec(self, v: Any) -> Any:
        if not isinstance(v, list) or len(v) != 2:
            raise ValueError(f"expected [low, high], found {str(v)[:40]}")
        return FLOAT.dec(v[0]), FLOAT.dec(v[1])


PREDICTION = Table(
    PredictionCheck,
    Field("applied", STR, "the cause whose idle fell most: the fix taken to be applied", attr="cause"),
    Field("lever", STR, "the what-if lever the before run's prediction replayed"),
    Field("predicted_step_ns", FLOAT, "mean step time predicted from the before run", attr="predicted"),
    Field("range", _Range(), get=lambda p: (p.low, p.high)),
    Field("measured_step_ns", FLOAT, "the after run's mean step time", attr="measured"),
    Field("error", FLOAT, "(predicted - measured) / measured; null when measured is 0", derived=True),
    build=lambda v: PredictionCheck(**{k: x for k, x in v.items() if k != "range"}, low=v["range"][0], high=v["range"][1]),
)

_CHANGE = "`{before, after, delta, relative}`"

COMPARISON = Table(
    Comparison,
    Field("schema_version", STR, f'`"{COMPARISON_SCHEMA}"`', get=lambda c: COMPARISON_SCHEMA, derived=True),
    Field("tool", Dict(STR), "`{name, version}`", get=lambda c: {"name": "whyidle", "version": __version__}, derived=True),
    Field("kind", STR, '`"comparison"`', get=lambda c: "comparison", derived=True),
    Field("before", STR, "the before run's input (trace or report)", attr="before_path"),
    Field("after", STR, "the after run's input", attr="after_path"),
    Field("basis", STR, "`per step` (both runs have steps) or `per second of window`: what the idle figures are divided by"),
    Field("verdict", STR, "the cause whose idle fell (or grew) most, then the largest remaining wait, in words"),
    Field("step_time_ns", Rec(CHANGE), "mean step time"),
    Field("steps_per_s", Rec(CHANGE)),
    Field("samples_per_s", Rec(CHANGE), "when both runs know their batch size"),
    Field("busy_fraction", Rec(CHANGE), "device basis"),
    Field("idle_ns", Rec(CHANGE), "device idle, per basis"),
    Field("idle_by_group_ns", Dict(Rec(CHANGE)), "group -> " + _CHANGE + ", groups with idle time in either run"),
    Field("idle_by_cause_ns", Dict(Rec(CHANGE)), '`"group/cause"` -> ' + _CHANGE + ", causes with idle time in either run"),
    Field("kernels", Tup(Rec(NAME_CHANGE)), "kernels and copies whose time changed most, per basis, largest change first (empty without per-name times)"),
    Field("ops", Tup(Rec(NAME_CHANGE)), "CPU ops whose time changed most, the same way"),
    Field("names_note", STR, "why `kernels` and `ops` are empty, or ''"),
    Field("throughput_basis", STR, "`samples/s`, `steps/s`, `device busy fraction` or '': what `regression` compares"),
    Field("regression", Opt(FLOAT), "relative throughput drop (0.05: 5% slower; negative: faster); null when neither run has throughput"),
    Field("notes", Tup(STR), "sentences: different devices, batch sizes, no step markers"),
    Field("prediction", Opt(Rec(PREDICTION)), "the before run's prediction for the fix applied, against the after run; null when none applies"),
    Field("mfu", Rec(CHANGE), "model FLOPs utilisation, where both runs' traces carry shapes", default=Change(None, None)),
    Field(
        "kernel_time_split", Dict(Rec(CHANGE)),
        "where both runs have a work model: `near_roofline`, `compute_slow`, `memory_bound`, `unmodelled` -> share of kernel time, " + _CHANGE,
        attr="kernel_split", default={},
    ),  # fmt: skip
)


def encode(c: Comparison) -> dict[str, Any]:
    """The comparison's JSON as plain data."""
    return COMPARISON.write(c)


def decode(d: dict[str, Any], where: str = "<dict>") -> Comparison:
    """A comparison from its JSON's dict; raises TraceFormatError naming ``where`` and the field."""
    check_version(str(d.get("schema_version", "")), COMPARISON_SCHEMA, where, "comparison")
    out: Comparison = read_saved(COMPARISON, d, where, "comparison")
    return out
