"""Issue 23's attribution mechanisms, each on a timeline built in code (times in microseconds):
the enclosing frames name the work, the host's state over the whole gap, the warm part behind a
cold start, and JIT compilation repeated through the window.
"""

from __future__ import annotations

import whyidle
from whyidle.analyses.hostwork import WorkClass, classify
from whyidle.timeline import Kind

from tlbuild import TL, US, causes, py

TRAINING = "Optimizer.step#SGD.step"
# A capture that is all cold start blames nothing: test_attribution.py::test_cold_start_dominating_is_said_and_no_cause_is_blamed


# -- 1. the enclosing frames name the work ---------------------------------------------------------


def test_a_frame_named_for_data_work_inside_a_framework_is_data_work() -> None:
    assert classify("transformers/pipelines/video_classification.py(117): preprocess") == WorkClass.DATA
    assert classify("transformers/pipelines/video_classification.py(30): read_video_pyav") == WorkClass.DATA
    assert classify("transformers/pipelines/video_classification.py(140): postprocess") == WorkClass.DISPATCH
    assert classify("flashinfer/decode.py(10): run") == WorkClass.DISPATCH  # a decode *phase*, not decoding data
    assert classify("diffusers/hooks/hooks.py(189): new_forward") == WorkClass.FRAMEWORK
    assert classify("torch/nn/modules/module.py(1747): _call_impl") == WorkClass.FRAMEWORK


def test_a_pipeline_preprocess_is_data_work_even_where_only_its_leaves_are_recognised() -> None:
    """A video-classification pipeline decodes a clip in ``preprocess`` (217 ms, ``read_video_pyav``
    under it); only two leaf calls (``astype``, ``np.stack``) are numpy.

    device █ 0-100 |........................ 217250 ........................|█ 217350-217500
    python [pipelines/base.py __call__ ..........................................................]
              [video_classification.py preprocess 110-217110                ]   [_call_impl ]
                 [read_video_pyav 200-200000 [astype] [np.stack]]                 [aten::linear][launch]"""
    t = TL()
    py(t, "transformers/pipelines/base.py(1290): __call__", -50, 217500)
    t.work("k0", 0, 100, launch_at=-10)
    py(t, "transformers/pipelines/video_classification.py(117): preprocess", 110, 217110)
    py(t, "transformers/pipelines/video_classification.py(30): read_video_pyav", 200, 200000)
    py(t, "<built-in method astype of numpy.ndarray object at 0x7f00>", 150000, 160000)
    py(t, "numpy/_core/shape_base.py(420): stack", 190000, 199000)
    py(t, "torch/nn/modules/module.py(1747): _call_impl", 217200, 217345)
    t.host("aten::linear", 217300, 217345)
    t.work("k1", 217350, 217500, launch_at=217340)
    r = whyidle.diagnose(t.build())
    # preprocess and everything under it [110, 217110) and the launch tail (10): data work; the
    # pipeline's own frames (10 + 90), the module call (100) and the op up to the launch (40):
    # framework dispatch
    assert causes(r) == {"starvation/host_preprocessing": 217010, "underfilled/host_overhead": 240}
    assert r.findings[0].cause == "host_preprocessing"
    assert all(f.cause != "host_overhead" for f in r.findings)


def test_framework_dispatch_inside_data_work_stays_dispatch_and_hooks_are_not_user_work() -> None:
    """``preprocess`` runs a feature extractor (a module call) and a diffusers pipeline's hook
    wraps the model: neither is the user's own work.

    device █ 0-100 |..................... 3905 .....................|█ 4005-4100
    python [infer.py run ..............................................................]
              [infer.py preprocess 100-1500 [_call_impl 600-1500]]
                                             [hooks.py new_forward 1600-4000][launch 4000]"""
    t = TL()
    py(t, "infer.py(10): run", -50, 4100)
    t.work("k0", 0, 100, launch_at=-10)
    py(t, "infer.py(40): preprocess", 100, 1500)
    py(t, "torch/nn/modules/module.py(1747): _call_impl", 600, 1500)
    py(t, "extractor.py(12): forward", 700, 1400)
    py(t, "diffusers/hooks/hooks.py(189): new_forward", 1600, 4000)
    t.work("k1", 4005, 4100, launch_at=4000)
    r = whyidle.diagnose(t.build())
    # preprocess's own time [100, 600) (500) is data work; the module call and the model's short
    # Python under it (900), the run loop between (100) and the hook (2400): dispatch, with the
    # launch tail (5)
    assert causes(r) == {"starvation/host_preprocessing": 500, "underfilled/host_overhead": 3405}


# -- 2. the host's state over the whole gap -------------------------------------------------------


