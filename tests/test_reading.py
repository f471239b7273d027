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
from whyidle.sources import _io, _twoway, load
from whyidle.sources import kineto as K

needs_fork = pytest.mark.skipif(not _twoway.can_fork(), reason="a forked helper needs Linux and two usable cores")


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
    monkeypatch.setattr(kineto_stream, "should_stream", lambda path, min_bytes=None: True)
    assert len(load(p, read_ahead=ra)) > 0
    assert not ra.pending()


# --- planned map with the plan made here: tasks taken from both ends of the list -------------


def both_ends(n: int, task: Callable[[int], Any]) -> list[Any]:
    return _twoway.planned_map(lambda: n, lambda m: m, lambda _, i: task(i))[1]


@needs_fork
@pytest.mark.parametrize("n", [2, 3, 17, 64])
def test_both_ends_is_the_list_in_order(n: int) -> None:
    here = os.getpid()

    def task(i: int) -> tuple[int, int]:
        time.sleep(0.005)  # long enough for the child to start and take its share
        return i * i, os.getpid()

    out = both_ends(n, task)
    assert [v for v, _ in out] == [i * i for i in range(n)]
    if n >= 17:  # both processes took part (the child's pid differs from ours)
        assert {pid for _, pid in out} - {here}


@needs_fork
def test_both_ends_raises_the_error_of_the_first_failing_task() -> None:
    def task(i: int) -> int:
        if i in (40, 45):
            raise ValueError(f"task {i}")
        return i

    with pytest.raises(ValueError, match="task 40"):
        both_ends(48, task)  # 40 and 45 lie in the child's end: redone here, in order


def test_both_ends_without_fork_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_twoway, "can_fork", lambda: False)
    here = os.getpid()
    assert both_ends(5, lambda i: (i, os.getpid())) == [(i, here) for i in range(5)]


# --- planned map: the child plans while this process does other work --------------------------


@needs_fork
def test_planned_map_takes_the_childs_plan_while_this_process_works() -> None:
    here = os.getpid()
    calls: list[int] = []

    def task(p: tuple[int, int], i: int) -> tuple[int, int]:
        time.sleep(0.005)  # long enough for both processes to take a share
        return p[0] + i, os.getpid()

    p, out = _twoway.planned_map(lambda: (100, os.getpid()), lambda p: 24, task, meanwhile=lambda: calls.append(os.getpid()))
    assert p[1] != here  # planned by the child
    assert calls == [here]  # meanwhile ran once, here
    assert [v for v, _ in out] == [100 + i for i in range(24)]
    assert {pid for _, pid in out} == {here, p[1]}


@needs_fork
def test_planned_map_plans_here_when_the_child_cannot_and_raises_its_error() -> None:
    here = os.getpid()

    def plan() -> int:
        if os.getpid() != here:
            raise RuntimeError("only in the child")
        return 5

    p, out = _twoway.planned_map(plan, lambda n: n, lambda n, i: i)
    assert p == 5 and out == list(range(5))  # planned here (the child's plan() raises); tasks by either

    def bad_plan() -> int:
        raise ValueError("no plan")

    with pytest.raises(ValueError, match="no plan"):
        _twoway.planned_map(bad_plan, lambda n: n, lambda n, i: i)


@needs_fork
def test_planned_map_leaves_a_small_plan_to_this_process() -> None:
    here = os.getpid()
    _, out = _twoway.planned_map(lambda: 6, lambda n: n, lambda n, i: (i, os.getpid()), min_size=8)
    assert out == [(i, here) for i in range(6)]


def test_planned_map_without_fork_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_twoway, "can_fork", lambda: False)
    here, calls = os.getpid(), []
    p, out = _twoway.planned_map(lambda: os.getpid(), lambda p: 3, lambda p, i: (i, p), meanwhile=lambda: calls.append(1))
    assert p == here and calls == [1] and out == [(i, here) for i in range(3)]


# --- relay: a forked child prepares, then answers a question ------------------------------------


@needs_fork
def test_relay_answers_in_the_child_while_this_process_works() -> None:
    here = os.getpid()
    relay = _twoway.Relay[tuple[int, int], int, tuple[int, int], None](lambda: (21, os.getpid()), lambda p, q: (p[0] * q, p[1]))
    with relay:
        time.sleep(0.01)  # this process's own work
        relay.ask(2)
        value, pid = relay.result()
    assert value == 42 and pid != here  # prepared and answered in the child


