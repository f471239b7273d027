"""Advice that fits the job: what each kind of job is and is not offered (traces built in code).

Every fix, step, snippet and prediction is chosen from the diagnosis's advice context
(analyses/advice_context.py, findings/advice.py): the workload, the framework and runtime, what
the job already does and the device. Each test builds the smallest trace that shows one kind of
job and checks both sides: the advice in its idiom is there, and advice it cannot use is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import whyidle
from whyidle.analyses.advice_context import advice_context
from whyidle.analyses.workload import workload_kind
from whyidle.findings.advice import hipify
from whyidle.timeline import Kind

from tlbuild import TL

TRAINING = "Optimizer.step#SGD.step"


def _fix_text(f: whyidle.Finding) -> str:
    return "\n".join((f.fix.summary, *f.fix.steps, f.fix.code))


def _finding(r: whyidle.Report, cause: str) -> whyidle.Finding:
    return next(f for f in r.findings if f.cause == cause)


def _launch_bound(t: TL, n: int = 10, op: str = "aten::add", stack: str | None = None) -> None:
    """Kernels of 2 us launched every 10 us: the device waits for each launch (host overhead)."""
    for i in range(n):
        t.host(op, 10 * i, 10 * i + 9, stack=stack)
        t.work("tiny", 10 * i + 8, 10 * i + 10, launch_at=10 * i + 2)


def _sync_each_kernel(t: TL, call: str = "cudaDeviceSynchronize", n: int = 6) -> None:
    """A kernel, a device sync, then 200 us of host work before the next launch: the sync's gaps."""
    for i in range(n):
        s = 400 * i
        t.work("step_kernel", s + 5, s + 100, launch_at=s, launch_dur=2)
        t.host(call, s + 3, s + 101, kind=Kind.RUNTIME)
        t.host("host_side_update", s + 105, s + 395, kind=Kind.ANNOTATION)


def test_training_eager_host_overhead_names_the_traces_optimizer_and_compile() -> None:
    t = TL()
    t.host(TRAINING, 200, 210)
    t.host("Optimizer.zero_grad#SGD.zero_grad", 215, 230)
    t.host("aten::zero_", 216, 220)
    _launch_bound(t)
    r = whyidle.diagnose(t.build())
    text = _fix_text(_finding(r, "host_overhead"))
    assert "torch.compile(model, mode='reduce-overhead')" in text
    assert "torch.optim.SGD(model.parameters(), lr=lr, fused=True)" in text  # the trace's optimizer, per-parameter
    assert "zero_grad(set_to_none=True)" in text  # zero_grad was seen filling gradients
    assert "AdamW" not in text
    assert r.advice is not None and r.advice.optimizer == "SGD" and r.advice.optimizer_impl == "per_parameter"


def test_inference_gets_no_optimizer_advice() -> None:
    t = TL()
    _launch_bound(t, op="aten::linear")
    r = whyidle.diagnose(t.build())
    assert r.source.workload == "inference"
    text = _fix_text(_finding(r, "host_overhead"))
    assert "torch.compile" in text
    for word in ("optim", "zero_grad", "fused=True", "loss"):
        assert word not in text, word


def test_a_fused_optimizer_is_not_offered_again() -> None:
    t = TL()
    t.host("Optimizer.step#AdamW.step", 200, 210)
    t.host("aten::_fused_adamw_", 201, 209)
    _launch_bound(t)
    r = whyidle.diagnose(t.build())
    assert r.advice is not None and r.advice.optimizer_impl == "fused"
    assert "fused=True" not in _fix_text(_finding(r, "host_overhead"))


@pytest.mark.parametrize("graphs", [False, True])
def test_a_compiled_model_is_not_told_to_compile(graphs: bool) -> None:
    t = TL()
    t.host("Torch-Compiled Region: 0/0", 0, 100)
    if graphs:
        t.host("cudaGraphLaunch", 1, 2, kind=Kind.RUNTIME)
    _launch_bound(t, op="aten::linear")
    r = whyidle.diagnose(t.build())
    assert r.advice is not None and r.advice.compiled and r.advice.cuda_graphs is graphs
    f = _finding(r, "host_overhead")
    text = _fix_text(f)
    assert "torch.compile(model)\n" not in text + "\n" and "model = torch.compile(model)" not in text
    assert "graph_breaks" in text  # what is left: the eager code between compiled regions
    assert ("mode='reduce-overhead'" in text) is (not graphs)  # CUDA graphs only where none run
    assert "torch.compile regions" in str(r)


