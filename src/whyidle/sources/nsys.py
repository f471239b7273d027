"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> Timeline.

The Nsight Systems source. It reads every schema from 2022.2 to 2025.5: tables appear only when
the capture used them and columns differ by version, so every table and column is probed before
it is read; nothing is assumed. The file is opened read-only (SQLite URI ``mode=ro``): whyidle
never modifies an input. The reading is split by what a reader looks for:

    nsys_schema.py   opening read-only, schema probing, StringIds, globalTid decoding
    nsys_context.py  one export being read: lanes, process-aware correlation keys, the time
                     shift to UTC epoch ns (TARGET_INFO_SESSION_START_TIME), GPUs (TARGET_INFO_GPU)
    nsys_device.py   kernels, copies, memsets, whole-graph runs (CUPTI_ACTIVITY_KIND_*)
    nsys_host.py     CUDA API calls, syncs, NVTX ranges (steps, emit_nvtx ops), OS runtime
                     calls and thread scheduling (why they are annotations, not host work)

This module runs the readers in order, adds the export-wide quality notes, and exports a
``.nsys-rep`` to SQLite when given one.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

from whyidle.errors import InputError, TraceFormatError, UnsupportedInputError
from whyidle.sources import nsys_device, nsys_host
from whyidle.sources.nsys_context import Export
from whyidle.sources.nsys_device import memcpy_name
from whyidle.sources.nsys_schema import decode_global_tid, is_nsys_export, open_ro, sidecar_notes, strip_api_version
from whyidle.sources.ranges import DEFAULT_STEP_PATTERN
from whyidle.timeline.model import Timeline

__all__ = [
    "load_nsys",
    "load_exported_report",
    "export_nsys_report",
    "DEFAULT_STEP_PATTERN",
    "strip_api_version",
    "decode_global_tid",
    "memcpy_name",
    "is_nsys_export",
]


def export_nsys_report(path: Path, *, nsys: str | None = None, timeout_s: float = 600.0) -> Path:
    """Export a ``.nsys-rep`` to SQLite in a fresh temporary folder (the caller deletes it).

    Runs ``nsys export --type sqlite`` when ``nsys`` is on the PATH; otherwise raises an
    UnsupportedInputError that says exactly which command to run.
    """
    exe = nsys or shutil.which("nsys")
    if exe is None:
        raise UnsupportedInputError(
            path,
            f"is an Nsight Systems report and nsys is not on the PATH; export it first with: "
            f"nsys export --type sqlite --output {path.with_suffix('.sqlite').name} {path.name}",
        )
    out_dir = Path(tempfile.mkdtemp(prefix="whyidle-nsys-"))
    out = out_dir / (path.stem + ".sqlite")
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise InputError(path, f"nsys export failed ({exc}); run it by hand: {' '.join(cmd[:-3])} {path.name}") from None
    if proc.returncode != 0 or not out.exists():
        shutil.rmtree(out_dir, ignore_errors=True)
        last = (proc.stderr or proc.stdout or "").strip().splitlines()
        why = last[-1] if last else f"exit status {proc.returncode}"
        raise InputError(path, f"nsys export --type sqlite failed: {why}")
    return out


def _read(x: Export) -> Timeline:
    """Every table into the builder, then the export-wide quality notes."""
    x.read_meta()
    n_kernels = nsys_device.read_kernels(x)
    n_copies = nsys_device.read_memcpy(x)
    n_sets = nsys_device.read_memset(x)
    n_graphs = nsys_device.read_graphs(x)
    n_runtime = nsys_host.read_runtime(x)
    nsys_host.read_sync(x)
    nsys_host.read_nvtx(x)
    nsys_host.read_osrt(x)
    nsys_host.read_sched(x)
    nsys_host.name_threads(x)
    if n_kernels == 0 and n_graphs == 0:
        other = []
        for count, one, many in ((n_copies, "copy", "copies"), (n_sets, "memset", "memsets"), (n_runtime, "CUDA API call", "CUDA API calls")):
            if count:
                other.append(f"{count} {one if count == 1 else many}")
        held = ", ".join(other) if other else "no device work"
        x.meta.quality.append(
            f"this capture has no kernels (it holds {held}): the capture ended before any kernel ran, "
            "or CUDA tracing was off (nsys profile --trace=cuda); re-capture a stretch where the job is training"
        )
    pids = len(x.proc_index)
    if pids > 1:
        x.meta.quality.append(
            f"device work and CUDA calls come from {pids} processes; correlation ids repeat across processes, "
            "so launches were joined to device work per (process, correlation id)"
        )
    return x.b.build()


def load_nsys(path: Path, step_pattern: str | None = None) -> Timeline:
    """Read an Nsight Systems SQLite export (opened read-only) into a Timeline.

    ``step_pattern`` is the regular expression that makes an NVTX range a step
    (default :data:`DEFAULT_STEP_PATTERN`).
    """
    notes = sidecar_notes(path)  # before reading: what is beside the export now
    with open_ro(path) as con:
        try:
            tl = _read(Export(path, con, step_pattern or DEFAULT_STEP_PATTERN))
            tl.meta.quality.extend(notes)
            return tl
        except sqlite3.DatabaseError as exc:
            raise TraceFormatError(path, f"is a damaged or unreadable SQLite database ({exc}); re-export it with nsys export --type sqlite") from None


def load_exported_report(path: Path, step_pattern: str | None = None, *, nsys: str | None = None) -> Timeline:
    """Read a ``.nsys-rep`` by exporting it to SQLite in a temporary folder (deleted afterwards)."""
    if not path.is_file():
        raise InputError(path, "no such file")
    out = export_nsys_report(path, nsys=nsys)
    try:
        tl = load_nsys(out, step_pattern)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    tl.meta.path = str(path)
    return tl
