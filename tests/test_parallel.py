"""The speed machinery's seam (whyidle.parallel): the same results with or without a forked helper.

``Helpers()`` runs everything here, in order; ``Helpers(fork=True)`` lets a forked child take
tasks from the back of a list (``map``) or do an errand beside this process (``beside``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from whyidle.parallel import Helpers, can_fork, forked

needs_fork = pytest.mark.skipif(not can_fork(), reason="a forked helper needs Linux and two usable cores")
FORKED = Helpers(fork=True)

P = TypeVar("P")
Q = TypeVar("Q")
U = TypeVar("U")
E = TypeVar("E")


@dataclass(frozen=True)
class Job(Generic[P, Q, U, E]):
    """An errand made of functions (the pipeline's is made of data; a test's may hold closures)."""

    prepare_fn: Callable[[], P]
    answer_fn: Callable[[P, Q], U]
    early_fn: Callable[[], E] = lambda: None  # type: ignore[assignment,return-value]
    idle_fn: Callable[[P], Iterable[object]] = lambda p: ()

    def early(self) -> E:
        return self.early_fn()

    def prepare(self) -> P:
        return self.prepare_fn()

    def idle(self, prepared: P) -> Iterable[object]:
        return self.idle_fn(prepared)

    def answer(self, prepared: P, question: Q) -> U:
        return self.answer_fn(prepared, question)


# --- map with the plan made here: tasks taken from both ends of the list ----------------------


def both_ends(n: int, task: Callable[[int], Any], helpers: Helpers = FORKED) -> list[Any]:
    return helpers.map(lambda: n, lambda m: m, lambda _, i: task(i))[1]


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


@pytest.mark.parametrize("helpers", [Helpers(), Helpers(fork=True)], ids=["sequential", "fork-refused"])
def test_map_without_a_child_runs_here_in_order(helpers: Helpers, monkeypatch: pytest.MonkeyPatch) -> None:
    import whyidle.parallel as par

    monkeypatch.setattr(par, "can_fork", lambda: False)  # a machine with one core, or not Linux
    here, calls = os.getpid(), []
    assert both_ends(5, lambda i: (i, os.getpid()), helpers) == [(i, here) for i in range(5)]
    p, out = helpers.map(lambda: os.getpid(), lambda p: 3, lambda p, i: (i, p), meanwhile=lambda: calls.append(1))
    assert p == here and calls == [1] and out == [(i, here) for i in range(3)]


# --- map: the child plans while this process does other work ------------------------------------


@needs_fork
def test_map_takes_the_childs_plan_while_this_process_works() -> None:
    here = os.getpid()
    calls: list[int] = []

    def task(p: tuple[int, int], i: int) -> tuple[int, int]:
        time.sleep(0.005)  # long enough for both processes to take a share
        return p[0] + i, os.getpid()

    p, out = FORKED.map(lambda: (100, os.getpid()), lambda p: 24, task, meanwhile=lambda: calls.append(os.getpid()))
    assert p[1] != here  # planned by the child
    assert calls == [here]  # meanwhile ran once, here
    assert [v for v, _ in out] == [100 + i for i in range(24)]
    assert {pid for _, pid in out} == {here, p[1]}


@needs_fork
def test_map_plans_here_when_the_child_cannot_and_raises_its_error() -> None:
    here = os.getpid()

    def plan() -> int:
        if os.getpid() != here:
            raise RuntimeError("only in the child")
        return 5

    p, out = FORKED.map(plan, lambda n: n, lambda n, i: i)
    assert p == 5 and out == list(range(5))  # planned here (the child's plan() raises); tasks by either

    def bad_plan() -> int:
        raise ValueError("no plan")

    with pytest.raises(ValueError, match="no plan"):
        FORKED.map(bad_plan, lambda n: n, lambda n, i: i)


@needs_fork
def test_map_leaves_a_small_plan_to_this_process() -> None:
    here = os.getpid()
    _, out = FORKED.map(lambda: 6, lambda n: n, lambda n, i: (i, os.getpid()), min_size=8)
    assert out == [(i, here) for i in range(6)]


# --- beside: an errand done by a forked child, or here -------------------------------------------


@needs_fork
def test_an_errand_is_answered_in_the_child_while_this_process_works() -> None:
    here = os.getpid()
    with FORKED.beside(Job(lambda: (21, os.getpid()), lambda p, q: (p[0] * q, p[1]))) as job:
        assert isinstance(job, forked.Relay)
        time.sleep(0.01)  # this process's own work
        job.ask(2)
        value, pid = job.result()
    assert value == 42 and pid != here  # prepared and answered in the child


@needs_fork
def test_a_failed_child_is_redone_here_and_its_error_raised_here() -> None:
    parent = os.getpid()

    def answer(p: int, q: int) -> int:
        if os.getpid() != parent:
            os._exit(3)  # the child dies without an answer: computed here instead
        return p + q

    with FORKED.beside(Job(lambda: 1, answer)) as job:
        job.ask(2)
        assert job.result() == 3

    def fails(p: int, q: int) -> int:
        raise ValueError(f"bad question {q}")

    with FORKED.beside(Job(lambda: 1, fails)) as job2, pytest.raises(ValueError, match="bad question 5"):  # the child's failure, raised here
        job2.ask(5)
        job2.result()


@needs_fork
def test_an_errand_left_without_a_result_stops_its_child() -> None:
    job = FORKED.beside(Job(lambda: time.sleep(30) or 1, lambda p, q: p))
    assert isinstance(job, forked.Relay)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt), job:
        pid = job.pid
        raise KeyboardInterrupt  # Ctrl-C while this process works
    assert time.perf_counter() - t0 < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped: no zombie left


@pytest.mark.parametrize("helpers", [Helpers(), Helpers(fork=True)], ids=["sequential", "fork-refused"])
def test_an_errand_without_a_child_runs_here_each_part_when_asked(helpers: Helpers, monkeypatch: pytest.MonkeyPatch) -> None:
    import whyidle.parallel as par

    monkeypatch.setattr(par, "can_fork", lambda: False)
    here, order = os.getpid(), []
    job = Job(lambda: order.append("prepare") or 1, lambda p, q: (p + q, os.getpid()), early_fn=lambda: order.append("early") or 5)
    with helpers.beside(job) as b:
        assert order == []  # nothing runs before it is asked for
        assert b.early() == 5 and b.early() == 5 and order == ["early"]  # made once
        b.ask(1)
        assert b.result() == (2, here)
    assert order == ["early", "prepare"]
    with pytest.raises(RuntimeError, match="before ask"):
        Helpers().beside(job).result()


@needs_fork
def test_the_child_works_ahead_while_the_question_has_not_come() -> None:
    """``idle`` runs in the child until the question comes (then stops at a step's end); what it
    made is there for the answer, and the answer is the same."""
    made: list[int] = []

    def idle(p: list[int]) -> Iterator[None]:
        for i in range(1000):
            p.append(i)
            time.sleep(0.001)
            yield

    with FORKED.beside(Job(lambda: made, lambda p, q: (len(p), q), idle_fn=idle)) as job:
        time.sleep(0.03)  # the child works ahead meanwhile
        job.ask(7)
        n, q = job.result()
    assert q == 7 and 5 <= n < 1000  # it worked ahead, and stopped when asked
    assert made == []  # in the child: this process's list is untouched


@needs_fork
def test_the_child_sends_its_early_result_ahead_of_the_answer() -> None:
    here = os.getpid()
    with FORKED.beside(Job(lambda: 1, lambda p, q: (p + q, os.getpid()), early_fn=os.getpid)) as job:
        assert job.early() != here  # made by the child, first
        assert job.early() == job.early()  # read once
        job.ask(2)
        assert job.result()[0] == 3
    with FORKED.beside(Job(lambda: 1, lambda p, q: p + q, early_fn=lambda: 5)) as skipped:
        skipped.ask(1)
        assert skipped.result() == 2  # the early result not asked for: skipped in the pipe

    def fails() -> int:
        raise ValueError("no early result")

    with FORKED.beside(Job(lambda: 1, lambda p, q: p, early_fn=fails)) as failing, pytest.raises(ValueError, match="no early result"):
        failing.early()  # the child's failure, raised here


def test_a_pipe_is_readable_with_data_or_when_its_writer_is_gone() -> None:
    r, w = os.pipe()
    try:
        assert not forked._readable(r)
        os.write(w, b"x")
        assert forked._readable(r)
        os.read(r, 1)
        os.close(w)
        w = -1
        assert forked._readable(r)  # EOF: readable, so a waiting side stops waiting
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_small_pages_for_the_call_and_the_setting_put_back(tmp_path: Path) -> None:
    import json

    import whyidle
    from whyidle.lab.synthetic import training_trace
    from whyidle.parallel.pages import _switch, small_pages

    switch = _switch()
    if switch is None:
        pytest.skip("this numpy has no huge-page switch (numpy < 1.20)")
    was = switch(True)
    try:
        for before in (True, False):
            switch(before)
            with small_pages():
                assert switch(False) is False  # off inside (reading it sets it: set it back as read)
            assert switch(before) is before, "put back as found"
            with pytest.raises(RuntimeError), small_pages():
                raise RuntimeError("boom")
            assert switch(before) is before, "put back after an error too"
        trace = tmp_path / "t.json"
        trace.write_text(json.dumps(training_trace("sync", steps=3)))
        switch(True)
        whyidle.diagnose(trace)
        assert switch(True) is True, "the library's diagnose leaves numpy's setting as it found it"
    finally:
        switch(was)
