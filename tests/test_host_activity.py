"""Issue 17's attribution mechanisms, each on a timeline built in code with its exact attribution
(times in microseconds). The host activity model, launch latency and cold start, dependencies,
capture artifacts, the sync that owns what it serialises, and the workload kind.
"""

from __future__ import annotations

import whyidle
from whyidle.analyses.hostwork import WorkClass, classify
from whyidle.timeline import Kind

from tlbuild import TL, US

TRAINING = "Optimizer.step#SGD.step"


def causes(report: whyidle.Report) -> dict[str, int]:
    return {k: v // US for k, v in report.idle_by_cause_ns.items() if v}


def py(t: TL, name: str, start: float, end: float) -> None:
    t.host(name, start, end, kind=Kind.PYTHON)


# -- the innermost frame names the work ---------------------------------------------------------


def test_frames_are_classified_by_what_they_name() -> None:
    assert classify("numpy/_core/_methods.py(148): _var") == WorkClass.DATA
    assert classify("<built-in method astype of numpy.ndarray object at 0x1>") == WorkClass.DATA
    assert classify("infer.py(278): decode_and_normalise") == WorkClass.DATA
    assert classify("torch/nn/functional.py(6244): multi_head_attention_forward") == WorkClass.DISPATCH
    assert classify("vllm/v1/attention/backends/flashinfer.py(1064): forward") == WorkClass.DISPATCH
    assert classify("flashinfer/decode.py(10): run") == WorkClass.DISPATCH  # a framework's "decode" phase
    assert classify("KernelExecutor::runFusion") == WorkClass.DISPATCH
    assert classify("## Call CompiledFxGraph abc ##") == WorkClass.DISPATCH
    assert classify("executor_utils::Nvrtc::CompileProgram") == WorkClass.COLD
    assert classify("<frozen importlib._bootstrap>(1): _find_and_load") == WorkClass.COLD
    assert classify("torch/compiler/__init__.py(3): is_compiling") == WorkClass.DISPATCH  # every op calls it
    assert classify("queue.py(154): get") == WorkClass.WAIT
    assert classify("<built-in method acquire of _thread.lock object at 0x7f>") == WorkClass.WAIT
    assert classify("epoll_wait") == WorkClass.WAIT
    assert classify("MPI_Recv") == WorkClass.RANKS
    assert classify("<built-in function sum>") == WorkClass.NEUTRAL
    assert classify("train.py(40): step") == WorkClass.USER


def test_numpy_preprocessing_on_the_launching_thread_is_host_preprocessing() -> None:
    """device █ 0-100 |.................. 1915 ..................|█ 2015-2100
    python [infer.py step ...........................................................]
              [decode_and_normalise 110-1900 [numpy _var 500-900]]    [forward 1950-2010]
                                                                     [aten::linear 1990-2005][launch 2010]"""
    t = TL()
    py(t, "infer.py(284): step", 0, 2100)
    t.work("k0", 0, 100, launch_at=-10)
    py(t, "infer.py(278): decode_and_normalise", 110, 1900)
    py(t, "numpy/_core/_methods.py(148): _var", 500, 900)
    py(t, "torch/nn/modules/linear.py(125): forward", 1950, 2012)
    t.host("aten::linear", 1990, 2005)
    t.work("k1", 2015, 2100, launch_at=2010)
    r = whyidle.diagnose(t.build())
    # 100-110 and 1900-1950: user code between calls, under 1 ms (dispatch, 60); decode [110, 1900):
    # data (1790); forward 1950-1990 (40) and the op 1990-2005 (15) plus 2005-2010 (5): host
    # overhead; the 5 us launch tail follows the dominant cause (preprocessing)
    assert causes(r) == {"starvation/host_preprocessing": 1795, "underfilled/host_overhead": 120}
    top = r.findings[0]
    assert (top.group, top.cause) == ("starvation", "host_preprocessing")
    # the innermost frames, by their own time
    assert [n for n, _, _ in top.evidence.top_ops[:2]] == ["infer.py(278): decode_and_normalise", "numpy/_core/_methods.py(148): _var"]
    assert top.evidence.top_ops[0][1] == 1390 * US
    assert r.source.workload == "inference"


def test_user_code_is_dispatch_when_short_and_own_work_when_long() -> None:
    """Two gaps of user Python without an op: 300 us (the interpreter) and 1500 us (its own work)."""
    t = TL()
    t.host(TRAINING, -30, -20)
    py(t, "train.py(10): main", -50, 3000)
    t.work("k0", 0, 100, launch_at=-10)
    t.work("k1", 405, 500, launch_at=400)
    t.work("k2", 2005, 2100, launch_at=2000)
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"underfilled/host_overhead": 305, "starvation/host_preprocessing": 1505}


