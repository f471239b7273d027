"""The batching simulator (exact event sequences, queueing theory) and the tuner's choices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whyidle.errors import InputError, UsageError
from whyidle.serving.batching import Traffic, evaluate, tune_batching, unit_arrivals
from whyidle.serving.latency import LatencyProfile, load_latency
from whyidle.serving.simulate import Draws, Settings, simulate

H200 = Path(__file__).parent / "data" / "h200" / "measured.json"
MS = 1_000_000


def test_hand_computed_event_sequence() -> None:
    # service(k) = 10 + k; max batch 3, max delay 5 (units: ns)
    a = [0, 1, 2, 10, 11, 12, 13]
    sim = simulate(a, [0, 11, 12, 13], Settings(3, 5))
    # batch 1: full when a2 arrives (t=2), runs 13 -> 15
    # batch 2: full at a5=12, but the instance is busy until 15; runs 13 -> 28
    # batch 3: a6 alone; its deadline 18 passed while the instance was busy: sent at 28, runs 11 -> 39
    assert sim.batch_start_ns.tolist() == [2, 15, 28]
    assert sim.batch_size.tolist() == [3, 3, 1]
    assert sim.batch_finish_ns.tolist() == [15, 28, 39]
    assert sim.latency_ns.tolist() == [15, 14, 13, 18, 17, 16, 26]
    assert sim.wait_ns.tolist() == [2, 1, 0, 5, 4, 3, 15]
    assert sim.span_ns == 39


def test_delay_expires_before_batch_fills() -> None:
    # max batch 4, delay 3: a0 waits 3 (only a1 joined), a2 arrives later and goes alone after its delay
    sim = simulate([0, 2, 20], [0, 5, 6, 7, 8], Settings(4, 3))
    assert sim.batch_start_ns.tolist() == [3, 23]
    assert sim.batch_size.tolist() == [2, 1]
    assert sim.latency_ns.tolist() == [9, 7, 8]


def test_preferred_sizes() -> None:
    # max batch 8, preferred 2 and 4, delay 100, service 10 + k
    svc = [0] + [10 + k for k in range(1, 9)]
    # a0, a1 arrive: preferred 2 formed at t=1 -> sent at once
    # a2..a6 arrive at 2..6 while it runs (until 13): at 13, 5 wait -> the largest preferred that fits is 4
    # a6 is left; alone until its deadline 106 (nothing else arrives): sent with 1
    sim = simulate([0, 1, 2, 3, 4, 5, 6], svc, Settings(8, 100, preferred=(2, 4)))
    assert sim.batch_start_ns.tolist() == [1, 13, 106]
    assert sim.batch_size.tolist() == [2, 4, 1]
    # without preferred sizes the same arrivals wait for 8 or the deadline: one batch of 7 at 100
    plain = simulate([0, 1, 2, 3, 4, 5, 6], svc, Settings(8, 100))
    assert plain.batch_start_ns.tolist() == [100] and plain.batch_size.tolist() == [7]


def test_two_instances_share_the_queue() -> None:
    # batch 1, no delay, service 10: the third request waits for the first instance to free up
    sim = simulate([0, 1, 2], [0, 10], Settings(1, 0, instances=2))
    assert sim.batch_start_ns.tolist() == [0, 1, 10]
    assert sim.latency_ns.tolist() == [10, 10, 18]
    assert sim.busy_share == pytest.approx(30 / (20 * 2))


def test_scale_multiplies_each_batch_in_send_order() -> None:
    sim = simulate([0, 100], [0, 10], Settings(1, 0), draws=Draws(scale=np.array([2.0, 0.5])))
    assert sim.latency_ns.tolist() == [20, 5]


def test_measured_spread_overhead_and_late_timer_exactly() -> None:
    # spread: the batch takes the factor at quantile u of its size's measured factors
    sim = simulate([0, 100, 200], [0, 10, 20], Settings(2, 0), draws=Draws(spread=[[1.0], [0.5, 1.0, 3.0], [1.0]], u=np.array([0.0, 0.5, 0.99])))
    assert sim.latency_ns.tolist() == [5, 10, 30]
    # overhead: added to every batch's time, so it also delays the next batch on a busy instance
    sim = simulate([0, 1], [0, 10], Settings(1, 0), draws=Draws(overhead_ns=np.array([3, 4])))
    assert sim.batch_start_ns.tolist() == [0, 13] and sim.latency_ns.tolist() == [13, 26]
    # a late timer: due at deadline 5 + 4 = 9, but the arrival at 7 wakes the loop past the
    # deadline and is sent with it at once; the next batch waits for its timer: 35 + 4
    sim = simulate([0, 7, 30], [0, 10, 11, 12], Settings(3, 5), draws=Draws(late_ns=np.array([4, 4, 4])))
    assert sim.batch_start_ns.tolist() == [7, 30 + 5 + 4] and sim.batch_size.tolist() == [2, 1]
    # a busy instance freeing after the deadline sends at once: no timer, no lateness
    sim = simulate([0, 20, 21], [0, 20, 20, 20], Settings(3, 5), draws=Draws(late_ns=np.array([7, 7, 7])))
    assert sim.batch_start_ns.tolist() == [0 + 5 + 7, 32] and sim.batch_size.tolist() == [1, 2]
    sim = simulate([0, 1], [0, 20], Settings(1, 0), draws=Draws(late_ns=np.array([7, 7])))
    assert sim.batch_start_ns.tolist() == [0, 20]  # no delay, no timer
    with pytest.raises(UsageError):
        simulate([0, 1], [0, 5, 6], Settings(2, 0), draws=Draws(u=np.array([0.1, 0.2])))  # u needs spread


def test_timer_resolution_rounds_the_last_sleep_up() -> None:
    # resolution 10, delay 25: the loop last slept at the arrival at 3 (22 left, rounded up to
    # 30): the timer fires at 33, not at the deadline 25; the arrival at 31 rides along
    sim = simulate([0, 3, 31, 100], [0, 5, 5, 5, 5], Settings(4, 25), draws=Draws(timer_ns=10))
    assert sim.batch_start_ns.tolist() == [31, 100 + 30] and sim.batch_size.tolist() == [3, 1]
    # an instance freeing up after the last arrival is when the loop last slept: the batch of 12
    # waits from 21 (16 left, up to 20) and 2 to wake: 43; the one of 50 from 63 (12 left, 20, + 2): 85
    sim = simulate([0, 1, 12, 50], [0, 20, 20], Settings(2, 25), draws=Draws(timer_ns=10, late_ns=np.array([2, 2, 2, 2])))
    assert sim.batch_start_ns.tolist() == [1, 43, 85] and sim.batch_size.tolist() == [2, 1, 1]
    with pytest.raises(UsageError):
        simulate([0], [0, 5], Settings(1, 5), draws=Draws(timer_ns=-1))


def test_md1_waiting_time() -> None:
    """Batch size 1, Poisson arrivals, fixed service S at load 0.5: Wq = rho S / (2 (1 - rho)) = S/2."""
    s_ns = MS
    a = (unit_arrivals(200_000, 1.0, seed=3) * 1e9 / 500.0).astype(np.int64)  # 500/s x 1 ms = 0.5
    sim = simulate(a, [0, s_ns], Settings(1, 0))
    assert sim.wait_ns.mean() == pytest.approx(0.5 * s_ns, rel=0.04)


def test_mm1_waiting_time() -> None:
    """Exponential service of mean S at load 0.5: Wq = rho S / (1 - rho) = S, sojourn 2 S."""
    s_ns = MS
    n = 200_000
    a = (unit_arrivals(n, 1.0, seed=4) * 1e9 / 500.0).astype(np.int64)
    scale = np.random.default_rng(5).exponential(1.0, n)
    sim = simulate(a, [0, s_ns], Settings(1, 0), draws=Draws(scale=scale))
    assert sim.wait_ns.mean() == pytest.approx(s_ns, rel=0.05)
    assert sim.latency_ns.mean() == pytest.approx(2 * s_ns, rel=0.05)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 50), min_size=1, max_size=60),
    bmax=st.integers(1, 6),
    delay=st.integers(0, 40),
    inst=st.integers(1, 3),
    pref=st.lists(st.integers(1, 6), max_size=3),
)
def test_invariants(gaps: list[int], bmax: int, delay: int, inst: int, pref: list[int]) -> None:
    a = np.cumsum(gaps)
    svc = [0] + [7 + 3 * k for k in range(1, bmax + 1)]
    sim = simulate(a, svc, Settings(bmax, delay, inst, preferred=tuple(pref)))
    assert sim.batch_size.sum() == len(gaps)
    assert sim.batch_size.max() <= bmax
    assert (sim.wait_ns >= 0).all()
    # a request never waits past its delay while an instance is free: a batch is sent at the
    # first request's deadline at the latest, or when an instance frees up
    first = np.cumsum(np.r_[0, sim.batch_size[:-1]])
    deadline = a[first] + delay
    assert (sim.batch_start_ns <= np.maximum(deadline, _free_times(sim, inst))).all()
    # batches are sent in FIFO order, and no instance runs two batches at once
    assert (np.diff(sim.batch_start_ns) >= 0).all()
    assert (sim.latency_ns == np.repeat(sim.batch_finish_ns, sim.batch_size) - a).all()


def _free_times(sim: object, inst: int) -> np.ndarray:
    import heapq

    free = [int(sim.batch_start_ns[0])] * inst  # type: ignore[attr-defined]
    out = []
    for s, f in zip(sim.batch_start_ns.tolist(), sim.batch_finish_ns.tolist()):  # type: ignore[attr-defined]
        out.append(free[0])
        heapq.heapreplace(free, f)
    return np.asarray(out)


def test_settings_are_checked() -> None:
    with pytest.raises(UsageError):
        simulate([0, 1], [0, 5], Settings(2, 0))  # no service time for a batch of 2
    with pytest.raises(UsageError):
        simulate([1, 0], [0, 5], Settings(1, 0))


# -- latency curves ------------------------------------------------------------------------


def test_reads_the_measured_h200_curve() -> None:
    p = load_latency(H200)
    doc = json.loads(H200.read_text())["latency"]["rows"]
    assert p.batch_sizes == tuple(r["batch_size"] for r in doc)
    assert p.median_ns[0] == doc[0]["latency_ns_median"]
    assert p.p90_ns is not None and p.p90_ns[-1] == doc[-1]["latency_ns_p90"]
    # interpolation between measured sizes: 3 lies halfway between 2 and 4
    t = p.service_table(4)
    assert t[3] == round((doc[1]["latency_ns_median"] + doc[2]["latency_ns_median"]) / 2)
    with pytest.raises(UsageError):
        p.service_table(512)


def test_reads_csv_with_units(tmp_path: Path) -> None:
    f = tmp_path / "curve.csv"
    f.write_text("batch_size,latency_ms,latency_ms_p90\n4,2.0,2.5\n1,1.5,1.6\n")
    p = load_latency(f)
    assert p.batch_sizes == (1, 4) and p.median_ns == (1.5e6, 2.0e6) and p.p90_ns == (1.6e6, 2.5e6)
    bad = tmp_path / "bad.csv"
    bad.write_text("size,ms\n1,2\n")
    with pytest.raises(InputError, match="batch_size"):
        load_latency(bad)
    nolat = tmp_path / "nolat.csv"
    nolat.write_text("batch_size,time\n1,2\n")
    with pytest.raises(InputError, match="no latency column"):
        load_latency(nolat)


# -- the tuner's choices on built-in curves -------------------------------------------------


def _even(rate: float | None, n: int = 4000) -> Traffic:
    return Traffic(unit_arrivals(n, 0.0), rate, 0.0, "even")


def _flat(ms: float, sizes: tuple[int, ...] = (1, 2, 4, 8)) -> LatencyProfile:
    return LatencyProfile(sizes, tuple(ms * MS for _ in sizes))


def test_capacity_under_a_tight_slo_is_hand_computed() -> None:
    """Service 1 ms for any batch, no delay, SLO 1.5 ms, evenly spaced arrivals. Up to 1,000/s
    every request finds the instance free (latency 1 ms). Above it a batch is always in flight
    and the phase between arrivals and batch ends drifts, so some request arrives just after a
    batch was sent and waits nearly a full service (latency near 2 ms): batching cannot help.
    At exactly 2,000/s every other arrival lands as a batch is sent and the SLO is met by luck;
    the capacity is the highest rate below which every rate meets it: 1,000/s."""
    res = tune_batching(_flat(1.0), _even(None), int(1.5 * MS), delays_ns=[0])
    for c in res.candidates:
        assert c.capacity_per_s == pytest.approx(1000, rel=0.003), c
    lucky = evaluate(_flat(1.0), _even(None), Settings(2, 0), 2000.0, jitter=False)
    assert lucky.p99_ns == pytest.approx(1.5 * MS, abs=2)


def test_batching_multiplies_capacity_when_the_slo_allows_one_wait() -> None:
    """SLO 2.5 ms = one full service of waiting + one of running: batch B carries B per ms."""
    res = tune_batching(_flat(1.0), _even(None), int(2.5 * MS), delays_ns=[0])
    caps = {c.settings.max_batch: c.capacity_per_s for c in res.candidates}
    for b, cap in caps.items():
        assert cap == pytest.approx(b * 1000, rel=0.003), (b, cap)
    assert res.best is not None and res.best.settings.max_batch == 8
    assert res.baseline.capacity_per_s == pytest.approx(1000, rel=0.003)


def test_no_gain_from_batching_a_linear_curve_prefers_low_latency() -> None:
    """Latency proportional to the batch: every max batch carries the same, and at the observed
    rate the tuner prefers the candidate with the lowest p99."""
    prof = LatencyProfile((1, 2, 4, 8), (1 * MS, 2 * MS, 4 * MS, 8 * MS))
    traffic = Traffic(unit_arrivals(4000, 1.0, seed=1), 300.0, 1.0, "poisson")
    res = tune_batching(prof, traffic, 20 * MS, jitter=False)
    caps = [c.capacity_per_s for c in res.frontier]
    assert max(caps) <= 1000.001 and min(caps) > 0
    assert res.best is not None and res.best.at_rate is not None
    assert res.best.at_rate.objective_ns == min(c.at_rate.objective_ns for c in res.candidates if c.at_rate and c.capacity_per_s >= max(caps) * 0.98)


def test_the_tuner_draws_the_measured_passes() -> None:
    """Batch 1 always 1 ms: capacity 1000/s. With one pass in ten measured at 3 ms (mean 1.2
    ms) the kept passes cut the capacity to at most 1/1.2 ms = 833/s and say so."""
    flat = LatencyProfile((1,), (1 * MS,), samples_ns=((1 * MS,) * 10,))
    slow = LatencyProfile((1,), (1 * MS,), samples_ns=((1 * MS,) * 9 + (3 * MS,),))
    traffic = Traffic(unit_arrivals(4000, 1.0, seed=2), 100.0, 1.0, "poisson")
    a = tune_batching(flat, traffic, 30 * MS, delays_ns=[0])
    b = tune_batching(slow, traffic, 30 * MS, delays_ns=[0])
    assert "measured passes" in b.jitter and a.baseline.capacity_per_s > 900
    assert b.baseline.capacity_per_s <= 1000 / 1.2 and b.baseline.capacity_per_s < a.baseline.capacity_per_s


def test_h200_curve_batching_raises_capacity_many_fold() -> None:
    """The measured H200 encoder: ~2.7 ms at batch 1, flat to 32. Without batching it carries
    about 1/2.7 ms = 365/s; batching to 32 or more carries thousands within a 50 ms p99."""
    prof = load_latency(H200)
    traffic = Traffic(unit_arrivals(5000, 1.0), 125.0, 1.0, "poisson")
    res = tune_batching(prof, traffic, 50 * MS, max_batches=[1, 8, 32, 128], delays_ns=[0, 2 * MS])
    assert res.baseline.capacity_per_s < 1 / (prof.median_ns[0] / 1e9)
    assert res.best is not None and res.best.settings.max_batch >= 32
    assert res.best.capacity_per_s > 20 * res.baseline.capacity_per_s


def test_profile_latency_on_a_cpu_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from whyidle.cli import main
    from whyidle.sweep.examples import tiny_encoder
    from whyidle.serving.latency import profile_latency

    model, x = tiny_encoder()
    p = profile_latency(model, x, [1, 4], warmup=1, iters=3)
    assert p.batch_sizes == (1, 4) and all(m > 0 for m in p.median_ns) and p.device == "cpu"
    assert p.p90_ns is not None and all(q >= m for q, m in zip(p.p90_ns, p.median_ns))
    saved = tmp_path / "curve.json"
    rc = main(["batching", "--measure", "whyidle.sweep.examples:tiny_encoder", "--batch-sizes", "1,2", "--rate", "10",
               "--slo-ms", "1000", "--requests-per-run", "500", "--save-latency", str(saved)])
    out = capsys.readouterr().out
    assert rc == 0 and "Recommended" in out
    assert "MPS" not in out and "MIG" not in out and "Instances:" in out  # a CPU: no GPU-sharing advice (issue 25, item 3)
    again = load_latency(saved)
    assert again.batch_sizes == (1, 2)


def test_evaluate_runs_under_the_callers_config() -> None:
    """The jitter's spread is capped at the caller's batching_max_sigma, not the default's: with
    the cap at 0 a jittered run is the unjittered one."""
    from whyidle.config import Config

    prof = LatencyProfile((1, 2, 4, 8), (1 * MS, 2 * MS, 4 * MS, 8 * MS), (2 * MS, 4 * MS, 8 * MS, 16 * MS))
    plain = evaluate(prof, _even(None), Settings(4, int(0.5 * MS)), 800.0, jitter=False)
    capped = evaluate(prof, _even(None), Settings(4, int(0.5 * MS)), 800.0, cfg=Config(batching_max_sigma=0.0))
    default = evaluate(prof, _even(None), Settings(4, int(0.5 * MS)), 800.0)
    assert capped == plain and default != plain
