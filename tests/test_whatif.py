"""The what-if replay (analyses/whatif.py) on timelines with known answers (times in microseconds).

Each scenario is drawn in its docstring; the expected step times follow from the replay's rules
(the module docstring), worked out by hand beside each assertion.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import whyidle
from whyidle.analyses import whatif as W
from whyidle.analyses import whatif_path as WP
from whyidle.analyses.links import link_launches
from whyidle.analyses.window import select_window
from whyidle.config import Config
from whyidle.findings.predict import lever_edits, predict_from_graph
from whyidle.timeline import Kind
from whyidle.timeline.model import Timeline

from tlbuild import TL, US

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def graph(tl: Timeline) -> W.Graph:
    links = link_launches(tl)
    g = W.build_graph(tl, links, select_window(tl, links, Config().window))
    assert g is not None
    return g


def steps_us(g: W.Graph, edit: W.Edit = W.NO_EDIT) -> list[float]:
    return [int(x) / US for x in W.replay(g, edit).step_ns]


def starved(loader_us: float = 60) -> Timeline:
    """Three steps of 100 us::

        host   [loader 0-60][launch 60-65] ...... |[loader 100-160][launch] ...
        device                   [k 70-100]       |                  [k 170-200]
    """
    t = TL()
    for i in range(3):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.host(LOADER, o, o + loader_us)
        t.work("k", o + 70, o + 100, launch_at=o + loader_us, launch_dur=5)
    return t.build()


def test_no_edit_gives_back_the_recorded_steps() -> None:
    assert steps_us(graph(starved())) == [100, 100, 100]


def test_workers_remove_the_loader_from_the_step() -> None:
    # Loader time at zero weight: step 1 is launch (0) .. next step start (host 65-100 kept: 40 us
    # of host after the loader); every step 40 us; the last ends with its kernel: 80 + 10 + 30.
    g = graph(starved())
    assert steps_us(g, W.Edit(loader_workers=2)) == [40, 40, 40]
    # The handoff cost is added per batch.
    assert steps_us(g, W.Edit(loader_workers=2, loader_handoff_ns=5 * US)) == [45, 45, 45]


def test_workers_cannot_beat_the_loaders_production_rate() -> None:
    # 60 us of loading per batch over 2 workers: a step of at least 30 us; over 1 worker, 60 us,
    # above the replayed 40 us.
    g = graph(starved())
    assert W.replay(g, W.Edit(loader_workers=2)).mean_step_ns == 40 * US
    assert W.replay(g, W.Edit(loader_workers=1)).mean_step_ns == 60 * US


def synced() -> Timeline:
    """Two steps of 100 us; each waits for its kernel, then computes on the host::

        host   [launch 0-5][cudaDeviceSynchronize 5-62][aten::softmax 62-95]
        device      [k 10-60]
    """
    t = TL()
    for i in range(2):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.work("k", o + 10, o + 60, launch_at=o, launch_dur=5)
        t.host("cudaDeviceSynchronize", o + 5, o + 62, kind=Kind.RUNTIME)
        t.host("aten::softmax", o + 62, o + 95)
    return t.build()


def test_sync_removed_lets_the_host_run_ahead() -> None:
    g = graph(synced())
    # The last step ends with its device work (the window ends there): 110-160 -> 60 us.
    assert steps_us(g) == [100, 60]
    # The sync keeps its tail (2 us after the device finished): step 1 = 5 + 2 + 33 (softmax)
    # + 5 (host to the step end) = 45 us. Step 2 launches at 45, its kernel is ready at 55 but
    # the stream is busy until 60: 60-110; the host ends at 45 + 40 = 85 -> the window ends at
    # 110: 65 us.
    assert steps_us(g, W.Edit(sync_removed=True)) == [45, 65]
    # With the host work that used the value gone too (softmax: after the sync, before the next
    # launch, launching nothing): step 1 = 5 + 2 + 5 = 12; step 2's kernel waits for the stream
    # (60-110): 98 us. The device is now the bottleneck: the window is its 100 us of work + 10.
    assert steps_us(g, W.Edit(sync_removed=True, sync_consumers_removed=True)) == [12, 98]


def pageable() -> Timeline:
    """Two steps of 100 us with a blocking pageable copy::

        host   [cudaMemcpyAsync 0-52][launch 55-60] ...
        device     [HtoD 10-50]          [k 65-90]
    """
    t = TL()
    for i in range(2):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.work("Memcpy HtoD (Pageable -> Device)", o + 10, o + 50, launch_at=o, launch_dur=52, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
        t.work("k", o + 65, o + 90, launch_at=o + 55, launch_dur=5)
    return t.build()


def test_async_copy_no_longer_blocks_the_host() -> None:
    g = graph(pageable())
    assert steps_us(g) == [100, 90]  # the last step ends with its kernel at 190
    # The call now costs the median non-blocking launch call (5 us): the copy is ready at 0 + 10
    # (its recorded launch latency) and runs 10-50; the kernel launched at 5 + 3 = 8 is ready at
    # 18 but waits for the copy on the stream: 50-75. Host: 5 + 48 (52 -> 100) = 53 per step.
    # Step 2: the copy is ready at 63 but the stream is busy until 75: 75-115, its kernel
    # 115-140 -> the window ends at 140: 87 us. The device (65 us of work per step) now decides.
    assert steps_us(g, W.Edit(h2d_async=True)) == [53, 87]


def launch_bound() -> Timeline:
    """Two steps of 100 us: ten 2 us kernels, each launched 10 us after the previous one."""
    t = TL()
    for i in range(2):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        for j in range(10):
            t.work("k", o + 10 * j + 6, o + 10 * j + 8, launch_at=o + 10 * j, launch_dur=5)
    return t.build()


def test_host_cost_scaled_down() -> None:
    g = graph(launch_bound())
    assert steps_us(g) == [100, 98]  # the last step ends with its last kernel at 198
    # Host time x0.5: launches every 5 us, step 1 = 50; step 2 = 50 host .. its last kernel
    # launched at 95, ready at 101, ends 103 -> 53. The kernels keep their 6 us latency and 2 us.
    assert steps_us(g, W.Edit(host_factor=0.5)) == [50, 53]


def gemm_bound() -> Timeline:
    """Two steps of 100 us, each waiting for its FP32 GEMM::

        host   [launch 0-5][cudaDeviceSynchronize 5-100]
        device      [volta_sgemm 5-95]
    """
    t = TL()
    for i in range(2):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.work("volta_sgemm_128x64_nn", o + 5, o + 95, launch_at=o, launch_dur=5)
        t.host("cudaDeviceSynchronize", o + 5, o + 100, kind=Kind.RUNTIME)
    return t.build()


def test_tensor_cores_shorten_fp32_gemm() -> None:
    g = graph(gemm_bound())
    assert steps_us(g) == [100, 95]  # the last step ends with its GEMM at 195
    # 5 (latency) + 90 / 5 + 5 (the sync's tail) = 28 us; the last step ends with its GEMM: 23.
    assert steps_us(g, W.Edit(gemm_factor=5.0)) == [28, 23]


def test_batch_factor_grows_kernels_that_fill_the_sms() -> None:
    g = graph(gemm_bound())
    # Unknown blocks per SM count as filling: the kernel takes 180 us: 5 + 180 + 5 = 190 (the
    # last step ends with its kernel: 185).
    assert steps_us(g, W.Edit(batch_factor=2.0)) == [190, 185]
    assert steps_us(g, W.Edit(batch_factor=2.0, batch_growth="none")) == [100, 95]


def test_critical_path_of_a_starved_step_is_the_loader_then_the_kernel() -> None:
    g = graph(starved())
    r = W.replay(g)
    path = WP.critical_path(g, r, 1)
    kinds = [(s.kind, s.dur_ns // US) for s in path]
    # Step 2 (100-200) ends with its kernel: back to its launch at 160, which came right after the
    # loader (100-160).
    assert kinds == [("loader", 60), ("launch latency", 10), ("device", 30)]
    assert path[0].start_ns == 100 * US and path[-1].end_ns == 200 * US
    # With workers the loader is gone: step 2 runs 40-80, its launch at 40 opens it.
    r2 = W.replay(g, W.Edit(loader_workers=4))
    kinds2 = [(s.kind, s.start_ns // US, s.dur_ns // US) for s in WP.critical_path(g, r2, 1)]
    assert kinds2 == [("launch latency", 40, 10), ("device", 50, 30)]


def test_findings_carry_predictions_and_the_report_the_critical_path() -> None:
    r = whyidle.diagnose(starved(loader_us=80))
    top = r.findings[0]
    assert top.cause == "input_pipeline"
    p = top.prediction
    assert p is not None
    assert p.step_ns_before == 100 * US
    # 4 workers (the config), 110 us handoff: 20 us of host + 110 per step (but the last step ends
    # with its kernel 10 + 30 after the launch: 20 -> 40) ... checked against the replay directly:
    g = graph(starved(loader_us=80))
    assert p.step_ns_after == W.replay(g, lever_edits("input_pipeline", Config().predictions).point).mean_step_ns
    assert p.speedup == 100 * US / p.step_ns_after
    assert r.extra["critical_path"]["by_kind_ns"]["loader"] == 80 * US
    js = r.to_dict()
    assert js["findings"][0]["prediction"]["step_ns_after"] == p.step_ns_after


def test_prediction_range_orders_its_ends() -> None:
    g = graph(synced())
    p = predict_from_graph(g, lever_edits("host_sync", Config().predictions), batch_size=8)
    assert p.step_ns_low <= p.step_ns_after <= p.step_ns_high
    assert p.samples_per_s_after is not None and p.samples_per_s_before is not None
    assert abs(p.samples_per_s_after / p.samples_per_s_before - p.speedup) < 1e-9


# --- property: the replay with no edit gives back the recorded steps ----------------------------


@st.composite
def simulated(draw: st.DrawFn) -> Timeline:
    """A host/device loop built by the replay's own rules with random costs: loaders, launches
    (FIFO on one stream, device start = max(launch + latency, previous end)), and syncs."""
    t = TL()
    n_steps = draw(st.integers(2, 4))
    h = 0
    prev_end = 0
    for s in range(n_steps):
        start = h
        if draw(st.booleans()):
            dur = draw(st.integers(10, 200))
            t.host(LOADER, h, h + dur)
            h += dur
        for _ in range(draw(st.integers(1, 6))):
            h += draw(st.integers(1, 30))  # host work between launches
            kdur = draw(st.integers(1, 80))
            lat = draw(st.integers(3, 8))
            ks = max(h + lat, prev_end)
            t.work("k", ks, ks + kdur, launch_at=h, launch_dur=4)
            prev_end = ks + kdur
            h += 4
            if draw(st.integers(0, 4)) == 0:
                tail = draw(st.integers(1, 5))
                end = max(h, prev_end) + tail
                t.host("cudaStreamSynchronize", h, end, kind=Kind.RUNTIME)
                h = end
        h += draw(st.integers(1, 40))
        t.step(s + 1, start, h)
    return t.build()


@settings(max_examples=60, deadline=None)
@given(simulated())
def test_replay_without_edit_reproduces_step_times(tl: Timeline) -> None:
    links = link_launches(tl)
    win = select_window(tl, links, Config().window)
    g = W.build_graph(tl, links, win)
    assert g is not None
    got = W.replay(g).step_ns
    want = np.array([s.end_ns - s.start_ns for s in win.steps])
    assert np.all(np.abs(got - want) <= 0.01 * want)
    # Removing the profiler's host time only takes time away: nothing ends later.
    assert W.replay(g, W.Edit(profiler_removed=True)).step_ns.sum() <= got.sum()


def shifted(tl: Timeline, by: int) -> Timeline:
    import msgspec.structs

    return msgspec.structs.replace(tl, start_ns=tl.start_ns + by, end_ns=tl.end_ns + by)


@settings(max_examples=30, deadline=None)
@given(simulated(), st.sampled_from([W.NO_EDIT, W.Edit(loader_workers=2), W.Edit(sync_removed=True), W.Edit(host_factor=0.3), W.Edit(profiler_removed=True)]))
def test_replay_is_the_same_at_epoch_timestamps(tl: Timeline, edit: W.Edit) -> None:
    # Kineto's timestamps are nanoseconds since the epoch (~1.7e18), where a float64 steps by 256
    # ns: the replay runs from the window start, so moving the trace moves the replay exactly.
    by = 1_764_547_200_123_456_789
    links = link_launches(tl)
    g0 = W.build_graph(tl, links, select_window(tl, links, Config().window))
    tl1 = shifted(tl, by)
    links1 = link_launches(tl1)
    g1 = W.build_graph(tl1, links1, select_window(tl1, links1, Config().window))
    assert g0 is not None and g1 is not None
    r0, r1 = W.replay(g0, edit), W.replay(g1, edit)
    assert np.array_equal(r1.step_ns, r0.step_ns)
    assert np.array_equal(r1.dev_start, r0.dev_start + by) and np.array_equal(r1.anc_end, r0.anc_end + by)
    if edit == W.NO_EDIT:  # the recorded times, to the nanosecond
        assert np.array_equal(r1.dev_start, g1.dev_start) and np.array_equal(r1.dev_end, g1.dev_end)


def same_replay(g: W.Graph, edit: W.Edit) -> None:
    """The replay's array path (every run of device work as arrays) and its scalar path (one op at
    a time) give the same numbers."""
    a, b = W.replay(g, edit, min_vector=1), W.replay(g, edit, min_vector=1 << 30)
    for f in a.__struct_fields__:
        x, y = getattr(a, f), getattr(b, f)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, (f, edit)


EDITS = [
    W.NO_EDIT, W.Edit(profiler_removed=True), W.Edit(sync_removed=True), W.Edit(sync_removed=True, sync_consumers_removed=True),
    W.Edit(h2d_async=True), W.Edit(loader_workers=4, loader_handoff_ns=100_000), W.Edit(host_factor=0.25),
    W.Edit(host_factor=0.5, host_region="optimizer"), W.Edit(gemm_factor=3), W.Edit(batch_factor=2),
    W.Edit(carried_backlog_ns=5_000_000, profiler_removed=True),
]


@st.composite
def tangled(draw: st.DrawFn) -> Timeline:
    """Steps of device work on up to three streams, long runs and short ones, some without a
    launch record, blocking copies, syncs and loader ranges at random: not a consistent
    recording, just every shape the replay's two paths must agree on."""
    t = TL()
    h = 0
    for s in range(draw(st.integers(2, 4))):
        start = h
        if draw(st.booleans()):
            t.host(LOADER, h, h + draw(st.integers(5, 100)))
            h += 100
        for _ in range(draw(st.integers(1, 40))):
            h += draw(st.integers(1, 10))
            ks = h + draw(st.integers(-2, 60))
            stream = draw(st.sampled_from([7, 7, 7, 8, 9]))
            launched = draw(st.integers(0, 9)) > 0
            if draw(st.integers(0, 9)) == 0:  # a blocking host-to-device copy
                t.work("Memcpy HtoD (Pageable -> Device)", ks, ks + 20, launch_at=h, launch_dur=ks + 21 - h, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync", stream=stream)
                h = ks + 21
                continue
            t.work("k", ks, ks + draw(st.integers(1, 50)), launch_at=h if launched else None, launch_dur=3, stream=stream)
            h += 3
            if draw(st.integers(0, 7)) == 0:
                end = h + draw(st.integers(1, 80))
                t.host("cudaDeviceSynchronize", h, end, kind=Kind.RUNTIME)
                h = end
        h += draw(st.integers(1, 40))
        t.step(s + 1, start, h)
    return t.build()


@settings(max_examples=60, deadline=None)
@given(st.one_of(simulated(), tangled()), st.sampled_from(EDITS))
def test_array_and_scalar_replays_agree(tl: Timeline, edit: W.Edit) -> None:
    links = link_launches(tl)
    g = W.build_graph(tl, links, select_window(tl, links, Config().window))
    if g is not None:
        same_replay(g, edit)


def test_array_and_scalar_replays_agree_on_real_traces(resnet0: object) -> None:
    from pathlib import Path

    from whyidle.sources import load

    h200 = Path(__file__).parent / "data" / "h200"
    for p in [resnet0, *sorted(h200.glob("*.pt.trace.json.gz"))]:
        tl = load(p)
        links = link_launches(tl)
        g = W.build_graph(tl, links, select_window(tl, links, Config().window))
        if g is None:
            continue
        for e in EDITS:
            same_replay(g, e)


def test_replay_of_real_traces_reproduces_their_steps(resnet0: object) -> None:
    from pathlib import Path

    from whyidle.sources import load

    h200 = Path(__file__).parent / "data" / "h200"
    paths = [resnet0, *sorted(h200.glob("lab_*_cuda*.pt.trace.json.gz"))]
    for p in paths:
        tl = load(p)
        links = link_launches(tl)
        win = select_window(tl, links, Config().window)
        g = W.build_graph(tl, links, win)
        assert g is not None, p
        got = W.replay(g).step_ns
        want = np.array([s.end_ns - s.start_ns for s in win.steps])
        assert np.all(np.abs(got - want) <= 0.01 * want), (p, got, want)


def test_long_windows_are_replayed_over_their_middle_steps() -> None:
    from whyidle.findings.predict import _middle_steps

    t = TL()
    for i in range(10):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.host(LOADER, o, o + 60)
        t.work("k", o + 70, o + 100, launch_at=o + 60, launch_dur=5)
    tl = t.build()
    links = link_launches(tl)
    win = select_window(tl, links, Config().window)
    sub = _middle_steps(win, 4)
    assert [s.number for s in sub.steps] == [4, 5, 6, 7]
    assert (sub.start_ns, sub.end_ns) == (300 * US, 700 * US)
    g = W.build_graph(tl, links, sub)
    assert g is not None
    # Sub-window steps: each 100 us; the last ends with its kernel at 700.
    assert steps_us(g) == [100, 100, 100, 100]
    assert steps_us(g, W.Edit(loader_workers=2)) == [40, 40, 40, 40]
    assert _middle_steps(win, 16) is win


def test_critical_path_names_host_segments_by_their_ops() -> None:
    r = whyidle.diagnose(starved())
    segs = r.extra["critical_path"]["segments"]
    loader = [s for s in segs if s["kind"] == "loader"]
    assert loader and loader[0]["names"] == [LOADER]


def recorded_ops() -> Timeline:
    """Three host-bound steps of 100 us, each twenty 3 us ops 1 us apart, then a launch::

        host   [op 0-3] [op 4-7] ... [op 76-79] [launch 80-85]  |[op 100-103] ...
        device                                      [k 86-96]   |
    """
    t = TL()
    for i in range(3):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        for j in range(20):
            t.host("aten::add", o + 4 * j, o + 4 * j + 3)
        t.work("k", o + 86, o + 96, launch_at=o + 80, launch_dur=5)
    return t.build()


def test_profiler_cost_is_the_floor_of_the_gaps_before_its_records() -> None:
    g = graph(recorded_ops())
    # 59 gaps before CPU ops (the first op has no earlier record): 57 of 1 us, 2 of 15 us (from
    # a launch's end at 85 to the next step's first op): the 10th percentile is 1 us. Three
    # launch calls are too few to tell their cost (fewer than 50): none removed for them.
    assert g.profiler_floor_ns == {"cpu_op": 1000, "runtime": 0, "python": 0, "annotation": 0}
    # 1 us before each of the 59 ops.
    assert g.profiler.total() == 59 * US
    assert steps_us(g) == [100, 100, 96]
    # Step 1 loses the 19 us before its ops 2-20 and the 1 us before step 2's first op (99-100):
    # 80 us; step 2 the same; step 3 the 19 us before its ops, then its launch at 280 - 59 = 221,
    # the kernel 6 us later for 10 us: 237 - 160 = 77 us.
    assert steps_us(g, W.Edit(profiler_removed=True)) == [80, 80, 77]


def test_record_gaps_go_back_to_the_latest_boundary() -> None:
    from whyidle.analyses.profcost import record_gaps

    # op 0-5 holding op 2-4, then op 10-12: gaps none, 2 (from the parent's start), 5 (from 5).
    gap, has = record_gaps(np.array([0, 2, 10]), np.array([5, 4, 12]))
    assert gap[1:].tolist() == [2, 5] and has.tolist() == [False, True, True]
    # A start on another record's end has no gap.
    gap, has = record_gaps(np.array([0, 5]), np.array([5, 8]))
    assert gap[1] == 0 and bool(has[1])


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_record_gaps_against_their_definition(spans: list[tuple[int, int]]) -> None:
    """Each start's gap back to the latest boundary before it, 0 when it shares its instant with
    another boundary (a start or an end), none before the first; by brute force."""
    from whyidle.analyses.profcost import record_gaps

    start = np.array(sorted(s for s, _ in spans), dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    gap, has = record_gaps(start, end)
    bounds = start.tolist() + end.tolist()
    for i, s in enumerate(start.tolist()):
        shared = bounds.count(s) > 1
        earlier = [b for b in bounds if b < s]
        assert bool(has[i]) == (shared or bool(earlier))
        if shared:
            assert gap[i] == 0
        elif earlier:
            assert gap[i] == s - max(earlier)
    assert gap.dtype == np.int64


@given(st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=60), st.floats(-0.1, 1.1))
@settings(max_examples=300, deadline=None)
def test_linear_quantile_is_numpys_bit_for_bit(values: list[int], q: float) -> None:
    from whyidle.analyses.profcost import linear_quantile

    a = np.array(values, dtype=np.int64)
    q = min(max(q, 0.0), 1.0)  # np.quantile refuses q outside [0, 1]
    assert linear_quantile(a, q) == float(np.quantile(a, q))
    assert a.tolist() == values  # the caller's array is not reordered


def test_carried_backlog_delays_the_first_sync() -> None:
    g = graph(synced())
    # The stream is busy until 30 us: the first kernel runs 30-80 (not 10-60), the sync returns
    # at 80 + its 2 us tail = 82, the softmax and the rest of the step (38 us) end step 1 at 120.
    # Step 2 launches at 120: its kernel runs 130-180, the window's end: 60 us.
    assert steps_us(g, W.Edit(carried_backlog_ns=30 * US)) == [120, 60]


def device_bound() -> Timeline:
    """Three steps of 100 us, each launching a 120 us kernel: the device falls 20 us behind per step::

        host   [launch 0-5] ........ |[launch 100-105] ...  |[launch 200-205]
        device     [k0 10-130]             [k1 130-250]            [k2 250-370]
    """
    t = TL()
    for i in range(3):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.work("k", max(o + 10, 10 + 120 * i), max(o + 10, 10 + 120 * i) + 120, launch_at=o, launch_dur=5)
    return t.build()


def test_steady_step_and_no_backlog_without_a_wait() -> None:
    g = graph(device_bound())
    r = W.replay(g)
    assert [int(x) / US for x in r.step_ns] == [100, 100, 170]
    # The window's mean carries the backlog into its last step (370 / 3 = 123.3 us); the steady
    # step is the interval between the ends of consecutive steps' work: 130, 250, 370 -> 120 us.
    assert r.done_ns.tolist() == [130 * US, 250 * US, 370 * US]
    assert r.steady_step_ns == 120 * US
    assert r.mean_step_ns == 370 * US / 3
    # No step waits for the device: how far the host ran ahead before the window is unknown.
    assert W.backlog_ns(g, r) == 0


def starved_synced() -> Timeline:
    """Three steps of 100 us: a 60 us loader, a stream sync (2 us, the previous kernel long done),
    then a launch of an 80 us kernel::

        host   [loader 0-60][sync 60-62][launch 62-67] ......... |[loader 100-160][sync] ...
        device                               [k 70-150]          |
    """
    t = TL()
    for i in range(3):
        o = 100 * i
        t.step(i + 1, o, o + 100)
        t.host(LOADER, o, o + 60)
        t.host("cudaStreamSynchronize", o + 60, o + 62, kind=Kind.RUNTIME)
        t.work("k", o + 70, o + 150, launch_at=o + 62, launch_dur=5)
    return t.build()


def test_warmup_backlog_in_a_profiled_after_run() -> None:
    from whyidle.findings.predict import Replays

    g = graph(starved_synced())
    assert W.first_wait_excess_ns(g) == 0  # every step's sync took its 2 us tail
    e = W.Edit(loader_workers=2)
    # Without the loader each sync waits for the previous kernel: kernels 10-90, 100-180,
    # 190-270; host steps start at 0, 40 (2 + 38 us of host after the sync), 130 (92 + 38).
    r = W.replay(g, e)
    assert [int(x) / US for x in r.step_ns] == [40, 90, 140]
    assert r.steady_step_ns == 90 * US
    # Each step's sync starts 50 us before the previous kernel ends (40 vs 90, 130 vs 180).
    assert W.backlog_ns(g, r) == 50 * US
    # The untraced replay is the same (too few records to tell the profiler's cost).
    assert Replays(g).warmup_backlog(e) == 50 * US
    # A profiled after-run starts 50 us behind: the first sync returns at 52, kernels 60-140,
    # 150-230, 240-320.
    assert steps_us(g, W.Edit(loader_workers=2, carried_backlog_ns=50 * US)) == [90, 90, 140]
    lv = lever_edits("input_pipeline", Config().predictions, workers=2)
    p = predict_from_graph(g, lv._replace(point=e, low=e, high=e), None, warmup=True)
    assert p.step_ns_after == 320 * US / 3
    assert "behind the device work of its unprofiled warm-up step" in p.assumption
    # On the untraced basis: the steady step, no backlog.
    assert predict_from_graph(g, lv._replace(point=e, low=e, high=e), None, untraced=True).step_ns_after == 90 * US


def test_pinned_over_pageable_bandwidth_from_the_trace() -> None:
    t = TL()
    t.step(1, 0, 100)
    # 10 MB pinned in 10 us, 10 MB pageable in 40 us: 4x; a 4-byte pinned copy (1 us) is too
    # small to count (it would halve the pinned bandwidth).
    t.work("Memcpy HtoD (Pinned -> Device)", 10, 20, launch_at=0, nbytes=10_000_000, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
    t.work("Memcpy HtoD (Pinned -> Device)", 21, 22, launch_at=6, nbytes=4, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
    t.work("Memcpy HtoD (Pageable -> Device)", 30, 70, launch_at=12, launch_dur=60, nbytes=10_000_000, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
    t.work("k", 80, 95, launch_at=75)
    g = graph(t.build())
    assert g.pinned_speedup == 4.0
    lv = lever_edits("h2d_copy", Config().predictions, copy_speedup=g.pinned_speedup)
    assert lv.point.pageable_copy_factor == 4.0 and "this trace's pinned over pageable" in lv.assumption
    # Without both kinds the configured point stays.
    assert lever_edits("h2d_copy", Config().predictions).point.pageable_copy_factor == Config().predictions.whatif_pinned_copy_speedup[0]
