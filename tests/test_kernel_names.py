"""The kernel-name tests match the regular expressions they replaced (the specification)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from whyidle.analyses.kernels import is_fp32_math_kernel, is_tensor_core_kernel

TENSOR_CORE = re.compile(
    r"h884|s884|h1688|s1688|c1688|i8816|16816|hmma|imma|wgmma|gmma|xmma|tensorop|tensor_op|_tc_|tf32|bf16.*gemm|gemm.*bf16|"
    r"fp16.*gemm|gemm.*fp16|ampere_h|ampere_bf|turing_h|volta_h|sm90_|sm100_|cutlass.*(?:f16|bf16)|flash_fwd|flash_bwd|fmha",
    re.IGNORECASE | re.DOTALL,
)
FP32_MATH = re.compile(
    r"sgemm|scudnn|implicit_convolve_sgemm|gemmSN|gemv2[NT]_kernel|gemvNSP|fft2d_|fft1d_|winograd|"
    r"dgrad_engine<float|wgrad_alg\d_engine<float|convolve_common_engine_float|gemmk1_kernel<float",
    re.IGNORECASE,
)
PIECES = [
    "h884", "hmma", "bf16", "fp16", "f16", "gemm", "GEMM", "cutlass", "CUTLASS", "sgemm", "gemv2N_kernel", "gemv2t_kernel",
    "wgrad_alg1_engine<float", "wgrad_algx_engine<float", "Winograd", "tensorop", "sm90_", "volta_h", "flash_fwd",
    "void ", "<", ">", "_", "::", "kernel", "float", "1", "x", "fft2d_", "gemmSN", "dgrad_engine<float", "\n",
]  # fmt: skip
names = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)

REAL = [
    "volta_h884gemm_64x64_ldg8_nn",
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)",
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)",
    "volta_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, ...)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "void gemv2N_kernel<int, int, float, float, float, float, 128, 32, 4, 4, false, false, cublasGemvParams<...> >(...)",
]


def test_real_names_agree_with_the_regular_expressions() -> None:
    for name in REAL:
        assert is_tensor_core_kernel(name) == bool(TENSOR_CORE.search(name)), name
        assert is_fp32_math_kernel(name) == (bool(FP32_MATH.search(name)) and not TENSOR_CORE.search(name)), name
    assert is_tensor_core_kernel(REAL[1]) and is_fp32_math_kernel(REAL[3]) and not is_tensor_core_kernel(REAL[4])


@settings(max_examples=600, deadline=None)
@given(names)
def test_composed_names_agree_with_the_regular_expressions(name: str) -> None:
    assert is_tensor_core_kernel(name) == bool(TENSOR_CORE.search(name))
    assert is_fp32_math_kernel(name) == (bool(FP32_MATH.search(name)) and not TENSOR_CORE.search(name))
