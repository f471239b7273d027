"""Small memory pages for numpy's arrays while whyidle works (:func:`small_pages`).

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of
4 MiB or more. A diagnosis of a large trace makes and drops hundreds of such arrays, and where
the kernel's transparent huge pages are ``madvise`` (the common default), each new one is
zeroed, and memory often compacted, 2 MiB at a time: on the 2 GB scale trace the gaps' cause
table (555k x 15, 67 MB) took 151 ms to fill the first time in huge pages and 36 ms in small
ones, and the whole diagnosis took 0.5 s less (9.5 against 10.0 s, analyses and reading both;
docs/performance.md). Small pages cost a little more in TLB misses on arrays that live long,
which a diagnosis has few of.

The setting is numpy's, for the whole process (its ``NUMPY_MADVISE_HUGEPAGE`` at start-up), so
the library sets it only for the length of a call and puts back what it found; the processes
whyidle starts (the out-of-core reader's workers) keep it off. Where numpy has no such switch,
nothing changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["small_pages", "no_huge_pages"]


def _switch() -> Callable[[bool], bool] | None:
    """numpy's ``_set_madvise_hugepage(enabled) -> previous`` (numpy >= 1.20), else None."""
    import importlib

    for where in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1.x
        try:
            switch = getattr(importlib.import_module(where), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if callable(switch):
            return switch  # type: ignore[no-any-return]
    return None


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's new arrays in small pages inside the block; the setting found is put back after."""
    switch = _switch()
    if switch is None:
        yield
        return
    was = switch(False)
    try:
        yield
    finally:
        switch(was)


def no_huge_pages() -> None:
    """numpy's new arrays in small pages from now on (for processes whyidle starts)."""
    switch = _switch()
    if switch is not None:
        switch(False)
