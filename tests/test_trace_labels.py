"""Labels on real traces: the workload kind and the top cause with its share of device idle,
for every trace in ../shared/traces and the H200 traces in tests/data, plus the issue-17 bars
that hold on all of them (no demand without a serving loop seen waiting; unattributed idle at
most 10 % or a note naming the capture option).

The labels come from how each trace was recorded (../shared/traces/SOURCES.md,
scripts/device_measure.py, tests/data/lab/RECORDED.md); the shares are what whyidle measures,
pinned to +-0.01 so that a change of mechanism shows up here and is updated deliberately.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import whyidle
from whyidle.errors import WhyidleError

from conftest import SHARED_TRACES, shared_trace

DATA = Path(__file__).parent / "data"

# (trace under ../shared/traces, workload kind, top cause over all idle, its share of idle)
SHARED_LABELS = [
    # MI250 toy training captured from its first steps: first calls dominate
("hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "training", "unattributed/cold_start", 0.71),
    ("hta/call_stack__backward_thread.json", "training", "unattributed/untraced_host", 1.0),
    ("hta/cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "unknown", "", 0.0),
    # benchmark captured from its first call: cuDNN/cuBLAS first use
    ("hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz", "inference", "unattributed/cold_start", 0.99),
    # a host that launches tiny kernels between syncs
    ("hta/critical_path__cuda_event_sync__event_sync_trace.json.gz", "inference", "underfilled/host_overhead", 0.96),
    # host time with nothing traced: the quality note names with_stack
    ("hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz", "inference", "unattributed/untraced_host", 0.96),
    ("hta/critical_path__end_to_end__simple_add__input__trace.json.gz", "inference", "unattributed/cold_start", 0.99),
    ("hta/critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz", "inference", "unattributed/cold_start", 0.99),
    ("hta/cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz", "inference", "", 0.0),
    ("hta/distributed_info_unavailable__distributed_info_not_found.json.gz", "training", "", 0.0),
    ("hta/execution_trace__benchmark_simple_add_trace.json.gz", "inference", "synchronization/host_sync", 0.45),
    ("hta/mixed_files__rank_non_gpu.json.gz", "training", "", 0.0),
    # MTIA device events (mtia_ccp_events) read as device work: ops as kernels, DMA requests as copies
    ("hta/mtia_inference_trace__mtia_inference_rank_0.json.gz", "inference", "underfilled/host_overhead", 0.76),
    # its 22,361 DMA requests carry no correlation id: the gaps they end have no launch record
    ("hta/mtia_trace_single_rank__mtia_rank_0.json.gz", "training", "unattributed/no_launch_info", 0.82),
    ("hta/nccl_parser_config__nccl_data.json.gz", "training", "underfilled/host_overhead", 0.98),
    # queued work waiting with no dependency record: the note names nsys
    ("hta/negative_queue_length_values_check__rank0.json.gz", "training", "unattributed/queued_work_waiting", 0.78),
    ("hta/rank_non_gpu__rank_non_gpu.json.gz", "training", "", 0.0),
    ("hta/rank_unavailable__rank_not_found.json.gz", "training", "", 0.0),
    ("hta/timeline_analysis__sampled_rank-0.json.gz", "training", "unattributed/queued_work_waiting", 0.37),
    # device work without launch records: the note names CPU activities
    ("hta/trace_compare__base__base.json.gz", "inference", "unattributed/no_launch_info", 0.63),
    ("hta/trace_compare__test__test.json.gz", "training", "unattributed/no_launch_info", 0.54),
    ("hta/trace_file_list__inference_rank_1.json.gz", "non_pytorch", "unattributed/cold_start", 0.88),
    ("hta/trace_filter__sampled_rank-0.json.gz", "training", "unattributed/queued_work_waiting", 0.37),
    ("hta/trace_filter__sampled_rank-1.json.gz", "training", "unattributed/queued_work_waiting", 0.34),
    # torch.compile'd Triton kernel: the host in the compiled region
    ("hta/triton_example__triton_example.json.gz", "inference", "underfilled/host_overhead", 1.0),
    # vLLM prefill: Python dispatch in the engine and attention library, not demand
    ("inference/tracelens__b200_eager_llm_prefill_rank0.json.gz", "serving", "underfilled/host_overhead", 0.95),
    # JAX on 8 MI300X: the Python thread waits in block_until_ready after each call of the jitted
    # function while the devices sit idle (the device work of a step ends ~23 ms before the wait does)
    ("jax/tracelens__mi300x_jax_conv_minimal.xplane.pb", "inference", "synchronization/host_sync", 0.52),
    # num_workers=0: the DataLoader in the training process
    ("kineto/resnet50_num_workers_0.pt.trace.json.gz", "training", "starvation/input_pipeline", 0.76),
    ("kineto/resnet50_num_workers_4.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.68),
    ("multirank/param__v100x8_dlrm_step12/worker0_step_12.1694128201545.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.7),
    ("multirank/param__v100x8_dlrm_step12/worker1_step_12.1694128201556.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.69),
    ("multirank/param__v100x8_dlrm_step12/worker2_step_12.1694128201554.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.7),
    ("multirank/param__v100x8_dlrm_step12/worker3_step_12.1694128201557.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.68),
    ("multirank/param__v100x8_dlrm_step12/worker4_step_12.1694128201547.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.77),
    ("multirank/param__v100x8_dlrm_step12/worker5_step_12.1694128201549.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.77),
    ("multirank/param__v100x8_dlrm_step12/worker6_step_12.1694128201553.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.7),
    ("multirank/param__v100x8_dlrm_step12/worker7_step_12.1694128201553.pt.trace.json.gz", "training", "underfilled/host_overhead", 0.75),
    ("nsys/nvfuser__h200_pytest_cross_entropy_nsys2025.1.1.sqlite", "training", "unattributed/untraced_host", 0.72),
    # NVRTC compilation (an NVTX range) before the kernels: cold start
    ("nsys/nvfuser__h200_test_matmul_nsys2024.6.2.sqlite", "non_pytorch", "unattributed/cold_start", 0.83),
    # MPI + CUDA saxpy: a blocking cudaMemcpy drains the device before each MPI exchange
    ("nsys/pipit__a100_saxpy-mpi-cuda_perlmutter_nsys2022.2.1.sqlite", "non_pytorch", "synchronization/host_sync", 0.76),
    ("nsys/weatherbench2__rtx4060_climate_train_unet_truncated_nsys2025.5.1.sqlite", "non_pytorch", "", 0.0),
    # rocprofv3 --kernel-trace of a PyTorch training job on an MI350X (ATen backward kernels): no
    # HIP API calls were recorded, so no gap has a launch; the note names rocprofv3 --runtime-trace
    ("rocprof/tracelens__rocprofv3_908_results.json.gz", "training", "unattributed/no_launch_info", 1.0),
]


def _top(r: whyidle.Report) -> tuple[str, float]:
    causes = {k: v for k, v in r.idle_by_cause_ns.items() if v}
    if not causes or not r.utilization.idle_ns:
        return "", 0.0
    key = max(causes, key=lambda k: causes[k])
    return key, causes[key] / r.utilization.idle_ns


@pytest.mark.parametrize("rel,kind,top,share", SHARED_LABELS, ids=lambda v: str(v)[:48])
def test_shared_trace_label(rel: str, kind: str, top: str, share: float) -> None:
    r = whyidle.diagnose(shared_trace(rel))
    got_top, got_share = _top(r)
    assert (r.source.workload, got_top) == (kind, top)
    assert got_share == pytest.approx(share, abs=0.01)


def _every_shared() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz", ".sqlite", ".xplane.pb")))


# Shared traces in a format whyidle does not read yet, with the issue that adds the reader: each
# must be refused with one clear error until then, and be labelled above once it is read.
AWAITING_READER: dict[str, str] = {}


def test_every_shared_trace_has_a_label() -> None:
    labelled = {rel for rel, *_ in SHARED_LABELS} | set(AWAITING_READER)
    missing = [str(p.relative_to(SHARED_TRACES)) for p in _every_shared() if str(p.relative_to(SHARED_TRACES)) not in labelled]
    assert not missing


@pytest.mark.parametrize("rel", sorted(AWAITING_READER))
def test_a_trace_awaiting_its_reader_is_refused_in_one_line(rel: str) -> None:
    with pytest.raises(WhyidleError) as exc:
        whyidle.diagnose(shared_trace(rel))
    assert "\n" not in str(exc.value) and rel.rsplit("/", 1)[-1] in str(exc.value), AWAITING_READER[rel]


@pytest.mark.parametrize("path", _every_shared(), ids=lambda p: p.name[:50])
def test_issue_17_bars_on_every_shared_trace(path: Path) -> None:
    try:
        r = whyidle.diagnose(path)
    except WhyidleError:
        return
    # No demand finding without a serving loop seen waiting for requests.
    demand = [f for f in r.findings if f.group == "insufficient_demand"]
    assert not demand or r.source.workload == "serving"
    if r.source.workload == "training":
        assert not demand
    # Unattributed idle (capture artifacts aside) at most 10 %, or a note naming the capture option
    # (or saying that none exists: MTIA DMA requests carry no correlation id in any capture).
    idle = r.utilization.idle_ns
    unattributed = r.idle_by_group_ns["unattributed"] - sum(r.artifact_idle_ns.values())
    if idle and unattributed > 0.10 * idle:
        assert any("to attribute it, capture with" in q or "which no capture option links to a launch" in q for q in r.quality)
    # Capture artifacts are never ranked findings.
    assert not {f.key for f in r.findings} & set(r.artifact_idle_ns)


def test_b200_llm_prefill_is_host_dispatch_not_demand() -> None:
    r = whyidle.diagnose(shared_trace("inference/tracelens__b200_eager_llm_prefill_rank0.json.gz"))
    assert r.source.workload == "serving" and "vllm/" in r.source.workload_evidence[0]
    assert r.findings[0].key == "underfilled/host_overhead"
    assert r.idle_by_cause_ns["insufficient_demand/idle_host"] < 0.001 * r.utilization.idle_ns  # 1.9 us blocked
    assert all(f.group != "insufficient_demand" for f in r.findings)


def test_dlrm_ranks_are_host_overhead_then_the_input_pipeline() -> None:
    folder = shared_trace("multirank/param__v100x8_dlrm_step12")
    second = []
    for p in sorted(folder.glob("worker*.pt.trace.json.gz")):
        r = whyidle.diagnose(p)
        assert r.source.workload == "training"
        assert r.findings[0].key == "underfilled/host_overhead", p.name
        causes = sorted((v, k) for k, v in r.idle_by_cause_ns.items() if v)
        second.append(causes[-2][1])
    # rank 1's step began with device work launched before the capture (a capture boundary, 14 %
    # of its idle) instead of the DataLoader wait the other ranks show
    assert second.count("starvation/input_pipeline") == 7 and second[1] == "unattributed/capture_boundary"


# -- the H200 traces recorded for issue 17 (scripts/device_measure.py, stage_workloads) -------------


def _h200(name: str) -> whyidle.Report:
    return whyidle.diagnose(DATA / "h200" / f"{name}.pt.trace.json.gz")


def test_offline_inference_with_numpy_preprocessing_is_host_preprocessing_not_demand() -> None:
    r = _h200("offline_inference_numpy_preprocessing")
    assert r.source.workload == "inference"
    top = r.findings[0]
    assert top.key == "starvation/host_preprocessing" and top.share_of_idle == pytest.approx(0.78, abs=0.01)
    assert top.evidence.top_ops[0][0].endswith("decode_and_normalise")  # the recorded function
    assert r.idle_by_cause_ns["insufficient_demand/idle_host"] == 0


def test_serving_loop_waiting_on_its_queue_has_a_demand_finding() -> None:
    r = _h200("serving_queue_wait")
    assert r.source.workload == "serving" and "serve_batch" in r.source.workload_evidence[0]
    demand = next(f for f in r.findings if f.key == "insufficient_demand/idle_host")
    # blocked in queue.get for 21 % of device idle; the rest is mostly the Python dispatch of each
    # batch under the profiler's Python tracer (host overhead, 63 %)
    assert demand.share_of_idle == pytest.approx(0.21, abs=0.01)
    assert "acquire of _thread.lock" in demand.evidence.top_ops[0][0]
    assert r.findings[0].key == "underfilled/host_overhead" and r.findings[0].share_of_idle == pytest.approx(0.63, abs=0.01)


def test_a_sync_after_each_kernel_is_synchronization() -> None:
    r = _h200("sync_after_each_kernel")
    top = r.findings[0]
    assert top.key == "synchronization/host_sync" and top.share_of_idle == pytest.approx(0.99, abs=0.01)
    facts = dict(top.evidence.facts)
    assert facts["sync_calls_per_step"] == 20.0 and facts["sync_call_names"] == "cudaDeviceSynchronize x60"
    assert "a device sync after every kernel or two" in top.fix.steps[0]


def test_cold_start_without_warm_up_is_a_capture_artifact() -> None:
    r = _h200("cold_start_no_warmup")
    assert r.cold_start and "unattributed/cold_start" not in {f"{f.group}/{f.cause}" for f in r.findings}
    assert r.artifact_idle_ns["unattributed/cold_start"] / r.utilization.idle_ns == pytest.approx(0.94, abs=0.01)
    # the warm remainder (steps 1-2, after the cold step 0) is still diagnosed, on its own basis
    assert all(f.basis == "warm " and dict(f.evidence.facts)["warm_steps"] == 2 for f in r.findings)


@pytest.mark.parametrize("name", ["lab_starvation_cuda_fixed", "lab_sync_cuda_fixed"])
def test_device_running_behind_the_capture_start_is_a_capture_artifact(name: str) -> None:
    """The fixed runs queue far ahead: the first kernels in the capture were launched before it."""
    r = _h200(name)
    assert r.artifact_idle_ns["unattributed/capture_boundary"] / r.utilization.idle_ns > 0.95
    assert r.findings == ()


@pytest.mark.parametrize(
    "name,top,share",
    [
        ("lab_none_cuda", "underfilled/host_overhead", 0.73),
        ("lab_starvation_cuda", "starvation/input_pipeline", 0.87),
        ("lab_sync_cuda", "synchronization/host_sync", 0.72),
        ("lab_launch_cuda", "underfilled/host_overhead", 0.98),
        ("lab_smallbatch_cuda", "underfilled/host_overhead", 0.94),
        # a 50 MB pageable copy with no kernel running: half the window, the compute waiting on it
        ("lab_h2d_cuda", "starvation/h2d_copy", 0.51),
    ],
)
def test_h200_lab_runs(name: str, top: str, share: float) -> None:
    r = _h200(name)
    assert r.source.workload == "training"
    assert r.findings[0].key == top and _share(r.findings[0]) == pytest.approx(share, abs=0.01)


def _share(f: whyidle.Finding) -> float:
    """Share of idle for an idle finding; of the window for one about the compute's wait (an exposed copy)."""
    return f.share_of_idle if f.idle_ns else f.share_of_window


@pytest.mark.parametrize(
    "name,top,share",
    [
        # the run-2 recordings (tests/data/lab/RECORDED.md); lab_none has no finding at all (below)
        ("lab_starvation", "starvation/input_pipeline", 0.96),
        ("lab_sync", "synchronization/host_sync", 0.96),
        ("lab_launch", "underfilled/host_overhead", 0.98),
        ("lab_smallbatch", "underfilled/host_overhead", 0.93),
        ("lab_h2d", "starvation/h2d_copy", 0.50),
    ],
)
def test_recorded_lab_fixtures(name: str, top: str, share: float) -> None:
    r = whyidle.diagnose(DATA / "lab" / f"{name}.pt.trace.json.gz")
    assert r.source.workload == "training"
    assert r.findings[0].key == top and _share(r.findings[0]) == pytest.approx(share, abs=0.01)


def test_recorded_well_fed_lab_run_has_no_finding() -> None:
    """Batch 8192 on the H200 (run 2): device-bound, so nothing to report; at batch 2048 (run 1) it was host-bound."""
    r = whyidle.diagnose(DATA / "lab" / "lab_none.pt.trace.json.gz")
    assert r.findings == () and r.utilization.busy_fraction > 0.9
