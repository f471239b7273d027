"""whyidle convert: the Parquet timeline round-trips exactly and diagnoses the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tlbuild import assert_same_timeline

from whyidle.cli import main
from whyidle.lab.synthetic import training_trace, write_trace
from whyidle.pipeline import diagnose
from whyidle.sources import load
from whyidle.timeline.model import Timeline

pa = pytest.importorskip("pyarrow", reason="the 'parquet' extra (pyarrow) is not installed")
import pyarrow.parquet as pq  # noqa: E402

TRACES = Path(__file__).parents[1].parent / "shared" / "traces"
REAL = [TRACES / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz", TRACES / "hta" / "trace_filter__sampled_rank-1.json.gz"]


def _same(a: Timeline, b: Timeline) -> None:
    b.meta.path = a.meta.path
    assert_same_timeline(a, b)
    assert a.meta == b.meta


def _report(path: Path) -> dict[str, object]:
    d = diagnose(path).to_dict()
    d["source"]["path"] = ""  # type: ignore[index]
    return d


@pytest.mark.parametrize("trace", REAL, ids=[p.name for p in REAL])
def test_real_trace_round_trip_and_same_diagnosis(trace: Path, tmp_path: Path) -> None:
    if not trace.exists():
        pytest.skip(f"real trace not found: {trace}")
    out = tmp_path / "t.parquet"
    assert main(["convert", str(trace), "-o", str(out)]) == 0
    _same(load(trace), load(out))
    assert _report(trace) == _report(out)


def test_columns_are_documented_and_queryable(tmp_path: Path) -> None:
    trace = write_trace(training_trace("starvation", steps=3), tmp_path / "s.json.gz")
    out = tmp_path / "s.parquet"
    assert main(["convert", str(trace), "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert table.column_names == [*Timeline.COLUMNS, "kind_name", "name_text", "lane_label"]
    tl = load(trace)
    kernels = table.filter(pa.compute.equal(table["kind_name"], "kernel"))
    assert kernels.num_rows == int((tl.kind == 0).sum())
    assert set(kernels["name_text"].to_pylist()) == {tl.strings[i] for i in tl.name[tl.kind == 0]}
    assert kernels["lane_label"].to_pylist()[0] == "GPU 0 stream 7"
    meta = json.loads(table.schema.metadata[b"whyidle.timeline"])
    assert meta["format_version"] == 1 and meta["meta"]["source_format"] == "kineto"
    # a folder of Parquet timelines is a run directory like one of traces
    assert _report(out) == _report(trace)


def test_convert_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(training_trace("none", steps=2), tmp_path / "s.json")
    assert main(["convert", str(trace), "-o", str(tmp_path / "x.csv")]) == 2
    assert "ending in .parquet" in capsys.readouterr().err
    assert main(["convert", str(trace), "-o", str(tmp_path / "nope" / "x.parquet")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    assert main(["diagnose", str(other)]) == 2
    assert "not a whyidle timeline" in capsys.readouterr().err
    assert not list(tmp_path.glob(".*.tmp"))


def test_stream_always_equals_in_memory(tmp_path: Path) -> None:
    trace = write_trace(training_trace("sync", steps=2), tmp_path / "s.json.gz")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["convert", str(trace), "-o", str(a), "--stream", "always"]) == 0
    assert main(["convert", str(trace), "-o", str(b), "--stream", "never"]) == 0
    _same(load(a), load(b))
