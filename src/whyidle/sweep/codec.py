"""The codec of a sweep: its JSON (schema ``whyidle.sweep/1.0``) written and read back from one field table.

:data:`SWEEP` lists every field of ``whyidle sweep -o sweep.json`` in the order it is written,
with its meaning: :func:`encode` writes a :class:`~whyidle.sweep.search.Sweep`, :func:`decode`
reads one back (``whyidle.load_report("sweep.json")``; the reader is registered with the core by
:mod:`whyidle.sweep.register`), and ``whyidle schema`` prints the table. The sweep's version and
kind are one field, ``schema`` (``whyidle.sweep/<major>.<minor>``), as it was first written.

A trial's result is written with every field, defaults included, so the JSON's keys do not
depend on the values; its label, the recommended configuration's code and the speed-up are
derived from the rest, so written, not read back.
"""

from __future__ import annotations

from typing import Any

from whyidle import __version__
from whyidle.config import SweepConfig
from whyidle.errors import TraceFormatError
from whyidle.findings.fields import BOOL, STR, Field, Lst, Opt, FLOAT, Rec, Struct, Table
from whyidle.findings.saved import check_version, read_saved
from whyidle.sweep.guard import Guard
from whyidle.sweep.search import BatchOutcome, Entry, Space, Sweep
from whyidle.sweep.trial import TrialResult

__all__ = ["SWEEP_SCHEMA", "SWEEP", "ENTRY", "TRIAL_RESULT", "BEST", "encode", "decode", "speedup"]

SWEEP_SCHEMA = "whyidle.sweep/1.0"
_VERSION = SWEEP_SCHEMA.split("/", 1)[1]


def speedup(sw: Sweep) -> float | None:
    """The recommended configuration's samples/s over the first configuration's."""
    b, base = sw.best, sw.baseline
    if b is None or base is None or not b.samples_per_s or not base.samples_per_s:
        return None
    return b.samples_per_s / base.samples_per_s


_RESULT_DOC = (
    "what the trial measured (times in ns, memory in bytes, `*_share` 0..1); `trial` is its configuration, every lever named, "
    "`status` `ok`, `oom`, `error`, `killed` or `timeout`, `message` why it failed"
)

TRIAL_RESULT = Table(
    TrialResult,
    Field("result", Struct(TrialResult, whole=True), _RESULT_DOC, get=lambda r: r, flat=True),
    Field("label", STR, "the configuration in words: the batch size and every lever away from its default", get=lambda r: r.trial.label(), derived=True),
    build=lambda v: v["result"],
)

BEST = Table(
    TrialResult,
    *TRIAL_RESULT.fields,
    Field("code", STR, "the configuration as the lines a training script would use", get=lambda r: r.trial.as_code(), derived=True),
    build=lambda v: v["result"],
)

ENTRY = Table(
    Entry,
    Field("stage", STR, "`batch_size`, a lever's name, `baseline`, `guard baseline` or `checkpointing+batch`: why the trial ran"),
    Field("decision", STR, "what the search decided from it, in words"),
    Field("kept", BOOL, "the recommended configuration is this trial's"),
    Field("guard", Opt(Struct(Guard, whole=True)), "the quality guard's verdict on a lever that changes numerics; null when not checked"),
    Field("result", Rec(TRIAL_RESULT), flat=True),
)

SWEEP = Table(
    Sweep,
    Field("schema", STR, f'`"{SWEEP_SCHEMA}"`: the kind and its schema version', get=lambda s: SWEEP_SCHEMA, derived=True),
    Field("whyidle_version", STR, "the whyidle that wrote it", get=lambda s: __version__, derived=True),
    Field("space", Struct(Space, whole=True), "what was searched: the batch range and each lever's values (the first is the baseline), in `order`"),
    Field("rules", Struct(SweepConfig, whole=True), "the rules it ran under (`SweepConfig`: steady state, plateau, keep gain, quality guard)"),
    Field("batch", Struct(BatchOutcome, whole=True), "the batch-size search: the batch `chosen` (the knee), the `best`, whether it ended at a `plateau` or an `edge`"),
    Field("trials", Lst(Rec(ENTRY)), "every trial in the order it ran", attr="entries"),
    Field("baseline", Opt(Rec(TRIAL_RESULT)), "the first successful trial of the starting configuration (a trial's fields)"),
    Field("best", Opt(Rec(BEST)), "the recommended configuration's trial (a trial's fields and `code`); null when none ran"),
    Field("speedup_vs_baseline", Opt(FLOAT), "best samples/s over the baseline's", get=speedup, derived=True),
    Field("notes", Lst(STR), "sentences: why the sweep stopped early, what it could not try"),
)


def encode(sw: Sweep) -> dict[str, Any]:
    """The sweep's JSON as plain data."""
    return SWEEP.write(sw)


def decode(d: dict[str, Any], where: str = "<dict>") -> Sweep:
    """A sweep from its JSON's dict; raises TraceFormatError naming ``where`` and the field."""
    schema = str(d.get("schema", ""))
    check_version(schema.split("/", 1)[1] if "/" in schema else schema, _VERSION, where, "sweep")
    out: Sweep = read_saved(SWEEP, d, where, "sweep")
    named = [(f"trials[{i}]", e.result) for i, e in enumerate(out.entries)] + [("baseline", out.baseline), ("best", out.best)]
    for name, r in named:
        if r is not None and (r.trial.batch_size < 1 or r.trial.accumulation < 1):
            raise TraceFormatError(where, f"is a whyidle sweep whose field {name}.trial has a batch size or accumulation below 1")
    return out
