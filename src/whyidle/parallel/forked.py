"""The forked half of :mod:`whyidle.parallel`: a child process that takes tasks from the back of
a list while this process takes them from the front (:func:`planned_map`), and a child that does
an errand beside this process (:class:`Relay`). Reached only through
:class:`whyidle.parallel.Helpers` with ``fork=True`` on a machine where :func:`can_fork`.

The in-memory Kineto reader decodes a trace in independent batches. On a machine with a second
core, a forked child takes batches from the back while this process takes them from the front,
until the two meet; the child then sends its results back through a pipe. Dynamic meeting (not a
fixed half each) keeps both busy when batches differ in cost (host ops with Python stacks cost
more than kernels).

Claims go through two counters in a shared anonymous mmap: ``front`` (this process has taken
every task below it) and ``back`` (the child has taken every task from it on). Each side writes
its own counter before doing the task and stops when it sees the other's claim. A stale read can
only make both sides do the same task (the result here wins), never skip one; a task the child
did not report (it failed or was killed) is done here. So results are always complete and in
order, and an error in a task is raised here, from this process's own run of it.

:func:`planned_map` does this for the tasks of a plan. Made here, the child inherits it; made by
the child (forked before the list is known, the Kineto reader's split), it runs while this process
does other work (the command line imports the analyses), and is sent here; both then take tasks
as above. A child that cannot plan sends none; the
plan is then made here, so its error is raised here too.

:class:`Relay` forks a child for an :class:`~whyidle.parallel.errand.Errand`: it makes the early
result and prepares at once, answers the question this process asks later, and sends the answer
back (the diagnosis's kernel statistics and what-if graph while the other analyses run, then the
replays of the levers the findings name).

A child only computes from what it inherited, pickles and writes to its pipe, and never returns
into the caller's code.
"""

from __future__ import annotations

import mmap
import os
import pickle
import select
import signal
import struct
import sys
from collections.abc import Callable
from typing import IO, Any, TypeVar

from whyidle.parallel.errand import Beside, Errand
from whyidle.parallel.pages import no_huge_pages

__all__ = ["can_fork", "planned_map", "Relay", "quiet_worker"]

T = TypeVar("T")
P = TypeVar("P")
Q = TypeVar("Q")
U = TypeVar("U")
E = TypeVar("E")
_COUNTERS = struct.Struct("=qq")  # front, back
_LENGTH = struct.Struct("=q")  # a pickled plan's length before it in the pipe (-1: no plan)


def _readable(fd: int) -> bool:
    """Whether pipe ``fd`` has data or its other end closed, without waiting (poll: unlike select,
    any descriptor number, in a process with many files open)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


def can_fork() -> bool:
    """Whether a forked helper can run beside this process: Linux, two usable cores."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):  # pragma: no cover - Linux has sched_getaffinity
        return False


