"""A saved multi-rank report loads back into the run it was made from (``whyidle.load_report``).

Built on the committed golden report of the 8-rank DLRM job (tests/golden/multirank_dlrm.json),
so it runs without ../shared/traces: the loaded run must render to the same JSON and terminal
reports byte for byte.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import whyidle
from whyidle.cli import main
from whyidle.ranks.model import MultiRankReport
from whyidle.findings.saved import load_report as load_one
from whyidle.render import render

GOLDEN = Path(__file__).parent / "golden"


def _as_golden(report: object, fmt: str) -> str:
    """The report as tests/test_golden.py writes it."""
    text = render(report, fmt, width=100)
    assert isinstance(text, str)
    return text if text.endswith("\n") else text + "\n"


def test_a_saved_run_renders_as_the_original(tmp_path: Path) -> None:
    saved = GOLDEN / "multirank_dlrm.json"
    run = whyidle.load_report(saved)
    assert isinstance(run, MultiRankReport)
    assert len(run.ranks) == 8 and run.cross_rank.stragglers  # the straggler and its cause came back
    assert _as_golden(run, "json") == saved.read_text(encoding="utf-8")
    assert _as_golden(run, "terminal") == (GOLDEN / "multirank_dlrm.txt").read_text(encoding="utf-8")
    gz = tmp_path / "run.json.gz"
    gz.write_bytes(gzip.compress(saved.read_bytes()))
    assert _as_golden(whyidle.load_report(gz), "json") == saved.read_text(encoding="utf-8")


def test_a_rank_of_a_saved_run_is_a_diagnosis() -> None:
    run = whyidle.load_report(GOLDEN / "multirank_dlrm.json")
    assert isinstance(run, MultiRankReport)
    rank0 = run.ranks[0].report
    assert isinstance(rank0, whyidle.Diagnosis) and rank0.source.rank == 0


def test_a_malformed_run_names_the_file_and_the_rank(tmp_path: Path) -> None:
    d = json.loads((GOLDEN / "multirank_dlrm.json").read_text(encoding="utf-8"))
    p = tmp_path / "run.json"
    del d["ranks"][3]["report"]["window"]
    p.write_text(json.dumps(d))
    with pytest.raises(whyidle.TraceFormatError, match=r"run\.json \(rank 3\): is a whyidle report without the field window"):
        whyidle.load_report(p)
    d = json.loads((GOLDEN / "multirank_dlrm.json").read_text(encoding="utf-8"))
    d["cross_rank"]["stragglers"][0]["steps"] = "twelve"
    p.write_text(json.dumps(d))
    with pytest.raises(whyidle.TraceFormatError, match=r"run\.json: is a whyidle multi-rank report with a missing or malformed field \(ValueError"):
        whyidle.load_report(p)


def test_compare_says_a_run_report_is_not_one_traces(capsys: pytest.CaptureFixture[str]) -> None:
    saved = str(GOLDEN / "multirank_dlrm.json")
    with pytest.raises(whyidle.TraceFormatError, match=r"is a multi-rank report \(8 ranks\) where one trace's report was expected"):
        load_one(saved)
    assert main(["compare", saved, saved]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "multi-rank report (8 ranks)" in err and "Traceback" not in err


def test_a_saved_run_gives_the_same_html_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import shared_trace

    from whyidle.ranks.run import diagnose_ranks

    run_dir = shared_trace("multirank/param__v100x8_dlrm_step12")
    monkeypatch.chdir(run_dir.parent)
    original = diagnose_ranks(run_dir.name, jobs=1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    original.save(str(tmp_path / "a" / "run.json"), columns=True)
    original.save(str(tmp_path / "a" / "run.html"))
    whyidle.load_report(tmp_path / "a" / "run.json").save(str(tmp_path / "b" / "run.html"))
    pages = sorted(p.name for p in (tmp_path / "a").glob("*.html"))
    assert len(pages) == 9  # the run's page and one per rank
    for name in pages:
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name
