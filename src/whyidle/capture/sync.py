"""The sync finder: every implicit host synchronisation in a block, by Python file and line.

::

    with whyidle.sync_finder() as syncs:
        for step in range(20):
            train_step()
    print(syncs.summary(steps=20))
    # 2 lines synchronise the host with the GPU (40 syncs in 20 steps):
    #   train.py:42  loss_value = loss.item()  20x (every step)

It turns on PyTorch's sync debug mode (``torch.cuda.set_sync_debug_mode("warn")``), which warns
at each synchronising CUDA call (``.item()``, ``.cpu()``, ``.nonzero()``, ``print(tensor)``,
pageable copies...), records those warnings instead of printing them, and counts them by the
Python line that caused them. The previous mode is restored on exit.

On a machine without CUDA there is nothing to synchronise with: the finder says so
(``available`` is False, ``reason`` says why) and the block runs unchanged.
"""

from __future__ import annotations

import linecache
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SyncSite", "SyncFinder", "sync_finder", "SYNC_WARNING_MARK"]

# Text of PyTorch's sync debug warning ("called a synchronizing CUDA operation").
SYNC_WARNING_MARK = "synchronizing CUDA operation"


@dataclass(frozen=True)
class SyncSite:
    file: str
    line: int
    code: str  # the source line, stripped ("" if unreadable)
    count: int

    @property
    def where(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass
class SyncFinder:
    """What :func:`sync_finder` recorded. ``sites`` is filled when the block exits."""

    available: bool
    reason: str = ""
    sites: list[SyncSite] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(s.count for s in self.sites)

    def summary(self, steps: int | None = None) -> str:
        """Sentences for a terminal: one line per synchronising Python line, most frequent first."""
        if not self.available:
            return f"sync finder: {self.reason}"
        if not self.sites:
            return "sync finder: no implicit host synchronisation in this block"
        per = f" in {steps} steps" if steps else ""
        lines = [f"{len(self.sites)} line(s) synchronise the host with the GPU ({self.total} syncs{per}):"]
        for s in self.sites:
            freq = ""
            if steps:
                freq = " (every step)" if s.count == steps else f" ({s.count / steps:.1f} per step)"
            code = f"  {s.code}" if s.code else ""
            lines.append(f"  {s.where}{code}  {s.count}x{freq}")
        return "\n".join(lines)


def _aggregate(records: list[warnings.WarningMessage]) -> list[SyncSite]:
    counts: Counter[tuple[str, int]] = Counter()
    for w in records:
        if SYNC_WARNING_MARK in str(w.message):
            counts[(w.filename, int(w.lineno))] += 1
    return [
        SyncSite(f, ln, linecache.getline(f, ln).strip(), n)
        for (f, ln), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


class _TorchMode:
    """The real switch: torch.cuda's sync debug mode."""

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def available(self) -> tuple[bool, str]:
        if not self._torch.cuda.is_available():
            return False, "needs CUDA: torch sees no GPU here, so no call can synchronise the host with one"
        return True, ""

    def get(self) -> int:
        return int(self._torch.cuda.get_sync_debug_mode())

    def set(self, mode: int | str) -> None:
        self._torch.cuda.set_sync_debug_mode(mode)


@contextmanager
def sync_finder(mode_switch: Any = None) -> Iterator[SyncFinder]:
    """Record implicit host synchronisations in the block (see the module docstring).

    ``mode_switch`` replaces torch's sync debug mode (tests pass a fake with ``available()``,
    ``get()`` and ``set(mode)``).
    """
    if mode_switch is None:
        try:
            mode_switch = _TorchMode()
        except ImportError:
            finder = SyncFinder(False, "needs torch: pip install 'whyidle[torch]'")
            warnings.warn(f"whyidle.sync_finder {finder.reason}", RuntimeWarning, stacklevel=3)
            yield finder
            return
    ok, reason = mode_switch.available()
    finder = SyncFinder(ok, reason)
    if not ok:
        warnings.warn(f"whyidle.sync_finder {reason}; the block runs without it", RuntimeWarning, stacklevel=3)
        yield finder
        return
    previous = mode_switch.get()
    records: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mode_switch.set("warn")
            try:
                yield finder
            finally:
                mode_switch.set(previous)
                records = list(caught)
                finder.sites = _aggregate(records)
    finally:
        _replay_others(records)  # outside the recording, so they reach the user's filters


def _replay_others(records: list[warnings.WarningMessage]) -> None:
    """Warnings that were not sync warnings are shown again after the block, as they would have been."""
    for w in records:
        if SYNC_WARNING_MARK not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
