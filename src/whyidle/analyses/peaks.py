"""Device peaks: dense math rate per precision and memory bandwidth, each from the vendor's document.

Rates are dense (the datasheets' "with sparsity" figures halved back where only those are printed),
in TFLOP/s (TOP/s for INT8); bandwidth in TB/s. ``None``: the document gives no figure for that
precision (the device has no such unit, or its datasheet does not print it); a step in that
precision then gets no fraction of peak, never a guessed one.

What each precision means here:

    fp64   FP64 matrix rate where the device has one (tensor cores / matrix cores), else vector
    fp32   an FP32 GEMM without TF32: NVIDIA's CUDA-core FP32; AMD's FP32 matrix rate
    tf32   NVIDIA TF32 tensor cores (PyTorch uses them for FP32 convolutions by default:
           ``torch.backends.cudnn.allow_tf32`` is True), AMD MI300's TF32
    bf16, fp16   16-bit tensor/matrix rate with FP32 accumulation (what PyTorch asks for)
    fp8, int8    8-bit tensor/matrix rate

AMD MI250 and MI250X hold two GCDs per module and ROCm shows each as a device: their rows are the
datasheet's module figures halved (per device). The two are told apart by the device's compute
units (``numSms`` in Kineto's device properties: 110 per GCD on an MI250X, 104 on an MI250).

``LINKS``: the GPU's link to its peers (NVLink, Infinity Fabric), as its document prints it (both
directions over all links), which collectives' bus bandwidth is compared with (analyses/collectives.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["DevicePeak", "PEAKS", "PRECISIONS", "device_peak", "LinkPeak", "LINKS", "link_peak"]

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


class DevicePeak(msgspec.Struct, frozen=True):
    """One device's peaks; ``source`` names the vendor document the numbers come from."""

    name: str
    fp64: float | None
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    int8: float | None
    mem_tbps: float
    source: str

    def tflops(self, precision: str) -> float | None:
        """The dense peak of ``precision`` in TFLOP/s, None if the document has none."""
        v = getattr(self, precision, None) if precision in PRECISIONS else None
        return float(v) if v is not None else None


def _p(name: str, fp64: float | None, fp32: float | None, tf32: float | None, b16: float | None, fp8: float | None, int8: float | None, tbps: float, source: str) -> DevicePeak:
    return DevicePeak(name, fp64, fp32, tf32, b16, b16, fp8, int8, tbps, source)


def _fp16_only(p: DevicePeak) -> DevicePeak:
    """Volta and Turing tensor cores take FP16, not BF16: no BF16 peak (PyTorch emulates it)."""
    return msgspec.structs.replace(p, bf16=None)