def quiet_worker() -> None:
    """Process-pool initializer: Ctrl-C reaches every process of the terminal's group; workers
    leave it to the parent (which stops the pool and says "interrupted" once) instead of each
    printing a KeyboardInterrupt traceback. And numpy's arrays in small pages (see
    :mod:`whyidle.parallel.pages`): a worker makes and drops arrays batch after batch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    no_huge_pages()


def planned_map(
    plan: Callable[[], P], size: Callable[[P], int], task: Callable[[P, int], T], meanwhile: Callable[[], object] | None = None, min_size: int = 2
) -> tuple[P, list[T]]:
    """``(p, [task(p, i) for i in range(size(p))])`` for ``p = plan()``, the tasks taken from the
    front here and from the back by a forked child (none by the child when the plan has fewer
    than ``min_size`` tasks).

    With ``meanwhile``, the child is forked first and makes the plan (which must pickle) while
    this process runs ``meanwhile()``. Without it there is nothing to overlap: the plan is made
    here and the child inherits it."""
    shared = mmap.mmap(-1, _COUNTERS.size)
    if meanwhile is None:
        p = plan()
        n = size(p)
        if n < min_size:
            shared.close()
            return p, [task(p, i) for i in range(n)]
        _COUNTERS.pack_into(shared, 0, 0, n)
        planned = True
        pid, r = _fork_child(lambda w: _child(shared, w, lambda j: task(p, j)))
    else:
        _COUNTERS.pack_into(shared, 0, 0, 0)  # the child sets back to the plan's size
        pid, r = _fork_child(lambda w: _planning_child(shared, w, plan, size, task, min_size))
    results: dict[int, T] = {}
    try:
        if meanwhile is not None:
            meanwhile()
        with os.fdopen(r, "rb") as pipe:
            r = -1
            if meanwhile is not None:
                p, planned = _read_plan(pipe, plan)
                if not planned:
                    os.kill(pid, signal.SIGKILL)  # it made no plan: everything is done here
                n = size(p)
            while planned:
                i, back = _COUNTERS.unpack_from(shared, 0)
                if i >= back:
                    break
                struct.pack_into("=q", shared, 0, i + 1)
                results[i] = task(p, i)
            data = pipe.read() if planned else b""
    except BaseException:
        os.kill(pid, signal.SIGKILL)  # its work is not wanted any more
        raise
    finally:
        if r >= 0:
            os.close(r)
        _reap(pid)
        shared.close()
    try:
        theirs: dict[int, T] = pickle.loads(data) if data else {}
    except Exception:  # a child that died mid-write: its tasks are done here
        theirs = {}
    for j, res in theirs.items():
        results.setdefault(j, res)
    return p, [results[i] if i in results else task(p, i) for i in range(n)]


def _read_plan(pipe: IO[bytes], plan: Callable[[], P]) -> tuple[P, bool]:
    """The child's plan and True, or the plan made here and False (the child made none)."""
    got = _read_message(pipe.read)
    return (got[0], True) if got is not None else (plan(), False)


def _child(shared: mmap.mmap, w: int, task: Callable[[int], object]) -> None:
    def claimed() -> dict[int, object]:
        done: dict[int, object] = {}
        while True:
            front, j = _COUNTERS.unpack_from(shared, 0)
            j -= 1
            if j < front:
                return done
            struct.pack_into("=q", shared, 8, j)
            done[j] = task(j)

    _send_and_exit(w, claimed)


def _planning_child(
    shared: mmap.mmap, w: int, plan: Callable[[], P], size: Callable[[P], int], task: Callable[[P, int], object], min_size: int
) -> None:
    try:  # never back into the parent's code: every way out is os._exit
        p, message = _message_or_exit(w, plan)
        n = size(p)
        struct.pack_into("=q", shared, 8, n if n >= min_size else 0)  # before the plan: the parent reads back after it
        _write_all(w, message)
        _child(shared, w, lambda j: task(p, j))
    finally:
        os._exit(1)


def _message_or_exit(w: int, make: Callable[[], T]) -> tuple[T, bytes]:
    """``make()``, and it pickled behind its length, for pipe ``w``. On any error the child says
    so (length -1) and exits: the parent makes it again, and raises its error there."""
    try:
        made = make()
        body = pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        os.write(w, _LENGTH.pack(-1))
        os._exit(1)
    return made, _LENGTH.pack(len(body)) + body


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send_and_exit(w: int, work: Callable[[], object]) -> None:
    """The child's end: ``work()``'s result pickled into pipe ``w``, then exit without the
    interpreter's teardown. On any error it sends nothing: the parent does the work again and
    raises the error itself."""
    code = 0
    try:
        data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        data, code = b"", 1
    try:
        with os.fdopen(w, "wb") as pipe:
            pipe.write(data)
    finally:
        os._exit(code)


def _fork_child(w_then: Callable[[int], None]) -> tuple[int, int]:
    """Fork a child that runs ``w_then(write_end)`` and never returns; (pid, read end) here."""
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # None when the stream was closed at start
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    pid = os.fork()
    if pid == 0:  # the child: never returns, whatever ``w_then`` does
        try:
            os.close(r)
            w_then(w)
        finally:
            os._exit(1)
    os.close(w)
    return pid, r