def test_a_blocking_copy_entered_after_the_gap_opened_owns_the_gap() -> None:
    """SGLang on ROCm: queued work waits behind a hipStreamWaitEvent; 0.3 ms after the device went
    idle the launching thread enters hipMemcpyWithStream (a copy to pageable memory) and stays in
    it 463 ms; the copy it launched ends the gap.

    device █ k0 0-100 |.................... 463200 ....................|█ copy |█ queued
    host   [wait][launch q]      [hipMemcpyWithStream 400-463400 ..................]"""
    t = TL()
    t.work("k0", 0, 100, launch_at=-50)
    t.host("hipStreamWaitEvent", -40, -35, kind=Kind.RUNTIME)
    t.work("queued", 463390, 463500, launch_at=-30, stream=8, launch_name="hipLaunchKernel")
    t.work("Memcpy DtoH (Device -> Pageable)", 463300, 463390, launch_at=400, launch_dur=463000, kind=Kind.MEMCPY, launch_name="hipMemcpyWithStream")
    r = whyidle.diagnose(t.build())
    # [100, 400): nothing traced, short: host overhead; the call [400, 463300): the call's
    assert causes(r) == {"underfilled/host_overhead": 300, "synchronization/host_sync": 462900}
    assert r.findings[0].cause == "host_sync"


def test_a_blocking_copy_between_launches_is_a_sync_not_launch_overhead() -> None:
    """The same call when its copy left no device record: the next kernel is launched after it."""
    t = TL()
    t.work("k0", 0, 100, launch_at=-50)
    t.host("hipMemcpyWithStream", 400, 493400, kind=Kind.RUNTIME)
    t.work("k1", 493420, 493500, launch_at=493410, launch_name="hipLaunchKernel")
    r = whyidle.diagnose(t.build())
    # [100, 400) and [493400, 493410) plus the tail: nothing traced, short; the call: a sync
    assert causes(r) == {"underfilled/host_overhead": 300 + 10, "synchronization/host_sync": 493000 + 10}


# -- 3. a cold start does not hide the warm part ----------------------------------------------------


def _cold_then_starved(t: TL) -> None:
    """Step 1 loads a module for 8 ms; steps 2-9 each wait 100 us for the DataLoader."""
    t.host(TRAINING, -30, -20)
    t.step(1, 0, 10000)
    t.work("k0", 0, 100, launch_at=-10)
    t.host("cuModuleLoadData", 150, 8150, kind=Kind.RUNTIME)
    t.work("k1", 8210, 10000, launch_at=8200)
    for n in range(2, 10):
        s = 10000 + 1000 * (n - 2)
        t.step(n, s, s + 1000)
        t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s, s + 100)
        t.work(f"k{n}", s + 110, s + 1000, launch_at=s + 105)


def test_a_cold_start_is_reported_and_the_warm_remainder_still_diagnosed() -> None:
    t = TL()
    _cold_then_starved(t)
    r = whyidle.diagnose(t.build())
    assert r.cold_start and r.artifact_idle_ns["unattributed/cold_start"] > 0
    assert any("cold start" in q and "warm" in q for q in r.quality)
    # 8 x (100 + 5) us of input starvation: 4.7 % of the 18 ms window (under the 5 % a finding
    # needs), 10.5 % of its warm part (steps 2-9: the step the cold start dominates left out)
    warm_ns = 8 * 1000 * US
    top = r.findings[0]
    assert (top.group, top.cause) == ("starvation", "input_pipeline")
    assert top.idle_ns == 8 * 105 * US
    assert abs(top.share_of_window - 8 * 105 * US / warm_ns) < 1e-9
    assert dict(top.evidence.facts)["warm_window_ns"] == warm_ns


# -- 4. JIT compilation and module loading through the window --------------------------------------


def _cupy_loop(t: TL, compiles: int) -> None:
    """A CuPy loop whose kernels compile on first use: nvrtc then cuModuleLoadData, then the launch;
    each iteration after the first meets a new shape."""
    py(t, "cupy_job.py(5): main", -50, 2000 * compiles + 1000)
    t.work("k0", 0, 100, launch_at=-10, launch_name="cuLaunchKernel")
    for i in range(compiles):
        s = 2000 * i + 100
        py(t, "cupy/_core/_kernel.pyx(1): __call__", s, s + 1800)
        t.host("nvrtcCompileProgram", s + 100, s + 1500, kind=Kind.RUNTIME)
        t.host("cuModuleLoadData", s + 1500, s + 1700, kind=Kind.RUNTIME)
        t.work(f"elementwise_{i}", s + 1710, s + 1900, launch_at=s + 1700, launch_name="cuLaunchKernel")


def test_repeated_jit_compilation_in_the_window_is_named_with_its_fix() -> None:
    t = TL()
    _cupy_loop(t, 4)
    r = whyidle.diagnose(t.build())
    got = causes(r)
    # per iteration: nvrtc and the module load (1600) and the launch tail (10)
    assert got["underfilled/jit_compile"] == 4 * 1610
    assert "unattributed/cold_start" not in got
    assert not r.cold_start
    top = r.findings[0]
    assert top.cause == "jit_compile"
    assert "RawModule" in top.fix.code and "torch" not in top.fix.code
    assert any("nvrtc" in name for name, _, _ in top.evidence.top_ops)


def test_a_single_module_load_is_still_a_cold_start() -> None:
    t = TL()
    _cupy_loop(t, 1)
    r = whyidle.diagnose(t.build())
    assert "underfilled/jit_compile" not in causes(r)
    assert causes(r)["unattributed/cold_start"] == 1610