# name            fp64   fp32   tf32    bf16/fp16 fp8    int8    TB/s   vendor document
PEAKS: dict[str, DevicePeak] = {
    p.name: p
    for p in (
        _fp16_only(_p("V100 SXM2", 7.8, 15.7, None, 125.0, None, None, 0.9, "NVIDIA Tesla V100 GPU Accelerator datasheet (SXM2), 2018 (tensor cores: FP16 only)")),
        _fp16_only(_p("V100 PCIe", 7.0, 14.0, None, 112.0, None, None, 0.9, "NVIDIA Tesla V100 GPU Accelerator datasheet (PCIe), 2018 (tensor cores: FP16 only)")),
        _fp16_only(_p("V100S PCIe", 8.2, 16.4, None, 130.0, None, None, 1.134, "NVIDIA V100S datasheet, 2019 (tensor cores: FP16 only)")),
        _p("A100 40GB", 19.5, 19.5, 156.0, 312.0, None, 624.0, 1.555, "NVIDIA A100 Tensor Core GPU datasheet, 2021 (40GB PCIe and SXM)"),
        _p("A100 80GB PCIe", 19.5, 19.5, 156.0, 312.0, None, 624.0, 1.935, "NVIDIA A100 Tensor Core GPU datasheet, 2021 (80GB PCIe)"),
        _p("A100 80GB SXM", 19.5, 19.5, 156.0, 312.0, None, 624.0, 2.039, "NVIDIA A100 Tensor Core GPU datasheet, 2021 (80GB SXM)"),
        _p("H100 SXM", 67.0, 67.0, 494.5, 989.5, 1979.0, 1979.0, 3.35, "NVIDIA H100 Tensor Core GPU datasheet, 2023 (SXM; sparsity figures halved)"),
        _p("H100 PCIe", 51.0, 51.0, 378.0, 756.5, 1513.0, 1513.0, 2.0, "NVIDIA H100 Tensor Core GPU datasheet, 2023 (PCIe; sparsity figures halved)"),
        _p("H200", 67.0, 67.0, 494.5, 989.5, 1979.0, 1979.0, 4.8, "NVIDIA H200 Tensor Core GPU datasheet, 2024 (SXM; sparsity figures halved)"),
        _p("H200 NVL", 60.0, 60.0, 417.5, 835.5, 1670.5, 1670.5, 4.8, "NVIDIA H200 Tensor Core GPU datasheet, 2024 (NVL; sparsity figures halved)"),
        _p("B200", 37.0, 75.0, 1125.0, 2250.0, 4500.0, 4500.0, 7.7, "NVIDIA HGX B200 specifications, 2025 (per-GPU column: 180 GB HBM3E at 7.7 TB/s, FP32 75 TFLOPS; 8-GPU tensor figures divided by 8, sparsity halved)"),
        _p("L4", None, 30.3, 60.0, 121.0, 242.5, 242.5, 0.3, "NVIDIA L4 Tensor Core GPU datasheet, 2023 (sparsity figures halved)"),
        _p("L40S", None, 91.6, 183.0, 362.05, 733.0, 733.0, 0.864, "NVIDIA L40S GPU datasheet, 2023 (dense figures as printed; FP8 and INT8 sparsity figures halved)"),
        _p("A10", None, 31.2, 62.5, 125.0, None, 250.0, 0.6, "NVIDIA A10 Tensor Core GPU datasheet, 2021"),
        _fp16_only(_p("T4", None, 8.1, None, 65.0, None, 130.0, 0.32, "NVIDIA T4 Tensor Core GPU datasheet, 2019 (tensor cores: FP16, INT8, INT4; no BF16)")),
        _p("RTX 4090", None, 82.6, 82.6, 165.2, 330.3, 660.6, 1.008, "NVIDIA Ada GPU Architecture whitepaper v2.1, Appendix A (FP32 accumulate)"),
        _p("RTX 4060", None, 15.1, None, None, None, None, 0.272, "NVIDIA GeForce RTX 4060 family specifications page (shader TFLOPS; tensor rates not printed)"),
        _p("RTX 3090", None, 35.6, 35.6, 71.0, None, 284.0, 0.936, "NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0, Table 9 (FP32 accumulate)"),
        _p("MI210", 45.3, 45.3, None, 181.0, None, 181.0, 1.6, "AMD Instinct MI210 Accelerator datasheet, 2022 (matrix rates)"),
        _p("MI250 GCD", 45.25, 45.25, None, 181.05, None, 181.05, 1.6384, "AMD Instinct MI250 Accelerator datasheet, 2021 (matrix rates; module figures halved per GCD)"),
        _p("MI250X GCD", 47.85, 47.85, None, 191.5, None, 191.5, 1.6384, "AMD Instinct MI250X Accelerator datasheet, 2021 (matrix rates; module figures halved per GCD)"),
        _p("MI300X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 2614.9, 5.3, "AMD Instinct MI300X Accelerator datasheet, 2023 (matrix rates, dense)"),
        _p("MI325X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 2614.9, 6.0, "AMD Instinct MI325X Accelerator datasheet, 2024 (matrix rates, dense)"),
        _p("MI350X", 72.1, 144.2, None, 2306.9, 4613.7, 4613.7, 8.0, "AMD Instinct MI350X GPU datasheet, 2025 (matrix rates, dense; TF32 not printed)"),
    )
}


def _nvidia(n: str, mem_gb: float) -> str | None:
    pcie = "pcie" in n
    for key, row in (("h200", "H200 NVL" if "nvl" in n else "H200"), ("b200", "B200"), ("l40s", "L40S"), ("4090", "RTX 4090"), ("4060", "RTX 4060"), ("3090", "RTX 3090")):
        if key in n:
            return row
    if "h100" in n:
        return "H100 PCIe" if pcie else "H100 SXM"
    if "a100" in n:
        return "A100 40GB" if mem_gb < 60 else ("A100 80GB PCIe" if pcie else "A100 80GB SXM")
    if "v100s" in n:
        return "V100S PCIe"
    if "v100" in n:
        return "V100 PCIe" if pcie else "V100 SXM2"  # the DGX Station's V100-DGXS is the SXM2 part
    words = n.replace("-", " ").split()
    return "L4" if "l4" in words else "A10" if "a10" in words else "T4" if "t4" in words else None


def device_peak(device: dict[str, Any]) -> DevicePeak | None:
    """The peaks of a device from its properties (Kineto's ``deviceProperties`` entry), None when
    the device is not in the table."""
    n = str(device.get("name", "")).lower()
    mem = device.get("totalGlobalMem")
    mem_gb = float(mem) / 1e9 if isinstance(mem, (int, float)) else 0.0
    if "mi250" in n:
        cus = device.get("numSms")
        if type(cus) is int and cus in (104, 110):
            return PEAKS["MI250X GCD" if cus == 110 else "MI250 GCD"]
        return PEAKS["MI250X GCD" if "mi250x" in n and "mi250x/mi250" not in n.replace(" ", "") else "MI250 GCD"]
    for key, row in (("mi210", "MI210"), ("mi300x", "MI300X"), ("mi325x", "MI325X"), ("mi350x", "MI350X")):
        if key in n:
            return PEAKS[row]
    row_name = _nvidia(n, mem_gb)
    return PEAKS[row_name] if row_name is not None else None


class LinkPeak(msgspec.Struct, frozen=True):
    """A GPU's link to its peers (NVLink, AMD Infinity Fabric): the total both directions together
    over all its links, as the vendor document prints it, and that document."""

    name: str
    total_gbps: float
    source: str

    @property
    def per_direction_gbps(self) -> float:
        """What one direction carries: nccl-tests' bus bandwidth is unidirectional."""
        return self.total_gbps / 2


# Keyed by the PEAKS row. PCIe cards are left out: their NVLink bridge is optional and the trace
# does not say whether one is fitted; so is the A100 40GB row, which holds PCIe and SXM parts alike
# (link_peak tells the SXM part by its name).
LINKS: dict[str, LinkPeak] = {
    "V100 SXM2": LinkPeak("NVLink 2", 300.0, "NVIDIA Tesla V100 GPU Accelerator datasheet (SXM2), 2018: NVLink 300 GB/s"),
    "A100 80GB SXM": LinkPeak("NVLink 3", 600.0, "NVIDIA A100 Tensor Core GPU datasheet, 2021: NVLink 600 GB/s (SXM)"),
    "H100 SXM": LinkPeak("NVLink 4", 900.0, "NVIDIA H100 Tensor Core GPU datasheet, 2023: NVLink 900 GB/s (SXM)"),
    "H200": LinkPeak("NVLink 4", 900.0, "NVIDIA H200 Tensor Core GPU datasheet, 2024: NVLink 900 GB/s (SXM)"),
    "B200": LinkPeak("NVLink 5", 1800.0, "NVIDIA HGX B200 datasheet, 2024: NVLink 1.8 TB/s per GPU"),
    "MI300X": LinkPeak("Infinity Fabric", 896.0, "AMD Instinct MI300X Platform datasheet, 2023: 7 Infinity Fabric links, 896 GB/s peak aggregate"),
}


def link_peak(device: dict[str, Any]) -> LinkPeak | None:
    """The link bandwidth of a device (Kineto's ``deviceProperties`` entry), None when not known."""
    peak = device_peak(device)
    if peak is None:
        return None
    if peak.name == "A100 40GB" and "pcie" not in str(device.get("name", "")).lower():
        return LINKS["A100 80GB SXM"]  # the same NVLink 3 on the 40GB SXM part
    return LINKS.get(peak.name)
