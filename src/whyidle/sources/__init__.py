"""Input formats. ``load(path)`` sniffs the format and returns a Timeline.

One module per format; these are the only modules that know a raw format.
"""

from __future__ import annotations

import os
from pathlib import Path

from whyidle.errors import InputError, UnsupportedInputError
from whyidle.sources._io import SQLITE_MAGIC, read_bytes
from whyidle.sources.kineto import load_kineto, looks_like_kineto
from whyidle.timeline.model import Timeline

__all__ = ["load", "find_traces"]

_TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(folder: Path) -> list[Path]:
    """Trace files directly inside ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))


def load(path: str | os.PathLike[str]) -> Timeline:
    """Read a profile into a Timeline, whatever its format."""
    p = Path(path)
    if p.is_dir():
        traces = find_traces(p)
        if not traces:
            raise InputError(p, "is a folder with no trace files (*.json, *.json.gz) in it")
        if len(traces) > 1:
            raise InputError(
                p,
                f"is a folder with {len(traces)} traces (one per rank?); pass one file, or analyse them "
                "together with whyidle.ranks.diagnose_ranks (the CLI does this for folders)",
            )
        p = traces[0]
    if p.suffix == ".nsys-rep" or p.name.endswith(".qdrep"):
        raise UnsupportedInputError(
            p, f"is an Nsight Systems report; export it first with: nsys export --type sqlite {p.name}"
        )
    raw = read_bytes(p)
    if raw.startswith(SQLITE_MAGIC):
        raise UnsupportedInputError(p, "is an SQLite database (an Nsight Systems export?); whyidle cannot read it yet")
    if looks_like_kineto(raw[:64]) or p.name.endswith(_TRACE_SUFFIXES):
        return load_kineto(p, raw)
    raise UnsupportedInputError(
        p, "is not a format whyidle reads; expected a PyTorch profiler trace (.json or .json.gz)"
    )
