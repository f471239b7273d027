"""The diagnosis as typed objects: Finding, Evidence, Fix, Skipped, GapRecord, Report.

A Report is what every renderer (terminal, JSON, HTML, Perfetto) takes; it holds measured numbers
only, in nanoseconds and fractions, never pre-formatted text for a particular output.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # annotations only: a Kineto diagnosis need not import the counter analyses
    from whyidle.analyses.counters import CounterAnalysis
    from whyidle.analyses.kernels import KernelStats
    from whyidle.analyses.utilization import Utilization

__all__ = ["Prediction", "Fix", "Evidence", "Finding", "Skipped", "GapRecord", "SourceInfo", "WindowInfo", "Report", "RankEntry", "MultiRankReport"]


class Fix(msgspec.Struct, frozen=True):
    summary: str  # the lever, one sentence
    steps: tuple[str, ...]  # what to change, in order
    code: str  # a short snippet
    verify: str  # how to check that it worked
    expected: str  # the expected effect, from the measured numbers
    docs: str  # a cause page (group name, see whyidle.pages) or a section of the repository docs


class Evidence(msgspec.Struct, frozen=True):
    gap_count: int
    idle_ns: int
    per_step_idle_ns: float | None  # mean over the selected steps
    share_of_step: float | None  # per-step idle of this cause / mean step time
    top_ops: tuple[tuple[str, int, int], ...]  # (op, ns overlapping these gaps, gaps)
    python_lines: tuple[tuple[str, int], ...]  # (file:line in func, gaps)
    examples: tuple[tuple[int, int, int], ...]  # (start_ns, end_ns, ns of this cause)
    facts: tuple[tuple[str, Any], ...] = ()  # other measured values, (name, value)


class Prediction(msgspec.Struct, frozen=True):
    """What the fix is predicted to buy, from a what-if replay of the trace (analyses/whatif.py)."""

    lever: str  # the change replayed, one phrase
    assumption: str  # what the replay assumed, one sentence
    step_ns_before: float  # the replay with no change (the recorded mean step, within 1%)
    step_ns_after: float  # predicted mean step time after the fix
    step_ns_low: float  # the range the assumption allows (low = the most optimistic)
    step_ns_high: float
    batch_factor: float = 1.0  # samples per step after / before
    samples_per_s_before: float | None = None
    samples_per_s_after: float | None = None

    @property
    def speedup(self) -> float:
        """Predicted samples/s after / before (steps/s when the batch is unknown)."""
        return self.batch_factor * self.step_ns_before / self.step_ns_after if self.step_ns_after > 0 else float("nan")

    @property
    def recovered_share(self) -> float:
        """Share of the step time the fix recovers (per sample when the batch changes)."""
        return 1.0 - 1.0 / self.speedup if self.speedup > 0 else 0.0

    def summary(self) -> str:
        """'Predicted with ...: step 18.7 ms -> 5.1 ms (5.0-5.1 ms), samples/s x3.65, 73% of the step recovered'."""
        from whyidle.units import format_ns

        rng = f" ({format_ns(self.step_ns_low)}-{format_ns(self.step_ns_high)})" if self.step_ns_high - self.step_ns_low > 0.01 * self.step_ns_after else ""
        rate = "samples/s" if self.samples_per_s_before is not None else "steps/s"
        per = " per sample" if self.batch_factor != 1 else ""
        return (
            f"Predicted with {self.lever}: step {format_ns(self.step_ns_before)} -> {format_ns(self.step_ns_after)}{rng}, "
            f"{rate} x{self.speedup:.2f}, {self.recovered_share:.0%} of the step{per} recovered"
        )


class Finding(msgspec.Struct, frozen=True):
    id: str
    group: str
    cause: str
    title: str
    idle_ns: int  # device-idle time this cause explains: an upper bound on what the fix recovers
    share_of_idle: float
    share_of_window: float
    evidence: Evidence
    fix: Fix
    variant: str = ""  # e.g. "single_process" for the input pipeline
    affected_busy_ns: int = 0  # for findings about busy time (FP32 math)
    prediction: Prediction | None = None  # what the fix buys, when the trace lets whyidle replay it
    # device time with no kernel running while the device only did this cause's work (an exposed
    # input copy): not idle, but time the compute waited, ranked beside idle time (rank_key)
    compute_wait_ns: int = 0

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


def rank_key(f: Finding) -> tuple[int, int]:
    """Findings rank by the time the device's compute waited on their cause (idle time, or an
    exposed copy), then by the busy time they concern."""
    return (-(f.idle_ns + f.compute_wait_ns), -f.affected_busy_ns)


class Skipped(msgspec.Struct, frozen=True):
    rule: str
    reason: str


class GapRecord(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int
    device: int
    group: str
    cause: str
    causes_ns: tuple[tuple[str, int], ...]  # every cause holding part of the gap, largest first
    next_work: str
    thread: str
    before: str
    during: str
    outermost: str
    innermost: str
    runtime_call: str
    python_line: str
    drained_by_sync: bool

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class SourceInfo(msgspec.Struct, frozen=True):
    path: str
    format: str
    version: str
    devices: tuple[str, ...]
    rank: int | None
    world_size: int | None
    training: bool
    # What kind of job: training, serving, inference, non_pytorch or unknown ('' when the
    # source does not say), and the evidence that decided it (analyses/workload.py).
    workload: str = ""
    workload_evidence: tuple[str, ...] = ()


class WindowInfo(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int
    basis: str
    steps: tuple[int, ...]
    all_steps: tuple[int, ...]

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class _Renderable:
    """What a report does for a user: print as the terminal report, render and save in any format."""

    __slots__ = ()

    def __str__(self) -> str:
        """The terminal report, 80 columns: ``print(report)`` shows what ``whyidle diagnose`` prints."""
        from whyidle.render import render

        return str(render(self, "terminal"))

    def render(self, format: str = "terminal", *, timeline: Any = None, width: int = 80) -> str | bytes:
        """The report as terminal text, json, html, perfetto (bytes), png or svg (bytes)."""
        from whyidle.render import render

        return render(self, format, timeline=timeline, width=width)

    def save(self, path: str | os.PathLike[str], format: str | None = None, *, timeline: Any = None) -> str:
        """Write the report to ``path`` (format from the suffix: .html, .json, .txt, .json.gz, .png, .svg); returns the format."""
        from whyidle.render import save

        return save(self, path, format, timeline=timeline)[1]


class Report(msgspec.Struct, _Renderable, frozen=True):
    source: SourceInfo
    window: WindowInfo
    utilization: Utilization
    kernels: KernelStats
    idle_by_cause_ns: dict[str, int]
    gap_count: int
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    gaps: tuple[GapRecord, ...]  # the largest gaps, with their CPU context
    quality: tuple[str, ...]
    cold_start: bool
    no_device_activity: bool
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    counters: CounterAnalysis | None = None  # GPU counter figures (a counter log, alone or joined)

    @property
    def idle_ns(self) -> int:
        return self.utilization.idle_ns

    @property
    def idle_by_group_ns(self) -> dict[str, int]:
        from whyidle.analyses.causes import GROUPS

        out = {g: 0 for g in GROUPS}
        for key, ns in self.idle_by_cause_ns.items():
            out[key.split("/", 1)[0]] += ns
        return out

    @property
    def artifact_idle_ns(self) -> dict[str, int]:
        """Idle time of the capture artifacts (cold start, capture boundaries), non-zero only."""
        from whyidle.analyses.causes import ARTIFACTS

        return {c.key: self.idle_by_cause_ns[c.key] for c in ARTIFACTS if self.idle_by_cause_ns.get(c.key, 0) > 0}

    @property
    def problems(self) -> tuple[Finding, ...]:
        return self.findings

    def to_dict(self) -> dict[str, Any]:
        from whyidle.render.json import report_to_dict

        return report_to_dict(self)

    def _repr_html_(self) -> str:
        try:
            from whyidle.render.html import render_html  # type: ignore[import-not-found,unused-ignore]

            return str(render_html(self))
        except ImportError:  # pragma: no cover - the HTML renderer is part of the package
            return f"<pre>{self!r}</pre>"


class RankEntry(msgspec.Struct, frozen=True):
    """One rank of a multi-rank run: its own single-rank report, or why it has none."""

    rank: int
    path: str
    report: Report | None
    error: str = ""  # why the file could not be read (the run goes on without it)


class MultiRankReport(msgspec.Struct, _Renderable, frozen=True):
    """A distributed job: one Report per rank plus the cross-rank analysis (analyses/ranks.py)."""

    run_dir: str
    rank_basis: str  # "distributedInfo", "file name", "file order" or a mix, said in words
    world_size: int | None
    ranks: tuple[RankEntry, ...]
    cross_rank: Any  # whyidle.analyses.ranks.CrossRank
    notes: tuple[str, ...] = ()

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for e in self.ranks if e.report is not None for f in e.report.findings)

    def to_dict(self) -> dict[str, Any]:
        from whyidle.render.json import multi_rank_to_dict

        return multi_rank_to_dict(self)
