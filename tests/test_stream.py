"""The out-of-core Kineto reader gives exactly the in-memory reader's Timeline."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tlbuild import assert_same_timeline

import whyidle.sources.kineto_stream as ks
from whyidle.errors import TraceFormatError
from whyidle.lab.synthetic import training_trace
from whyidle.sources import load
from whyidle.sources._io import read_bytes
from whyidle.sources.kineto import parse_kineto
from whyidle.sources.kineto_stream import parse_kineto_stream, should_stream

TRACES = Path(__file__).parents[1].parent / "shared" / "traces"
REAL = sorted(p for p in TRACES.rglob("*.json*") if p.is_file()) if TRACES.exists() else []


@pytest.fixture(params=[4096, 1 << 20], ids=["4KiB-batches", "1MiB-batches"])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(ks, "_BATCH", request.param)
    monkeypatch.setattr(ks, "_BLOCK", min(request.param, ks._BLOCK))
    return int(request.param)


@pytest.mark.skipif(not REAL, reason=f"real traces not found in {TRACES}")
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_every_real_trace_same_timeline(path: Path, batch: int) -> None:
    if batch < 1 << 20 and path.stat().st_size > 1 << 20:
        pytest.skip("4 KiB batches on the large traces add time and no new case; the small ones cover them")
    try:
        expected = parse_kineto(read_bytes(path), path=str(path))
    except TraceFormatError:
        with pytest.raises(TraceFormatError):
            parse_kineto_stream(path)
        return
    assert_same_timeline(expected, parse_kineto_stream(path))


@pytest.mark.parametrize("schema", ["new", "2021"])
def test_synthetic_compact_json_and_plain_file(tmp_path: Path, batch: int, schema: str) -> None:
    doc = training_trace("sync", steps=3, schema=schema)
    doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000  # written after the events, as Kineto does
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, separators=(",", ":")))
    assert_same_timeline(parse_kineto(p.read_bytes(), path=str(p)), parse_kineto_stream(p))


def test_bare_list_and_multi_member_gzip(tmp_path: Path) -> None:
    events = training_trace("none", steps=2)["traceEvents"]
    text = json.dumps(events).encode()
    p = tmp_path / "t.json.gz"
    half = len(text) // 2
    p.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    assert_same_timeline(parse_kineto(text, path=str(p)), parse_kineto_stream(p))


def test_unpadded_nanosecond_style_decided_by_the_last_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Integer times in the first MiB, 2024 exporter's unpadded fractions only at the end: the
    # first pass guesses "decimal", the last MiB says otherwise, and a second pass reads it right.
    monkeypatch.setattr(ks, "_BLOCK", 1 << 16)
    monkeypatch.setattr(ks, "_BATCH", 1 << 16)
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1} for i in range(30000)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1, "ts": f"@{i}", "dur": 3} for i in range(3)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": ev})
    text = text.replace('"@0"', "50000.5").replace('"@1"', "50001.10").replace('"@2"', "50002.25")
    p = tmp_path / "t.json"
    p.write_text(text)
    mem = parse_kineto(text.encode(), path=str(p))
    assert any("without zero-padded" in q for q in mem.meta.quality)
    assert_same_timeline(mem, parse_kineto_stream(p))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": 1', "truncated"),
        ('{"traceEvents": {}}', "not a list"),
        ('{"schemaVersion": 1}', "without a 'traceEvents' list"),
        ('{"traceEvents": []}', "empty 'traceEvents'"),
        ("hello", "not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=message):
        parse_kineto_stream(p)


def test_load_streams_above_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(training_trace("none", steps=2)).encode()))
    assert not should_stream(p)
    assert should_stream(p, min_bytes=1)
    called: list[Path] = []
    real = ks.load_kineto_stream
    import whyidle.sources as sources

    monkeypatch.setattr(sources, "_large", lambda path, min_bytes: True)
    monkeypatch.setattr(ks, "should_stream", lambda path, min_bytes=None, settings=None: True)
    monkeypatch.setattr(ks, "load_kineto_stream", lambda path, jobs=None, settings=None: called.append(path) or real(path, jobs, settings))
    tl = load(p)
    assert called == [p] and len(tl) > 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_false_cuts_inside_events_and_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    # '}, {' inside names, call stacks and lists of objects (even ones keyed like events) in args:
    # every batch boundary lands on false cuts first; the result must still be exact.
    monkeypatch.setattr(ks, "_BATCH", 2048)
    monkeypatch.setattr(ks, "_BLOCK", 2048)
    ev = [
        {
            "ph": "X", "cat": "cpu_op", "name": f"op}}, {{{i % 7}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1,
            "args": {"Input Dims": [[4 + i % 3, 3]], "x": [{"name": 1}, {"ph": "}, {"}], "Call stack": f"a}}, {{\"ph\": b{i % 5}"},
        }
        for i in range(1500)
    ]
    p = tmp_path / "adv.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [{"id": 0}], "x": [[1], [2]]}))
    assert_same_timeline(parse_kineto(p.read_bytes(), path=str(p)), parse_kineto_stream(p, jobs=jobs))


@pytest.mark.parametrize("window", [64, 4096])
def test_plain_file_cut_ahead_of_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    # A plain file decoded by workers is cut from a small window past each batch, never read
    # whole by the main process. Windows without a candidate (64 bytes, inside long events), a
    # run of blank space longer than a window, false candidates inside args, and a tail of
    # fields after the events longer than a batch: each falls back or is joined, and the
    # Timeline is exactly the in-memory reader's.
    monkeypatch.setattr(ks, "_BATCH", 4096)
    monkeypatch.setattr(ks, "_BLOCK", 4096)
    monkeypatch.setattr(ks, "_GZ_READ", 4096)
    monkeypatch.setattr(ks, "_WINDOW", window)
    cut_at: list[int] = []
    real = ks._Text.jump
    monkeypatch.setattr(ks._Text, "jump", lambda self, offset, size: cut_at.append(offset) or real(self, offset, size))
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1, "args": {"x": [{"name": 1}, {"ph": "a"}] * (i % 4)}}
        for i in range(3000)
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": ev})
    k = len(text) // 3
    k = text.index("}, {", k) + 3
    text = text[:k] + " " * 10_000 + text[k:]  # blank space between two events
    tail = json.dumps([{"id": i, "name": f"dev{i}", "ph": "X"} for i in range(400)])
    text = text[:-1] + f', "deviceProperties": {tail}}}'
    p = tmp_path / "t.json"
    p.write_text(text)
    assert_same_timeline(parse_kineto(p.read_bytes(), path=str(p)), parse_kineto_stream(p, jobs=2))
    assert cut_at, "no batch was cut ahead"


@pytest.mark.skipif(not REAL, reason=f"real traces not found in {TRACES}")
def test_parallel_chunks_same_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ks, "_BATCH", 1 << 20)
    path = TRACES / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"
    assert_same_timeline(parse_kineto(read_bytes(path), path=str(path)), parse_kineto_stream(path, jobs=2))


@pytest.mark.parametrize("gz", [False, True])
def test_progress_reports_bytes_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool) -> None:
    monkeypatch.setattr(ks, "_BLOCK", 1 << 14)
    monkeypatch.setattr(ks, "_GZ_READ", 1 << 12)
    text = json.dumps(training_trace("none", steps=3)).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text) if gz else text)
    seen: list[tuple[int, int]] = []
    parse_kineto_stream(p, progress=lambda done, total: seen.append((done, total)))
    size = p.stat().st_size
    assert len(seen) >= 2
    assert all(t == size for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1][0] == size


def test_should_stream_only_json(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("timestamp, utilization.gpu [%]\n" * 100)
    assert not should_stream(p, min_bytes=1)
