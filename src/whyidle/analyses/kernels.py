"""Kernel statistics: how well the work that did run used the device.

* est. SM efficiency: kernel-time-weighted mean of ``min(blocks per SM, 1)``, the share of SMs a
  kernel's grid could occupy (the TensorBoard plugin's definition);
* est. achieved occupancy: kernel-time-weighted mean of Kineto's ``est. achieved occupancy %``;
* tensor-core share: share of kernel time in kernels whose names mark tensor-core (MMA) code;
* FP32 math share: share of kernel time in FP32 GEMM/convolution kernels that do not use tensor
  cores (SGEMM, FP32 cuDNN convolutions, FFT/Winograd convolutions);
* short kernels: count and time of kernels shorter than ``AttributionSettings.short_kernel_ns``, against the
  mean host time of one launch call;
* fill: how much of the device the kernels' grids could occupy over busy time
  (:mod:`whyidle.analyses.kernel_fill`).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from whyidle.analyses.calls import is_kernel_launch
from whyidle.analyses.kernel_fill import KernelFill, kernel_fill
from whyidle.analyses.links import Links
from whyidle.analyses.window import Window
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import median
from whyidle.timeline.model import Kind, Timeline

__all__ = ["KernelStats", "kernel_stats", "is_tensor_core_kernel", "is_fp32_math_kernel"]

# What marks tensor-core (MMA) kernels and FP32 math kernels in their names, matched case-blind.
# Kernel names are long C++ template instances (thousands of characters), so the tests are
# substring searches on the lowered name, not one regular expression with ".*" alternatives,
# which backtracked: 10 ms for 87 names of one trace. tests/test_kernels_names.py checks them
# against the regular expressions they replaced.
_TC_TOKENS = (
    "h884", "s884", "h1688", "s1688", "c1688", "i8816", "16816", "hmma", "imma", "wgmma", "gmma", "xmma",
    "tensorop", "tensor_op", "_tc_", "tf32", "ampere_h", "ampere_bf", "turing_h", "volta_h", "sm90_",
    "sm100_", "flash_fwd", "flash_bwd", "fmha",
)  # fmt: skip
_TC_ORDERED = (("bf16", "gemm"), ("gemm", "bf16"), ("fp16", "gemm"), ("gemm", "fp16"), ("cutlass", "f16"))
_FP32_TOKENS = (
    "sgemm", "scudnn", "implicit_convolve_sgemm", "gemmsn", "gemvnsp", "fft2d_", "fft1d_", "winograd",
    "dgrad_engine<float", "convolve_common_engine_float", "gemmk1_kernel<float",
)  # fmt: skip
_FP32_PATTERNS = re.compile(r"gemv2[nt]_kernel|wgrad_alg\d_engine<float")  # on the lowered name


def _ordered(low: str, first: str, then: str) -> bool:
    """Whether ``then`` occurs after an occurrence of ``first`` (the regex ``first.*then``)."""
    i = low.find(first)
    return i >= 0 and low.find(then, i + len(first)) >= 0


def is_tensor_core_kernel(name: str) -> bool:
    low = name.lower()
    return any(t in low for t in _TC_TOKENS) or any(_ordered(low, a, b) for a, b in _TC_ORDERED)


def is_fp32_math_kernel(name: str) -> bool:
    low = name.lower()
    fp32 = any(t in low for t in _FP32_TOKENS) or (("gemv2" in low or "wgrad_alg" in low) and _FP32_PATTERNS.search(low) is not None)
    return fp32 and not is_tensor_core_kernel(name)


class KernelStats(msgspec.Struct, frozen=True):
    count: int
    total_ns: int
    median_ns: float | None
    short_count: int
    short_ns: int
    mean_launch_ns: float | None  # mean host time of one kernel launch call
    sm_efficiency: float | None
    achieved_occupancy_pct: float | None
    tensor_core_ns: int
    fp32_math_ns: int
    top_fp32_kernels: tuple[tuple[str, int], ...]  # (name, ns) largest first
    fill: KernelFill | None = None  # the SM share the kernels could occupy (None without kernels)

    @property
    def short_share(self) -> float:
        return self.short_count / self.count if self.count else 0.0

    @property
    def tensor_core_share(self) -> float:
        return self.tensor_core_ns / self.total_ns if self.total_ns else 0.0

    @property
    def fp32_math_share(self) -> float:
        return self.fp32_math_ns / self.total_ns if self.total_ns else 0.0


def kernel_stats(tl: Timeline, links: Links, window: Window, cfg: AttributionSettings) -> KernelStats:
    lo, hi = window.start_ns, window.end_ns
    rows = links.device_rows
    k = rows[(tl.kind[rows] == int(Kind.KERNEL)) | (tl.kind[rows] == int(Kind.COLLECTIVE))]
    k = k[(tl.end_ns[k] > lo) & (tl.start_ns[k] < hi)]
    dur = (tl.end_ns[k] - tl.start_ns[k]).astype(np.int64)
    total = int(dur.sum())
    short = dur < cfg.short_kernel_ns
    bps = tl.blocks_per_sm[k].astype(np.float64)
    have = np.isfinite(bps)
    sm_eff = float((np.minimum(bps[have], 1.0) * dur[have]).sum() / dur[have].sum()) if have.any() and dur[have].sum() > 0 else None
    occ = tl.occupancy[k].astype(np.float64)
    have_o = np.isfinite(occ)
    occupancy = float((occ[have_o] * dur[have_o]).sum() / dur[have_o].sum()) if have_o.any() and dur[have_o].sum() > 0 else None
    tc = tl.name_mask(is_tensor_core_kernel, k)
    fp32 = tl.name_mask(is_fp32_math_kernel, k)
    top: dict[str, int] = {}
    if fp32.any():
        names = tl.name[k[fp32]]
        for n_id, d in zip(names.tolist(), dur[fp32].tolist()):
            s = tl.strings[n_id]
            top[s] = top.get(s, 0) + d
    runtime = np.flatnonzero(tl.kind == int(Kind.RUNTIME))
    launches = runtime[tl.name_mask(is_kernel_launch, runtime)]
    launches = launches[(tl.start_ns[launches] >= lo) & (tl.start_ns[launches] < hi)]
    mean_launch = float((tl.end_ns[launches] - tl.start_ns[launches]).mean()) if launches.size else None
    return KernelStats(
        count=int(k.size),
        total_ns=total,
        median_ns=median(dur) if dur.size else None,
        short_count=int(short.sum()),
        short_ns=int(dur[short].sum()),
        mean_launch_ns=mean_launch,
        sm_efficiency=sm_eff,
        achieved_occupancy_pct=occupancy,
        tensor_core_ns=int(dur[tc].sum()),
        fp32_math_ns=int(dur[fp32].sum()),
        top_fp32_kernels=tuple(sorted(top.items(), key=lambda kv: -kv[1])[:5]),
        fill=kernel_fill(tl, links, window, cfg),
    )
