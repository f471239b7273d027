"""The work model: FLOPs and bytes per op (analyses/flops.py), the roofline and MFU (analyses/work.py),
the device peaks (analyses/peaks.py).

Tier 1: counts exact against analytic counts written out here, over shapes and dtypes (hypothesis),
and timelines built in code with known kernel times. Tier 2: a small CPU model recorded with
torch.profiler(record_shapes=True) against torch.utils.flop_counter. Tier 3 (test_work_traces.py):
the shared real traces.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlbuild import US
from whyidle.analyses.flops import itemsize, op_work
from whyidle.analyses.links import link_launches
from whyidle.analyses.peaks import PEAKS, PRECISIONS, device_peak
from whyidle.analyses.window import select_window
from whyidle.analyses.work import WorkSummary, measure_work
from whyidle.config import Config
from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

DTYPES = {"float": ("fp32", 4), "c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "double": ("fp64", 8)}
dims = st.integers(1, 64)
dtypes = st.sampled_from(sorted(DTYPES))


def text(shapes: list[list[int]], types: list[str], concrete: list[str] | None = None, flops: int | None = None) -> str:
    return json.dumps([shapes, types, concrete if concrete is not None else [""] * len(shapes), flops])


def nbytes(shape: list[int], dtype: str) -> int:
    return math.prod(shape) * DTYPES[dtype][1]


# --- GEMMs --------------------------------------------------------------------------------------


@given(m=dims, k=dims, n=dims, dtype=dtypes)
def test_mm_and_addmm_are_2mkn(m: int, k: int, n: int, dtype: str) -> None:
    w = op_work("aten::mm", text([[m, k], [k, n]], [dtype, dtype]))
    assert w is not None and w.flops == 2 * m * k * n and w.precision == DTYPES[dtype][0] and w.family == "gemm"
    assert w.nbytes == nbytes([m, k], dtype) + nbytes([k, n], dtype) + nbytes([m, n], dtype)
    a = op_work("aten::addmm", text([[n], [m, k], [k, n], [], []], [dtype] * 3 + ["Scalar", "Scalar"]))
    assert a is not None and a.flops == 2 * m * k * n  # the bias add is not counted (as flop_counter)


@given(b=dims, m=dims, k=dims, n=dims, dtype=dtypes)
def test_bmm_baddbmm_matmul_linear(b: int, m: int, k: int, n: int, dtype: str) -> None:
    flops = 2 * b * m * k * n
    assert op_work("aten::bmm", text([[b, m, k], [b, k, n]], [dtype] * 2)).flops == flops  # type: ignore[union-attr]
    assert op_work("aten::baddbmm", text([[b, m, n], [b, m, k], [b, k, n]], [dtype] * 3)).flops == flops  # type: ignore[union-attr]
    # matmul broadcasts a 2-D right operand over the batch; linear's weight is [out, in]
    assert op_work("aten::matmul", text([[b, m, k], [k, n]], [dtype] * 2)).flops == flops  # type: ignore[union-attr]
    assert op_work("aten::linear", text([[b, m, k], [n, k], [n]], [dtype] * 3)).flops == flops  # type: ignore[union-attr]


def test_shapes_that_do_not_fit_are_not_modelled() -> None:
    assert op_work("aten::mm", text([[4, 5], [6, 7]], ["float"] * 2)) is None
    assert op_work("aten::mm", "") is None
    assert op_work("aten::mm", "not json") is None
    assert op_work("aten::view", text([[4, 5]], ["float"])) is None


def test_a_broadcast_view_is_read_once() -> None:
    """bmm of activations with an expanded weight (stride 0 over the batch): the weight's bytes once."""
    b, m, k, n = 64, 8, 1024, 3072
    shapes = [[b, m, k], [b, k, n]]
    w = op_work("aten::bmm", json.dumps([shapes, ["c10::BFloat16"] * 2, ["", ""], None, [[m * k, k, 1], [0, n, 1]]]))
    assert w is not None and w.nbytes == 2 * (b * m * k + k * n + b * m * n)


