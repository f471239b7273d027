"""How the in-memory reader reads: read-ahead in a thread, batches shared with a forked child."""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tlbuild import assert_same_timeline

from whyidle.errors import InputError, TraceFormatError
from whyidle.lab.synthetic import training_trace
from whyidle.parallel import can_fork
from whyidle.sources import _io, load, read
from whyidle.parallel import Helpers
from whyidle.sources import kineto as K

needs_fork = pytest.mark.skipif(not can_fork(), reason="a forked helper needs Linux and two usable cores")


# --- read-ahead ---------------------------------------------------------------------------


def test_prefetched_read_is_the_plain_read(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    ra = _io.ReadAhead()
    ra.start(p, max_bytes=1 << 30)
    assert ra.pending() == [p]
    assert _io.read_bytes(p, ra) == b'{"traceEvents": []}'
    assert not ra.pending()  # handed over once, then forgotten


def test_prefetch_error_is_raised_by_the_reader_in_its_words(tmp_path: Path) -> None:
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": [' + b"1," * 5000 + b"1]}")[:-40])
    with _io.ReadAhead() as ra:
        ra.start(p, max_bytes=1 << 30)
        with pytest.raises(TraceFormatError, match="truncated"):
            _io.read_bytes(p, ra)


def test_a_file_changed_after_prefetch_is_read_again(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b"[1]")
    with _io.ReadAhead() as ra:
        ra.start(p, max_bytes=1 << 30)
        ra._pending[p].thread.join()
        p.write_bytes(b"[1, 2]")
        os.utime(p, ns=(1, 1))
        assert _io.read_bytes(p, ra) == b"[1, 2]"


def test_prefetch_leaves_large_missing_and_non_json_files_to_their_readers(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"1," * 1000 + b"1]")
    ra = _io.ReadAhead()
    ra.start(big, max_bytes=100)  # the streaming reader's range: never read whole
    ra.start(tmp_path / "missing.json", max_bytes=1 << 30)
    ra.start(tmp_path, max_bytes=1 << 30)
    db = tmp_path / "run.sqlite"
    db.write_bytes(_io.SQLITE_MAGIC + bytes(100))  # Nsight export: sqlite3 reads it, not read_bytes
    ra.start(db, max_bytes=1 << 30)
    assert not ra.pending()
    with pytest.raises(InputError, match="no such file"):
        _io.read_bytes(tmp_path / "missing.json")


def test_load_forgets_a_read_ahead_its_reader_did_not_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import whyidle.sources as sources
    from whyidle.sources import kineto_stream

    p = tmp_path / "t.json"
    p.write_text(json.dumps(training_trace("none", steps=2)))
    ra = _io.ReadAhead()
    ra.start(p, max_bytes=1 << 30)
    assert ra.pending() == [p]
    # The streaming reader takes it (a lower threshold than the read-ahead's): it reads the file
    # in blocks, not through read_bytes, and the read-ahead must not stay behind.
    monkeypatch.setattr(sources, "_large", lambda path, min_bytes: True)
    monkeypatch.setattr(kineto_stream, "should_stream", lambda path, min_bytes=None, settings=None: True)
    assert len(read(p, read_ahead=ra)) > 0
    assert not ra.pending()


def _forked_loads(p: Path) -> list[Callable[[], Any]]:
    """load(p, jobs=2) as library calls make it (the plan made here, then a child forked) and as
    the command line does (the child makes the plan while this process imports)."""

    def with_imports() -> Any:
        with _io.ReadAhead(imports=("json",)) as ra:
            return read(p, helpers=Helpers(fork=True), read_ahead=ra)

    return [lambda: load(p, jobs=2), with_imports]


def _serial_error_is_the_forked_one(p: Path) -> str:
    """The serial reader's error on ``p``, checked to be the forked readers' too."""
    with pytest.raises(TraceFormatError) as serial:
        load(p, jobs=1)
    for load2 in _forked_loads(p):
        with pytest.raises(TraceFormatError) as forked:
            load2()
        assert str(forked.value) == str(serial.value)
    return str(serial.value)


@needs_fork
def test_forked_decode_gives_the_same_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "_BATCH_EVENTS", 64)  # many batches from a small trace
    monkeypatch.setattr(K, "_BATCH_BYTES", 4096)
    monkeypatch.setattr(K, "_FORK_MIN_BATCHES", 2)
    monkeypatch.setattr(K, "_FORK_MIN_BYTES", 0)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(training_trace("none", steps=6)))
    for forked in _forked_loads(p):
        assert_same_timeline(forked(), load(p, jobs=1))


@needs_fork
def test_forked_decode_reports_a_bad_event_as_the_serial_reader_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "_BATCH_EVENTS", 16)
    monkeypatch.setattr(K, "_BATCH_BYTES", 1024)
    monkeypatch.setattr(K, "_FORK_MIN_BATCHES", 2)
    monkeypatch.setattr(K, "_FORK_MIN_BYTES", 0)
    trace = training_trace("none", steps=6)
    trace["traceEvents"][-5]["ts"] = "soon"  # in the child's end of the list
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    assert "not a number" in _serial_error_is_the_forked_one(p)


@needs_fork
def test_forked_split_reports_broken_json_as_the_serial_reader_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child splits the text; when it cannot, this process splits it and raises the error."""
    monkeypatch.setattr(K, "_FORK_MIN_BYTES", 0)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(training_trace("none", steps=2))[:-40])  # truncated
    _serial_error_is_the_forked_one(p)


@needs_fork
def test_forked_decode_splits_here_when_slices_do_not_point_into_the_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "_BATCH_EVENTS", 64)
    monkeypatch.setattr(K, "_FORK_MIN_BATCHES", 2)
    monkeypatch.setattr(K, "_FORK_MIN_BYTES", 0)
    monkeypatch.setattr(K, "_cut_plan", lambda text: None)  # the plan that splits by decoding
    p = tmp_path / "t.json"
    p.write_text(json.dumps(training_trace("none", steps=6), indent=1))  # white space between events
    serial = load(p, jobs=1)
    for forked in _forked_loads(p):
        assert_same_timeline(forked(), serial)
    monkeypatch.setattr(K, "_batch_bounds", lambda text, events: [])
    for forked in _forked_loads(p):
        assert_same_timeline(forked(), serial)


@needs_fork
def test_load_imports_what_the_read_ahead_names_while_the_child_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "_FORK_MIN_BYTES", 0)
    name = "whyidle.serving.instances"  # a module nothing here has imported
    monkeypatch.delitem(sys.modules, name, raising=False)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(training_trace("none", steps=2)))
    with _io.ReadAhead(imports=(name,)) as ra:
        ra.start(p, 1 << 30)
        read(p, helpers=Helpers(fork=True), read_ahead=ra)
    assert name in sys.modules
