"""The codecs of the saved reports (findings/codec.py, ranks/model.py): one field table writes and
reads each result type, so what is saved loads back and saves again byte for byte.

* reports saved by earlier code (schema 1.0: the goldens, summary form, and tests/data/saved,
  full form, written by the code before the codec) load and write back identically;
* property: a diagnosis with arbitrary findings, gaps, steps, lanes and gap columns (and a run
  with an arbitrary cross-rank analysis) saves -> loads -> saves to the same text;
* a field table is the only place a field is declared: a field added to it is written, read
  back and documented with no other edit.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whyidle
from whyidle.diagnosis import as_diagnosis
from whyidle.analyses import causes as C
from whyidle.analyses.utilization import StepFigures
from whyidle.findings import codec
from whyidle.findings.codec import SCHEMA_VERSION
from whyidle.findings.fields import INT, STR, Field, Table, Tup
from whyidle.findings.model import DiagnosisData, Evidence, Finding, Fix, GapColumns, GapRecord, Prediction, Skipped
from whyidle.findings.saved import report_from_dict
from whyidle.ranks.analysis import CollectiveMatch, CrossRank, RankComm, StepImbalance, Straggler, StragglerCause
from whyidle.ranks.model import MultiRankReport, decode as decode_run, encode as encode_run
from whyidle.render.json import dumps, render_json
from whyidle.timeline.model import Lane, LaneKind

HERE = Path(__file__).parent
SAVED_1_0 = sorted((HERE / "golden").glob("*.json")) + sorted((HERE / "data" / "saved").glob("v1_0_*.json"))


def _written_again(p: Path) -> str:
    text = p.read_text(encoding="utf-8")
    full = '"detail": "full"' in text
    loaded = whyidle.load_report(p)
    return dumps(loaded.to_dict(columns=full))


@pytest.mark.parametrize("path", SAVED_1_0, ids=[p.name for p in SAVED_1_0])
def test_a_report_saved_by_schema_1_0_loads_and_saves_identically(path: Path) -> None:
    # the same fields, written as the current schema version (1.1 added a field 1.0 reports lack)
    assert _written_again(path) == path.read_text(encoding="utf-8").replace('"schema_version": "1.0"', f'"schema_version": "{SCHEMA_VERSION}"')


@cache
def _base() -> DiagnosisData:
    d = whyidle.load_report(HERE / "data" / "saved" / "v1_0_full.json")
    assert isinstance(d, whyidle.Diagnosis)
    return d


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_NS = st.integers(-(2**40), 2**40)
_POS = st.integers(0, 2**40)
_FLOAT = st.floats(-1e12, 1e12, allow_nan=False) | _NS
_OPT_FLOAT = st.none() | _FLOAT
_FACT = st.one_of(_TEXT, _NS, st.floats(-1e9, 1e9, allow_nan=False), st.booleans(), st.none())


def _tup(s: st.SearchStrategy[Any], n: int = 3) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(s, max_size=n).map(tuple)


_PREDICTION = st.builds(
    Prediction, _TEXT, _TEXT, _FLOAT, _FLOAT, _FLOAT, _FLOAT,
    batch_factor=_FLOAT, samples_per_s_before=_OPT_FLOAT, samples_per_s_after=_OPT_FLOAT, note=_TEXT,
)  # fmt: skip
_EVIDENCE = st.builds(
    Evidence, _POS, _POS, _OPT_FLOAT, _OPT_FLOAT,
    _tup(st.tuples(_TEXT, _POS, _POS)), _tup(st.tuples(_TEXT, _POS)), _tup(st.tuples(_NS, _NS, _POS)),
    facts=st.dictionaries(_TEXT, _FACT, max_size=3).map(lambda d: tuple(d.items())),
)  # fmt: skip
_FINDING = st.builds(
    Finding, _TEXT, _TEXT, _TEXT, _TEXT, _POS, _FLOAT, _FLOAT, _EVIDENCE, st.builds(Fix, _TEXT, _tup(_TEXT), _TEXT, _TEXT, _TEXT, _TEXT),
    variant=_TEXT, affected_busy_ns=_POS, prediction=st.none() | _PREDICTION, compute_wait_ns=_POS,
)  # fmt: skip
_GAP = st.builds(
    GapRecord, _NS, _NS, _POS, _TEXT, _TEXT, st.dictionaries(_TEXT, _POS, max_size=3).map(lambda d: tuple(d.items())),
    _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, st.booleans(),
)  # fmt: skip
_STEP = st.builds(StepFigures, _POS, _NS, _NS, _POS, _POS, _POS, _POS, _POS, st.lists(_POS, min_size=len(C.CAUSES), max_size=len(C.CAUSES)).map(tuple))
_LANES = _tup(st.builds(Lane, st.sampled_from(list(LaneKind)), st.integers(-1, 8), _TEXT, _TEXT, _TEXT), 4)


@st.composite
def _gap_columns(draw: st.DrawFn, n_lanes: int) -> GapColumns:
    n = draw(st.integers(0, 5))
    strings = tuple(draw(st.lists(_TEXT, max_size=4)))

    def col(lo: int, hi: int) -> np.ndarray:
        return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=np.int64).reshape(n)

    def names() -> np.ndarray:
        return col(-1, len(strings) - 1)

    causes = np.array(draw(st.lists(st.lists(st.integers(0, 10**9), min_size=len(C.CAUSES), max_size=len(C.CAUSES)), min_size=n, max_size=n)), dtype=np.int64)
    return GapColumns(
        start_ns=col(-(2**40), 2**40), end_ns=col(-(2**40), 2**40), device=col(0, 8), causes_ns=causes.reshape(n, len(C.CAUSES)),
        drained_by_sync=col(0, 1).astype(np.bool_), host_end_ns=col(-(2**40), 2**40), thread=col(-1, n_lanes - 1), next_work=names(),
        op=names(), op_start_ns=col(0, 2**40), op_end_ns=col(0, 2**40), before=names(), python_line=names(), runtime_call=names(), strings=strings,
    )  # fmt: skip


@st.composite
def _diagnoses(draw: st.DrawFn) -> DiagnosisData:
    base = _base()
    lanes = draw(_LANES)
    util = msgspec.structs.replace(base.utilization, steps=draw(_tup(_STEP)), batch_size=draw(st.none() | st.integers(1, 4096)))
    return msgspec.structs.replace(
        base,
        utilization=util,
        findings=draw(_tup(_FINDING, 2)),
        skipped=draw(_tup(st.builds(Skipped, _TEXT, _TEXT))),
        gaps=draw(_tup(_GAP)),
        quality=draw(_tup(_TEXT)),
        cold_start=draw(st.booleans()),
        lanes=lanes,
        gap_columns=draw(st.none() | _gap_columns(len(lanes))),
        idle_by_cause_ns={c.key: draw(st.sampled_from((0, 0, 7, 10**9))) for c in C.CAUSES},
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_diagnoses(), st.booleans())
def test_a_diagnosis_saves_loads_and_saves_identically(d: DiagnosisData, columns: bool) -> None:
    text = render_json(d, columns=columns)
    again = report_from_dict(json.loads(text), "<saved>")
    assert render_json(again, columns=columns) == text
    assert again.findings == tuple(msgspec.structs.replace(f) for f in again.findings)  # built as the model's types


_CAUSE = st.builds(StragglerCause, _TEXT, _FLOAT, facts=st.dictionaries(_TEXT, _NS, max_size=2).map(lambda d: tuple(d.items())))
_CROSS = st.builds(
    CrossRank,
    ranks=_tup(_POS),
    basis=_TEXT,
    collectives=_tup(st.builds(CollectiveMatch, _NS, _TEXT, _POS, _tup(_POS), _POS, _POS, _POS)),
    unmatched_collectives=_POS,
    stragglers=_tup(st.builds(Straggler, _POS, _tup(_NS), _POS, _POS, _POS, _POS, st.none() | _CAUSE, _tup(_CAUSE))),
    comm=_tup(st.builds(RankComm, _POS, _POS, _POS, _POS, _POS, _POS, _OPT_FLOAT)),
    steps=_tup(st.builds(StepImbalance, _NS, _tup(_POS), _tup(_POS), _POS, _FLOAT, _FLOAT)),
    mean_step_spread=_OPT_FLOAT,
    mean_compute_spread=_OPT_FLOAT,
    notes=_tup(_TEXT),
)


@settings(max_examples=40, deadline=None)
@given(_CROSS, _tup(_TEXT), st.none() | st.integers(1, 64))
def test_a_run_saves_loads_and_saves_identically(cross: CrossRank, notes: tuple[str, ...], world: int | None) -> None:
    run = MultiRankReport(run_dir="run", rank_basis="file name", world_size=world, ranks=(), cross_rank=cross, notes=notes)
    d = encode_run(run)
    again = decode_run(json.loads(dumps(d)), "<saved>")
    assert again.cross_rank == cross and encode_run(again) == d


def test_a_field_is_declared_once() -> None:
    """A field added to a table is written, read back and documented, with nothing else to edit."""

    class Box(msgspec.Struct, frozen=True):
        name: str
        sizes: tuple[int, ...] = ()

    old = Table(Box, Field("name", STR, "what it is"))
    new = Table(Box, Field("name", STR, "what it is"), Field("sizes", Tup(INT), "its sizes", since="1.1", default=()))
    b = Box("x", (1, 2))
    assert new.write(b) == {"name": "x", "sizes": [1, 2]} and new.read(new.write(b)) == b
    assert new.read(old.write(b)) == Box("x")  # a report saved before the field loads with its default
    assert new.rows()[1] == ("`sizes`", "its sizes (since 1.1)")


def test_a_required_field_missing_is_named(tmp_path: Path) -> None:
    doc = json.loads((HERE / "data" / "saved" / "v1_0_full.json").read_text(encoding="utf-8"))
    del doc["findings"][0]["evidence"]["gap_count"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(whyidle.TraceFormatError, match=r"without the field findings\[0\]\.evidence\.gap_count"):
        whyidle.load_report(p)


def test_the_codec_is_what_the_writer_and_reader_use() -> None:
    d = _base()
    assert as_diagnosis(d).to_dict(columns=True) == codec.encode(d, columns=True)
    assert render_json(codec.decode(codec.encode(d, columns=True)), columns=True) == render_json(d, columns=True)


def test_a_malformed_run_field_is_named_by_its_path(tmp_path: Path) -> None:
    doc = json.loads((HERE / "golden" / "multirank_dlrm.json").read_text(encoding="utf-8"))
    doc["cross_rank"]["stragglers"][0]["steps"] = "twelve"
    p = tmp_path / "run.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(whyidle.TraceFormatError, match=r"run\.json: .* at cross_rank\.stragglers\[0\]\.steps$"):
        whyidle.load_report(p)