def test_framework_python_between_ops_is_host_overhead_not_demand() -> None:
    """An LLM engine's Python between launches (the B200 prefill trace's pattern)."""
    t = TL()
    py(t, "vllm/v1/worker/gpu_model_runner.py(1): execute_model", -50, 3000)
    t.work("k0", 0, 100, launch_at=-10)
    py(t, "flashinfer/fused_moe/core.py(1633): trtllm_fp4_block_scale_moe_op", 100, 1400)
    t.host("aten::empty", 1400, 1410)
    t.work("k1", 1505, 1600, launch_at=1500)
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"underfilled/host_overhead": 1405}
    assert r.source.workload == "serving"  # engine frames, but no wait: no demand
    assert all(f.group != "insufficient_demand" for f in r.findings)


def test_nothing_traced_is_untraced_host_work_never_demand() -> None:
    t = TL()
    t.work("k0", 0, 100, launch_at=-10)
    t.host("aten::linear", 2600, 2620)
    t.work("k1", 2615, 2700, launch_at=2610)
    r = whyidle.diagnose(t.build())
    # 2500 us with nothing traced and the launch tail (the dominant cause); the op: host overhead
    assert causes(r) == {"unattributed/untraced_host": 2505, "underfilled/host_overhead": 10}
    assert any("with_stack=True" in q for q in r.quality)  # the capture option that would name it


# -- launch latency and cold start ---------------------------------------------------------------


def test_a_launch_still_running_when_the_device_went_idle_is_launch_latency() -> None:
    """device █ 0-100 |. 30 .|█ 130-200      the launch [90, 120) was running at 100."""
    t = TL()
    t.host(TRAINING, -30, -20)
    t.work("k0", 0, 100, launch_at=-10)
    t.work("k1", 130, 200, launch_at=90, launch_dur=30)
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"underfilled/launch_latency": 30}


def test_a_slow_launch_in_flight_is_cold_start_and_not_queued_work() -> None:
    """The launch [50, 3050) (lazy module loading) was running when the device went idle."""
    t = TL()
    t.host(TRAINING, -30, -20)
    t.work("k0", 0, 100, launch_at=-10)
    t.work("k1", 3060, 3100, launch_at=50, launch_dur=3000)
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"unattributed/cold_start": 2960}
    assert r.cold_start and r.findings == ()


def test_the_first_call_of_an_op_that_is_far_slower_than_its_later_calls_is_cold_start() -> None:
    """aten::conv2d's first call takes 2 ms (cuDNN heuristics, lazy loading), later ones 20 us."""
    t = TL()
    t.host(TRAINING, -30, -20)
    t.work("k0", 0, 100, launch_at=-10)
    t.host("aten::conv2d", 100, 2100)
    t.work("k1", 2110, 2200, launch_at=2095)
    for i in range(3):
        s = 2300 + 100 * i
        t.host("aten::conv2d", s, s + 20)
        t.work(f"k{i + 2}", s + 20, s + 90, launch_at=s + 10)
    r = whyidle.diagnose(t.build())
    # the call up to the launch inside it, and the launch tail
    assert r.idle_by_cause_ns["unattributed/cold_start"] == (2095 - 100 + 15) * US
    assert "unattributed/cold_start" in r.artifact_idle_ns


def test_jit_compilation_named_by_a_range_is_cold_start() -> None:
    t = TL()
    t.work("k0", 0, 100, launch_at=-10)
    t.host("executor_utils::Nvrtc::CompileProgram", 100, 1900, kind=Kind.ANNOTATION)
    t.work("k1", 2010, 2100, launch_at=2000)
    r = whyidle.diagnose(t.build())
    # the compile (1800) and the launch tail (10); 1900-2000 nothing traced, under 1 ms
    assert causes(r) == {"unattributed/cold_start": 1810, "underfilled/host_overhead": 100}
    assert r.source.workload == "non_pytorch"


# -- dependencies ---------------------------------------------------------------------------------


def test_queued_work_behind_a_stream_wait_is_a_dependency_wait() -> None:
    t = TL()
    t.host(TRAINING, -60, -55)
    t.work("k0", 0, 100, launch_at=-50)
    t.host("cudaStreamWaitEvent", -40, -35, kind=Kind.RUNTIME)
    t.work("k1", 300, 400, launch_at=-30)  # queued behind the wait: 200 us
    t.work("k2", 600, 700, launch_at=-20)  # queued, no wait since k1's launch: unexplained
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"synchronization/dependency_wait": 200, "unattributed/queued_work_waiting": 200}