class Relay(Beside[Q, U, E]):
    """An errand done by a forked child beside this process: the child makes ``errand.early()``
    and sends it ahead, prepares, runs ``errand.idle(prepared)`` one step at a time until this
    process :meth:`ask` s its question (it stops at the first step boundary after the question
    arrives), answers it and sends the answer back; :meth:`early` and :meth:`result` wait for
    them.

    When the child fails, :meth:`early` and :meth:`result` compute here (as :class:`Beside`
    does), so an error in the errand is raised here. The child only reads what both processes
    hold (its copy is copy-on-write) and sends back pickles. Leaving the ``with`` block without
    a result stops the child."""

    def __init__(self, errand: Errand[P, Q, U, E]) -> None:
        super().__init__(errand)
        q_r, self.q_w = os.pipe()

        def child(w: int) -> None:
            os.close(self.q_w)
            _write_all(w, _message_or_exit(w, self.errand.early)[1])
            _send_and_exit(w, lambda: self._answer_in_child(q_r))

        self.pid, self.r = _fork_child(child)
        os.close(q_r)

    def early(self) -> E:
        """The early result, from the child when it made it, else made here."""
        if self.early_read is None:
            got = _read_message(lambda n: _read_exactly(self.r, n)) if self.pid > 0 else None
            self.early_read = (self.errand.early() if got is None else got[0],)
        return self.early_read[0]

    def _answer_in_child(self, q_r: int) -> U:
        prepared = self.errand.prepare()
        for _ in self.errand.idle(prepared):
            if _readable(q_r):  # the question (or EOF) is there
                break
        with os.fdopen(q_r, "rb") as pipe:
            question: Q = pickle.loads(pipe.read())  # EOF (no question): an error, nothing sent
        return self.errand.answer(prepared, question)

    def ask(self, question: Q) -> None:
        self.question = (question,)
        if self.pid > 0 and self.q_w >= 0:
            q_w, self.q_w = self.q_w, -1  # the file object below closes it
            try:
                with os.fdopen(q_w, "wb") as pipe:
                    pipe.write(pickle.dumps(question, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:  # the child is gone: result() answers here
                pass

    def result(self) -> U:
        if self.question is None:
            raise RuntimeError("Relay.result() before ask()")
        data = b""
        if self.pid > 0:
            if self.early_read is None:
                _read_message(lambda n: _read_exactly(self.r, n))  # not wanted, but ahead of the answer
            r, self.r = self.r, -1  # the file object below closes it, even when interrupted
            with os.fdopen(r, "rb") as pipe:
                data = pipe.read()
            _reap(self.pid)
            self.pid = -1
        try:
            if data:
                out: U = pickle.loads(data)
                return out
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError):  # a child that died mid-write
            pass
        return super().result()

    def __enter__(self) -> Relay[Q, U, E]:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid > 0:  # left without a result: its work is not wanted any more
            os.kill(self.pid, signal.SIGKILL)
            for fd in (self.q_w, self.r):
                if fd >= 0:
                    os.close(fd)
            self.q_w = self.r = -1
            _reap(self.pid)
            self.pid = -1


def _read_message(read: Callable[[int], bytes]) -> tuple[Any] | None:
    """One length-prefixed pickle (as a 1-tuple) through ``read(n)`` (n bytes, fewer only at the
    end), or None when the child sent none (it failed: length -1, or the pipe closed)."""
    head = read(_LENGTH.size)
    length = _LENGTH.unpack(head)[0] if len(head) == _LENGTH.size else -1
    if length < 0:
        return None
    body = read(length)
    try:
        return (pickle.loads(body),) if len(body) == length else None
    except Exception:  # a child that died mid-write
        return None


def _read_exactly(fd: int, n: int) -> bytes:
    parts: list[bytes] = []
    while n > 0:
        part = os.read(fd, min(n, 1 << 20))
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # pragma: no cover - already reaped
        pass
