"""Input formats. ``load(path)`` sniffs the format and returns a Timeline.

One module per format, the larger ones split by what they read (``nsys`` with ``nsys_schema``,
``nsys_context``, ``nsys_device``, ``nsys_host``; ``rocprof`` with ``rocprof_schema``; ``counters``
with one ``counters_*`` module per log format; ``xplane`` with ``xplane_wire`` (the protobuf wire
format), ``xplane_decode`` (the XSpace schema) and ``xplane_derive`` (threads, copies and steps across
lines); ``ranges`` holds what the readers of user ranges share); these are the only modules that know
a raw format. The format is told from the bytes, never the name.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from whyidle.errors import ArgumentError, InputError, UnsupportedInputError
from whyidle.sources._io import GZIP_MAGIC, SQLITE_MAGIC, ReadAhead, TooLargeForMemory, check_regular, estimated_size, read_bytes
from whyidle.parallel import Helpers
from whyidle.sources.rocprof_schema import looks_like_rocprof
from whyidle.sources.xplane_wire import XPLANE_SUFFIXES

if TYPE_CHECKING:
    from whyidle.config import ReadSettings
    from whyidle.timeline.model import Timeline

__all__ = ["load", "read", "find_traces", "passed_over", "ReadAhead", "read_bytes", "TooLargeForMemory"]

_TRACE_SUFFIXES = (".json", ".json.gz", ".parquet", *XPLANE_SUFFIXES)


def _profile_run(folder: Path) -> Path:
    """A JAX/TensorFlow log folder's newest profile run (``plugins/profile/<run>/``), else ``folder``."""
    base = folder / "plugins" / "profile" if (folder / "plugins" / "profile").is_dir() else folder
    if base.name == "profile" and base.parent.name == "plugins":
        runs = sorted(p for p in base.iterdir() if p.is_dir() and any(q.name.endswith(".xplane.pb") for q in p.iterdir()))
        if runs:
            return runs[-1]
    return folder


def find_traces(folder: Path) -> list[Path]:
    """Trace files directly inside ``folder``, sorted by name (a JAX log folder: its newest
    profile run's XPlane files, one per host). A folder that cannot be listed is an InputError."""
    try:
        folder = _profile_run(folder)
        found = sorted(p for p in folder.iterdir() if p.name.endswith(_TRACE_SUFFIXES) and p.is_file())
    except OSError as exc:
        raise InputError(folder, f"cannot be listed ({exc.strerror or exc}); expected a folder of trace files") from None
    xplane = [p for p in found if p.name.endswith(XPLANE_SUFFIXES)]
    return xplane or found  # jax writes <host>.trace.json.gz beside <host>.xplane.pb: the same capture, less of it


def passed_over(folder: Path) -> list[tuple[str, str]]:
    """Entries of ``folder`` named like traces that :func:`find_traces` leaves out because they
    are not regular files, with what each is: (name, "a named pipe (FIFO)")."""
    out: list[tuple[str, str]] = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return out
    for p in entries:
        if not p.name.endswith(_TRACE_SUFFIXES):
            continue
        try:
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                try:
                    st = p.stat()
                except OSError as exc:
                    out.append((p.name, f"a symbolic link to nothing readable ({exc.strerror or exc})"))
                    continue
        except OSError:
            continue  # gone since it was listed
        if stat.S_ISREG(st.st_mode):
            continue
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        out.append((p.name, what))
    return out


def load(
    path: str | os.PathLike[str],
    step_pattern: str | None = None,
    jobs: int = 1,
    *,
    counters_utc_offset_min: int | None = None,
    counters_interval_ms: float | None = None,
    settings: ReadSettings | None = None,
) -> Timeline:
    """Read a profile into a Timeline, whatever its format.

    ``step_pattern``: the regular expression naming step ranges in formats whose steps are user
    ranges (Nsight Systems NVTX); None uses the source's default. ``jobs`` >= 2 lets a forked
    process decode part of a Kineto trace (Linux, two usable cores; see :mod:`whyidle.parallel`).
    ``counters_utc_offset_min`` / ``counters_interval_ms``: how to read a GPU counter log's clock
    (the ReadSettings fields of those names; see :func:`whyidle.sources.counters.parse_counters`).
    ``settings``: the reading settings (a Config's ``read``): its ``step_range`` and counter clock
    where the arguments above are None, and its size limits.
    """
    return read(
        path,
        step_pattern,
        Helpers(fork=jobs >= 2),
        counters_utc_offset_min=counters_utc_offset_min,
        counters_interval_ms=counters_interval_ms,
        settings=settings,
    )


def read(
    path: str | os.PathLike[str],
    step_pattern: str | None = None,
    helpers: Helpers = Helpers(),
    *,
    read_ahead: ReadAhead | None = None,
    counters_utc_offset_min: int | None = None,
    counters_interval_ms: float | None = None,
    settings: ReadSettings | None = None,
) -> Timeline:
    """:func:`load` for the command line and the feature packages: with the ``helpers`` they
    give it (a forked child decoding part of a Kineto trace, the processes decoding chunks of a
    trace too large for memory) and a :class:`~whyidle.sources._io.ReadAhead` that may already be
    reading the file (the modules it names are imported while a forked child splits the trace)."""
    from whyidle.config import ReadSettings

    if settings is not None and not isinstance(settings, ReadSettings):
        raise ArgumentError(f"settings must be a whyidle.ReadSettings (a Config's .read), not {type(settings).__name__}", field="settings")
    rs = settings or ReadSettings()
    p = Path(path)
    clock = (
        rs.counters_utc_offset_min if counters_utc_offset_min is None else counters_utc_offset_min,
        rs.counters_interval_ms if counters_interval_ms is None else counters_interval_ms,
    )
    try:
        return _load(p, rs.step_range if step_pattern is None else step_pattern, helpers, read_ahead, clock, rs)
    finally:
        if read_ahead is not None:
            read_ahead.discard(p)  # a read-ahead that this input did not use