def test_the_profilers_count_when_no_formula() -> None:
    w = op_work("myops::fused_thing", text([[8, 8]], ["float"], flops=1234))
    assert w is not None and w.flops == 1234 and w.family == "profiler" and w.precision == "fp32"


# --- convolutions -------------------------------------------------------------------------------


def conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@settings(max_examples=60)
@given(n=st.integers(1, 8), groups=st.integers(1, 4), cin_g=st.integers(1, 8), cout_g=st.integers(1, 8), k=st.integers(1, 5),
       s=st.integers(1, 3), p=st.integers(0, 3), d=st.integers(1, 2), h=st.integers(8, 40), dtype=dtypes)  # fmt: skip
def test_convolution_forward_and_backward(n: int, groups: int, cin_g: int, cout_g: int, k: int, s: int, p: int, d: int, h: int, dtype: str) -> None:
    cin, cout = cin_g * groups, cout_g * groups
    ho = conv_out(h, k, s, p, d)
    if ho <= 0:
        return
    # one multiply-add per output element per weight element of its group
    analytic = 2 * (n * cout * ho * ho) * (cin_g * k * k)
    concrete = ["", "", "", f"[{s}, {s}]", f"[{p}, {p}]", f"[{d}, {d}]", "False", "[0, 0]", str(groups)]
    types = [dtype, dtype, dtype, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    w = op_work("aten::convolution", text([[n, cin, h, h], [cout, cin_g, k, k], [cout], [], [], [], [], [], []], types, concrete))
    assert w is not None and w.flops == analytic and w.family == "conv"
    assert w.precision == ("tf32" if dtype == "float" else DTYPES[dtype][0])  # cuDNN's default for FP32
    grad = [[n, cout, ho, ho], [n, cin, h, h], [cout, cin_g, k, k]] + [[]] * 8
    for mask, times in (("[True, True, True]", 2), ("[False, True, False]", 1), ("[True, False, False]", 1)):
        bw = op_work("aten::convolution_backward", text(grad, [dtype] * 3 + ["ScalarList"] * 8, [""] * 10 + [mask]))
        assert bw is not None and bw.flops == times * analytic


def test_a_convolution_without_its_stride_takes_the_output_size_it_is_given() -> None:
    shapes = [[2, 3, 32, 32], [8, 3, 3, 3], [], [], [], [], [], [], []]
    assumed = op_work("aten::convolution", json.dumps([shapes, ["float", "float"] + ["GenericList"] * 7, None, None]))
    assert assumed is not None and "stride 1, no padding assumed" in assumed.note
    assert assumed.flops == 2 * 2 * 8 * 30 * 30 * 27
    told = op_work("aten::convolution", json.dumps([shapes, ["float", "float"] + ["GenericList"] * 7, None, None]), out_spatial=[16, 16])
    assert told is not None and told.flops == 2 * 2 * 8 * 16 * 16 * 27 and "next op" in told.note


# --- attention ----------------------------------------------------------------------------------


def kept_scores(sq: int, sk: int, causal: bool) -> int:
    return sum(min(i + 1, sk) for i in range(sq)) if causal else sq * sk


@given(b=st.integers(1, 4), hkv=st.integers(1, 4), rep=st.integers(1, 3), sq=st.integers(1, 40), sk=st.integers(1, 40),
       d=st.sampled_from([16, 64, 128]), causal=st.booleans(), dtype=st.sampled_from(["c10::BFloat16", "c10::Half"]))  # fmt: skip
def test_attention_forward_backward_causal_and_gqa(b: int, hkv: int, rep: int, sq: int, sk: int, d: int, causal: bool, dtype: str) -> None:
    hq = hkv * rep
    q, kv = [b, hq, sq, d], [b, hkv, sk, d]
    scores = kept_scores(sq, sk, causal)
    flag = "True" if causal else "False"
    fwd = op_work("aten::_scaled_dot_product_flash_attention", text([q, kv, kv, [], [], [], []], [dtype] * 3 + ["Scalar"] * 4, ["", "", "", "0.", flag, "False", ""]))
    assert fwd is not None and fwd.flops == 2 * b * hq * scores * (d + d) and fwd.family == "attention"
    concrete = [""] * 11 + [flag, "", "", ""]
    bwd = op_work("aten::_scaled_dot_product_flash_attention_backward", text([q, q, kv, kv, q, [b, hq, sq]] + [[]] * 9, [dtype] * 6 + ["Scalar"] * 9, concrete))
    assert bwd is not None and bwd.flops == 2 * b * hq * scores * (3 * d + 2 * d)


# --- ops that only move data --------------------------------------------------------------------


@given(shape=st.lists(st.integers(1, 32), min_size=1, max_size=4), dtype=dtypes)
def test_elementwise_normalisation_softmax_reduction_copy_bytes(shape: list[int], dtype: str) -> None:
    one = nbytes(shape, dtype)
    for name, family in (("aten::add", "elementwise"), ("aten::mul", "elementwise")):
        w = op_work(name, text([shape, shape, []], [dtype, dtype, "Scalar"]))
        assert w is not None and (w.flops, w.nbytes, w.family) == (0, 3 * one, family)  # two read, one written
    for name, family in (("aten::relu", "elementwise"), ("aten::_softmax", "softmax"), ("aten::native_layer_norm", "norm")):
        w = op_work(name, text([shape], [dtype]))
        assert w is not None and (w.flops, w.nbytes, w.family) == (0, 2 * one, family)
    r = op_work("aten::sum", text([shape, [], []], [dtype, "ScalarList", "Scalar"]))
    assert r is not None and (r.nbytes, r.family) == (one, "reduction")  # the small output is not counted
    c = op_work("aten::copy_", text([shape, shape, []], ["float", dtype, "Scalar"]))
    assert c is not None and c.nbytes == nbytes(shape, "float") + one


@given(vocab=st.integers(1, 1000), dim=st.integers(1, 256), tokens=st.integers(1, 512), dtype=dtypes)
def test_embedding_reads_the_rows_it_gathers(vocab: int, dim: int, tokens: int, dtype: str) -> None:
    w = op_work("aten::embedding", text([[vocab, dim], [tokens], [], [], []], [dtype, "long int", "Scalar", "Scalar", "Scalar"]))
    assert w is not None and w.flops == 0 and w.nbytes == tokens * 8 + 2 * tokens * dim * DTYPES[dtype][1]


def test_dtype_sizes() -> None:
    assert [itemsize(t) for t in ("float", "c10::BFloat16", "double", "c10::Float8_e4m3fn", "Scalar")] == [4, 2, 8, 1, 0]


# --- device peaks -------------------------------------------------------------------------------


def test_every_peak_names_its_vendor_document_and_has_a_rate() -> None:
    for p in PEAKS.values():
        assert "datasheet" in p.source or "whitepaper" in p.source or "specifications" in p.source, p.name
        assert p.mem_tbps > 0 and any(p.tflops(x) for x in PRECISIONS), p.name


@pytest.mark.parametrize(
    "device, row",
    [
        ({"name": "Tesla V100-SXM2-32GB"}, "V100 SXM2"), ({"name": "Tesla V100-PCIE-16GB"}, "V100 PCIe"),
        ({"name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42_000_000_000}, "A100 40GB"),
        ({"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_000_000_000}, "A100 80GB SXM"),
        ({"name": "NVIDIA A100 80GB PCIe", "totalGlobalMem": 85_000_000_000}, "A100 80GB PCIe"),
        ({"name": "NVIDIA H100 80GB HBM3"}, "H100 SXM"), ({"name": "NVIDIA H100 PCIe"}, "H100 PCIe"),
        ({"name": "NVIDIA H200"}, "H200"), ({"name": "NVIDIA H200 NVL"}, "H200 NVL"), ({"name": "NVIDIA B200"}, "B200"),
        ({"name": "NVIDIA L4"}, "L4"), ({"name": "NVIDIA L40S"}, "L40S"), ({"name": "NVIDIA A10"}, "A10"), ({"name": "Tesla T4"}, "T4"),
        ({"name": "NVIDIA GeForce RTX 4090"}, "RTX 4090"), ({"name": "NVIDIA GeForce RTX 4060"}, "RTX 4060"),
        ({"name": "NVIDIA GeForce RTX 3090"}, "RTX 3090"), ({"name": "AMD Instinct MI210"}, "MI210"),
        ({"name": "AMD Instinct MI250X/MI250", "numSms": 110}, "MI250X GCD"), ({"name": "AMD Instinct MI250X/MI250", "numSms": 104}, "MI250 GCD"),
        ({"name": "AMD Instinct MI300X"}, "MI300X"), ({"name": "AMD Instinct MI325X"}, "MI325X"), ({"name": "AMD Instinct MI350X"}, "MI350X"),
    ],
)  # fmt: skip
def test_device_names_find_their_row(device: dict[str, object], row: str) -> None:
    peak = device_peak(device)
    assert peak is not None and peak.name == row


def test_an_unknown_device_has_no_peak() -> None:
    assert device_peak({"name": "AMD Radeon Graphics"}) is None and device_peak({}) is None


# --- the work model on timelines built in code ---------------------------------------------------


class Job:
    """A thread of ops with recorded inputs, each launching kernels of known length (us)."""

    def __init__(self, device: str = "NVIDIA H100 80GB HBM3", major: int = 9) -> None:
        self.b = TimelineBuilder(TimelineMeta(source_format="test", devices=[{"name": device, "computeMajor": major, "computeMinor": 0}]))
        self.main = self.b.lane_id(LaneKind.CPU_THREAD, -1, "1", "1", "main")
        self.stream = self.b.lane_id(LaneKind.GPU_STREAM, 0, "0", "7")
        self.corr = 0

    def op(self, name: str, start: float, end: float, inputs: str | None) -> None:
        self.b.add(int(start * US), int(end * US), self.main, Kind.CPU_OP, name, inputs=inputs)

    def kernel(self, name: str, launch_at: float, start: float, end: float) -> None:
        self.corr += 1
        self.b.add(int(launch_at * US), int((launch_at + 1) * US), self.main, Kind.RUNTIME, "cudaLaunchKernel", corr=self.corr)
        self.b.add(int(start * US), int(end * US), self.stream, Kind.KERNEL, name, corr=self.corr)

    def work(self) -> tuple[WorkSummary, Timeline]:
        tl = self.b.build()
        cfg = Config()
        links = link_launches(tl)
        return measure_work(tl, links, select_window(tl, links, cfg.window), cfg), tl


BF16_MM = text([[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2)
MM_FLOPS = 2 * 4096**3


def test_nested_ops_count_once_and_unmodelled_kernels_keep_their_time() -> None:
    """linear holds a cast (copy_) and the addmm: the addmm's FLOPs in BF16, counted once; the cast's
    bytes; a kernel launched by no modelled op is unmodelled with its time."""
    j = Job()
    fp32 = text([[4096, 4096], [4096, 4096], [4096]], ["float"] * 3)
    j.op("aten::linear", 0, 100, fp32)
    j.op("aten::copy_", 1, 10, text([[4096, 4096], [4096, 4096], []], ["c10::BFloat16", "float", "Scalar"]))
    j.kernel("cast", 2, 10, 30)
    j.op("aten::addmm", 20, 90, text([[4096], [4096, 4096], [4096, 4096], [], []], ["c10::BFloat16"] * 3 + ["Scalar"] * 2))
    j.kernel("sm90_gemm", 21, 40, 240)
    j.op("aten::_fused_adamw_", 110, 120, None)
    j.kernel("adam", 111, 300, 340)
    w, _ = j.work()
    assert w.flops == MM_FLOPS and w.flops_by_precision == {"bf16": MM_FLOPS}
    assert w.kernel_ns == 260 * US and w.unmodelled_ns == 40 * US and w.unmodelled == (("adam", 40 * US),)
    by_name = {r.name: r for r in w.ops}
    assert set(by_name) == {"aten::addmm", "aten::copy_"}
    gemm = by_name["aten::addmm"]
    assert gemm.kernel_ns == 200 * US and gemm.tflops == pytest.approx(MM_FLOPS / 200e-6 / 1e12)
    assert by_name["aten::copy_"].nbytes == 4096 * 4096 * 6 and by_name["aten::copy_"].bound == "memory"


def test_mfu_is_model_flops_over_step_time_at_peak() -> None:
    j = Job()
    for n, t0 in ((1, 0), (2, 1000)):
        j.b.add(int(t0 * US), int((t0 + 1000) * US), j.main, Kind.STEP, f"ProfilerStep#{n}")
        j.op("aten::mm", t0 + 10, t0 + 20, BF16_MM)
        j.kernel("gemm", t0 + 11, t0 + 20, t0 + 520)
    w, _ = j.work()
    peak = PEAKS["H100 SXM"]
    assert w.peak == peak and [s.flops for s in w.steps] == [MM_FLOPS, MM_FLOPS]
    assert w.mfu == pytest.approx(2 * MM_FLOPS / (peak.bf16 * 1e12) / (w.duration_ns / 1e9))  # type: ignore[operator]
    for s in w.steps:
        assert s.mfu == pytest.approx(MM_FLOPS / (peak.bf16 * 1e12) / (s.duration_ns / 1e9))  # type: ignore[operator]
    # 137.4 GFLOP in 500 us is 275 TFLOP/s, 28% of 989.5: compute-bound and slow
    (gemm,) = w.ops
    assert gemm.bound == "compute" and gemm.fraction == pytest.approx(MM_FLOPS / 500e-6 / 1e12 / peak.bf16)  # type: ignore[operator]
    assert w.compute_slow_ns == 1000 * US and w.near_roofline_ns == 0


_CONV_TYPES = ["float", "float"] + ["GenericList"] * 7  # no stride recorded: the output size is read after it
_consumer = st.tuples(st.integers(2, 5), st.booleans(), st.booleans(), st.lists(st.integers(1, 9), min_size=3, max_size=3))


@settings(max_examples=60)
@given(convs=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3), st.lists(_consumer, max_size=11)), min_size=1, max_size=5))
def test_a_convolution_without_its_stride_takes_the_size_of_the_first_op_that_consumes_it(
    convs: list[tuple[int, int, list[tuple[int, bool, bool, list[int]]]]],
) -> None:
    """Each convolution's output size comes from the first of the next 8 ops with recorded inputs
    on its thread (the following convolutions among them) whose first input has its rank and
    starts [N, C_out]; without one, stride 1 and no padding are assumed. Written out here as a
    scan, op by op."""
    j = Job()
    ops: list[tuple[str, float, float, str]] = []  # (name, start, end, inputs), in start order
    t = 0.0
    for n, cout, consumers in convs:
        ops.append(("aten::convolution", t, t + 5, json.dumps([[[n, 3, 12, 12], [cout, 3, 3, 3]] + [[]] * 7, _CONV_TYPES, None, None])))
        j.kernel("conv", t + 1, t + 2, t + 3)
        t += 6
        for rank, same_n, same_c, spatial in consumers:
            first = [n if same_n else n + 1, cout if same_c else cout + 1, *spatial][:rank]
            ops.append(("aten::relu", t, t + 1, json.dumps([[first], ["float"], None, None])))
            t += 2
    for name, start, end, inputs in ops:
        j.op(name, start, end, inputs)
    expected = 0
    for i, (name, _, end, inputs) in enumerate(ops):
        if name != "aten::convolution":
            continue
        dims = json.loads(inputs)[0]
        after = [json.loads(o[3])[0][0] for o in ops[i + 1 :] if o[1] >= end][:8]
        out = next((d[2:] for d in after if len(d) == len(dims[0]) and d[:2] == [dims[0][0], dims[1][0]]), None)
        w = op_work(name, inputs, out_spatial=out)
        assert w is not None
        expected += w.flops
    work, _ = j.work()
    assert work.flops == expected


def test_an_unknown_device_gets_rates_without_fractions() -> None:
    j = Job(device="Mystery Accelerator 9000")
    j.op("aten::mm", 0, 10, BF16_MM)
    j.kernel("gemm", 1, 10, 110)
    w, _ = j.work()
    assert w.peak is None and w.mfu is None and w.flops == MM_FLOPS
    assert w.ops[0].fraction is None and w.ops[0].tflops == pytest.approx(MM_FLOPS / 100e-6 / 1e12)
    assert w.unrated_ns == 100 * US and any("not in whyidle's table" in n for n in w.notes)


def test_a_precision_without_a_peak_gives_no_mfu() -> None:
    j = Job(device="Tesla V100-SXM2-32GB", major=7)  # Volta's tensor cores take FP16, not BF16
    j.op("aten::mm", 0, 10, text([[64, 64], [64, 64]], ["c10::BFloat16"] * 2))
    j.kernel("gemm", 1, 10, 20)
    w, _ = j.work()
    assert w.mfu is None and w.ops[0].fraction is None and any("no bf16 peak" in n for n in w.notes)


def test_the_fp32_finding_quotes_the_rate_reached() -> None:
    """FP32 GEMM kernels (sgemm) on a V100: the finding says what rate they reached against the
    FP32 peak, from the work model."""
    from whyidle import diagnose

    j = Job(device="Tesla V100-SXM2-32GB", major=7)
    fp32_mm = text([[2048, 2048], [2048, 2048]], ["float", "float"])
    for i in range(4):
        t0 = i * 3000
        j.op("aten::mm", t0, t0 + 20, fp32_mm)
        j.kernel("volta_sgemm_128x64_nn", t0 + 1, t0 + 30, t0 + 2030)  # 2 ms each
    (f,) = [f for f in diagnose(j.b.build()).findings if f.id == "fp32_math"]
    facts = dict(f.evidence.facts)
    rate = 2 * 2048**3 / 2e-3 / 1e12
    assert facts["fp32_gemm_tflops"] == round(rate, 3) and facts["fp32_peak_tflops"] == 15.7 and facts["fp16_peak_tflops"] == 125.0  # V100: FP16 tensor cores only
    assert f"{rate / 15.7:.0%} of the V100 SXM2's 15.7 TFLOP/s FP32 peak" in f.fix.expected


# Figures as the datasheets print them "with sparsity" (TF32, BF16/FP16, FP8, INT8), per GPU: the
# table holds half of each (dense). H200 and B200's 8-GPU figures are already per GPU here.
PRINTED_SPARSE = {
    "H100 SXM": (989, 1979, 3958, 3958), "H100 PCIe": (756, 1513, 3026, 3026), "H200": (989, 1979, 3958, 3958),
    "H200 NVL": (835, 1671, 3341, 3341), "B200": (2250, 4500, 9000, 9000), "L4": (120, 242, 485, 485),
}  # fmt: skip


@pytest.mark.parametrize("row", sorted(PRINTED_SPARSE))
def test_sparsity_figures_are_halved(row: str) -> None:
    p = PEAKS[row]
    for precision, printed in zip(("tf32", "bf16", "fp8", "int8"), PRINTED_SPARSE[row], strict=True):
        assert p.tflops(precision) == pytest.approx(printed / 2, abs=0.6), (row, precision)


def test_l40s_bf16_is_the_dense_figure_its_datasheet_prints() -> None:
    """The L40S datasheet prints BF16/FP16 362.05 dense beside 733 with sparsity (not twice it):
    the dense figure is the peak."""
    assert PEAKS["L40S"].bf16 == PEAKS["L40S"].fp16 == 362.05 and PEAKS["L40S"].tf32 == 183.0


def test_tensor_cores_without_bf16_have_no_bf16_peak() -> None:
    """Volta (V100) and Turing (T4) tensor cores take FP16 and not BF16."""
    for row in ("V100 SXM2", "V100 PCIe", "V100S PCIe", "T4"):
        assert PEAKS[row].bf16 is None and PEAKS[row].fp16 is not None