def test_cuda_cpp_program_gets_cuda_advice_only() -> None:
    """No Python frame and no PyTorch op: an nsys capture of a CUDA C++ program."""
    t = TL()
    t.b.meta.source_format = "nsys"
    _sync_each_kernel(t)
    r = whyidle.diagnose(t.build())
    assert r.source.workload == "non_pytorch" and r.advice is not None and r.advice.idiom == "cuda"
    for f in r.findings:
        text = _fix_text(f)
        for word in ("torch", ".item()", "loss", "DataLoader", "record_function", "optim"):
            assert word not in text, (f.id, word)
    sync = next(f for f in r.findings if f.cause == "host_sync")
    assert "cudaEventRecord" in sync.fix.code or "cudaEventSynchronize" in sync.fix.code


def test_hip_program_gets_hip_names() -> None:
    t = TL()
    t.b.meta.devices[0] = {"name": "AMD Instinct MI300X", "gcnArchName": "gfx942:sramecc+:xnack-", "warpSize": 64}
    _sync_each_kernel(t, call="hipDeviceSynchronize")
    r = whyidle.diagnose(t.build())
    assert r.advice is not None and r.advice.idiom == "hip" and r.advice.generation == "CDNA3 (gfx942)"
    sync = next(f for f in r.findings if f.cause == "host_sync")
    assert "hipEventSynchronize" in sync.fix.code and "cuda" not in sync.fix.code.lower()
    assert hipify("cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s)") == "hipMemcpyAsync(d, h, n, hipMemcpyHostToDevice, s)"


def test_cupy_program_gets_cupy_advice() -> None:
    t = TL()
    _launch_bound(t, op="cupy/_core/_kernel.pyx(1200): __call__", stack="run.py(8): main")
    tl = t.build()  # the frames are Python records
    tl.kind[tl.kind == int(Kind.CPU_OP)] = int(Kind.PYTHON)
    r = whyidle.diagnose(tl)
    assert r.advice is not None and r.advice.framework == "cupy" and r.advice.idiom == "cupy"
    f = _finding(r, "host_overhead")
    text = _fix_text(f)
    assert "cupy" in text and "torch" not in text


def test_vllm_serving_gets_engine_settings_not_a_training_loop() -> None:
    t = TL()
    _launch_bound(t, op="vllm/v1/worker/gpu_model_runner.py(2907): execute_model")
    tl = t.build()
    tl.kind[tl.kind == int(Kind.CPU_OP)] = int(Kind.PYTHON)
    r = whyidle.diagnose(tl)
    assert r.source.workload == "serving" and r.advice is not None and r.advice.engine == "vLLM"
    text = _fix_text(_finding(r, "host_overhead"))
    assert "vllm serve" in text and "--max-num-seqs" in text
    for word in ("optim", "zero_grad", "loss", "DataLoader"):
        assert word not in text, word


def test_existing_workers_are_not_predicted_as_new_workers() -> None:
    """The DataLoader has workers already: the lever is faster batches, and the prediction says so."""
    r = _loader_job(600, workers=True)
    f = _finding(r, "input_pipeline")
    assert f.variant == "multi_process"
    assert f.prediction is not None
    assert "worker processes" not in f.prediction.lever and "sooner" in f.prediction.lever
    assert "num_workers=8" not in f.fix.code


def test_single_process_loader_snippet_and_prediction_use_the_same_worker_count() -> None:
    f = _finding(_loader_job(600), "input_pipeline")
    assert f.prediction is not None
    workers = whyidle.Config().predictions.whatif_loader_workers
    assert f"DataLoader with {workers} worker processes" == f.prediction.lever
    assert f"num_workers={workers}," in f.fix.code


def test_inference_fp32_fix_has_no_backward_pass() -> None:
    t = TL()
    for i in range(10):
        t.work("volta_sgemm_128x64_nn", 20 * i, 20 * i + 18, launch_at=20 * i - 5)
    t.host("aten::mm", -10, 200)
    r = whyidle.diagnose(t.build())
    f = next((f for f in r.findings if f.cause == "fp32_math"), None)
    assert f is not None, [x.id for x in r.findings]
    assert "backward" not in f.fix.code and "GradScaler" not in _fix_text(f) and "inference_mode" in f.fix.code


