"""The busy-time findings (findings/work_rules.py): memory-bound kernel chains a compiler would
fuse, GEMM shapes too small or badly aligned, attention not using a fused kernel.

Each fires on a timeline built in code with the flaw, with the numbers the roofline gives, and
stays silent on the fused or well-shaped version of the same job. The shared traces are in
test_work_traces.py's tier; what fires there is in the report of the change.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlbuild import US
import whyidle
from whyidle.analyses.advice_context import AdviceContext
from whyidle.analyses.gemm_shapes import gemm_dims
from whyidle.analyses.peaks import PEAKS
from whyidle.catalogue import idiom_levers
from whyidle.findings.advice import fit_lever, for_idiom
from whyidle.findings.levers import lever_for
from whyidle.pages import page_name, page_text
from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

BUSY = ("fusion_candidates", "gemm_shapes", "unfused_attention")
H100 = PEAKS["H100 SXM"]


def text(shapes: list[list[int]], types: list[str]) -> str:
    return json.dumps([shapes, types, [""] * len(shapes), None])


class Job:
    """Ops on one thread, each launching one kernel on one stream; steps of ``step_us``."""

    def __init__(self) -> None:
        self.b = TimelineBuilder(TimelineMeta(source_format="test", devices=[{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]))
        self.main = self.b.lane_id(LaneKind.CPU_THREAD, -1, "1", "1", "main")
        self.stream = self.b.lane_id(LaneKind.GPU_STREAM, 0, "0", "7")
        self.corr = 0
        self.t = 0.0  # host clock (us)
        self.d = 0.0  # device clock (us)

    def op(self, name: str, inputs: str | None, kernel: str, kernel_us: float, inner: str | None = None, stack: str | None = None) -> None:
        """An op (and an inner op that launches) whose kernel runs right after the previous one."""
        start = self.t
        self.b.add(int(start * US), int((start + 8) * US), self.main, Kind.CPU_OP, name, inputs=inputs, stack=stack)
        if inner is not None:
            self.b.add(int((start + 1) * US), int((start + 7) * US), self.main, Kind.CPU_OP, inner, inputs=inputs)
        self.corr += 1
        self.b.add(int((start + 2) * US), int((start + 5) * US), self.main, Kind.RUNTIME, "cudaLaunchKernel", corr=self.corr)
        d0 = max(self.d, start + 5)
        self.b.add(int(d0 * US), int((d0 + kernel_us) * US), self.stream, Kind.KERNEL, kernel, corr=self.corr)
        self.t, self.d = start + 10, d0 + kernel_us

    def region(self, name: str, start: float, end: float) -> None:
        self.b.add(int(start * US), int(end * US), self.main, Kind.CPU_OP, name)

    def steps(self, n: int, body: object, step_us: float) -> Timeline:
        for i in range(n):
            t0 = i * step_us
            self.t = max(self.t, t0)
            self.b.add(int(t0 * US), int((t0 + step_us) * US), self.main, Kind.STEP, f"ProfilerStep#{i + 1}")
            body(self)  # type: ignore[operator]
        return self.b.build()


def busy(d: whyidle.Diagnosis) -> dict[str, whyidle.Finding]:
    return {f.cause: f for f in d.findings if f.cause in BUSY}


# --- fusion candidates -----------------------------------------------------------------------

BF16 = "c10::BFloat16"
X = [4096, 4096]  # 32 MiB in bf16
LN = text([X, [4096], [4096], []], [BF16, BF16, BF16, "Scalar"])
ADD = text([X, X, []], [BF16, BF16, "Scalar"])
GELU = text([X, []], [BF16, "Scalar"])


def _chain(j: Job) -> None:
    for _ in range(4):  # four layers
        j.op("aten::mm", text([X, X], [BF16, BF16]), "sm90_xmma_gemm_bf16", 200)
        j.op("aten::layer_norm", LN, "vectorized_layer_norm_kernel", 50, inner="aten::native_layer_norm", stack="model.py(42): forward")
        j.op("aten::add", ADD, "elementwise_kernel_add", 50)
        j.op("aten::gelu", GELU, "GeluCUDAKernelImpl", 50)


def test_a_memory_bound_chain_is_a_fusion_candidate_with_its_roofline_estimate() -> None:
    d = whyidle.diagnose(Job().steps(2, _chain, 1200))
    f = busy(d)["fusion_candidates"]
    facts = dict(f.evidence.facts)
    # 8 chains of 3 kernels of 50 us; fused, each reads x, the LN weights and the residual and
    # writes one tensor: 3 x 32 MiB + 16 KiB at 3.35 TB/s = 30 us, under the floor of one 50 us kernel
    mib32 = 4096 * 4096 * 2
    assert facts["chains"] == 8 and facts["kernels"] == 24 and facts["kernel_ns"] == 24 * 50 * US
    assert facts["fused_bytes_est"] == 8 * (3 * mib32 + 2 * 4096 * 2)
    assert facts["fused_bytes_est"] / 8 / (H100.mem_tbps * 1e3) < 50 * US  # the bound: 30 us
    assert facts["fused_ns_est"] == 8 * 50 * US  # the floor
    assert f.affected_busy_ns == 1200 * US and f.est_saving_ns == 800 * US
    # where it runs: the stream, and the Python line of the chain's first op (here its outer op's:
    # the launching native_layer_norm has no stack of its own)
    assert f.evidence.top_ops[0][0] == "aten::native_layer_norm -> aten::add -> aten::gelu x8 on GPU 0 stream 7 at model.py:42 in forward"
    assert "estimate" in f.fix.expected and "800.0 us saved" in f.fix.expected
    assert "torch.compile" in f.fix.code  # an eager job


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4096), cols=st.integers(1, 4096), us=st.lists(st.integers(1, 99), min_size=3, max_size=3))
def test_a_fused_chain_moves_no_more_bytes_and_saves_no_more_than_it_took(rows: int, cols: int, us: list[int]) -> None:
    x = [rows, cols]

    def body(j: Job) -> None:
        for _ in range(3):
            j.op("aten::native_layer_norm", text([x, [cols], [cols], []], [BF16, BF16, BF16, "Scalar"]), "ln", us[0])
            j.op("aten::add", text([x, x, []], [BF16, BF16, "Scalar"]), "add", us[1])
            j.op("aten::gelu", text([x, []], [BF16, "Scalar"]), "gelu", us[2])

    d = whyidle.diagnose(Job().steps(1, body, 400))  # the conftest checker holds every number to every other
    f = busy(d).get("fusion_candidates")
    if f is not None:
        facts = dict(f.evidence.facts)
        assert facts["fused_bytes_est"] <= facts["bytes"] and 0 < f.est_saving_ns <= f.affected_busy_ns == 3 * sum(us) * US


@pytest.mark.parametrize("region", ["Torch-Compiled Region", "## Call CompiledFxGraph fx_abc ##", "Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad"])
def test_the_same_chain_inside_a_compiled_region_or_the_optimizer_is_not_a_candidate(region: str) -> None:
    def compiled(j: Job) -> None:
        t0 = j.t
        _chain(j)
        j.region(region, t0, j.t)

    d = whyidle.diagnose(Job().steps(2, compiled, 1200))
    assert "fusion_candidates" not in busy(d)


def test_fused_kernels_without_eager_ops_are_not_a_candidate() -> None:
    def fused(j: Job) -> None:
        for _ in range(4):
            j.op("aten::mm", text([X, X], [BF16, BF16]), "sm90_xmma_gemm_bf16", 200)
            j.op("CompiledFunction", None, "triton_per_fused_add_gelu_native_layer_norm_0", 60)

    assert not busy(whyidle.diagnose(Job().steps(2, fused, 1200)))


def test_a_chain_seen_once_is_not_a_pattern() -> None:
    def once(j: Job) -> None:
        if j.t == 0:
            j.op("aten::add", ADD, "elementwise_kernel_add", 90)
            j.op("aten::gelu", GELU, "GeluCUDAKernelImpl", 90)
        j.op("aten::mm", text([X, X], [BF16, BF16]), "sm90_xmma_gemm_bf16", 200)

    assert "fusion_candidates" not in busy(whyidle.diagnose(Job().steps(2, once, 400)))


# --- GEMM shapes -----------------------------------------------------------------------------


def _gemms(k: int, slow_us: float) -> object:
    def body(j: Job) -> None:
        for _ in range(3):
            j.op("aten::mm", text([[4096, 4096], [4096, 4096]], [BF16, BF16]), "sm90_xmma_gemm_bf16", 200)
            j.op("aten::mm", text([[4096, k], [k, 4096]], [BF16, BF16]), "sm90_xmma_gemm_bf16_k", slow_us)

    return body


def test_a_misaligned_gemm_is_estimated_at_the_rate_of_the_well_shaped_ones() -> None:
    d = whyidle.diagnose(Job().steps(2, _gemms(4093, 600), 2500))
    f = busy(d)["gemm_shapes"]
    good = 2 * 4096**3 / 200e-6 / 1e12 / H100.bf16  # the fraction the aligned GEMMs reach
    bad = 2 * 4096 * 4093 * 4096 / 600e-6 / 1e12 / H100.bf16
    facts = dict(f.evidence.facts)
    assert facts["misaligned_shapes"] == 1 and facts["reference_fraction_bf16"] == round(good, 3)
    assert f.affected_busy_ns == 6 * 600 * US
    assert f.est_saving_ns == pytest.approx(6 * 600 * US * (1 - bad / good), rel=1e-6)
    assert "K/N not a multiple of 8" in f.evidence.top_ops[0][0] or "K not a multiple of 8" in f.evidence.top_ops[0][0]
    assert f.variant == "" and "pad_to_multiple_of" in f.fix.code and "estimate" in f.fix.expected


@given(b=st.integers(1, 8), m=st.integers(1, 300), k=st.integers(1, 300), n=st.integers(1, 300), op=st.sampled_from(["mm", "addmm", "bmm", "baddbmm", "matmul", "linear"]))
def test_gemm_dims_read_m_n_k_from_each_op_layout(b: int, m: int, k: int, n: int, op: str) -> None:
    a, w = ([b, m, k], [b, k, n]) if op in ("bmm", "baddbmm", "matmul") else ([m, k], [k, n])
    inputs = {"addmm": [[n], a, w], "baddbmm": [[b, m, n], a, w], "linear": [[b, m, k], [n, k]]}.get(op, [a, w])
    d = gemm_dims(f"aten::{op}", text(inputs, [BF16] * len(inputs)))
    batch = b if op in ("bmm", "baddbmm", "matmul") else 1
    rows = b * m if op == "linear" else m
    assert d is not None and (d.batch, d.m, d.n, d.k, d.precision) == (batch, rows, n, k, "bf16")


def test_the_aligned_gemm_is_not_flagged() -> None:
    assert "gemm_shapes" not in busy(whyidle.diagnose(Job().steps(2, _gemms(4096, 200), 2500)))


def test_tiny_m_gemms_ask_for_more_rows() -> None:
    def decode(j: Job) -> None:
        for _ in range(8):  # 4 rows against a 4096 x 4096 weight: 32 MiB read in 80 us is 0.13 of the memory bound
            j.op("aten::mm", text([[4, 4096], [4096, 4096]], [BF16, BF16]), "gemv_bf16", 80)

    f = busy(whyidle.diagnose(Job().steps(2, decode, 800)))["gemm_shapes"]
    assert f.variant == "tiny_m" and "M=4" in f.evidence.top_ops[0][0] and "near-roofline" in f.fix.expected


# --- attention -------------------------------------------------------------------------------

BH, S, D = 64, 1024, 64


def _explicit(j: Job) -> None:
    for _ in range(2):
        j.op("aten::matmul", text([[BH, S, D], [BH, D, S]], [BF16, BF16]), "gemm_qk", 100, inner="aten::bmm")
        j.op("aten::div", text([[BH, S, S], []], [BF16, "Scalar"]), "elementwise_div", 80)
        j.op("aten::softmax", text([[BH, S, S], [], []], [BF16, "Scalar", "Scalar"]), "softmax_warp_forward", 150, inner="aten::_softmax")
        j.op("aten::matmul", text([[BH, S, S], [BH, S, D]], [BF16, BF16]), "gemm_pv", 100, inner="aten::bmm")


def test_explicit_softmax_attention_is_unfused_with_the_fused_roofline_estimate() -> None:
    f = busy(whyidle.diagnose(Job().steps(2, _explicit, 1200)))["unfused_attention"]
    flops = 2 * 2 * BH * S * S * D
    nbytes = BH * 4 * S * D * 2
    per = max(flops / (H100.bf16 * 1e3), nbytes / (H100.mem_tbps * 1e3)) / 0.5
    assert f.affected_busy_ns == 4 * 430 * US and f.est_saving_ns == 4 * 430 * US - 4 * int(per)
    assert "aten::bmm -> aten::div -> aten::_softmax -> aten::bmm x4: 64 heads x [1024 x 1024] scores, head dim 64, bf16" == f.evidence.top_ops[0][0]
    assert "scaled_dot_product_attention" in f.fix.code
    assert "fusion_candidates" not in busy(whyidle.diagnose(Job().steps(2, _explicit, 1200)))  # its div is not counted twice


def test_sdpa_is_not_flagged() -> None:
    def sdpa(j: Job) -> None:
        for _ in range(2):
            q = [2, 32, S, D]
            j.op("aten::scaled_dot_product_attention", text([q, q, q], [BF16] * 3), "flash_fwd_kernel", 60, inner="aten::_scaled_dot_product_flash_attention")

    assert not busy(whyidle.diagnose(Job().steps(2, sdpa, 400)))


# --- every output, the fix by idiom, the docs --------------------------------------------------


def test_busy_findings_rank_by_their_estimate_and_render_everywhere(tmp_path: object) -> None:
    d = whyidle.diagnose(Job().steps(2, _explicit, 1200))
    f = busy(d)["unfused_attention"]
    assert d.findings[0] is f  # ranked by the time its fix saves, above any idle cause worth less
    assert f.title in d.render("terminal") and "estimated (from the roofline) to save" in d.render("terminal", width=200)
    assert f.title in d.render("html")
    trace = json.loads(d.render("perfetto", gzip=False))
    assert trace["traceEvents"]  # the busy finding adds no gap slice, and breaks nothing
    saved = json.loads(d.render("json"))
    (row,) = [r for r in saved["findings"] if r["cause"] == "unfused_attention"]
    assert row["est_saving_ns"] == f.est_saving_ns
    path = tmp_path / "r.json"  # type: ignore[operator]
    d.save(path)
    back = busy(whyidle.load_report(path))["unfused_attention"]
    assert back == f


@pytest.mark.parametrize("cause", BUSY)
def test_each_finding_has_a_lever_per_idiom_and_a_page(cause: str) -> None:
    ctx = AdviceContext(workload="training", framework="jax", idiom="jax")
    assert fit_lever(for_idiom(cause, lever_for(cause), ctx), ctx, 4) == idiom_levers(cause)["jax"]
    cuda = AdviceContext(workload="inference", framework="cuda", idiom="cuda")
    assert "torch" not in fit_lever(for_idiom(cause, lever_for(cause), cuda), cuda, 4).code
    compiled = AdviceContext(workload="training", framework="pytorch", idiom="pytorch", compiled=True)
    assert "torch.compile(model)" not in fit_lever(lever_for(cause), compiled, 4).code
    assert page_name(f"underfilled/{cause}") == "underfilled" and f"`underfilled/{cause}`" in page_text("underfilled")


def test_the_consistency_checker_holds_an_estimate_to_its_busy_time_and_its_words() -> None:
    import msgspec

    from whyidle.findings.consistency import contradictions

    d = whyidle.diagnose(Job().steps(2, _explicit, 1200))
    assert contradictions(d) == ()
    f = busy(d)["unfused_attention"]
    for broken, says in (
        (msgspec.structs.replace(f, est_saving_ns=f.affected_busy_ns + 1), "estimated to save"),
        (msgspec.structs.replace(f, fix=msgspec.structs.replace(f.fix, expected="faster")), "does not quote its estimated saving"),
    ):
        data = msgspec.structs.replace(d, findings=(broken,))
        assert any(says in c for c in contradictions(data))



# --- the shared traces -------------------------------------------------------------------------


def test_resnet50_eager_training_has_fusion_chains_under_the_bar(resnet0: object) -> None:
    """ResNet-50 trained eagerly on a V100: batch norm, ReLU and the residual add run as separate
    memory-bound kernels (cudnn_batch_norm -> clamp_min, threshold_backward -> batch norm backward)
    that Inductor fuses; fused, they would save about 25 ms of 50 ms of chain kernels, 2-3 % of the
    1.07 s window: under the 5 % every finding needs, so no finding (the input pipeline dominates)."""
    from whyidle.analyses.sequences import fusion_chains, fusible_kernels
    from whyidle.config import Config
    from whyidle.pipeline import analyse

    d = whyidle.diagnose(resnet0)  # type: ignore[arg-type]
    assert not busy(d)
    cfg = Config()
    a = analyse(whyidle.sources.load(resnet0), cfg)  # type: ignore[arg-type]
    assert a.op_kernels is not None and a.work is not None
    chains = fusion_chains(a.tl, a.op_kernels, a.work.peak, cfg.attribution, fusible_kernels(a.tl, a.op_kernels))
    saving = sum(c.kernel_ns - c.est_ns for c in chains)
    window = a.window.end_ns - a.window.start_ns
    assert 0.01 * window < saving < cfg.findings.min_finding_share_of_window * window
    names = {n for c in chains for n in c.ops}
    assert {"aten::cudnn_batch_norm", "aten::clamp_min", "aten::threshold_backward", "aten::cudnn_batch_norm_backward"} <= names
