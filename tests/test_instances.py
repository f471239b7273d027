"""More instances, MPS or MIG: advice that agrees with its own numbers (issue 25, items 3 and 4)."""

from __future__ import annotations

from whyidle.config import Config
from whyidle.serving.batching import BatchingResult, Candidate, Outcome
from whyidle.serving.instances import advise_instances
from whyidle.serving.latency import LatencyProfile
from whyidle.serving.simulate import Settings

MS = 1_000_000


def _result(busy: float, rate: float = 100.0, capacity: float = 1000.0) -> BatchingResult:
    out = Outcome(rate, 1 * MS, 2 * MS, 3 * MS, 3 * MS, 4.0, busy, rate)
    best = Candidate(Settings(8, MS), capacity, out)
    base = Candidate(Settings(1, 0), capacity / 4, out)
    return BatchingResult(99.0, 50 * MS, "poisson", 1.0, rate, 1000, (base, best), best, base, (base, best), 2, 0.1, "none")


H200 = LatencyProfile((1, 8), (1 * MS, 2 * MS), device="NVIDIA H200", memory_bytes=2 * 10**9)


def _sharing(lines: tuple[str, ...]) -> str:
    return next(line for line in lines if line.startswith("At the observed rate"))


def test_sharing_is_advised_only_when_the_idle_time_matters() -> None:
    """Busy 99%: the old advice said 'the idle rest can hold other work: share the GPU (MPS ...)'.
    Now sharing is advised only from ServingSettings.batching_share_min_idle_share idle, and the line
    says how much idle time there is either way."""
    busy = advise_instances(_result(0.99), H200)
    line = _sharing(busy.lines)
    assert "idle 1%" in line and "share the GPU (MPS" not in line and "too little idle time" in line
    idle = advise_instances(_result(0.30), H200)
    line = _sharing(idle.lines)
    assert "idle 70%" in line and "share the GPU (MPS" in line
    # the threshold is the config's: at 40% busy (60% idle) a 0.7 threshold withholds the advice
    strict = advise_instances(_result(0.40), H200, cfg=Config(batching_share_min_idle_share=0.7))
    assert "share the GPU (MPS" not in _sharing(strict.lines) and "70% idle" in _sharing(strict.lines)


def test_no_gpu_sharing_advice_for_a_cpu() -> None:
    """A curve measured on a CPU gets no MPS or MIG advice (it got both, issue 25 item 3)."""
    cpu = LatencyProfile((1, 8), (1 * MS, 2 * MS), device="cpu")
    adv = advise_instances(_result(0.2), cpu)
    text = " ".join(adv.lines)
    assert adv.on_cpu and "MPS" not in text and "MIG" not in text
    assert "idle 80%" in _sharing(adv.lines) and "no GPU to share" in _sharing(adv.lines)
    assert adv.mig_gpu is None and adv.mig_fits == ()
    # the same curve said to be for an H200 gets the GPU's advice
    assert not advise_instances(_result(0.2), cpu, gpu="NVIDIA H200").on_cpu
