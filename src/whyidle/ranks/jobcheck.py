"""Do the files of a run folder belong to one job? (pure)

A folder is read as one trace per rank of one distributed job. Two unrelated runs dropped in one
folder would otherwise be compared as ranks of one job ("ranks from file order") and a straggler
named between them. The ranks of one job:

* agree on the **world size** (``distributedInfo``), where the traces record it;
* run the **same collectives**: a rank with collectives beside one without, or collectives that
  mostly do not match across ranks (by step, name and order), is not the same program;
* were captured over the **same period**: with the same profiler schedule the ranks' windows
  overlap, up to the clock offsets between hosts (milliseconds under NTP). Windows on the wall
  clock that lie further apart than the longest of them are different runs::

      rank 0   |--- window ---|
      rank 1                                                  |--- window ---|
                              <------ gap > longest window ----->  not one job

Each problem is a sentence; the report leads with them and compares no rank against another.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from whyidle.timeline.counters import on_epoch_clock
from whyidle.units import format_ns

if TYPE_CHECKING:
    from whyidle.ranks.analysis import CrossRank
    from whyidle.ranks.run import RankResult

__all__ = ["one_job_problems"]


def _ranks(rs: Sequence[int]) -> str:
    listed = ", ".join(map(str, rs[:8])) + (f" and {len(rs) - 8} more" if len(rs) > 8 else "")
    return f"rank{'s' if len(rs) > 1 else ''} {listed}"


def _collective_problem(ranked: Sequence[tuple[int, RankResult]], cr: CrossRank) -> str | None:
    counts = {rank: len(r.profile.collectives) for rank, r in ranked if r.profile is not None and r.profile.has_device_activity}
    with_c = sorted(k for k, v in counts.items() if v)
    without = sorted(k for k, v in counts.items() if not v)
    if with_c and without:
        return f"{_ranks(with_c)} ran collectives, {_ranks(without)} none"
    matched = len(cr.collectives)
    if with_c and len(with_c) >= 2 and cr.unmatched_collectives > matched:
        return f"their collectives do not match: {cr.unmatched_collectives} appear on some ranks only, {matched} on all"
    return None


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_problem(ranked: Sequence[tuple[int, RankResult]]) -> str | None:
    wins = sorted(
        (r.report.window.start_ns, r.report.window.end_ns, rank)
        for rank, r in ranked
        if r.report is not None and not r.report.no_device_activity and r.report.window.end_ns > r.report.window.start_ns
    )
    if len(wins) < 2 or not all(on_epoch_clock(lo) for lo, _, _ in wins):
        return None
    longest = max(hi - lo for lo, hi, _ in wins)
    end, end_rank = wins[0][1], wins[0][2]
    for lo, hi, rank in wins[1:]:
        if lo - end > longest:
            return (
                f"they were not captured over the same period: rank {end_rank}'s trace ends at {_when(end)}, rank {rank}'s "
                f"starts {format_ns(lo - end)} later ({_when(lo)}), more than the longest window ({format_ns(longest)})"
            )
        if hi > end:
            end, end_rank = hi, rank
    return None


def one_job_problems(ranked: Sequence[tuple[int, RankResult]], cr: CrossRank) -> tuple[str, ...]:
    """Why the readable traces (with their assigned ranks) may not be one job; () when they are."""
    ok = [(rank, r) for rank, r in ranked if not r.error]
    out: list[str] = []
    sizes = sorted({r.world_size for _, r in ok if r.world_size is not None})
    if len(sizes) > 1:
        out.append(f"the traces disagree on the world size ({', '.join(map(str, sizes))})")
    for p in (_collective_problem(ok, cr), _time_problem(ok)):
        if p:
            out.append(p)
    return tuple(out)
