"""The multi-rank pipeline: a folder with one trace per rank -> MultiRankReport.

``diagnose_ranks(run_dir)`` reads every trace (in parallel processes, or on a Dask cluster),
diagnoses each rank on its own, assigns rank numbers (from ``distributedInfo``, else from the file
names, else from the file order; the report says which), checks that the files are one job (same
world size, matching collectives, the same period: :mod:`whyidle.ranks.jobcheck`), and runs the
cross-rank analysis. Only
the small per-rank results (:class:`RankResult`) travel back from the workers. A file that cannot
be read, a rank without GPU activity or a missing rank is reported, never fatal.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from whyidle.config import Config
from whyidle.errors import InputError, WhyidleError
from whyidle.findings.model import DiagnosisData
from whyidle.ranks.analysis import CrossRank, RankProfile, cross_rank, rank_profile
from whyidle.ranks.jobcheck import one_job_problems
from whyidle.ranks.model import MultiRankReport, RankEntry
import whyidle.ranks.register  # noqa: F401  (a MultiRankReport made here renders: its renderers registered)

__all__ = ["RankResult", "rank_job", "diagnose_ranks", "rank_from_name", "assign_ranks", "build_multi_rank", "map_local", "read_run_folder"]

Progress = Callable[[int, int], None]  # (done, total)

_RANK_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class RankResult:
    """What one worker sends back for one trace file: small, picklable."""

    path: str
    trace_rank: int | None  # from distributedInfo
    world_size: int | None
    report: DiagnosisData | None
    profile: RankProfile | None
    error: str = ""


def rank_job(path: str, cfg: Config, chunk_jobs: int | None = 1) -> RankResult:
    """Parse and diagnose one rank's trace (runs in a worker process or on a Dask worker).

    ``chunk_jobs``: processes decoding chunks of a large trace (None: by size); 1 where ranks
    already run one per core.
    """
    from whyidle.pipeline import analyse, report_from
    from whyidle.sources import load

    try:
        tl = load(path, stream_jobs=chunk_jobs, settings=cfg.read)
    except WhyidleError as exc:
        return RankResult(path, None, None, None, None, str(exc))
    a = analyse(tl, cfg)
    report = report_from(a, cfg)
    rank = tl.meta.rank if tl.meta.rank_basis == "distributedInfo" else None
    profile = rank_profile(-1 if rank is None else rank, tl, a.links, a.window, a.utilization)
    return RankResult(path, rank, tl.meta.world_size, report, profile)


def rank_from_name(name: str) -> int | None:
    """The rank written in a file name (``..._rank-3.json.gz``, ``rank_12...``), if any."""
    found = _RANK_NAME.findall(name)
    return int(found[-1]) if found else None


def assign_ranks(results: Sequence[RankResult]) -> tuple[list[int], str, list[str]]:
    """Rank numbers for the results (in order), the basis used, and notes."""
    notes: list[str] = []
    from_info = [r.trace_rank for r in results]
    from_name = [rank_from_name(Path(r.path).name) for r in results]
    readable = [i for i, r in enumerate(results) if not r.error]

    def distinct(values: list[int | None]) -> bool:
        vals = [values[i] for i in readable]
        return all(v is not None for v in vals) and len(set(vals)) == len(vals)

    if readable and distinct(from_info):
        ranks, basis = [v if v is not None else -1 for v in from_info], "distributedInfo"
        names = [from_name[i] for i in readable]
        if all(n is not None for n in names) and [from_info[i] for i in readable] != names:
            notes.append("the ranks in the file names differ from distributedInfo; distributedInfo was used")
    elif distinct(from_name):
        ranks, basis = [v if v is not None else -1 for v in from_name], "file name"
        if any(v is not None for v in from_info):
            notes.append("distributedInfo is missing or repeats a rank in some traces; ranks were read from the file names")
    else:
        ranks, basis = list(range(len(results))), "file order"
        notes.append("neither distributedInfo nor the file names give distinct ranks; ranks follow the sorted file names")
    # Unreadable files keep a rank from their name when it is free, else none (-1).
    taken = {ranks[i] for i in readable}
    for i, r in enumerate(results):
        if r.error:
            name_rank = from_name[i]
            ranks[i] = name_rank if name_rank is not None and name_rank not in taken else -1
    return ranks, basis, notes


def map_local(paths: Sequence[str], cfg: Config, jobs: int | None = None, progress: Progress | None = None) -> list[RankResult]:
    """Run :func:`rank_job` for every path in parallel processes (``jobs``: default all cores)."""
    n = len(paths)
    jobs = max(1, min(jobs or os.cpu_count() or 1, n))
    if jobs == 1:
        out = []
        for i, p in enumerate(paths):
            out.append(rank_job(p, cfg, chunk_jobs=None))
            if progress:
                progress(i + 1, n)
        return out
    results: list[RankResult | None] = [None] * n
    from whyidle.sources import quiet_worker

    with ProcessPoolExecutor(max_workers=jobs, initializer=quiet_worker) as pool:
        futures = {pool.submit(rank_job, p, cfg): i for i, p in enumerate(paths)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, n)
    return [r for r in results if r is not None]


def build_multi_rank(run_dir: str, results: Sequence[RankResult], cfg: Config) -> MultiRankReport:
    """Assign ranks, note what is missing or odd, and run the cross-rank analysis (pure)."""
    ranks, basis, notes = assign_ranks(results)
    entries = []
    profiles: list[RankProfile] = []
    for rank, r in sorted(zip(ranks, results), key=lambda t: (t[0] < 0, t[0], t[1].path)):
        entries.append(RankEntry(rank, r.path, r.report, r.error))
        if r.error:
            notes.append(f"{Path(r.path).name}: could not be read, left out ({r.error})")
        elif r.profile is not None:
            profiles.append(replace(r.profile, rank=rank))
            if r.report is not None and r.report.no_device_activity:
                notes.append(f"rank {rank} ({Path(r.path).name}) has no GPU activity")
    sizes = {r.world_size for r in results if r.world_size is not None}
    world = max(sizes) if sizes else None
    if len(sizes) > 1:
        notes.append(f"the largest world size ({max(sizes)}) was used")
    present = sorted({e.rank for e in entries if e.rank >= 0 and not e.error})
    expected = world if world is not None else (max(present) + 1 if present else 0)
    # Counted, never listed in full: a world size of millions costs nothing (the first 16 are named).
    have = set(present)
    n_missing = expected - sum(1 for r in have if r < expected)
    if n_missing > 0:
        first = list(itertools.islice((r for r in range(expected) if r not in have), 16))
        shown = ", ".join(map(str, first)) + (f" and {n_missing - 16} more" if n_missing > 16 else "")
        notes.append(f"{len(present)} of {expected} ranks present; missing: {shown}. Cross-rank figures cover the present ranks only")
    cr: CrossRank = cross_rank(profiles, cfg.attribution)
    problems = one_job_problems(list(zip(ranks, results)), cr)
    return MultiRankReport(run_dir, basis, world, tuple(entries), cr, tuple(notes), problems)


def read_run_folder(run_dir: Path) -> tuple[list[str], tuple[str, ...]]:
    """The trace files of a run folder, and a note for each entry named like a trace that is not
    one (a FIFO, a folder, a broken symbolic link): left out, and said. InputError for a path
    that is not a folder, cannot be listed, or holds no trace file."""
    from whyidle.sources import find_traces, passed_over

    if not run_dir.is_dir():
        raise InputError(run_dir, "is not a folder; expected a folder with one trace per rank")
    paths = [str(p) for p in find_traces(run_dir)]
    skipped = tuple(f"{name}: {what}, not a trace file; left out" for name, what in passed_over(run_dir))
    if not paths:
        also = f" ({'; '.join(skipped)})" if skipped else ""
        raise InputError(run_dir, f"is a folder with no trace files (*.json, *.json.gz, *.parquet) in it{also}")
    return paths, skipped


def diagnose_ranks(
    run_dir: str | os.PathLike[str],
    config: Config | None = None,
    *,
    jobs: int | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> MultiRankReport:
    """Diagnose a folder with one trace per rank.

    ``jobs``: local processes (default: all cores). ``scheduler`` (``tcp://host:8786``) or
    ``workers`` (a local Dask cluster of that many processes) run the per-rank work on Dask.
    """
    cfg = config or Config()
    d = Path(run_dir)
    paths, skipped = read_run_folder(d)
    if scheduler or workers:
        from whyidle.ranks.dask import map_dask

        said: list[str] = []
        results = map_dask(rank_job, paths, cfg, scheduler=scheduler, workers=workers, progress=progress, said=said)
    else:
        said = []
        results = map_local(paths, cfg, jobs=jobs, progress=progress)
    if all(r.error for r in results):
        raise InputError(d, f"none of its {len(results)} traces could be read; first problem: {results[0].error}")
    report = build_multi_rank(str(d), results, cfg)
    return msgspec.structs.replace(report, notes=(*said, *skipped, *report.notes)) if said or skipped else report
