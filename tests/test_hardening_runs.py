"""Run folders as inputs (issue 24): ``whyidle diagnose RUN_DIR`` given entries that are not trace
files says which and why, never hangs on a FIFO, and a folder it cannot list is one clear error.
The fuzz family ``runs`` (tests/hostile_runs.py) covers the rest; each test here fails without
its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import hostile
from whyidle.cli import main
from whyidle.errors import InputError
from whyidle.ranks.run import diagnose_ranks


def _rank(folder: Path, k: int, n: int) -> None:
    doc = hostile.base_trace(2)
    doc["distributedInfo"] = {"rank": k, "world_size": n}
    (folder / f"rank{k}.json").write_text(json.dumps(doc))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_entries_named_like_traces_that_are_not_files_are_named_in_the_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO, a broken symbolic link and a link to itself named ``rankN.json`` were left out
    without a word: the report said ranks were missing and not why."""
    _rank(tmp_path, 0, 5)
    _rank(tmp_path, 4, 5)
    os.mkfifo(tmp_path / "rank1.json")
    (tmp_path / "rank2.json").symlink_to("gone.json")
    (tmp_path / "rank3.json").symlink_to("rank3.json")
    (tmp_path / "rank5.json").mkdir()
    notes = diagnose_ranks(tmp_path, jobs=1).notes
    assert "rank1.json: a named pipe (FIFO), not a trace file; left out" in notes
    assert any(n.startswith("rank2.json: a symbolic link to nothing readable") for n in notes)
    assert any(n.startswith("rank3.json: a symbolic link to nothing readable") for n in notes)
    assert "rank5.json: a folder, not a trace file; left out" in notes
    assert main(["diagnose", str(tmp_path), "--jobs", "1"]) == 0
    assert "rank1.json: a named pipe (FIFO)" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_folder_of_only_non_files_is_one_error_naming_them(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank0.json")
    (tmp_path / "rank1.json").symlink_to("gone.json")
    with pytest.raises(InputError) as e:
        diagnose_ranks(tmp_path, jobs=1)
    assert "no trace files" in str(e.value) and "rank0.json: a named pipe (FIFO)" in str(e.value) and "rank1.json" in str(e.value)


def test_folder_that_cannot_be_listed_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder without read permission raised PermissionError from its listing (root reads every
    folder, so the refusal is simulated)."""
    _rank(tmp_path, 0, 2)
    real = Path.iterdir

    def refuse(self: Path):  # type: ignore[no-untyped-def]
        if self == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "iterdir", refuse)
    with pytest.raises(InputError) as e:
        diagnose_ranks(tmp_path, jobs=1)
    assert str(e.value) == f"{tmp_path}: cannot be listed (Permission denied); expected a folder of trace files"
