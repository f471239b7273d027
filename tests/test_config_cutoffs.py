"""Cut-offs the analyses apply come from the caller's Config, not from literals in the code."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import whyidle
from whyidle.analyses.counters import burst_pattern
from whyidle.config import Config
from whyidle.lab.synthetic import training_trace, write_trace


def test_the_few_steps_note_follows_min_profiled_steps(tmp_path: Path) -> None:
    p = write_trace(training_trace("starvation"), tmp_path / "t.pt.trace.json.gz")
    n = len(whyidle.diagnose(p).window.steps)
    assert not any("profiled step(s)" in q for q in whyidle.diagnose(p, min_profiled_steps=n).quality)
    notes = [q for q in whyidle.diagnose(p, min_profiled_steps=n + 1).quality if "profiled step(s)" in q]
    assert notes == [f"only {n} profiled step(s): capture at least {n + 1} active steps for stable figures"]


def test_a_regular_rhythm_needs_counter_rhythm_min_pauses() -> None:
    busy = np.array(([True] * 6 + [False] * 2) * 4, dtype=np.bool_)  # 4 bursts, each followed by a pause
    pattern = burst_pattern(busy, 100_000_000, "gpu_util_pct", 50.0, Config().attribution)
    assert pattern.pauses == 4 and pattern.regular
    assert not burst_pattern(busy, 100_000_000, "gpu_util_pct", 50.0, Config(counter_rhythm_min_pauses=5).attribution).regular
    assert burst_pattern(busy, 100_000_000, "gpu_util_pct", 50.0, Config(counter_rhythm_min_pauses=4).attribution).regular
