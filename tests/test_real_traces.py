"""End to end on the real GPU traces in ../shared/traces (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

import whyidle
from whyidle.errors import WhyidleError

from conftest import SHARED_TRACES, shared_trace


def test_resnet_num_workers_0_is_single_process_input_starvation(resnet0: Path) -> None:
    r = whyidle.diagnose(resnet0)
    top = r.findings[0]
    assert (top.group, top.cause, top.variant) == ("starvation", "input_pipeline", "single_process")
    assert top.share_of_idle >= 0.60
    assert "num_workers" in top.fix.code and "pin_memory" in top.fix.code
    assert top.evidence.top_ops[0][0] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert top.evidence.python_lines  # the trace was captured with stacks


def test_resnet_num_workers_4_input_pipeline_is_minor(resnet4: Path) -> None:
    r = whyidle.diagnose(resnet4)
    ip = r.idle_by_cause_ns["starvation/input_pipeline"]
    assert ip / r.utilization.idle_ns < 0.10
    assert r.findings[0].cause != "input_pipeline"


def test_tensorboard_plugin_gpu_utilization_cross_check(resnet0: Path, resnet4: Path) -> None:
    # The TensorBoard plugin publishes 55.51 % and 70.27 % "GPU Utilization" for these traces.
    assert round(whyidle.diagnose(resnet0).utilization.kernel_busy_fraction * 100, 2) == 55.51
    assert round(whyidle.diagnose(resnet4).utilization.kernel_busy_fraction * 100, 2) == 70.27


def test_resnet_figures_are_consistent(resnet0: Path) -> None:
    r = whyidle.diagnose(resnet0)
    u = r.utilization
    assert u.batch_size == 32 and u.samples_per_s == pytest.approx(u.steps_per_s * 32)
    assert len(u.steps) == 6 and r.window.steps == (5, 6, 7, 8, 9, 10)
    assert sum(r.idle_by_cause_ns.values()) == u.idle_ns == sum(s.idle_ns for s in u.steps)
    assert u.busy_ns + u.idle_ns == u.window_ns
    fp32 = next(f for f in r.findings if f.cause == "fp32_math")  # V100, FP32 convolutions
    assert fp32.affected_busy_ns > 0 and "autocast" in fp32.fix.code
    # A V100 (7.0) has FP16 tensor cores only: the advice is FP16 with a GradScaler, not BF16/TF32.
    assert fp32.variant == "fp16_only" and "float16" in fp32.fix.code and "GradScaler" in fp32.fix.code


def test_skip_first_changes_the_window(resnet4: Path) -> None:
    r = whyidle.diagnose(resnet4, skip_first_steps=1)
    assert r.window.steps == (6, 7, 8, 9, 10)


def _all_shared() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


@pytest.mark.parametrize("path", _all_shared(), ids=lambda p: p.name[:50])
def test_every_shared_trace_loads_or_fails_clearly(path: Path) -> None:
    try:
        r = whyidle.diagnose(path)
    except WhyidleError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    assert r.utilization.idle_ns >= 0
    assert sum(r.idle_by_cause_ns.values()) == (r.utilization.idle_ns if not r.no_device_activity else 0)


def test_cpu_only_trace_says_no_gpu_activity() -> None:
    r = whyidle.diagnose(shared_trace("hta/cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
    assert r.no_device_activity and r.findings == ()
    assert r.source.rank == 34


def test_amd_trace_reads_like_nvidia() -> None:
    r = whyidle.diagnose(shared_trace("hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert r.kernels.count > 0 and r.utilization.busy_ns > 0
