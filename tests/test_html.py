"""The HTML report: self-contained, escaped, small; the activity strip it draws; a real browser.

The browser test drives Debian's ``chromium`` through ``chromium-driver`` with Selenium. It skips
when no browser is installed, unless WHYIDLE_REQUIRE_BROWSER=1 (set by .ci/run, which installs
one), in which case a missing browser fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whyidle
from whyidle.analyses import causes as C
from whyidle.analyses.links import link_launches
from whyidle.analyses.strip import activity_strip
from whyidle.pipeline import analyse
from whyidle.lab.synthetic import Sim, training_trace, write_trace
from whyidle.render.html import DEFAULT_BINS, render_html

from whyidle.timeline import Kind

from tlbuild import TL, US

ARTIFACTS = Path(__file__).parent / "artifacts"
XSS_KERNEL = "<img src=x onerror=alert(1)>"
XSS_OP = "<script>alert(2)</script>"
XSS_DEVICE = "<img src=z onerror=alert(5)>"
XSS_LINE_FILE = "x<img src=y onerror=alert(4)>.py"


def _data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="(wi-[0-9a-f]+)-data">(.*?)</script>', page, re.S)
    assert m, "the report embeds its data as JSON"
    return msgspec.json.decode(m.group(2).encode())


def xss_trace(path: Path) -> Path:
    """Three steps starved by a single-process DataLoader; every name a trace can carry is hostile."""
    sim = Sim(device_name=XSS_DEVICE)
    for n in range(1, 4):
        with sim.step(n):
            with sim.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", stack=f"{XSS_LINE_FILE}(7): run"):
                sim.busy(20_000)
            with sim.op("aten::mm", stack=f"{XSS_LINE_FILE}(9): run"):
                for _ in range(10):
                    sim.launch(XSS_KERNEL, 300)
            with sim.op("Optimizer.step#SGD.step"):
                sim.launch("sgd_kernel", 100)
            with sim.op(XSS_OP):  # the op before the next step's wait for data
                sim.busy(5)
    sim.t = max(sim.t, sim.dev_free + 10)
    return write_trace(sim.trace(), path)


@pytest.fixture
def starved(tmp_path: Path) -> Path:
    return write_trace(training_trace("starvation"), tmp_path / "starved.pt.trace.json.gz")


# -- the activity strip (pure analysis) --------------------------------------------------------


def test_strip_splits_each_bin_exactly() -> None:
    """device ███|........ idle 100-615: input pipeline 510, host overhead 5 ........|████████
    bins of 100 us:  0: compute 100 | 1-5: idle 100 each | 6: idle 15, compute 85 | 7-9: compute"""
    t = TL()
    t.step(1, 0, 1000)
    t.host("Optimizer.step#SGD.step", -50, -40)
    t.work("k0", 0, 100, launch_at=-10)
    t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 600)
    t.host("aten::conv2d", 600, 620)
    t.work("conv_kernel", 615, 1000, launch_at=605)
    tl = t.build()
    a = analyse(tl)
    (s,) = activity_strip(tl, link_launches(tl), a.window, a.gaps, bins=10)
    assert s.bins == 10 and s.edges_ns[0] == 0 and s.edges_ns[-1] == 1000 * US
    compute = s.busy_ns[:, 0]
    idle = s.idle_ns.sum(axis=1)
    assert compute.tolist() == [100 * US, 0, 0, 0, 0, 0, 85 * US, 100 * US, 100 * US, 100 * US]
    np.testing.assert_allclose(idle, [0, 100 * US, 100 * US, 100 * US, 100 * US, 100 * US, 15 * US, 0, 0, 0], atol=2)
    ip, ho = C.cause_index(C.INPUT_PIPELINE), C.cause_index(C.HOST_OVERHEAD)
    # Totals over the bins are exact: the gap's causes, spread evenly over it.
    assert s.idle_ns[:, ip].sum() == 510 * US and s.idle_ns[:, ho].sum() == 5 * US
    assert abs(s.idle_ns[1, ip] - 100 * US * 510 / 515) <= 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 400), st.integers(0, 1)), min_size=1, max_size=25),
    st.integers(1, 64),
)
def test_strip_conserves_time(kernels: list[tuple[int, int, int]], bins: int) -> None:
    """Whatever the work and the bin count: every bin adds up to its length, and the totals over
    the bins are the utilisation's busy figures and the gaps' causes, exactly."""
    t = TL()
    for start, dur, stream in kernels:
        t.work("k", start, start + dur, launch_at=start - 20, stream=7 + stream, kind=Kind.KERNEL if stream == 0 else Kind.MEMCPY)
    tl = t.build()
    a = analyse(tl)
    (s,) = activity_strip(tl, link_launches(tl), a.window, a.gaps, bins=bins)
    lengths = np.diff(s.edges_ns)
    per_bin = s.busy_ns.sum(axis=1) + s.idle_ns.sum(axis=1)
    assert np.all(np.abs(per_bin - lengths) <= len(C.CAUSES))
    u = a.utilization
    assert s.busy_ns[:, 0].sum() == u.compute_ns and s.busy_ns[:, 2].sum() == u.memcpy_ns + u.memset_ns
    assert s.idle_ns.sum(axis=0).tolist() == a.gaps.total_by_cause().tolist()


def test_strip_bins_never_exceed_the_window_in_ns() -> None:
    t = TL()
    t.work("k0", 0, 0.005)  # a 5 ns window: at most 5 bins
    tl = t.build()
    a = analyse(tl)
    (s,) = activity_strip(tl, link_launches(tl), a.window, a.gaps, bins=1000)
    assert s.bins == 5 and s.busy_ns.sum() == 5


# -- the page -----------------------------------------------------------------------------------


def test_page_is_self_contained_and_complete(starved: Path) -> None:
    r = whyidle.diagnose(starved)
    page = render_html(r)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page), "no network resources"
    assert "default-src 'none'" in page
    d = _data(page)
    (dev,) = d["devices"]
    assert dev["bins"] == DEFAULT_BINS
    # Per-mille shares: every bin adds up to the whole bin (rounding aside).
    total = np.sum([np.array(v) for v in dev["parts"].values()], axis=0)
    assert np.all(np.abs(total - 1000) <= len(dev["parts"]))
    assert "starvation/input_pipeline" in dev["parts"]
    assert [s["n"] for s in d["steps"]] == [1, 2, 3, 4, 5]
    assert r.findings[0].title in page
    assert "num_workers" in page  # the fix's code
    assert 'class="wi-gaps"' in page and page.split('class="wi-gaps"')[1].split("</table>")[0].count("<tr>") == len(r.gaps) + 1


def test_every_trace_string_is_escaped(tmp_path: Path) -> None:
    r = whyidle.diagnose(xss_trace(tmp_path / "xss.pt.trace.json.gz"))
    assert any(g.next_work == XSS_KERNEL for g in r.gaps)
    assert any(g.during == XSS_OP or g.before == XSS_OP for g in r.gaps)
    page = render_html(r)
    for raw in (XSS_KERNEL, XSS_OP, XSS_DEVICE, XSS_LINE_FILE):
        assert raw not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    # The embedded JSON cannot end its script block early.
    m = re.search(r'<script type="application/json" id="wi-[0-9a-f]+-data">(.*?)</script>', page, re.S)
    assert m and "<" not in m.group(1) and ">" not in m.group(1)
    assert XSS_DEVICE in _data(page)["devices"][0]["label"]


def test_resnet_page_stays_small(resnet0: Path) -> None:
    r = whyidle.diagnose(resnet0)
    page = render_html(r)
    d = _data(page)
    assert len(page) < 300_000
    assert d["devices"][0]["bins"] == DEFAULT_BINS
    assert len(d["steps"]) == len(r.utilization.steps) == 6


def test_repr_html_is_the_report(starved: Path) -> None:
    r = whyidle.diagnose(starved)
    out = r._repr_html_()
    assert out == render_html(r)
    assert 'class="wi"' in out


def test_the_strip_needs_no_trace_file(starved: Path, tmp_path: Path) -> None:
    """The diagnosis holds every gap and each device's busy time: the strip is drawn from it after
    the input is gone, the same as before, and from the JSON report saved and loaded back."""
    r = whyidle.diagnose(starved)
    before = render_html(r)
    starved.unlink()
    page = render_html(r)
    assert page == before and len(_data(page)["devices"]) == 1
    saved = tmp_path / "r.json"
    r.save(saved, columns=True)
    assert render_html(whyidle.load_report(saved)) == page


def test_a_report_saved_without_columns_says_why_it_has_no_strip(starved: Path, tmp_path: Path) -> None:
    import json

    r = whyidle.diagnose(starved)
    d = json.loads(r.render("json"))  # the summary form: no gap columns
    del d["name_times"]  # as a report saved by an earlier whyidle
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    page = render_html(whyidle.load_report(old))
    assert _data(page)["devices"] == [] and "--full-json" in page
    assert r.findings[0].title in page


def test_cli_writes_html(starved: Path, tmp_path: Path) -> None:
    from whyidle.cli import main

    out = tmp_path / "report.html"
    assert main(["diagnose", str(starved), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    out2 = tmp_path / "r.out"
    assert main(["diagnose", str(starved), "--format", "html", "-o", str(out2)]) == 0
    assert out2.read_text() == out.read_text()


# -- static plots (matplotlib extra) -------------------------------------------------------------


def test_step_plot_png_and_svg(starved: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from whyidle.cli import main
    from whyidle.render.plots import step_rows

    r = whyidle.diagnose(starved)
    labels, rows = step_rows(r)
    assert labels == ["1", "2", "3", "4", "5"]
    assert [label for _, label, _ in rows][:1] == ["compute kernels"]
    assert any(label == "idle: input starvation" for _, label, _ in rows)
    png, svg = tmp_path / "steps.png", tmp_path / "steps.svg"
    assert main(["diagnose", str(starved), "-o", str(png)]) == 0
    assert main(["diagnose", str(starved), "-o", str(svg)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in svg.read_bytes()[:2000]


def test_plot_without_matplotlib_names_the_extra(starved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whyidle.render.plots import render_png

    r = whyidle.diagnose(starved)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(whyidle.MissingExtraError, match=r"pip install 'whyidle\[plot\]'"):
        render_png(r)


# -- a real headless browser -------------------------------------------------------------------


def _browser() -> tuple[str, str]:
    """(chromium binary, chromedriver), or skip/fail with the reason."""
    required = os.environ.get("WHYIDLE_REQUIRE_BROWSER") == "1"
    why = ""
    try:
        import selenium  # noqa: F401
    except ImportError:
        why = "selenium is not installed (pip install 'whyidle[test]')"
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver") or (os.path.exists("/usr/bin/chromedriver") and "/usr/bin/chromedriver") or ""
    if not why and not (chrome and driver):
        why = "no headless browser: install chromium and chromium-driver (apt-get install chromium chromium-driver)"
    if why:
        if required:
            pytest.fail(f"WHYIDLE_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    return str(chrome), str(driver)


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    chrome, driver_path = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


def _console_errors(drv) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{e['level']}: {e['message']}" for e in drv.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _full_screenshot(drv, path: Path) -> None:  # type: ignore[no-untyped-def]
    height = drv.execute_script("return document.documentElement.scrollHeight")
    drv.set_window_size(1400, min(int(height) + 40, 16000))
    path.parent.mkdir(parents=True, exist_ok=True)
    assert drv.save_screenshot(str(path))
    assert path.stat().st_size > 10_000


def _check_embedded_docs(browser, finding, group: str) -> None:  # type: ignore[no-untyped-def]
    """The finding's cause page is in the page, closed; a click on its summary opens it, and what
    shows is the page: its sections, its code, and how to read it in a terminal."""
    from selenium.webdriver.common.by import By

    from whyidle.pages import page_text, page_title

    details = finding.find_element(By.CSS_SELECTOR, "details.wi-docs")
    doc = details.find_element(By.CSS_SELECTOR, ".wi-doc")
    summary = details.find_element(By.TAG_NAME, "summary")
    assert details.get_attribute("open") is None and not doc.is_displayed()
    assert page_title(group) in summary.text
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", summary)
    summary.click()
    assert details.get_attribute("open") is not None and doc.is_displayed()
    md = page_text(group)
    sections = [ln[3:].replace("`", "") for ln in md.splitlines() if ln.startswith("## ")]
    assert [h.text for h in doc.find_elements(By.TAG_NAME, "h5")] == sections
    assert "What it is." in doc.text and "How whyidle detects it." in doc.text
    code = doc.find_elements(By.CSS_SELECTOR, "pre code")
    assert code and all(c.is_displayed() for c in code) and code[-1].text.strip() in md
    assert f"whyidle explain {group}" in doc.text
    assert not doc.find_elements(By.CSS_SELECTOR, "a, img")  # offline: nothing to follow or fetch


def test_report_in_a_real_browser(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from conftest import SHARED_TRACES
    from selenium.webdriver.common.by import By

    real = SHARED_TRACES / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
    trace = real if real.exists() else write_trace(training_trace("starvation"), tmp_path / "starved.pt.trace.json.gz")
    r = whyidle.diagnose(trace)
    page = tmp_path / "report.html"
    page.write_text(render_html(r))
    browser.get(page.as_uri())
    assert _console_errors(browser) == []
    findings = browser.find_elements(By.CSS_SELECTOR, ".wi-finding")
    assert len(findings) == len(r.findings) and findings[0].is_displayed()
    assert r.findings[0].title in findings[0].text
    strip = browser.find_element(By.CSS_SELECTOR, ".wi-strip-svg")
    assert strip.is_displayed() and strip.size["width"] > 600 and strip.size["height"] > 30
    drawn = {p.get_attribute("data-class") for p in browser.find_elements(By.CSS_SELECTOR, ".wi-strip-svg path")}
    assert {"compute", "starvation/input_pipeline"} <= drawn
    assert len(browser.find_elements(By.CSS_SELECTOR, ".wi-steps svg rect")) > len(r.utilization.steps)
    _check_embedded_docs(browser, findings[0], r.findings[0].group)
    # Sorting the gap table by start time puts the earliest gap first.
    heads = browser.find_elements(By.CSS_SELECTOR, "table.wi-gaps th")
    heads[1].click()
    first = browser.find_element(By.CSS_SELECTOR, "table.wi-gaps tbody tr td:nth-child(2)").get_attribute("data-v")
    assert int(first) == min(g.start_ns for g in r.gaps) - r.window.start_ns
    # Hovering the strip shows a tooltip with a breakdown.
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element_with_offset(strip, 5, 0).perform()
    tip = browser.find_element(By.CSS_SELECTOR, ".wi-tip")
    assert tip.is_displayed() and tip.text
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    assert not tip.is_displayed()
    _full_screenshot(browser, ARTIFACTS / "report.png")
    assert _console_errors(browser) == []


def test_hostile_names_render_as_text_in_a_browser(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    r = whyidle.diagnose(xss_trace(tmp_path / "xss.pt.trace.json.gz"))
    page = tmp_path / "xss.html"
    page.write_text(render_html(r))
    browser.get(page.as_uri())
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 2  # the data block and the report's own
    body = browser.find_element(By.TAG_NAME, "body").text
    assert XSS_KERNEL in body and XSS_OP in body
    label = browser.find_element(By.CSS_SELECTOR, ".wi-strip-label").text
    assert XSS_DEVICE in label
    assert _console_errors(browser) == []
    _full_screenshot(browser, ARTIFACTS / "report_hostile_names.png")


def _small_shared() -> list[Path]:
    from conftest import SHARED_TRACES

    if not SHARED_TRACES.exists():
        return []
    found = sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    return [p for p in found if p.stat().st_size < 1_500_000]


@pytest.mark.parametrize("path", _small_shared(), ids=lambda p: p.name[:50])
def test_every_small_shared_trace_renders(path: Path) -> None:
    try:
        tl = whyidle.load(path)
        r = whyidle.diagnose(tl)
    except whyidle.WhyidleError:
        pytest.skip("whyidle does not diagnose this trace (tested in test_real_traces.py)")
    page = render_html(r)
    d = _data(page)
    assert len(d["devices"]) == (0 if r.no_device_activity else r.utilization.n_devices)
    assert len(page) < 400_000


def test_gap_table_fits_the_page_at_1400_px(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from conftest import SHARED_TRACES
    from selenium.webdriver.common.by import By

    real = SHARED_TRACES / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
    trace = real if real.exists() else write_trace(training_trace("starvation"), tmp_path / "starved.pt.trace.json.gz")
    page = tmp_path / "report.html"
    page.write_text(render_html(whyidle.diagnose(trace)))
    browser.set_window_size(1400, 1000)
    browser.get(page.as_uri())
    wrap = browser.find_element(By.CSS_SELECTOR, ".wi-table-wrap")
    scroll, client = browser.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth]", wrap)
    assert scroll <= client, f"the gap table is {scroll} px wide in a {client} px frame"
    heads = browser.find_elements(By.CSS_SELECTOR, "table.wi-gaps th")
    last = heads[-1]
    assert last.text == "launching thread" and last.is_displayed()
    assert last.location["x"] + last.size["width"] <= wrap.location["x"] + wrap.size["width"] + 1
    nxt = heads[8]
    assert nxt.text == "next device work" and nxt.size["width"] > 100


def test_busy_time_finding_lists_kernels_not_cpu_ops() -> None:
    r = whyidle.diagnose(Path(__file__).parent / "data" / "h200" / "sync_after_each_kernel.pt.trace.json.gz")
    fp32 = next(f for f in r.findings if f.id == "fp32_math")
    page = render_html(r)
    block = page.split(fp32.title, 1)[1].split('<div class="wi-finding"', 1)[0]
    assert "On the CPU meanwhile" not in block and "On the GPU: the kernels concerned" in block
    share = fp32.affected_busy_ns / r.window.duration_ns
    from whyidle.render.html import card_ms as _ms

    assert f"Concerns {_ms(fp32.affected_busy_ns)} of device busy time ({share:.0%} of the window), not idle time" in block


def test_counter_log_report_has_its_counter_table(tmp_path: Path) -> None:
    from conftest import shared_trace

    r = whyidle.diagnose(shared_trace("counters/ai-inference-energy__GA100_lstm_1410MHz_run0.query-gpu.csv"))
    page = render_html(r)
    assert " 0 gaps" not in page and "wi-strip" not in page.split("<body", 1)[1].split("<script", 1)[0]
    table = page.split('<table class="wi-counters">', 1)[1].split("</table>", 1)[0]
    assert "<th>median</th>" in table and "GPU-Util" in table and "power" in table


# -- a multi-rank run: the job on one page, each rank on its own --------------------------------


def test_multi_rank_report_in_a_real_browser(browser, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from conftest import shared_trace
    from selenium.webdriver.common.by import By

    from whyidle.cli import main
    from whyidle.ranks.run import diagnose_ranks

    run = shared_trace("multirank/param__v100x8_dlrm_step12")  # 8 x V100, DLRM with DDP (SOURCES.md)
    m = diagnose_ranks(run, jobs=2)
    page = tmp_path / "job.html"
    assert main(["diagnose", str(run), "--jobs", "2", "-o", str(page)]) == 0
    err = capsys.readouterr().err
    assert f"wrote the HTML report (open it in a browser) to {page}" in err
    assert err.count("HTML report, linked from the job's page to") == 8
    browser.get(page.as_uri())
    assert _console_errors(browser) == []
    rows = browser.find_elements(By.CSS_SELECTOR, "table.wi-ranks tbody tr")
    assert len(rows) == 8
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.wi-ranks th")]
    assert heads[5:8] == ["comm exposed", "comm hidden", "waiting for the slowest"]
    comm = {c.rank: c for c in m.cross_rank.comm}
    from whyidle.render.html import card_ms as _ms
    for e, row in zip(m.ranks, rows):
        assert e.report is not None
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[0].text == f"rank {e.rank}" and cells[2].text == f"{e.report.utilization.busy_fraction:.0%}"
        bar = cells[1].find_elements(By.CSS_SELECTOR, ".wi-rankbar span")
        assert len(bar) == 1 + sum(1 for ns in e.report.idle_by_cause_ns.values() if ns > 0)  # busy, then each cause
        assert bar[0].is_displayed() and cells[1].size["width"] >= 360
        # communication: exposed vs hidden behind compute, and the wait for the slowest rank
        c = comm[e.rank]
        assert [x.text for x in cells[5:8]] == [_ms(c.exposed_ns), _ms(c.hidden_ns), _ms(c.waiting_ns)]
    assert sum(c.exposed_ns for c in comm.values()) > 0 and sum(c.hidden_ns for c in comm.values()) > 0
    # the stragglers, as the analysis names them
    text = browser.find_element(By.TAG_NAME, "body").text
    for s in m.cross_rank.stragglers:
        assert f"rank {s.rank} arrived last at {s.collectives_last} of {s.collectives_total} collectives" in text
    # the straggler timeline: one row per rank, one cell per collective, the last arrival outlined
    coll = browser.find_elements(By.CSS_SELECTOR, "table.wi-coll tr")
    assert len(coll) == 8 and all(len(r.find_elements(By.TAG_NAME, "td")) == len(m.cross_rank.collectives) for r in coll)
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.wi-coll td.wi-last")) == len(m.cross_rank.collectives)
    _full_screenshot(browser, ARTIFACTS / "multi_rank.png")
    # each rank's link opens that rank's own report
    link = rows[3].find_element(By.TAG_NAME, "a")
    assert link.get_attribute("href").endswith("job.rank3.html")
    link.click()
    assert Path(m.ranks[3].path).name in browser.find_element(By.CSS_SELECTOR, ".wi-sub").text
    assert len(browser.find_elements(By.CSS_SELECTOR, ".wi-finding")) == len(m.ranks[3].report.findings)  # type: ignore[union-attr]
    assert _console_errors(browser) == []
