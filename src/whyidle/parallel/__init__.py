"""The speed machinery's one seam: work that may be done beside this process.

Everything that makes whyidle faster with a second core goes through :class:`Helpers`: decoding a
trace in batches from both ends (:meth:`Helpers.map`), a helper process that works beside the
analyses (:meth:`Helpers.beside`), and the processes decoding chunks of a trace too large for
memory (:attr:`Helpers.chunk_jobs`). Callers hand it plain data and plain functions, and read the
results in order, as if everything ran here one after another, which is what the default
``Helpers()`` does. ``Helpers(fork=True)`` lets :mod:`whyidle.parallel.forked` fork a child for
the same calls (Linux, two usable cores; elsewhere it runs here too): the same results, sooner.

Forking is the caller's choice (``jobs=2``; the command line makes it, library calls default to
one process): a process whose other threads hold native locks (a training job's CUDA or OpenMP
threads) should not fork. One exception: a Kineto trace too large for memory (from
``ReadSettings.stream_min_bytes``, 256 MiB) is decoded by a process pool whatever ``jobs`` says
(:attr:`Helpers.chunk_jobs` None: by size), started the way :mod:`multiprocessing` starts
processes by default (a fork on Linux before Python 3.14); its workers only decode text.

And one setting that is not a helper: :func:`small_pages`, numpy's arrays in small memory pages
while whyidle works (:mod:`whyidle.parallel.pages`).

This package imports nothing of whyidle's (a leaf): the readers (``sources``) and the pipeline
both call it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

from whyidle.parallel.errand import Beside, Errand
from whyidle.parallel.forked import Relay, can_fork, planned_map, quiet_worker
from whyidle.parallel.pages import small_pages

__all__ = ["Helpers", "Errand", "Beside", "can_fork", "quiet_worker", "small_pages"]

T = TypeVar("T")
P = TypeVar("P")
Q = TypeVar("Q")
U = TypeVar("U")
E = TypeVar("E")


class Helpers(msgspec.Struct, frozen=True):
    """The help this process may have, and the calls that use it.

    ``fork``: a forked child may decode half of a trace and work beside the analyses (Linux with
    two usable cores; elsewhere, or False, everything runs here). ``chunk_jobs``: processes
    decoding chunks of a trace too large for memory (None: by its size; 1 where traces are
    already read one per core)."""

    fork: bool = False
    chunk_jobs: int | None = None

    def forks(self) -> bool:
        """Whether the calls below fork a child here."""
        return self.fork and can_fork()

    def map(
        self, plan: Callable[[], P], size: Callable[[P], int], task: Callable[[P, int], T], meanwhile: Callable[[], object] | None = None, min_size: int = 2
    ) -> tuple[P, list[T]]:
        """``(p, [task(p, i) for i in range(size(p))])`` for ``p = plan()``, after ``meanwhile()``
        (work this process does while a child plans; it may not be called at all).

        Forked (:func:`whyidle.parallel.forked.planned_map`): the child makes the plan when there
        is ``meanwhile`` work to overlap, and takes tasks from the back while this process takes
        them from the front (none when the plan has fewer than ``min_size`` tasks)."""
        if self.forks():
            return planned_map(plan, size, task, meanwhile, min_size)
        if meanwhile is not None:
            meanwhile()
        p = plan()
        return p, [task(p, i) for i in range(size(p))]

    def beside(self, errand: Errand[P, Q, U, E]) -> Beside[Q, U, E]:
        """The errand under way: in a forked child that starts at once, or here, each part when
        its result is asked for."""
        if self.forks():
            return Relay(errand)
        return Beside(errand)