def test_the_context_is_in_the_report_and_json_and_reads_back(tmp_path: Path) -> None:
    t = TL()
    t.host(TRAINING, 200, 210)
    _launch_bound(t)
    r = whyidle.diagnose(t.build())
    assert "Seen in trace" in str(r)
    d = r.to_dict()
    assert d["advice_context"]["framework"] == "pytorch" and d["advice_context"]["optimizer"] == "SGD"
    path = tmp_path / "r.json"
    r.save(path)
    again = whyidle.load_report(path)
    assert again.advice == r.advice and str(again) == str(r)


def test_context_items_come_from_their_records() -> None:
    t = TL()
    t.host("Optimizer.step#Adam.step", 0, 10)
    t.host("aten::_foreach_add_", 1, 9)
    t.host("aten::_amp_update_scale_", 11, 12)
    t.work("Memcpy HtoD (Pinned -> Device)", 20, 30, launch_at=15, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
    t.work("ampere_bf16_s16816gemm_bf16_128x128", 40, 90, launch_at=35)
    t.host("cuModuleLoadData", 100, 110, kind=Kind.RUNTIME)
    tl = t.build()
    c = advice_context(tl, workload_kind(tl))
    assert (c.optimizer, c.optimizer_impl, c.grad_scaler, c.reduced_precision) == ("Adam", "foreach", True, "bf16")
    assert (c.pinned_copies, c.pageable_copies, c.module_loads, c.loader, c.compiled) == (1, 0, 1, "", False)
    assert c.generation == "Ampere (8.0)" and c.vendor == "nvidia"


def _shared_traces() -> list[str]:
    from conftest import SHARED_TRACES

    if not SHARED_TRACES.is_dir():
        return []
    keep = (".json.gz", ".json", ".sqlite")
    return sorted(
        p.relative_to(SHARED_TRACES).as_posix()
        for p in SHARED_TRACES.rglob("*")
        if p.is_file() and p.name.endswith(keep) and "counters" not in p.parts
    )


@pytest.mark.parametrize("rel", _shared_traces() or ["(none)"])
def test_no_prediction_claims_more_than_its_finding_without_saying_why(rel: str) -> None:
    """On every shared trace: a prediction that recovers more than its finding explains says why,
    and a fix the replay finds no gain for says so instead of being recommended."""
    from conftest import shared_trace
    from whyidle.errors import WhyidleError
    from whyidle.findings.predict import beyond_explained, explained_per_step_ns

    if rel == "(none)":
        pytest.skip("../shared/traces is absent on this machine")
    try:
        r = whyidle.diagnose(shared_trace(rel))
    except WhyidleError as exc:  # a trace whyidle refuses with its one-line error has no findings
        pytest.skip(f"{rel}: {exc}")
    n = max(len(r.window.steps), 1)
    for f in r.findings:
        p = f.prediction
        if p is None or p.batch_factor != 1:
            continue
        recovered = p.step_ns_before - p.step_ns_after
        if beyond_explained(recovered, explained_per_step_ns(f, n)):
            assert p.note.startswith("predicts "), (rel, f.id, p.note)
        if p.step_ns_after > p.step_ns_before * 0.995:
            assert not p.recommended and "no gain" in p.summary(), (rel, f.id)
        else:
            assert p.recommended
        assert "Predicted with" in p.summary() or "no gain" in p.summary()


def _loader_job(loader_us: float, workers: bool = False, step_us: float = 1000.0, steps: int = 4) -> whyidle.Report:
    """A training step: the loader's __next__, then one kernel to the step's end."""
    t = TL()
    it = "_MultiProcessingDataLoaderIter" if workers else "_SingleProcessDataLoaderIter"
    t.work("k0", -30, 0, launch_at=-40)
    for n in range(steps):
        s = n * step_us
        t.step(n + 1, s, s + step_us)
        t.host(TRAINING, s + loader_us + 1, s + loader_us + 4)
        t.host(f"enumerate(DataLoader)#{it}.__next__", s, s + loader_us)
        t.work("gemm", s + loader_us + 5, s + step_us, launch_at=s + loader_us)
    return whyidle.diagnose(t.build())


def test_compare_checks_a_prediction_only_for_the_change_it_predicted() -> None:
    before = _loader_job(600)
    assert before.findings[0].prediction is not None and "worker processes" in before.findings[0].prediction.lever
    # workers added: the change the prediction replayed
    assert whyidle.compare(before, _loader_job(100, workers=True)).to_dict()["prediction"]["applied"] == "starvation/input_pipeline"
    # the loader got faster some other way (still in the training process): not the workers predicted
    assert whyidle.compare(before, _loader_job(100)).to_dict()["prediction"] is None
    # the input wait fell but the step grew: a regression is not the fix applied
    assert whyidle.compare(before, _loader_job(100, workers=True, step_us=1500)).to_dict()["prediction"] is None


def test_a_perfetto_export_saved_from_the_api_reads_back(tmp_path: Path) -> None:
    """Issue 25, item 1: report.save('x.json.gz') is the annotated original while the trace is
    there (it reads back as the same diagnosis); without it, the drawing says what it is."""
    from whyidle.lab.synthetic import training_trace, write_trace

    trace = write_trace(training_trace("starvation"), tmp_path / "t.json")
    r = whyidle.diagnose(trace)
    out = tmp_path / "x.json.gz"
    r.save(out)
    again = whyidle.diagnose(out)
    assert again.idle_by_cause_ns == r.idle_by_cause_ns and again.utilization.busy_ns == r.utilization.busy_ns
    with pytest.raises(whyidle.WhyidleError):
        r.save(trace)  # never over the trace it was made from
    trace.unlink()
    r.save(out)
    with pytest.raises(whyidle.TraceFormatError, match="drawing of a diagnosis"):
        whyidle.diagnose(out)


def test_readable_names_and_formats_from_the_bytes(tmp_path: Path) -> None:
    """Issue 25, items 8 and 9: no heap address in what a user reads; an Nsight SQLite export is
    read by its bytes whatever its name; a counter log with no times says how to record them."""
    import shutil

    from conftest import shared_trace

    data = Path(__file__).parent / "data" / "h200"
    r = whyidle.diagnose(data / "serving_queue_wait.pt.trace.json.gz")
    names = [n for f in r.findings for n, _, _ in f.evidence.top_ops]
    assert "<built-in method acquire of _thread.lock object>" in names and not any("0x" in n for n in names)
    sqlite = shared_trace("nsys/nvfuser__h200_test_matmul_nsys2024.6.2.sqlite")
    renamed = tmp_path / "run.nsys-rep"
    shutil.copy(sqlite, renamed)
    assert whyidle.diagnose(renamed).utilization.busy_ns == whyidle.diagnose(sqlite).utilization.busy_ns
    dcgmi = shared_trace("counters/ai-inference-energy__GV100_lstm_1380MHz_run0.dcgmi.txt")
    joined = whyidle.diagnose(data / "lab_h2d_cuda.pt.trace.json.gz", counters=dcgmi)
    assert any("nvidia-smi dmon -o DT" in q for q in joined.quality), joined.quality


def test_the_step_trackers_fix_has_no_placeholder() -> None:
    """The tracker's report (whyidle.track, whyidle run on CPU) fills the lever's worker count and
    the loop's batch size, as a trace's report does."""
    from whyidle.capture.tracker import StepRecord
    from whyidle.capture.tracker_records import LoaderInfo, TrackerStats
    from whyidle.capture.tracker_report import report_from_tracker

    steps = tuple(StepRecord(i, i * 20_000_000, (i + 1) * 20_000_000, 15_000_000, 0, 16, None) for i in range(12))
    loader = LoaderInfo("DataLoader", 0, False, 16, None, False)
    r = report_from_tracker(TrackerStats(steps=steps, device="cpu", device_timing=False, loader=loader, loop_line="train.py:9 in main", skip_first=1))
    f = _finding(r, "input_pipeline")
    workers = whyidle.Config().predictions.whatif_loader_workers
    assert "{" not in f.fix.code and f"num_workers={workers}," in f.fix.code and "batch_size=16," in f.fix.code
