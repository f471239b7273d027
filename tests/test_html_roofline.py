"""The HTML report's roofline plot (render/html_roofline.py): points where the work model puts them
on a log-log chart, the device's roof (memory slope, ridge point, compute ceiling), hover text, and
points only for a device without known peaks. A real browser shows it in a whole report."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from test_html import _console_errors, browser  # noqa: F401  (the fixture)
from test_work import Job, text
from whyidle.analyses.peaks import PEAKS
from whyidle.analyses.work import WorkSummary
from whyidle.render.html_roofline import BOUND_COLORS, _Axes, roofline_svg

BIG = text([[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2)  # intensity 1365 FLOP/B: compute-bound on H100
THIN = text([[4096, 16], [16, 4096]], ["c10::BFloat16"] * 2)  # intensity 15.9 FLOP/B: memory-bound


def _two_gemms(device: str = "NVIDIA H100 80GB HBM3") -> WorkSummary:
    j = Job(device=device)
    j.op("aten::mm", 0, 10, BIG)
    j.kernel("gemm_big", 1, 10, 410)
    j.op("aten::mm", 20, 30, THIN)
    j.kernel("gemm_thin", 21, 500, 600)
    j.op("aten::relu", 40, 50, text([[4096, 4096]], ["c10::BFloat16"]))
    j.kernel("relu", 41, 700, 720)
    w, _ = j.work()
    return w


def _svg(w: WorkSummary) -> ET.Element:
    return ET.fromstring(roofline_svg(w))


def _circles(root: ET.Element) -> list[ET.Element]:
    return [c for c in root.iter("{http://www.w3.org/2000/svg}circle") if c.get("class") == "wi-op"]


def test_points_sit_at_their_intensity_and_rate_under_the_devices_roof() -> None:
    w = _two_gemms()
    peak = PEAKS["H100 SXM"]
    root = _svg(w)
    (chart,) = root.iter("figure")
    assert chart.get("data-precision") == "bf16"
    ops = {o.name + o.inputs: o for o in w.ops if o.flops > 0}
    assert len(ops) == 2
    ridge = peak.bf16 / peak.mem_tbps  # type: ignore[operator]
    ax = _Axes([o.intensity for o in ops.values()] + [ridge], [o.tflops for o in ops.values()] + [peak.bf16])  # type: ignore[list-item]
    circles = _circles(root)
    assert len(circles) == 2  # relu only moves data: not on the FLOP roofline
    longest = max(o.kernel_ns for o in ops.values())
    for c in circles:
        hover = c.findtext("{http://www.w3.org/2000/svg}title") or ""
        (op,) = [o for o in ops.values() if hover.startswith("aten::mm " + ("4096x4096, 4096x4096" if o.intensity > 100 else "4096x16, 16x4096"))]
        assert float(c.get("cx", "")) == pytest.approx(ax.x(op.intensity), abs=0.06)
        assert float(c.get("cy", "")) == pytest.approx(ax.y(op.tflops), abs=0.06)
        assert float(c.get("r", "")) == pytest.approx(max(2.5, 16 * math.sqrt(op.kernel_ns / longest)), abs=0.06)
        assert c.get("fill") == BOUND_COLORS[op.bound] and c.get("data-bound") == op.bound
        assert f"{op.tflops:.3g} TFLOP/s" in hover and f"{op.tbps:.3g} TB/s" in hover and "c10::BFloat16" in hover
        assert f"{op.bound}-bound, {op.fraction:.0%} of the roofline" in hover
    assert {c.get("data-bound") for c in circles} == {"compute", "memory"}
    # The ridge point sits at peak / bandwidth, on the ceiling.
    (ridge_dot,) = [c for c in root.iter("{http://www.w3.org/2000/svg}circle") if c.get("class") == "wi-ridge"]
    assert float(ridge_dot.get("cx", "")) == pytest.approx(ax.x(ridge), abs=0.06)
    assert float(ridge_dot.get("cy", "")) == pytest.approx(ax.y(peak.bf16), abs=0.06)  # type: ignore[arg-type]
    assert "1 op shape(s) that only move data" in roofline_svg(w)


def test_an_unknown_device_gets_points_only_and_says_so() -> None:
    w = _two_gemms(device="Mystery Accelerator 9000")
    page = roofline_svg(w)
    root = ET.fromstring(page)
    assert not [p for p in root.iter("{http://www.w3.org/2000/svg}path") if p.get("class") == "wi-roof"]
    assert all(c.get("fill") == BOUND_COLORS[""] for c in _circles(root)) and len(_circles(root)) == 2
    assert "points only" in page and "Mystery Accelerator 9000 is not in whyidle's table of peaks" in page


def test_no_op_with_flops_draws_no_plot() -> None:
    j = Job()
    j.op("aten::relu", 0, 10, text([[64, 64]], ["float"]))
    j.kernel("relu", 1, 10, 20)
    w, _ = j.work()
    assert roofline_svg(w) == ""


def test_hostile_op_names_are_escaped_in_the_plot() -> None:
    j = Job()
    j.op("aten::mm", 0, 10, text([[64, 64], [64, 64]], ["<script>alert(1)</script>"] * 2 + ["c10::BFloat16"]))
    j.op("aten::mm", 20, 30, BIG)
    j.kernel("gemm", 21, 30, 40)
    w, _ = j.work()
    assert "<script>" not in roofline_svg(w)
    ET.fromstring(roofline_svg(w))  # still well-formed


def test_the_roofline_in_a_real_browser(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from conftest import SHARED_TRACES
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    import whyidle
    from whyidle.render.html import render_html

    real = SHARED_TRACES / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
    if not real.exists():
        pytest.skip(f"the shared ResNet-50 trace is absent ({real})")
    r = whyidle.diagnose(real)
    page = tmp_path / "report.html"
    page.write_text(render_html(r))
    browser.get(page.as_uri())
    assert _console_errors(browser) == []
    chart = browser.find_element(By.CSS_SELECTOR, ".wi-roofline-chart svg")
    assert chart.is_displayed() and chart.size["width"] > 300 and chart.size["height"] > 150
    points = browser.find_elements(By.CSS_SELECTOR, ".wi-roofline-chart circle.wi-op")
    assert r.work is not None and len(points) == sum(1 for o in r.work.ops if o.flops > 0 and o.kernel_ns > 0)
    assert browser.find_element(By.CSS_SELECTOR, ".wi-roofline-chart path.wi-roof").is_displayed()
    hover = points[0].find_element(By.TAG_NAME, "title").get_attribute("textContent") or ""
    assert "aten::" in hover and "TFLOP/s" in hover and "float" in hover
    ActionChains(browser).move_to_element(points[0]).perform()  # hovering raises no error
    assert _console_errors(browser) == []


def test_tf32_work_on_a_device_without_tf32_is_drawn_under_its_fp32_peak() -> None:
    """FP32 convolutions count as TF32 (cuDNN's default); a V100 has no TF32 units: FP32's roof."""
    j = Job(device="Tesla V100-SXM2-32GB", major=7)
    j.op("aten::convolution", 0, 10, text([[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []], ["float"] * 2 + [""] * 5, ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False"]))
    j.kernel("conv", 1, 10, 510)
    w, _ = j.work()
    page = roofline_svg(w)
    root = ET.fromstring(page)
    (chart,) = root.iter("figure")
    assert chart.get("data-precision") == "tf32" and "(no TF32 units: its FP32 peak)" in (chart.findtext("figcaption") or "")
    assert "peak 15.7 TFLOP/s" in page
