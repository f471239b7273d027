"""Timing a latency curve: until steady, outliers dropped, monotone, warnings (issue 25, item 3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from whyidle.config import Config, SweepConfig
from whyidle.serving.latency import profile_function
from whyidle.serving.passes import drop_outliers, monotone_rows

US = 1_000


class FakeModel:
    """A fake clock and a model whose i-th pass of batch k takes ``cost(k, i)`` ns on it."""

    def __init__(self, cost: Callable[[int, int], int]) -> None:
        self.t = 0
        self.cost = cost
        self.calls: Counter[int] = Counter()

    def clock(self) -> int:
        return self.t

    def run(self, k: int) -> None:
        self.t += self.cost(k, self.calls[k])
        self.calls[k] += 1


WARMUP, ITERS = 2, 20


def _cost(k: int, i: int) -> int:
    m = i - WARMUP  # the measured pass number (negative: warm-up)
    if k == 4 and m == 30:
        return 3_000 * US  # one preempted pass: 3 ms against ~0.05 ms
    if k == 8:
        return 40 * US  # measured faster than batch 4: noise, not physics
    if k == 16 and 0 <= m < 2 * ITERS:
        return 120 * US  # two slow windows before it settles
    if k == 32:
        return (100 if (m // ITERS) % 2 else 150) * US  # windows alternate 100 / 150 us: never steady
    return 50 * US + k * US


def test_the_curve_is_measured_until_steady_without_outliers_and_monotone() -> None:
    """On CPU the capacity table jumped 122k/s -> 39k/s -> 155k/s -> 63k/s with batch size, from
    single slow passes among 20 and no warning. Each size is now timed in windows until the last
    3 agree within 10%, the 3 ms pass is dropped and said, batch 8's faster median is raised to
    batch 4's, and batch 32, which never settles, is flagged as too noisy to decide."""
    fake = FakeModel(_cost)
    cfg = Config()
    prof = profile_function(fake.run, [1, 4, 8, 16, 32], warmup=WARMUP, iters=ITERS, clock=fake.clock, cfg=cfg)
    assert prof.samples_ns is not None
    passes = dict(zip(prof.batch_sizes, prof.samples_ns))
    # steady at once: exactly 3 windows; batch 16 needed two more; batch 32 ran out of windows
    assert fake.calls[1] == WARMUP + 3 * ITERS and len(passes[1]) == 3 * ITERS
    assert fake.calls[16] == WARMUP + 5 * ITERS and set(passes[16]) == {66 * US}
    assert fake.calls[32] == WARMUP + cfg.serving.latency_max_windows * ITERS
    # the preempted pass is out of the curve and the simulator's draws, and the notes say so
    assert max(passes[4]) == 54 * US and len(passes[4]) == 3 * ITERS - 1
    assert any("batch 4: 1 of 60 passes dropped as outliers (slowest 3.00 ms against a median 0.05 ms)" in n for n in prof.notes)
    # monotone: batch 8 (40 us) is taken as batch 4 (54 us), its passes scaled alike
    meds = dict(zip(prof.batch_sizes, prof.median_ns))
    assert meds[8] == meds[4] == 54 * US and set(passes[8]) == {54 * US}
    assert list(prof.median_ns) == sorted(prof.median_ns)
    assert any(n.startswith("batch 8 measured faster (0.04 ms) than batch 4 (0.05 ms)") for n in prof.notes)
    assert any(n.startswith("batch 32: the pass times did not settle in 10 windows") and "spread 50%, more than 10%" in n for n in prof.notes)
    assert not any(n.startswith(("batch 1:", "batch 16:")) for n in prof.notes)


def test_the_warnings_reach_the_report_and_the_saved_curve(tmp_path: pytest.TempPathFactory) -> None:
    import json

    from whyidle.serving.batching import Traffic, tune_batching, unit_arrivals
    from whyidle.serving.latency import load_latency
    from whyidle.serving.report import batching_text

    fake = FakeModel(_cost)
    prof = profile_function(fake.run, [1, 4], warmup=WARMUP, iters=ITERS, clock=fake.clock)
    res = tune_batching(prof, Traffic(unit_arrivals(2000, 1.0), 100.0, 1.0, "poisson"), 20_000 * US, delays_ns=[0])
    text = batching_text(res, prof, None)
    assert "Warning: batch 4: 1 of 60 passes dropped as outliers" in text
    path = tmp_path / "curve.json"  # type: ignore[operator]
    path.write_text(json.dumps(prof.to_dict()))
    assert load_latency(path).notes == prof.notes


def test_outlier_fence_keeps_the_devices_own_spread() -> None:
    """A GPU's tail (the H200 curve's p90 is 1.7x its median) stays; a 60x pass goes."""
    cfg = Config()
    tight = [100.0] * 18 + [101.0, 170.0]  # IQR 0: the fence is 2x the median
    assert drop_outliers(tight, cfg) == (tight, [])
    assert drop_outliers([50.0] * 19 + [2990.0], cfg) == ([50.0] * 19, [2990.0])


def test_monotone_rows_raise_only_what_falls() -> None:
    rows = [(1, 100.0, 110.0, (100.0,)), (2, 95.0, 99.0, (95.0,)), (4, 150.0, None, None)]
    out, notes = monotone_rows(rows, SweepConfig().steady_tolerance)
    assert [r[1] for r in out] == [100.0, 100.0, 150.0] and out[1][3] == (100.0,)
    assert notes == []  # 5% is within the steady tolerance: raised silently
