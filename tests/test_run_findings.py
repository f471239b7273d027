"""A multi-rank run's findings with their fixes, and the check that its files are one job
(issue 25, item 7)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from test_ranks import RANK0, _load, replay, write_run
from whyidle.cli import main
from whyidle.ranks.run import diagnose_ranks
from whyidle.ranks.run_findings import COMM_FIX

LAB = Path(__file__).parent / "data"
needs_traces = pytest.mark.skipif(not RANK0.exists(), reason=f"real traces not found: {RANK0}")


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    if not RANK0.exists():
        pytest.skip(f"real traces not found: {RANK0}")
    return _load(RANK0)


def test_the_reports_give_the_runs_findings_with_fixes(base: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 2 waits 50 ms per step for its DataLoader: the run's first finding is that straggler,
    with its cause and the fix of its own input-pipeline finding; the terminal and HTML reports,
    which stopped at the per-rank table, now list the run's findings, each with its fix."""
    run = write_run(tmp_path, replay(base, 4, {2: "input"}))
    rep = diagnose_ranks(run, jobs=1)
    assert rep.not_one_job == ()
    found = rep.run_findings
    first = found[0]
    assert first.key == "straggler" and first.ranks == (2,) and first.time_ns == rep.cross_rank.stragglers[0].lateness_ns
    assert "starvation/input_pipeline" in first.what
    own = rep.ranks[2].report
    assert own is not None
    assert first.fix == next(f.fix.summary for f in own.findings if f.key == "starvation/input_pipeline")
    top = found[-1]
    assert top.key == "top_cause" and top.fix
    assert main(["diagnose", str(run), "--jobs", "1", "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "Findings for the run:" in out and "1. Rank 2 is the straggler" in out and f"fix: {first.fix}" in out
    page = tmp_path / "run.html"
    assert main(["diagnose", str(run), "--jobs", "1", "-o", str(page)]) == 0
    text = page.read_text()
    assert "Findings for the run" in text and "Rank 2 is the straggler" in text and "<b>Fix:</b>" in text


def test_exposed_communication_is_a_finding_with_its_fix() -> None:
    """The 8-rank DLRM run (tests/golden/multirank_dlrm.txt): 46.9 ms of its collectives ran with
    no compute beside them, 37% of the ranks' windows."""
    from conftest import shared_trace

    rep = diagnose_ranks(shared_trace("multirank/param__v100x8_dlrm_step12"), jobs=1)
    ex = next(f for f in rep.run_findings if f.key == "exposed_communication")
    assert ex.time_ns == sum(c.exposed_ns for c in rep.cross_rank.comm) and ex.fix == COMM_FIX
    assert rep.not_one_job == ()


def test_two_unrelated_runs_are_not_taken_for_one_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two single-GPU lab runs captured 1.9 hours apart in one folder were 'ranks from file order'
    of one job; the report now says they were not captured over the same period and names no
    straggler between them."""
    run = tmp_path / "mixed"
    run.mkdir()
    shutil.copy(LAB / "lab" / "lab_h2d.pt.trace.json.gz", run / "a.json.gz")
    shutil.copy(LAB / "h200" / "lab_sync_cuda.pt.trace.json.gz", run / "b.json.gz")
    rep = diagnose_ranks(run, jobs=1)
    assert rep.rank_basis == "file order"
    assert rep.not_one_job == (
        "they were not captured over the same period: rank 1's trace ends at 2026-11-30 19:15:46 UTC, rank 0's starts "
        "6671.63 s later (2026-11-30 21:06:57 UTC), more than the longest window (44.4 ms)",
    )
    assert all(f.key == "top_cause" for f in rep.run_findings)
    assert main(["diagnose", str(run), "--jobs", "1", "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "These files may not be one job" in out and "not captured over the same period" in out


def test_world_sizes_and_collectives_that_disagree(base: dict[str, Any], tmp_path: Path) -> None:
    """Ranks of one replayed job, one claiming another world size, then one without collectives."""
    docs = replay(base, 2, {})
    docs[1]["distributedInfo"]["world_size"] = 4
    rep = diagnose_ranks(write_run(tmp_path, docs), jobs=1)
    assert rep.not_one_job == ("the traces disagree on the world size (2, 4)",)
    assert not any(f.key == "straggler" for f in rep.run_findings)
    docs = replay(base, 2, {})
    nocoll = copy.deepcopy(docs[1])
    nocoll["traceEvents"] = [e for e in nocoll["traceEvents"] if "nccl" not in str(e.get("name", "")).lower()]
    (tmp_path / "b").mkdir()
    rep = diagnose_ranks(write_run(tmp_path / "b", [docs[0], nocoll]), jobs=1)
    assert rep.not_one_job == ("rank 0 ran collectives, rank 1 none",)
