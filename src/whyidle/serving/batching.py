"""The batching tuner: the dynamic-batching settings that carry the most traffic within a latency target.

For every candidate (max batch, max queue delay) the tuner finds the **capacity**: the highest
arrival rate at which the simulated latency percentile (p99 by default) stays within the SLO, by
bisection on the rate in log space between a rate that meets it and the instances' service bound
``instances x max_k k / latency(k)``. The traffic keeps its shape while its rate changes: the same
inter-arrival sequence (a Poisson or gamma renewal process of the given burstiness, or a request
log's own gaps) is compressed or stretched, so every candidate sees the same bursts (common random
numbers), and the measured spread of the latency curve is drawn once and reused the same way.

The recommendation is the candidate with the highest capacity; among those within
``batching_capacity_tie_share`` of it, the one with the lowest percentile at the observed rate (a
longer delay that buys no capacity only adds latency). Every number comes from the simulation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import msgspec
import numpy as np

from whyidle.config import Config
from whyidle.errors import UsageError
from whyidle.findings.fields import FLOAT, INT, STR, Field, Opt, Struct, Table, Tup
from whyidle.serving.latency import LatencyProfile
from whyidle.serving.simulate import Draws, Settings, Simulation, percentile_ns, simulate

__all__ = ["Traffic", "Outcome", "Candidate", "BatchingResult", "BATCHING_RESULT", "unit_arrivals", "tune_batching", "evaluate"]


class Traffic(msgspec.Struct, frozen=True):
    """An arrival process at unit rate (1 request/s): cumulative arrival times in seconds."""

    unit_times_s: np.ndarray
    rate_per_s: float | None  # the observed (or stated) rate; None: unknown
    burstiness: float  # squared coefficient of variation of the inter-arrival times (Poisson: 1)
    source: str  # "poisson", "gamma renewal", or the log it was replayed from

    def at_rate(self, rate_per_s: float) -> np.ndarray:
        return np.asarray(np.rint(self.unit_times_s * (1e9 / rate_per_s)), dtype=np.int64)


class Outcome(msgspec.Struct, frozen=True):
    """One simulation's figures: latency percentiles, batches and instance busy share."""

    rate_per_s: float
    p50_ns: float
    p95_ns: float
    p99_ns: float
    objective_ns: float  # the percentile the SLO is about
    mean_batch: float
    busy_share: float
    throughput_per_s: float


class Candidate(msgspec.Struct, frozen=True):
    settings: Settings
    capacity_per_s: float  # 0: the SLO is not met even at a trickle
    at_rate: Outcome | None  # at the observed rate, when one is known


class BatchingResult(msgspec.Struct, frozen=True):
    percentile: float
    slo_ns: int
    traffic_source: str
    burstiness: float
    rate_per_s: float | None
    requests_per_run: int
    candidates: tuple[Candidate, ...]
    best: Candidate | None
    baseline: Candidate  # max batch 1, no delay: what the GPU carries without batching
    frontier: tuple[Candidate, ...]  # per max batch, its best delay (capacity, then latency)
    simulations: int
    seconds: float
    jitter: str  # how the service time's spread was modelled

    def to_dict(self) -> dict[str, object]:
        """The result as JSON data (:data:`BATCHING_RESULT`)."""
        return BATCHING_RESULT.write(self)


_CANDIDATE = Struct(Candidate, whole=True)

BATCHING_RESULT = Table(
    BatchingResult,
    Field("percentile", FLOAT, "the latency percentile the objective is about (99: p99)"),
    Field("slo_ns", INT, "the latency objective"),
    Field("traffic_source", STR, "`poisson`, `gamma renewal`, or the log the arrivals were replayed from"),
    Field("burstiness", FLOAT, "squared coefficient of variation of the gaps between arrivals (Poisson: 1)"),
    Field("rate_per_s", Opt(FLOAT), "the observed (or stated) request rate; null: unknown"),
    Field("requests_per_run", INT, "requests per simulation"),
    Field(
        "candidates", Tup(_CANDIDATE),
        "every setting tried: `settings` {`max_batch`, `max_delay_ns`, `instances`, `preferred`}, `capacity_per_s` (the highest rate within "
        "the objective; 0: not met even at a trickle), `at_rate` (null without a rate; else `rate_per_s`, `p50_ns`, `p95_ns`, `p99_ns`, "
        "`objective_ns`, `mean_batch`, `busy_share`, `throughput_per_s` at the observed rate)",
    ),  # fmt: skip
    Field("best", Opt(_CANDIDATE), "the recommendation (a candidate); null when no setting meets the objective"),
    Field("baseline", _CANDIDATE, "max batch 1, no delay: what the device carries without batching"),
    Field("frontier", Tup(_CANDIDATE), "per max batch, its best delay"),
    Field("simulations", INT, "simulations run"),
    Field("seconds", FLOAT, "the search's wall time"),
    Field("jitter", STR, "how the service time's spread was modelled, in words"),
)


