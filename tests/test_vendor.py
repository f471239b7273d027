"""Device vendor from deviceProperties: an AMD GPU's computeMajor is not an NVIDIA compute capability."""

from __future__ import annotations

from pathlib import Path

import whyidle
from whyidle.timeline.model import TimelineMeta

H200 = Path(__file__).parent / "data" / "h200"
# As ROCm 6.2's Kineto writes them for an MI250 GCD (from the shared HTA AMD trace).
MI250 = {"id": 0, "name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "warpSize": 64, "numSms": 104}
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "warpSize": 32, "numSms": 132}


def test_vendor_and_compute_capability() -> None:
    assert TimelineMeta("kineto", devices=[MI250]).vendor == "amd"
    assert TimelineMeta("kineto", devices=[MI250]).min_compute_capability is None
    assert TimelineMeta("kineto", devices=[{**MI250, "name": ""}]).vendor == "amd"  # the 64-lane wavefront alone
    assert TimelineMeta("kineto", devices=[H100]).vendor == "nvidia"
    assert TimelineMeta("kineto", devices=[H100]).min_compute_capability == (9, 0)
    assert TimelineMeta("kineto", devices=[{"id": 0, "computeMajor": 8, "computeMinor": 0}]).min_compute_capability == (8, 0)
    assert TimelineMeta("kineto", devices=[]).vendor == ""
    assert TimelineMeta("kineto", devices=[MI250, H100]).vendor == ""  # mixed: claim neither


def test_fp32_rule_does_not_read_an_amd_gpu_as_nvidia() -> None:
    tl = whyidle.load(H200 / "sync_after_each_kernel.pt.trace.json.gz")
    assert any(f.cause == "fp32_math" for f in whyidle.diagnose(tl).findings)  # on the H200 it is a finding
    tl.meta.devices = [MI250]
    r = whyidle.diagnose(tl)
    assert not any(f.cause == "fp32_math" for f in r.findings)
    (skip,) = [s for s in r.skipped if s.rule == "underfilled/fp32_math"]
    assert "AMD GPU" in skip.reason and "GFX architecture" in skip.reason
