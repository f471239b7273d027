"""The work model against torch.utils.flop_counter: a small CPU model recorded here with
torch.profiler(record_shapes=True), and the shared ResNet-50 training trace against a ResNet-50
built here (torchvision's architecture) counted on the meta device; and the report's rows on the
shared traces that carry shapes. Skipped without torch or without the shared traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import shared_trace
from whyidle import sources
from whyidle.analyses.links import link_launches
from whyidle.analyses.window import select_window
from whyidle.analyses.work import WorkSummary, measure_work
from whyidle.config import Config

torch = pytest.importorskip("torch", reason="torch is needed to record a model and count its FLOPs with flop_counter")
nn = torch.nn
F = torch.nn.functional


def work_of(path: Path) -> WorkSummary:
    tl = sources.load(path)
    cfg = Config()
    links = link_launches(tl)
    return measure_work(tl, links, select_window(tl, links, cfg.window), cfg)


class Small(nn.Module):  # type: ignore[misc]
    """Every GEMM-family op, a strided and padded convolution, forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 6, 3, padding=2, dilation=2, bias=False)
        self.lin = nn.Linear(6 * 8 * 8, 32)
        self.proj = nn.Linear(16, 24, bias=False)

    def forward(self, x: Any, t: Any) -> Any:
        y = self.lin(self.conv2(F.relu(self.conv(x))).flatten(1))
        u = self.proj(t)
        scores = torch.baddbmm(torch.zeros(2, 6, 6), u, u.transpose(1, 2))
        return y.sum() + torch.bmm(u, u.transpose(1, 2)).sum() + scores.sum() + torch.matmul(t, torch.ones(16, 5)).sum()


def test_a_recorded_cpu_model_matches_flop_counter(tmp_path: Path) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    m = Small()
    x, t = torch.randn(2, 4, 16, 16), torch.randn(2, 6, 16)
    with FlopCounterMode(display=False) as counter:
        m(x, t).backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        m(x, t).backward()
    prof.export_chrome_trace(str(tmp_path / "small.json"))
    w = work_of(tmp_path / "small.json")
    assert counter.get_total_flops() > 0
    assert w.flops == counter.get_total_flops()


def test_grouped_convolution_weight_gradient_is_counted_per_group(tmp_path: Path) -> None:
    """flop_counter counts a grouped convolution's weight gradient as if it had one group (it
    ignores groups there): whyidle counts the real work, the forward's count; flop_counter's is
    ``groups`` times that."""
    from torch.utils.flop_counter import FlopCounterMode

    groups = 4
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=groups, bias=False)
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    forward = 2 * 2 * 8 * 10 * 10 * (8 // groups) * 9
    with FlopCounterMode(display=False) as counter:
        conv(x).sum().backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        conv(x).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "g.json"))
    w = work_of(tmp_path / "g.json")
    assert w.flops == 3 * forward  # forward, input gradient, weight gradient
    assert counter.get_total_flops() == 2 * forward + groups * forward


def _bottleneck(cin: int, width: int, stride: int) -> Any:
    out = width * 4
    body = nn.Sequential(
        nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),  # v1.5: stride on the 3x3
        nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
    )  # fmt: skip
    down = nn.Sequential(nn.Conv2d(cin, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)) if stride != 1 or cin != out else None

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.body, self.down = body, down

        def forward(self, x: Any) -> Any:
            return F.relu(self.body(x) + (x if self.down is None else self.down(x)))

    return Block()


def resnet50() -> Any:
    """torchvision.models.resnet50's layers (torchvision is not a dependency): stem, 3-4-6-3
    bottlenecks of widths 64-128-256-512, average pool, a 1000-way linear."""
    layers: list[Any] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(_bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000))


def test_resnet50_flops_per_training_step_match_flop_counter() -> None:
    """The shared trace (V100, batch 32 at 224x224, no stride in its record: the output sizes come
    from the next op's input) against flop_counter on ResNet-50 at the trace's input shape."""
    from torch.utils.flop_counter import FlopCounterMode

    path = shared_trace("kineto/resnet50_num_workers_0.pt.trace.json.gz")
    tl = sources.load(path)
    first = next(int(i) for i in np.flatnonzero(tl.inputs >= 0) if tl.name_of(int(i)) == "aten::convolution")
    import json

    shape = json.loads(tl.inputs_of(first))[0][0]
    assert shape == [32, 3, 224, 224]
    with torch.device("meta"):
        model = resnet50()
        x = torch.empty(shape)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    reference = counter.get_total_flops()
    w = work_of(path)
    per_step = {s.flops for s in w.steps}
    assert len(per_step) == 1
    (flops,) = per_step
    assert abs(flops - reference) / reference < 0.05, (flops, reference)


@pytest.mark.parametrize(
    "rel, peak, precisions",
    [
        ("kineto/resnet50_num_workers_0.pt.trace.json.gz", "V100 SXM2", {"tf32", "fp32"}),
        ("inference/tracelens__b200_eager_llm_prefill_rank0.json.gz", "B200", {"bf16"}),
    ],
)
def test_shared_traces_report_mfu_and_the_split(rel: str, peak: str, precisions: set[str]) -> None:
    w = work_of(shared_trace(rel))
    assert w.peak is not None and w.peak.name == peak and set(w.flops_by_precision) == precisions
    assert w.mfu is not None and 0 < w.mfu < 1
    assert w.near_roofline_ns + w.compute_slow_ns + w.memory_bound_ns + w.unrated_ns + w.unmodelled_ns == w.kernel_ns
    assert w.ops and all(r.kernel_ns > 0 and r.tbps > 0 for r in w.ops)