def unit_arrivals(n: int, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` arrival times (s) of a renewal process at 1 request/s with gamma inter-arrival times.

    Burstiness is the squared coefficient of variation ``c^2`` of the gaps: 1 is Poisson
    (exponential gaps), above 1 clusters requests in bursts, below 1 spreads them evenly
    (gamma shape ``1/c^2``; ``c^2 = 0`` is a fixed interval).
    """
    if n < 1 or burstiness < 0:
        raise UsageError("arrivals need n >= 1 and burstiness >= 0")
    if burstiness == 0:
        gaps = np.ones(n)
    else:
        rng = np.random.default_rng(seed)
        shape = 1.0 / burstiness
        gaps = rng.gamma(shape, 1.0 / shape, size=n)
    out: np.ndarray = np.cumsum(gaps)
    return out


def _outcome(sim: Simulation, rate: float, q: float) -> Outcome:
    lat = sim.latency_ns
    p = np.percentile(lat, [50, 95, 99, q], method="inverted_cdf") if lat.size else np.full(4, math.nan)
    return Outcome(rate, float(p[0]), float(p[1]), float(p[2]), float(p[3]), sim.mean_batch, sim.busy_share, sim.throughput_per_s)


class _Runner:
    def __init__(self, profile: LatencyProfile, traffic: Traffic, q: float, slo_ns: int, jitter: bool, seed: int, cfg: Config) -> None:
        self.profile, self.traffic, self.q, self.slo_ns, self.cfg = profile, traffic, q, slo_ns, cfg
        n = traffic.unit_times_s.size
        # the measured passes themselves when the curve keeps them, else a log-normal from p90/median
        self.u = np.random.default_rng(seed + 1).random(n) if jitter and profile.samples_ns is not None else None
        self.z = np.random.default_rng(seed + 1).standard_normal(n) if jitter and self.u is None and profile.p90_ns is not None else None
        self.count = 0

    def sigma(self, max_batch: int) -> list[float]:
        if self.z is None:
            return [0.0] * (max_batch + 1)
        return [min(s, self.cfg.serving.batching_max_sigma) for s in self.profile.sigma_table(max_batch)]

    def run(self, st: Settings, rate: float) -> Simulation:
        self.count += 1
        svc = self.profile.service_table(st.max_batch)
        draws = Draws(sigma=self.sigma(st.max_batch), z=self.z) if self.z is not None else None
        if self.u is not None:
            draws = Draws(spread=self.profile.spread_table(st.max_batch), u=self.u)
        return simulate(self.traffic.at_rate(rate), svc, st, draws=draws)

    def meets(self, st: Settings, rate: float) -> bool:
        sim = self.run(st, rate)
        # A finite run of an overloaded server can still show a tolerable percentile if the queue
        # had little time to grow; a growing queue shows first at the end, so the last part of
        # the run must meet the objective too.
        tail = sim.latency_ns[int(sim.latency_ns.size * (1 - self.cfg.serving.batching_tail_share)) :]
        return sim.percentile_ns(self.q) <= self.slo_ns and percentile_ns(tail, self.q) <= self.slo_ns

    def capacity(self, st: Settings, start: float = 0.0) -> float:
        # The service bound: every batch full at its most efficient size, each taking its mean
        # time (a log-normal of median m has mean m * exp(sigma^2 / 2)). No rate above it is stable.
        svc = self.profile.service_table(st.max_batch)
        sig = self.sigma(st.max_batch)
        spread = self.profile.spread_table(st.max_batch) if self.u is not None else None
        mean = [float(np.mean(f)) for f in spread] if spread else [math.exp(x**2 / 2) for x in sig]
        # Just below it: at the bound itself a server is stable only when arrivals line up exactly.
        hi = st.instances * max(k / (svc[k] * mean[k] / 1e9) for k in range(1, st.max_batch + 1)) * (1 - 1e-3)
        lo = hi * self.cfg.serving.batching_min_rate_share
        if lo < start < hi and self.meets(st, start):
            lo = start  # the rate carried without batching: the doubling starts there
        elif not self.meets(st, lo):
            return 0.0
        # Whether a rate meets the SLO is not monotone in the rate: arrivals that happen to line
        # up with batch ends can meet it at one rate and miss it just below. The capacity is the
        # highest rate below which every rate tried meets it: double up to the first miss, then
        # bisect between the last rate met and that miss.
        while True:
            up = min(lo * 2, hi)
            if not self.meets(st, up):
                hi = up
                break
            lo = up
            if up >= hi:
                return hi
        for _ in range(self.cfg.serving.batching_bisection_steps):
            mid = math.sqrt(lo * hi)
            if self.meets(st, mid):
                lo = mid
            else:
                hi = mid
        return lo


def tune_batching(
    profile: LatencyProfile,
    traffic: Traffic,
    slo_ns: int,
    *,
    percentile: float = 99.0,
    instances: int = 1,
    max_batches: Sequence[int] | None = None,
    delays_ns: Sequence[int] | None = None,
    preferred: Sequence[int] = (),
    jitter: bool = True,
    seed: int = 0,
    cfg: Config | None = None,
) -> BatchingResult:
    """Search (max batch, max delay) for the highest capacity with the percentile within ``slo_ns``.

    ``preferred``: Triton preferred batch sizes applied to every candidate (those below its max batch).
    """
    cfg = cfg or Config()
    if slo_ns <= 0 or not 0 < percentile < 100:
        raise UsageError("the latency objective needs an SLO above 0 and a percentile between 0 and 100")
    t0 = time.perf_counter()
    runner = _Runner(profile, traffic, percentile, slo_ns, jitter, seed, cfg)
    one = profile.median_ns[0]
    sizes = sorted(set(max_batches)) if max_batches else [b for b in profile.batch_sizes]
    if sizes[-1] > profile.max_batch or sizes[0] < 1:
        raise UsageError(f"max batch sizes must lie within the measured curve (1..{profile.max_batch}), got {sizes}")
    sizes = [b for b in sizes if b == 1 or _interp_ok(profile, b, slo_ns)]
    if delays_ns is None:
        # No delay, then fractions of what the SLO leaves after a batch of one (a longer wait
        # than that would break the SLO on its own at low traffic).
        room = slo_ns - one
        delays = [0] + [int(room * f) for f in cfg.serving.batching_delay_fractions_of_slack] if room > 0 else [0]
    else:
        delays = sorted(set(int(d) for d in delays_ns))
    base_st = Settings(1, 0, instances)
    base_at = _outcome(runner.run(base_st, traffic.rate_per_s), traffic.rate_per_s, percentile) if traffic.rate_per_s else None
    baseline = Candidate(base_st, runner.capacity(base_st), base_at)
    cands: list[Candidate] = [baseline] if 1 in sizes else []
    for b in sizes:
        for d in delays if b > 1 else []:
            st = Settings(b, d, instances, tuple(p for p in sorted(set(preferred)) if p < b))
            cap = runner.capacity(st, start=baseline.capacity_per_s)
            at = _outcome(runner.run(st, traffic.rate_per_s), traffic.rate_per_s, percentile) if traffic.rate_per_s else None
            cands.append(Candidate(st, cap, at))
    best = _choose(cands, cfg)
    frontier = []
    for b in sorted({c.settings.max_batch for c in cands}):
        pick = _choose([c for c in cands if c.settings.max_batch == b], cfg)
        if pick is not None:
            frontier.append(pick)
    return BatchingResult(
        percentile, slo_ns, traffic.source, traffic.burstiness, traffic.rate_per_s, int(traffic.unit_times_s.size),
        tuple(cands), best, baseline, tuple(frontier), runner.count, time.perf_counter() - t0, _jitter_note(runner, profile, cfg),
    )


def _jitter_note(runner: _Runner, profile: LatencyProfile, cfg: Config) -> str:
    if runner.u is not None:
        return f"the measured passes per batch size ({sum(len(x) for x in profile.samples_ns or ())} kept with the curve), drawn at random"
    if runner.z is None:
        return "none: the median latency per batch size" + ("" if profile.p90_ns is not None else " (the curve has no p90)")
    raw = max(profile.sigma_table(profile.max_batch))
    note = f"log-normal per batch from p90/median, sigma up to {min(raw, cfg.serving.batching_max_sigma):.2f}"
    if raw > cfg.serving.batching_max_sigma:
        note += f" (the curve's {raw:.2f} capped at {cfg.serving.batching_max_sigma}: a p90 that far above the median is measurement noise, e.g. a busy host; measure again)"
    return note


def _interp_ok(profile: LatencyProfile, b: int, slo_ns: int) -> bool:
    return profile.service_table(b)[b] < slo_ns  # a batch that alone takes the SLO is never worth it


def _choose(cands: Sequence[Candidate], cfg: Config) -> Candidate | None:
    ok = [c for c in cands if c.capacity_per_s > 0]
    if not ok:
        return None
    top = max(c.capacity_per_s for c in ok)
    near = [c for c in ok if c.capacity_per_s >= top * (1 - cfg.serving.batching_capacity_tie_share)]

    def key(c: Candidate) -> tuple[float, float, int, int]:
        lat = c.at_rate.objective_ns if c.at_rate is not None else 0.0
        return (lat, -c.capacity_per_s, c.settings.max_delay_ns, c.settings.max_batch)

    return min(near, key=key)


def evaluate(
    profile: LatencyProfile,
    traffic: Traffic,
    settings: Settings,
    rate_per_s: float,
    *,
    percentile: float = 99.0,
    jitter: bool = True,
    seed: int = 0,
    cfg: Config | None = None,
) -> Outcome:
    """One simulation of given settings at a given rate (the figures the tuner compares), under
    ``cfg``'s rules (``batching_max_sigma``), as :func:`tune_batching` runs it."""
    runner = _Runner(profile, traffic, percentile, 1, jitter, seed, cfg or Config())
    return _outcome(runner.run(settings, rate_per_s), rate_per_s, percentile)