def _load(p: Path, step_pattern: str | None, helpers: Helpers, read_ahead: ReadAhead | None, clock: tuple[int | None, float | None], rs: ReadSettings) -> Timeline:
    if p.is_dir():
        traces = find_traces(p)
        if not traces:
            raise InputError(p, "is a folder with no trace files (*.json, *.json.gz, *.parquet, *.xplane.pb) in it")
        if len(traces) > 1:
            raise InputError(
                p,
                f"is a folder with {len(traces)} traces (one per rank?); pass one file, or analyse them "
                "together with whyidle.ranks.run.diagnose_ranks (the CLI does this for folders)",
            )
        p = traces[0]
    check_regular(p)  # before any open: a FIFO would block, /dev/zero never end
    if _head(p).startswith(SQLITE_MAGIC):  # from the bytes: an export named .nsys-rep is SQLite too
        from whyidle.sources.nsys import load_nsys

        return load_nsys(p, step_pattern)
    if p.suffix == ".nsys-rep" or p.name.endswith(".qdrep"):
        from whyidle.sources.nsys import load_exported_report

        return load_exported_report(p, step_pattern)
    if p.suffix == ".parquet" or _head(p)[:4] == b"PAR1":
        from whyidle.sources.parquet import load_parquet

        return load_parquet(p)
    if p.name.endswith(XPLANE_SUFFIXES):
        return _load_xplane(p, read_ahead, rs)
    if _large(p, rs.stream_min_bytes):
        from whyidle.sources.kineto_stream import load_kineto_stream, should_stream

        if should_stream(p, rs.stream_min_bytes, rs):
            return load_kineto_stream(p, jobs=helpers.chunk_jobs, settings=rs)
    try:  # gzip size fields are modulo 4 GiB: a larger content is found out while reading
        raw = read_bytes(p, read_ahead, max_bytes=rs.stream_min_bytes, settings=rs)
    except TooLargeForMemory:
        if not looks_like_rocprof(_text_head(p)):
            from whyidle.sources.kineto_stream import load_kineto_stream

            return load_kineto_stream(p, jobs=helpers.chunk_jobs, settings=rs)
        raw = _read_rocprof(p, rs)
    from whyidle.sources.kineto import (  # numpy: after the read began
        load_kineto,
        looks_like_kineto,
    )

    if looks_like_rocprof(raw[:256]):
        from whyidle.sources.rocprof import load_rocprof

        box = [raw]  # the reader lets go of the text once decoded
        del raw
        return load_rocprof(p, box, step_pattern)
    if not looks_like_kineto(raw[:64]):
        from whyidle.sources.xplane import is_xplane, load_xplane

        if is_xplane(raw):
            return load_xplane(p, raw)
    if looks_like_kineto(raw[:64]) or p.name.endswith(_TRACE_SUFFIXES):
        box = [raw]  # the reader frees the text once decoded: no reference may stay here
        del raw
        return load_kineto(p, box, helpers, meanwhile=None if read_ahead is None else read_ahead.import_now)
    from whyidle.sources.counters import counter_timeline, looks_like_counter_log

    if looks_like_counter_log(raw[:8192]):
        return counter_timeline(p, raw, utc_offset_min=clock[0], interval_ms=clock[1])
    raise UnsupportedInputError(
        p,
        "is not a format whyidle reads; expected a PyTorch profiler trace (.json or .json.gz), an Nsight "
        "Systems export (.sqlite, .nsys-rep), rocprofv3 JSON output, a JAX/XLA profile (.xplane.pb) or a GPU counter log "
        "(nvidia-smi, dcgmi dmon, whyidle watch)",
    )


def _load_xplane(p: Path, read_ahead: ReadAhead | None, rs: ReadSettings) -> Timeline:
    """An XPlane file, read whole (plain or gzip; the settings' gzip-bomb cap applies)."""
    from whyidle.sources.xplane import load_xplane

    return load_xplane(p, read_bytes(p, read_ahead, settings=rs))


def _large(p: Path, min_bytes: int) -> bool:
    """Whether the file may need the out-of-core reader (its estimated size, without importing it)."""
    try:
        return p.is_file() and estimated_size(p) >= min_bytes
    except OSError:
        return False  # read_bytes says why in words


def _read_rocprof(p: Path, rs: ReadSettings) -> bytes:
    """rocprofv3 JSON past the in-memory Kineto reader's range: read whole up to
    ``rs.rocprof_max_bytes``, gzip within ``rs``' limits."""
    cap = rs.rocprof_max_bytes
    try:
        return read_bytes(p, max_bytes=cap, settings=rs)
    except TooLargeForMemory:
        raise InputError(
            p,
            f"is rocprofv3 JSON output over {cap / (1 << 20):.0f} MiB decompressed, more than whyidle reads into memory "
            "(ReadSettings.rocprof_max_bytes); record a shorter stretch (rocprofv3 --collection-period) or one process per file",
        ) from None


def _text_head(p: Path) -> bytes:
    """The first decompressed bytes of a file (b"" when they cannot be read)."""
    try:
        with p.open("rb") as f:
            head = f.read(4096)
        if head[:2] == GZIP_MAGIC:
            return zlib.decompressobj(wbits=31).decompress(head, 256)
        return head[:256]
    except (OSError, zlib.error):
        return b""


def _head(p: Path) -> bytes:
    """The first bytes of a file (b"" when it cannot be read; read_bytes then says why)."""
    try:
        with p.open("rb") as f:
            return f.read(len(SQLITE_MAGIC))
    except OSError:
        return b""