def test_a_collective_that_waited_while_queued_is_a_dependency_wait() -> None:
    t = TL()
    t.host(TRAINING, -60, -55)
    t.work("k0", 0, 100, launch_at=-50)
    t.work("ncclKernel_AllReduce_RING_LL_Sum_float", 400, 900, launch_at=-30, kind=Kind.COLLECTIVE)
    r = whyidle.diagnose(t.build())
    assert causes(r) == {"synchronization/dependency_wait": 300}
    f = r.findings[0]
    assert f.cause == "dependency_wait" and dict(f.evidence.facts)["before_a_collective"] == 1


def test_mpi_calls_on_the_launching_thread_are_waits_on_other_ranks() -> None:
    t = TL()
    t.work("k0", 0, 100, launch_at=-10)
    t.host("MPI_Recv", 150, 1150, kind=Kind.ANNOTATION)
    t.work("k1", 1210, 1300, launch_at=1200)
    r = whyidle.diagnose(t.build())
    # MPI_Recv (1000) and the launch tail (10); 100-150 and 1150-1200 nothing traced, short
    assert causes(r) == {"synchronization/dependency_wait": 1010, "underfilled/host_overhead": 100}
    assert r.findings[0].evidence.top_ops[0][0] == "MPI_Recv"


# -- capture artifacts -----------------------------------------------------------------------------


def test_work_launched_before_the_capture_is_a_capture_artifact() -> None:
    """The device runs work whose launches precede the capture (correlation ids 1-2, no launch
    record); the first gap waited on it."""
    t = TL()
    t.step(1, 0, 2000)
    t.host(TRAINING, 5, 10)
    t.b.add(1500 * US, 1600 * US, t.stream(), Kind.KERNEL, "pre_capture_a", corr=1)
    t.b.add(1602 * US, 1700 * US, t.stream(), Kind.KERNEL, "pre_capture_b", corr=2)
    t._corr = 10
    t.work("k", 1800, 1900, launch_at=20)
    r = whyidle.diagnose(t.build())
    # [0, 1500) waited on pre-capture work; [1600, 1602) between two such kernels: a boundary;
    # [1700, 1800): k was launched (at 20) and queued, and still waited: unexplained
    assert causes(r) == {"unattributed/capture_boundary": 1500, "underfilled/kernel_boundaries": 2, "unattributed/queued_work_waiting": 100}
    assert r.artifact_idle_ns == {"unattributed/capture_boundary": 1500 * US}
    assert "capture_boundary" not in {f.cause for f in r.findings}  # never ranked


def test_the_window_ends_with_the_last_steps_device_work_not_the_profilers_stop() -> None:
    """The last step's host range runs 5 ms past its kernel (the profiler stopping)."""
    t = TL()
    t.host(TRAINING, 1, 2)
    t.step(1, 0, 100)
    t.step(2, 100, 5200)
    t.work("k1", 10, 95, launch_at=5)
    t.work("k2", 110, 195, launch_at=105)
    r = whyidle.diagnose(t.build())
    assert r.window.end_ns == 195 * US
    # [0, 10) and [95, 110): host overhead up to each launch plus its tail; no 5 ms "untraced host"
    assert causes(r) == {"underfilled/host_overhead": 25}


# -- the sync owns what it serialises ---------------------------------------------------------------


def test_a_sync_after_each_kernel_owns_the_python_between_and_the_pattern_is_named() -> None:
    """One step: 4 x [matmul, cudaDeviceSynchronize, 300 us of Python (sum(range(...)))], then a
    last kernel.  device |mm0|........ 415 ........|mm1| ...
                  host  [mm][sync 11-102][sum 105-405]  [mm][launch 505] ..."""
    t = TL()
    t.host(TRAINING, -30, -20)
    t.step(1, 0, 2100)
    py(t, "train.py(298): step", 0, 2100)
    for i in range(4):
        s = 500 * i
        t.host("aten::mm", s, s + 10)
        t.work(f"mm{i}", s + 15, s + 100, launch_at=s + 5)
        t.host("cudaDeviceSynchronize", s + 11, s + 102, kind=Kind.RUNTIME)
        py(t, "<built-in function sum>", s + 105, s + 405)
    t.host("aten::mm", 2000, 2010)
    t.work("end", 2015, 2100, launch_at=2005)
    r = whyidle.diagnose(t.build())
    # [0, 15) before the first launch: host overhead; each gap [100 + 500 i, 515 + 500 i) opened
    # inside the sync, and all 415 us of it (the sync, the Python, the next op and launch) is the
    # sync's
    assert causes(r) == {"synchronization/host_sync": 4 * 415, "underfilled/host_overhead": 15}
    f = r.findings[0]
    facts = dict(f.evidence.facts)
    assert f.cause == "host_sync" and facts["gaps_drained_by_sync"] == 4
    assert facts["sync_calls"] == 4 and facts["sync_calls_per_step"] == 4.0 and facts["kernels_per_sync"] == 1.2
    assert "a device sync after every kernel or two" in f.fix.steps[0]
    assert f.evidence.python_lines[0][0] == "train.py:298 in step"


