"""The analysis window and the steps inside it.

With step markers (``ProfilerStep#N``)::

    host   |ProfilerStep#5 ......|ProfilerStep#6 ......|ProfilerStep#7 ....|
    device   ███ ██ █████   ████   ███ ██ █████   ████   ███ ██ █████   ████████
           ^ window start                                       window end ^
           (first selected step starts)   (end of device work launched in the last step)

Steps partition the window: step i runs from its own start to the next step's start; the last
step runs to the window end, which is the end of the device work launched in the last step. The
TensorBoard plugin ends its window at the later of that and the last step's host range; the two
agree when the device finishes after the host (its sample traces), and whyidle's window is shorter
by the profiler's stop when the host range ends later (docs/metrics.md).

Without step markers the window is the span of device activity, and step figures are unavailable.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from whyidle.analyses.links import Links
from whyidle.config import WindowSettings
from whyidle.errors import UsageError
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Step", "Window", "select_window"]

_STEP_NUM = re.compile(r"(\d+)\D*$")  # ProfilerStep#12, "train_step 12", "step_12/fwd"
# A step number longer than this is not one (int64 holds 18 digits; Python refuses to convert
# strings over 4,300 digits): such steps are numbered in time order like unnumbered ones.
_STEP_NUM_MAX_DIGITS = 18


class Step(msgspec.Struct, frozen=True):
    number: int
    start_ns: int
    end_ns: int  # partition end (next step's start, or the window end)
    host_end_ns: int  # end of the host-side step range
    row: int


class Window(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int
    basis: str  # "steps" or "device activity" or "empty"
    steps: tuple[Step, ...]
    all_step_numbers: tuple[int, ...]
    notes: tuple[str, ...] = msgspec.field(default_factory=tuple)

    @property
    def duration_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


def _device_span(tl: Timeline, links: Links) -> tuple[int, int] | None:
    if links.device_rows.size == 0:
        return None
    return int(tl.start_ns[links.device_rows].min()), int(tl.end_ns[links.device_rows].max())


def _chosen(numbers: list[int], cfg: WindowSettings) -> list[int]:
    """Indices of the steps ``skip_first_steps`` and ``steps`` select (consecutive, at least one)."""
    chosen = list(range(len(numbers)))
    if cfg.skip_first_steps:
        if cfg.skip_first_steps >= len(chosen):
            raise UsageError(
                f"skip_first_steps {cfg.skip_first_steps} drops every step: the trace has {len(chosen)} steps",
                field="skip_first_steps",
            )
        chosen = chosen[cfg.skip_first_steps :]
    if cfg.steps:
        wanted = set(cfg.steps)
        chosen = [i for i in chosen if numbers[i] in wanted]
        if not chosen:
            raise UsageError(f"steps selects none of the trace's steps (it has ProfilerStep#{numbers[0]}..#{numbers[-1]})", field="steps")
        if chosen != list(range(chosen[0], chosen[-1] + 1)):
            raise UsageError("steps must select consecutive steps (for example 3-6)", field="steps")
    return chosen


def select_window(tl: Timeline, links: Links, cfg: WindowSettings) -> Window:
    step_rows = np.flatnonzero(tl.kind == int(Kind.STEP))
    span = _device_span(tl, links)
    if step_rows.size == 0:
        if cfg.steps or cfg.skip_first_steps:
            raise UsageError("step selection was given, but the trace has no ProfilerStep markers")
        if span is None:
            return Window(0, 0, "empty", (), ())
        return Window(
            span[0],
            span[1],
            "device activity",
            (),
            (),
            ("no ProfilerStep markers: the window is the span of device activity and step figures are unavailable",),
        )
    # Steps of a process that launched device work, when there are any (traces stitched from
    # several processes can carry another process's step markers).
    launched = links.launch_of[links.launch_of >= 0]
    if launched.size:
        pids = {tl.lanes[int(ln)].pid for ln in unique_sorted(tl.lane[launched])}
        own = np.array([tl.lanes[int(ln)].pid in pids for ln in tl.lane[step_rows]], dtype=np.bool_)
        if own.any():
            step_rows = step_rows[own]
    # Steps on the thread that has the most of them (the training loop's thread).
    lanes, counts = np.unique(tl.lane[step_rows], return_counts=True)
    main_lane = lanes[np.argmax(counts)]
    step_rows = step_rows[tl.lane[step_rows] == main_lane]
    step_rows = step_rows[np.argsort(tl.start_ns[step_rows], kind="stable")]
    numbers = []
    for r in step_rows:
        m = _STEP_NUM.search(tl.name_of(int(r)))
        numbers.append(int(m.group(1)) if m and len(m.group(1)) <= _STEP_NUM_MAX_DIGITS else -1)
    notes_numbering: tuple[str, ...] = ()
    if len(set(numbers)) != len(numbers) or -1 in numbers:
        # Step names without distinct numbers (an NVTX range named "train_step"): number them
        # 1, 2, ... in time order so that --steps can still select them.
        numbers = list(range(1, len(numbers) + 1))
        notes_numbering = ("step markers carry no distinct numbers; they are numbered 1.. in time order",)
    all_numbers = tuple(numbers)
    chosen = _chosen(numbers, cfg)
    last_row = int(step_rows[chosen[-1]])
    last_start, last_end = int(tl.start_ns[last_row]), int(tl.end_ns[last_row])
    # End of the device work launched inside the last selected step (the step's host range when
    # it launched nothing). Not the host range's end: after the last kernel the host only closes
    # the step (the profiler's stop, its closing sync), which is a capture artifact, not idle time.
    end = last_end
    has_launch = links.launch_of >= 0
    if has_launch.any():
        ls = tl.start_ns[links.launch_of[has_launch]]
        inside = (ls >= last_start) & (ls < last_end)
        if inside.any():
            end = max(int(tl.end_ns[links.device_rows[has_launch][inside]].max()), last_start + 1)
    first_start = int(tl.start_ns[step_rows[chosen[0]]])
    steps: list[Step] = []
    for j, i in enumerate(chosen):
        r = int(step_rows[i])
        s = int(tl.start_ns[r])
        nxt = int(tl.start_ns[step_rows[chosen[j + 1]]]) if j + 1 < len(chosen) else end
        steps.append(Step(numbers[i], s, max(nxt, s), int(tl.end_ns[r]), r))
    notes: list[str] = list(notes_numbering)
    if cfg.skip_first_steps:
        notes.append(f"the first {cfg.skip_first_steps} steps were skipped (--skip-first)")
    return Window(first_start, end, "steps", tuple(steps), all_numbers, tuple(notes))
