"""Saved reports as inputs (issue 24): a malformed report is refused on load, naming the field,
so that nothing malformed reaches a renderer; deep nesting is one clear error everywhere a report
is read. Each test fails without its fix."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import hostile
import whyidle
from whyidle.cli import main
from whyidle.errors import TraceFormatError
from whyidle.render.json import render_json


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    t = tmp_path_factory.mktemp("rep") / "t.json"
    t.write_text(json.dumps(hostile.base_trace(3)))
    doc: dict[str, Any] = json.loads(render_json(whyidle.diagnose(t)))
    assert doc["findings"] and doc.get("extra", {}).get("critical_path"), "the base trace must have a finding and a critical path"
    return doc


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


# Each of these loaded before, and then str() or save() raised inside a renderer.
_MALFORMED = [
    (("findings", 0, "title"), 5, "findings[0].title is malformed: expected str, found int 5"),
    (("findings", 0, "share_of_idle"), "nan", "findings[0]"),
    (("findings", 0, "fix", "steps"), [1, 2], "findings[0].fix.steps[0] is malformed: expected str, found int 1"),
    (("quality",), [None], "quality[0] is malformed: expected str, found NoneType None"),
    (("source", "path"), 7, "source.path is malformed: expected str"),
    (("extra", "critical_path", "segments", 0), "x", "extra.critical_path"),
    (("extra", "critical_path", "by_kind_ns"), {"kernel": "x"}, "extra.critical_path"),
    (("findings", 0, "evidence", "top_ops"), [{"name": 3, "overlap_ns": 1, "gaps": 1}], "findings[0].evidence.top_ops[0][0] is malformed: expected str"),
]


@pytest.mark.parametrize(("path", "value", "field"), _MALFORMED, ids=[".".join(map(str, p)) for p, _, _ in _MALFORMED])
def test_malformed_report_is_refused_on_load_naming_the_field(tmp_path: Path, report: dict[str, Any], path: tuple[Any, ...], value: Any, field: str) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_set(report, path, value)))
    with pytest.raises(TraceFormatError) as e:
        d = whyidle.load_report(p)
        str(d), d.save(tmp_path / "out.html"), d.save(tmp_path / "out.json")  # what crashed before
    assert str(e.value).startswith(f"{p}: is a whyidle report whose field ") and field in str(e.value), str(e.value)


@pytest.mark.parametrize(("path", "value", "field"), [
    (("window", "duration_ns"), "nan", "whose field window.duration_ns is malformed"),
    (("findings", 0, "evidence", "idle_ns"), [1], "whose field findings[0].evidence.idle_ns is malformed"),
    (("steps",), "x", "whose field steps is malformed"),
])  # fmt: skip
def test_read_errors_name_the_field(tmp_path: Path, report: dict[str, Any], path: tuple[Any, ...], value: Any, field: str) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_set(report, path, value)))
    with pytest.raises(TraceFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        whyidle.load_report(p)
    d = copy.deepcopy(report)
    del d["window"]
    p.write_text(json.dumps(d))
    with pytest.raises(TraceFormatError, match="without the field window"):
        whyidle.load_report(p)


def test_a_valid_report_still_loads_and_renders(tmp_path: Path, report: dict[str, Any]) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(report))
    d = whyidle.load_report(p)
    assert json.loads(str(d.render("json"))) == report and "why is this GPU idle" in str(d)


def test_deeply_nested_report_for_scaling_is_one_line(tmp_path: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps(report)[:-1] + ', "extra2": ' + "[" * 100_000 + "]" * 100_000 + "}")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report))
    limit = sys.getrecursionlimit()
    assert main(["scaling", "--before", str(deep), "--after", str(good)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{deep}: has JSON nested too deeply" in err, err
    assert sys.getrecursionlimit() == limit


def test_malformed_report_for_scaling_is_refused(tmp_path: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_set(report, ("steps", 0, "end_ns"), "x")))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report))
    assert main(["scaling", "--before", str(bad), "--after", str(good)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "whose field steps[0].end_ns is malformed" in err, err


def test_fallback_colour_of_an_unknown_cause_is_a_colour() -> None:
    from whyidle.render._contrast import ink

    assert ink("#888") == ink("#888888")


# --- Parquet timelines (whyidle convert output read back) ---------------------------------------


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyarrow")
    from whyidle.sources import load
    from whyidle.sources.parquet import write_parquet

    d = tmp_path_factory.mktemp("pq")
    (d / "t.json").write_text(json.dumps(hostile.base_trace(3)))
    write_parquet(load(d / "t.json"), d / "t.parquet")
    return d / "t.parquet"


def _tampered(good: Path, out: Path, column: str | None = None, value: Any = None, side: tuple[str, Any] | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(good)
    if column is not None:
        values = table.column(column).to_numpy().copy()
        values[0] = value
        table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    if side is not None:
        meta = json.loads(table.schema.metadata[b"whyidle.timeline"])
        meta[side[0]] = side[1]
        table = table.replace_schema_metadata({b"whyidle.timeline": json.dumps(meta).encode()})
    pq.write_table(table, out)
    return out


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"column": "name", "value": 10**6}, "row 0: column name is 1000000, outside its table"),
        ({"column": "lane", "value": -1}, "row 0: column lane is -1, outside its table"),
        ({"column": "kind", "value": 99}, "row 0: column kind is 99, which is no event kind"),
        ({"column": "end_ns", "value": 2**63 - 1}, "row 0: end_ns 9223372036854775807 is beyond 2**62 ns"),
        ({"column": "start_ns", "value": -(2**63)}, "row 0: start_ns -9223372036854775808 is beyond 2**62 ns"),
        ({"side": ("strings", [1, 2])}, "has whyidle metadata that is not a timeline's: Expected `str`, got `int` - at `$.strings[0]`"),
        ({"side": ("lanes", [["gpu_stream", "x", "1", "7", ""]])}, "at `$.lanes[0][1]`"),
        ({"side": ("meta", {"source_format": 5})}, "Expected `str`, got `int` - at `$.meta.source_format`"),
        ({"side": ("meta", {"source_format": "kineto", "quality": "x"})}, "at `$.meta.quality`"),
    ],
)
def test_tampered_parquet_is_refused_naming_what(tmp_path: Path, parquet: Path, change: dict[str, Any], says: str) -> None:
    p = _tampered(parquet, tmp_path / "bad.parquet", **change)
    with pytest.raises(TraceFormatError) as e:
        whyidle.diagnose(p)
    assert str(e.value).startswith(str(p)) and says in str(e.value), str(e.value)


def test_parquet_metadata_that_is_not_json(tmp_path: Path, parquet: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    pq.write_table(table.replace_schema_metadata({b"whyidle.timeline": b"{not json"}), tmp_path / "bad.parquet")
    with pytest.raises(TraceFormatError, match="has unreadable whyidle metadata"):
        whyidle.diagnose(tmp_path / "bad.parquet")