def test_named_work_after_a_sync_keeps_its_cause() -> None:
    """Offline inference: .cpu() at the end of a batch, then numpy preprocessing of the next."""
    t = TL()
    py(t, "infer.py(284): run", -50, 3000)
    t.work("k0", 0, 100, launch_at=-10)
    t.host("cudaStreamSynchronize", 20, 102, kind=Kind.RUNTIME)
    py(t, "numpy/_core/_methods.py(148): _var", 110, 2010)
    t.work("k1", 2105, 2200, launch_at=2100)
    r = whyidle.diagnose(t.build())
    # sync (2) + Python 102-110 (8) + 2010-2100 (90) + tail (5 -> dominant): the sync's 100;
    # numpy 1900 and the tail: preprocessing
    assert causes(r) == {"synchronization/host_sync": 100, "starvation/host_preprocessing": 1905}


# -- workload kind ------------------------------------------------------------------------------------


def test_workload_kind_and_its_evidence() -> None:
    t = TL()
    t.work("k0", 0, 100, launch_at=-10)
    r = whyidle.diagnose(t.build())
    assert r.source.workload == "non_pytorch" and "no PyTorch op" in r.source.workload_evidence[0]
    t.host("aten::add", -30, -20)
    assert whyidle.diagnose(t.build()).source.workload == "inference"
    t.host("handle_request", -40, -5, kind=Kind.ANNOTATION)
    r = whyidle.diagnose(t.build())
    assert r.source.workload == "serving" and "handle_request" in r.source.workload_evidence[0]
    t.host("autograd::engine::evaluate_function: AddmmBackward0", -60, -50)
    r = whyidle.diagnose(t.build())
    assert r.source.workload == "training" and r.source.training
    d = r.to_dict()
    assert d["source"]["workload"] == "training" and d["source"]["workload_evidence"]
    u = TL()
    u.host("aten::add", 0, 10)
    assert whyidle.diagnose(u.build()).source.workload == "unknown"


# -- the innermost-record sweep ------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from whyidle.analyses.hostwork import innermost_segments  # noqa: E402


def _nested(draw: st.DrawFn, lo: int, hi: int, depth: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    t = lo
    while t < hi and len(out) < 4:
        s = draw(st.integers(t, hi))
        e = draw(st.integers(s, hi))
        out.append((s, e, draw(st.integers(0, 7))))
        if depth and e > s:
            out += _nested(draw, s, e, depth - 1)
        t = e + draw(st.integers(0, 3))
    return out


@st.composite
def frames(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    return _nested(draw, 0, 200, 3)


@settings(max_examples=200, deadline=None)
@given(frames())
def test_innermost_segments_match_a_point_by_point_reading(recs: list[tuple[int, int, int]]) -> None:
    """At every instant, the owner is the innermost open frame, and a neutral frame reads as the
    nearest enclosing frame with a class of its own (user at the top); inside a data frame, user,
    dispatch and neutral frames are data work; framework machinery reads as dispatch."""
    import numpy as np

    recs.sort(key=lambda r: (r[0], -(r[1] - r[0])))
    s = np.array([r[0] for r in recs], dtype=np.int64)
    e = np.array([r[1] for r in recs], dtype=np.int64)
    c = np.array([r[2] for r in recs], dtype=np.int8)
    t0, t1, cls, who = innermost_segments(s, e, c)
    for t in range(0, 201):
        open_ = [k for k in range(len(recs)) if s[k] <= t < e[k]]
        hit = np.flatnonzero((t0 <= t) & (t < t1))
        if not open_:
            assert hit.size == 0
            continue
        assert hit.size == 1 and who[hit[0]] == open_[-1]
        chain = [c[k] for k in reversed(open_) if c[k] != WorkClass.NEUTRAL]
        expected = chain[0] if chain else WorkClass.USER
        inherits = (WorkClass.NEUTRAL, WorkClass.USER, WorkClass.DISPATCH)
        if next((c[k] for k in reversed(open_) if c[k] not in inherits), None) == WorkClass.DATA:
            expected = WorkClass.DATA
        assert cls[hit[0]] == (WorkClass.DISPATCH if expected == WorkClass.FRAMEWORK else expected)
