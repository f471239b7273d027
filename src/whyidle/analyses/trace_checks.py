"""Trace checks whose findings are quality notes: gaps in the step numbering, host/device clock skew.

Missing steps. ``ProfilerStep#N`` numbers count up by one in time order. A number missing between
the first and the last (``#5, #6, #8``) means the trace lost that step's events (a full event
buffer) or joins two profiling cycles; numbers that go back in time mean steps of two captures or
threads were merged. The per-step figures then cover only the steps present.

Clock skew. Device work cannot start before the host call that launched it began::

    host     [cudaLaunchKernel]          launch start L
    device        [kernel]               kernel start K >= L, always
    device  [kernel]                     K < L: the two clocks disagree

CUPTI converts GPU timestamps to the host clock; when that conversion drifts (long captures,
some virtualised GPUs) or a trace is stitched from two clocks, device events land early. A device
start more than ``AttributionSettings.clock_skew_min_ns`` before its launch is skew, and the gap attribution
near launches (which compares launch times with gap starts) is uncertain by about that much.

Pure: (Timeline, Links, Window, AttributionSettings) -> notes.
"""

from __future__ import annotations

from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import median
from whyidle.timeline.model import Timeline
from whyidle.units import format_ns

__all__ = ["step_numbering_notes", "clock_skew_notes"]


def _missing(nums: list[int]) -> tuple[list[tuple[int, int]], int]:
    """The runs of numbers missing between the smallest and the largest, and how many are missing:
    [7, 8, 10, 13] -> ([(9, 9), (11, 12)], 3). Works from the numbers present, so a trace whose steps
    are numbered 1009 and 1000000000 costs two numbers, not a billion."""
    present = sorted(set(nums))
    runs = [(a + 1, b - 1) for a, b in zip(present, present[1:]) if b > a + 1]
    return runs, sum(b - a + 1 for a, b in runs)


def _ranges(runs: list[tuple[int, int]], most: int = 20) -> str:
    """[(7, 7), (9, 11)] -> '#7, #9..#11' (the first ``most`` runs, then how many more)."""
    out = [f"#{a}" if a == b else f"#{a}..#{b}" for a, b in runs[:most]]
    if len(runs) > most:
        out.append(f"and {len(runs) - most} more runs")
    return ", ".join(out)


def step_numbering_notes(window: Window) -> tuple[str, ...]:
    """Notes on step numbers missing from the sequence, or going back in time."""
    nums = list(window.all_step_numbers)
    if len(nums) < 2:
        return ()
    notes: list[str] = []
    back = [(a, b) for a, b in zip(nums, nums[1:]) if b <= a]
    if back:
        a, b = back[0]
        notes.append(
            f"step numbers go back in time {len(back)} time(s) (step #{b} starts after #{a}): the trace merges steps of "
            "two captures or threads; per-step figures mix them"
        )
    runs, n_missing = _missing(nums)
    if runs and not back:
        notes.append(
            f"step{'s' if n_missing > 1 else ''} {_ranges(runs)} missing from #{min(nums)}..#{max(nums)}: their events were "
            f"dropped (a full profiler buffer) or the trace joins two profiling cycles; per-step figures cover the "
            f"{len(nums)} steps present"
        )
    return tuple(notes)


def clock_skew_notes(tl: Timeline, links: Links, cfg: AttributionSettings) -> tuple[str, ...]:
    """A note when device work starts before the host call that launched it."""
    linked = links.launch_of >= 0
    if not linked.any():
        return ()
    dev = links.device_rows[linked]
    early = tl.start_ns[links.launch_of[linked]] - tl.start_ns[dev]
    skewed = early > cfg.clock_skew_min_ns
    n = int(skewed.sum())
    if not n:
        return ()
    worst = early[skewed]
    return (
        f"clock skew: {n} of {dev.size} device events ({n / dev.size:.0%}) start before the host call that launched them, "
        f"by up to {format_ns(float(worst.max()))} (median {format_ns(median(worst))}): the host and device clocks "
        "disagree (CUPTI's clock conversion drifted, or the trace joins two clocks); idle attributed near launches is "
        "uncertain by about that much",
    )
