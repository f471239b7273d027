"""The quality guard: a lever that changes numerics must train like the fp32 baseline.

The candidate and its fp32 baseline run the same seeded steps on the same batches (a sweep
trial records the loss of its first ``guard_steps`` steps, warm-up included). The guard fails
when any loss is NaN or infinite, or when a loss deviates from the baseline's at the same step
by more than ``guard_max_rel_dev`` of the baseline's::

    dev_i = |loss_i - base_i| / |base_i|        fails when max_i dev_i > guard_max_rel_dev

GradScaler's skipped steps (fp16) are reported, not judged on their own: a skipped step is an
optimizer step that did not happen, so it shows in the following losses' deviation.
"""

from __future__ import annotations

import math

import msgspec

from whyidle.config import SweepConfig
from whyidle.sweep.trial import TrialResult

__all__ = ["Guard", "check_guard"]


class Guard(msgspec.Struct, kw_only=True):
    checked: bool
    passed: bool
    message: str
    steps: int = 0
    max_rel_dev: float | None = None
    worst_step: int | None = None
    nonfinite_losses: int = 0
    scaler_skipped_steps: int | None = None


def check_guard(baseline: list[float], cand: TrialResult, cfg: SweepConfig) -> Guard:
    skipped = cand.scaler_skipped_steps
    bad = cand.nonfinite_losses + sum(1 for v in cand.losses if not math.isfinite(v))
    if bad:
        return Guard(checked=True, passed=False, message=f"{bad} NaN/inf loss(es) in the first {len(cand.losses)} steps", steps=len(cand.losses), nonfinite_losses=bad, scaler_skipped_steps=skipped)
    n = min(len(baseline), len(cand.losses), cfg.guard_steps)
    if n == 0:
        why = "the fp32 baseline recorded no losses" if not baseline else "step() returned no loss"
        return Guard(checked=False, passed=True, message=f"not checked: {why}", scaler_skipped_steps=skipped)
    devs = [abs(c - b) / abs(b) if b != 0 else (0.0 if c == 0 else math.inf) for b, c in zip(baseline[:n], cand.losses[:n])]
    worst = max(range(n), key=lambda i: devs[i])
    dev = devs[worst]
    ok = dev <= cfg.guard_max_rel_dev
    verdict = "within" if ok else "beyond"
    msg = f"loss within {dev:.2%} of the fp32 baseline over {n} steps" if ok else f"loss deviates {dev:.2%} from the fp32 baseline at step {worst}"
    msg += f" ({verdict} the {cfg.guard_max_rel_dev:.0%} limit)"
    if skipped:
        msg += f"; GradScaler skipped {skipped} step(s)"
    return Guard(checked=True, passed=ok, message=msg, steps=n, max_rel_dev=dev, worst_step=worst, scaler_skipped_steps=skipped)
