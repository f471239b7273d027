"""Tasks shared between this process and one forked child, taken from both ends of the list.

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

:class:`Relay` forks a child for different work: it prepares at once, answers a question this
process asks later, and sends the answer back (the diagnosis builds its what-if graph while the
other analyses run, then replays the levers the findings name).

Forking is the caller's choice (``jobs=2``; the command line makes it, library calls default to one
process): a process whose other threads hold native locks (a training job's CUDA or OpenMP
threads) should not fork. The child only decodes, pickles and writes to the pipe. Used only on
Linux with at least two usable cores; elsewhere the tasks run here, one after another.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["can_fork", "two_ended_map", "Relay", "quiet_worker"]

T = TypeVar("T")
P = TypeVar("P")
Q = TypeVar("Q")
U = TypeVar("U")
_COUNTERS = struct.Struct("=qq")  # front, back


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
    printing a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def two_ended_map(n: int, task: Callable[[int], T]) -> list[T]:
    """``[task(i) for i in range(n)]``, with a forked child taking tasks from the back."""
    if n < 2 or not can_fork():
        return [task(i) for i in range(n)]
    shared = mmap.mmap(-1, _COUNTERS.size)
    _COUNTERS.pack_into(shared, 0, 0, n)
    pid, r = _fork_child(lambda w: _child(shared, w, task))
    results: dict[int, T] = {}
    try:
        while True:
            i, back = _COUNTERS.unpack_from(shared, 0)
            if i >= back:
                break
            struct.pack_into("=q", shared, 0, i + 1)
            results[i] = task(i)
        with os.fdopen(r, "rb") as pipe:
            r = -1
            data = pipe.read()
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
    return [results[i] if i in results else task(i) for i in range(n)]


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
    if pid == 0:  # the child: never returns
        os.close(r)
        w_then(w)
    os.close(w)
    return pid, r


class Relay(Generic[P, Q, U]):
    """Work done by a forked child beside this process, in two parts: ``prepare()`` starts at
    once; ``answer(prepared, question)`` when this process :meth:`ask` s its question, computed
    while this process goes on; :meth:`result` waits for it.

    Without a child (:func:`can_fork`, or ``fork=False``), or when the child fails, :meth:`result`
    computes both parts here, so an error in them is raised here. The child only reads what both
    processes hold (its copy is copy-on-write) and sends back the answer, pickled. Use it as a
    context manager: leaving the block without a result stops the child."""

    def __init__(self, prepare: Callable[[], P], answer: Callable[[P, Q], U], fork: bool = True) -> None:
        self.prepare, self.answer = prepare, answer
        self.question: tuple[Q] | None = None
        self.pid = -1
        if not (fork and can_fork()):
            return
        q_r, self.q_w = os.pipe()

        def child(w: int) -> None:
            os.close(self.q_w)
            _send_and_exit(w, lambda: self._answer_in_child(q_r))

        self.pid, self.r = _fork_child(child)
        os.close(q_r)

    def _answer_in_child(self, q_r: int) -> U:
        prepared = self.prepare()
        with os.fdopen(q_r, "rb") as pipe:
            question: Q = pickle.loads(pipe.read())  # EOF (no question): an error, nothing sent
        return self.answer(prepared, question)

    def ask(self, question: Q) -> None:
        self.question = (question,)
        if self.pid > 0:
            try:
                with os.fdopen(self.q_w, "wb") as pipe:
                    pipe.write(pickle.dumps(question, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:  # the child is gone: result() answers here
                pass

    def result(self) -> U:
        if self.question is None:
            raise RuntimeError("Relay.result() before ask()")
        data = b""
        if self.pid > 0:
            with os.fdopen(self.r, "rb") as pipe:
                data = pipe.read()
            _reap(self.pid)
            self.pid = -1
        try:
            if data:
                out: U = pickle.loads(data)
                return out
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError):  # a child that died mid-write
            pass
        return self.answer(self.prepare(), self.question[0])

    def __enter__(self) -> Relay[P, Q, U]:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid > 0:  # left without a result: its work is not wanted any more
            os.kill(self.pid, signal.SIGKILL)
            if self.question is None:
                os.close(self.q_w)
            os.close(self.r)
            _reap(self.pid)
            self.pid = -1


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # pragma: no cover - already reaped
        pass