@needs_fork
def test_relay_redoes_a_failed_child_here_and_raises_its_error() -> None:
    parent = os.getpid()

    def answer(p: int, q: int) -> int:
        if os.getpid() != parent:
            os._exit(3)  # the child dies without an answer: computed here instead
        return p + q

    relay = _twoway.Relay[int, int, int, None](lambda: 1, answer)
    with relay:
        relay.ask(2)
        assert relay.result() == 3

    def fails(p: int, q: int) -> int:
        raise ValueError(f"bad question {q}")

    relay2 = _twoway.Relay[int, int, int, None](lambda: 1, fails)
    with relay2, pytest.raises(ValueError, match="bad question 5"):  # the child's failure, raised here
        relay2.ask(5)
        relay2.result()


@needs_fork
def test_relay_left_without_a_result_stops_its_child() -> None:
    relay = _twoway.Relay[int, int, int, None](lambda: time.sleep(30) or 1, lambda p, q: p)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt), relay:
        pid = relay.pid
        raise KeyboardInterrupt  # Ctrl-C while this process works
    assert time.perf_counter() - t0 < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped: no zombie left


def test_relay_without_fork_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_twoway, "can_fork", lambda: False)
    here = os.getpid()
    relay = _twoway.Relay[int, int, tuple[int, int], None](lambda: 1, lambda p, q: (p + q, os.getpid()))
    with relay:
        relay.ask(1)
        assert relay.result() == (2, here)
    relay = _twoway.Relay[int, int, tuple[int, int], None](lambda: 1, lambda p, q: (p + q, os.getpid()), fork=False)
    with relay:
        relay.ask(1)
        assert relay.result() == (2, here)


def _forked_loads(p: Path) -> list[Callable[[], Any]]:
    """load(p, jobs=2) as library calls make it (the plan made here, then a child forked) and as
    the command line does (the child makes the plan while this process imports)."""

    def with_imports() -> Any:
        with _io.ReadAhead(imports=("json",)) as ra:
            return load(p, jobs=2, read_ahead=ra)

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
        load(p, jobs=2, read_ahead=ra)
    assert name in sys.modules


@needs_fork
def test_relay_works_ahead_while_the_question_has_not_come() -> None:
    """``idle`` runs in the child until the question comes (then stops at a step's end); what it
    made is there for the answer, and the answer is the same."""
    made: list[int] = []

    def idle(p: list[int]) -> Iterator[None]:
        for i in range(1000):
            p.append(i)
            time.sleep(0.001)
            yield

    relay = _twoway.Relay[list[int], int, tuple[int, int], None](lambda: made, lambda p, q: (len(p), q), idle=idle)
    with relay:
        time.sleep(0.03)  # the child works ahead meanwhile
        relay.ask(7)
        n, q = relay.result()
    assert q == 7 and 5 <= n < 1000  # it worked ahead, and stopped when asked
    assert made == []  # in the child: this process's list is untouched


@needs_fork
def test_relay_sends_its_early_result_ahead_of_the_answer() -> None:
    here = os.getpid()
    relay = _twoway.Relay[int, int, tuple[int, int], int](lambda: 1, lambda p, q: (p + q, os.getpid()), early=os.getpid)
    with relay:
        assert relay.early_result() != here  # made by the child, first
        assert relay.early_result() == relay.early_result()  # read once
        relay.ask(2)
        assert relay.result()[0] == 3
    skipped = _twoway.Relay[int, int, int, int](lambda: 1, lambda p, q: p + q, early=lambda: 5)
    with skipped:
        skipped.ask(1)
        assert skipped.result() == 2  # the early result not asked for: skipped in the pipe

    def fails() -> int:
        raise ValueError("no early result")

    failing = _twoway.Relay[int, int, int, int](lambda: 1, lambda p, q: p, early=fails)
    with failing, pytest.raises(ValueError, match="no early result"):  # the child's failure, raised here
        failing.early_result()


def test_a_pipe_is_readable_with_data_or_when_its_writer_is_gone() -> None:
    r, w = os.pipe()
    try:
        assert not _twoway._readable(r)
        os.write(w, b"x")
        assert _twoway._readable(r)
        os.read(r, 1)
        os.close(w)
        w = -1
        assert _twoway._readable(r)  # EOF: readable, so a waiting side stops waiting
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
