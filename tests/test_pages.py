"""The cause pages ship with the package: a wheel holds them, ``whyidle explain`` prints them, the
terminal report names that command and the HTML report embeds them, escaped and offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import whyidle
from whyidle.catalogue import CATALOGUE, GROUPS
from whyidle.cli import main
from whyidle.lab.synthetic import training_trace, write_trace
from whyidle.pages import PAGES, page_name, page_text, page_title
from whyidle.render._markdown import markdown_html, page_html
from whyidle.render.html import render_html

ROOT = Path(__file__).resolve().parents[1]
PAGE_DIR = ROOT / "src" / "whyidle" / "data" / "causes"


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(training_trace("starvation"), tmp_path_factory.mktemp("pages") / "starved.pt.trace.json.gz")


def test_one_page_per_group_and_one_copy_of_it() -> None:
    assert PAGES == GROUPS
    assert sorted(p.stem for p in PAGE_DIR.glob("*.md")) == sorted(GROUPS)
    for g in GROUPS:
        assert page_text(g) == (PAGE_DIR / f"{g}.md").read_text(encoding="utf-8")
        assert page_title(g).lower().startswith(g.replace("_", " ")[:10])
    # the repository's docs/causes points at the package's pages rather than holding copies
    assert not list((ROOT / "docs" / "causes").glob("[!R]*.md"))
    index = (ROOT / "docs" / "causes" / "README.md").read_text()
    assert all(f"../../src/whyidle/data/causes/{g}.md" in index for g in GROUPS)


def test_page_names_accept_groups_and_cause_keys() -> None:
    assert page_name("starvation") == "starvation" and page_name("Insufficient demand") == "insufficient_demand"
    assert all(page_name(e.key) == e.group for e in CATALOGUE)
    with pytest.raises(whyidle.UsageError, match="the pages are starvation, underfilled"):
        page_name("starvation/nope")


def test_explain_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "synchronization/host_sync"]) == 0
    assert capsys.readouterr().out == page_text("synchronization")
    assert main(["explain"]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {g}" in listing and page_title(g) in listing for g in GROUPS)


def test_explain_an_unknown_cause_is_one_line_and_exit_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "whyidle", "explain", "gpu_gremlins"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "'gpu_gremlins'" in out.stderr
    assert all(g in out.stderr for g in GROUPS)


def test_terminal_report_names_the_offline_page(starved: Path) -> None:
    r = whyidle.diagnose(starved)
    text = " ".join(str(r).split())
    assert r.findings and f"Docs: whyidle explain {r.findings[0].group}" in text


def test_markdown_is_escaped_and_offline() -> None:
    out = markdown_html("# Title\n\ntext <script>alert(1)</script> [a link](https://example.com/x)\n\n```\n<b>code</b>\n```\n\n## Sub\n\n* one\n* two\n")
    assert "<script" not in out and "&lt;script&gt;" in out
    assert "href" not in out and "a link" in out and "example.com" not in out
    assert "<pre><code>&lt;b&gt;code&lt;/b&gt;\n</code></pre>" in out
    assert "Title" not in out and "<h5>Sub</h5>" in out and "<li>one</li>" in out
    code = 0
    for g in GROUPS:  # the real pages: every heading but the title, every code block, no link
        html, md = page_html(g), page_text(g)
        assert "<a " not in html and "<img" not in html
        assert html.count("<h5>") == sum(1 for ln in md.splitlines() if ln.startswith("## "))
        blocks = [t for t in MarkdownIt("commonmark").parse(md) if t.type in ("fence", "code_block")]
        assert html.count("<pre>") == len(blocks)
        code += len(blocks)
    assert code >= 5


def test_html_report_embeds_each_findings_page(starved: Path) -> None:
    r = whyidle.diagnose(starved)
    page = render_html(r)
    assert "docs/causes" not in page
    blocks = page.split('<details class="wi-docs">')[1:]
    assert len(blocks) == len(r.findings) > 0
    for f, block in zip(r.findings, blocks):
        assert page_title(f.group).split(":")[0] in block.split("</summary>", 1)[0]
        assert page_html(f.group) in block and f"whyidle explain {f.group}" in block


def test_a_wheel_ships_the_pages(tmp_path: Path) -> None:
    """Build the wheel as ``pip install .`` does (setuptools, no editable install), install it
    into an empty folder and run ``whyidle explain`` from there: the pages come from the wheel."""
    try:
        import setuptools
        import wheel  # noqa: F401  the build-system's requirements (pyproject.toml), built without isolation
    except ImportError as exc:
        pytest.skip(f"{exc.name} is not installed: cannot build the wheel without fetching the build requirements")
    if int(setuptools.__version__.split(".")[0]) < 68:
        pytest.skip(f"setuptools {setuptools.__version__} is older than the build requirement (>=68): cannot build without fetching it")
    src = tmp_path / "src-copy"  # a copy: building in the checkout would leave build/ and egg-info behind
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("whyidle-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"whyidle/data/causes/{g}.md" for g in GROUPS} <= names
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-compile", "--target", str(site), str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import whyidle, sys; print(whyidle.__file__, file=sys.stderr); from whyidle.cli import main; sys.exit(main(['explain', 'underfilled']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith(str(site)) and out.stdout == page_text("underfilled")


def test_a_findings_other_docs_are_named_and_old_paths_are_not(starved: Path) -> None:
    """A finding about an input format (Nsight, counter logs) also names its section of whyidle's
    docs; a report saved before the pages shipped (docs/causes/...) gets the page, not the dead path."""
    import msgspec

    from whyidle.render.html import _docs

    f = whyidle.diagnose(starved).findings[0]
    nsys = msgspec.structs.replace(f, fix=msgspec.structs.replace(f.fix, docs="docs/inputs.md#nsight-systems"))
    assert "More in whyidle's documentation: <code>docs/inputs.md#nsight-systems</code>" in _docs(nsys)
    old = msgspec.structs.replace(f, fix=msgspec.structs.replace(f.fix, docs="docs/causes/starvation.md"))
    assert "docs/causes" not in _docs(old) and page_html(f.group) in _docs(old)
