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
from typing import TypeVar

__all__ = ["can_fork", "two_ended_map", "quiet_worker"]

T = TypeVar("T")
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
        _child(shared, w, task)
    os.close(w)
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
    code = 0
    done: dict[int, object] = {}
    try:
        while True:
            front, j = _COUNTERS.unpack_from(shared, 0)
            j -= 1
            if j < front:
                break
            struct.pack_into("=q", shared, 8, j)
            done[j] = task(j)
        data = pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # the parent does these tasks again and raises the error itself
        data, code = b"", 1
    try:
        with os.fdopen(w, "wb") as pipe:
            pipe.write(data)
    finally:
        os._exit(code)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # pragma: no cover - already reaped
        pass
