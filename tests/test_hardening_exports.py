"""Nsight exports as inputs and as outputs (issue 24): a stale export read beside its un-checkpointed
SQLite log says so; a large export written as a Perfetto trace stays within bounded memory. Each
test fails without its fix."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

import whyidle
from whyidle.render.perfetto import annotate
from whyidle.timeline.model import Timeline


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


def _tiled(tl: Timeline, times: int) -> Timeline:
    """The Timeline repeated ``times`` times, one copy after another in time."""
    span = int(tl.end_ns.max() - tl.start_ns.min()) + 1000
    shift = np.repeat(np.arange(times, dtype=np.int64) * span, len(tl))
    cols: dict[str, Any] = {c: np.tile(getattr(tl, c), times) for c in Timeline.COLUMNS}
    cols["start_ns"] = cols["start_ns"] + shift
    cols["end_ns"] = cols["end_ns"] + shift
    return msgspec.structs.replace(tl, **cols)


def _peak_bytes(fn: Callable[[], bytes]) -> tuple[int, bytes]:
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_perfetto_export_of_a_large_capture_encodes_in_bounded_memory(tmp_path: Path) -> None:
    """A 5M-row Nsight export written with ``-o a.json.gz`` died with SIGSEGV inside the JSON
    encoder under a 3 GB limit: the trace built from its Timeline was a dict per event, all made
    first, then one encode of the whole. Events are now made and encoded a chunk at a time and
    compressed as they come: four times the events cost about the same memory (it was 3.8x:
    51 MB for 100,000 events, 196 MB for 400,000), and the export is the same trace."""
    from nsysbuild import VERSIONS, standard_db

    db = standard_db(tmp_path / "run.sqlite", VERSIONS[1])
    d, tl = whyidle.diagnose(db), whyidle.load(db)
    small, large = _tiled(tl, 60_000 // len(tl)), _tiled(tl, 240_000 // len(tl))
    peak_small, _ = _peak_bytes(lambda: annotate(small, d, gzip=True))
    peak_large, out = _peak_bytes(lambda: annotate(large, d, gzip=True))
    assert peak_large < 2 * peak_small, f"peak {peak_small / 1e6:.1f} MB for {len(small):,} events, {peak_large / 1e6:.1f} MB for {len(large):,}"
    doc = json.loads(gzip.decompress(out))
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == len(large)
    assert doc["whyidle_annotation"]["built_from"] == "nsys" and len([e for e in doc["traceEvents"] if e["ph"] == "B"]) == d.gap_count
