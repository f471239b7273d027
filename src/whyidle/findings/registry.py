"""The rules, declared: each one a name, what it is about, what it needs, its docs, and ``apply``.

A rule reads the :class:`~whyidle.findings.rules.Analyses` and the settings it may use (a
:class:`~whyidle.findings.settings.RuleSettings`: attribution, finding and prediction thresholds,
built once by the pipeline) and returns findings and the reasons it skipped something
(``Skipped``), never prints. ``needs`` names the evidence it requires; a rule whose
needs the input cannot meet is not run (a Kineto trace gets no Nsight API rule), and a rule that
can run but lacks part of its data says so with a ``Skipped``. ``apply_rules`` runs them in
order; the pipeline ranks what they return.

Adding a finding that is not an idle cause (those all come from ``idle_causes``, one per cause
of the catalogue) is a function and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import msgspec

from whyidle.analyses.copies import exposed_h2d_copies
from whyidle.findings.settings import RuleSettings
from whyidle.findings.copy_rules import exposed_copy_finding
from whyidle.findings.kernel_fill_rules import small_grid_finding
from whyidle.findings.model import Finding, Skipped
from whyidle.findings.rules import Analyses, fp32_findings, idle_cause_findings
from whyidle.findings.work_rules import work_findings

__all__ = ["Rule", "RULES", "NEEDS", "apply_rules"]

Outcome = Sequence[Finding | Skipped]


class Rule(msgspec.Struct, frozen=True):
    name: str
    description: str
    needs: tuple[str, ...]  # keys of NEEDS
    docs: str  # a cause page (whyidle.pages: a group name) or a path under the repository's docs/
    apply: Callable[[Analyses, RuleSettings], Outcome]


# What a rule may need, as a test on the analyses.
NEEDS: dict[str, Callable[[Analyses], bool]] = {
    "device_activity": lambda a: not a.quality.no_device_activity,
    "gaps": lambda a: len(a.gaps) > 0,
    "nsys": lambda a: a.tl.meta.source_format == "nsys",
    "warm": lambda a: not a.quality.cold_start,
}


def _small_grids(a: Analyses, cfg: RuleSettings) -> Outcome:
    out = small_grid_finding(a.kernels.fill, a.utilization.capacity_ns, cfg, a.advice)
    return () if out is None else (out,)


def _exposed_copies(a: Analyses, cfg: RuleSettings) -> Outcome:
    steps = tuple((st.start_ns, st.end_ns) for st in a.window.steps)
    out = exposed_copy_finding(exposed_h2d_copies(a.tl, a.window.start_ns, a.window.end_ns, steps), a.utilization.capacity_ns, cfg, a.advice)
    return () if out is None else (out,)


def _nsys_api(a: Analyses, cfg: RuleSettings) -> Outcome:
    from whyidle.findings.nsys_rules import nsys_findings  # only an Nsight capture needs it

    return nsys_findings(a, cfg)


RULES: tuple[Rule, ...] = (
    Rule(
        "idle_causes",
        "one finding per cause of the catalogue that explains enough device idle, with its evidence and lever",
        (),
        "docs/causes/",
        idle_cause_findings,
    ),
    Rule("fp32_math", "GEMM/convolution kernel time in FP32 without tensor cores", ("device_activity", "warm"), "underfilled", fp32_findings),
    Rule(
        "busy_work",
        "busy time a fix would shorten: memory-bound kernel chains to fuse, GEMM shapes too small or misaligned, attention not fused",
        ("device_activity", "warm"),
        "underfilled",
        work_findings,
    ),
    Rule("nsys_api", "CUDA API patterns only an Nsight capture shows (pageable and synchronous copies, blocking calls)", ("nsys", "device_activity", "gaps"), "docs/inputs.md#nsight-systems", _nsys_api),
    Rule("small_grids", "kernels whose grids leave most SMs idle", ("device_activity",), "underfilled", _small_grids),
    Rule("exposed_h2d_copy", "host-to-device copies with no kernel running", ("device_activity",), "starvation", _exposed_copies),
)


def apply_rules(a: Analyses, cfg: RuleSettings, rules: Sequence[Rule] = RULES) -> tuple[tuple[Finding, ...], tuple[Skipped, ...]]:
    """Every rule whose needs are met, in order: -> (findings, skipped), unranked."""
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for rule in rules:
        if not all(NEEDS[n](a) for n in rule.needs):
            continue
        for out in rule.apply(a, cfg):
            if isinstance(out, Finding):
                findings.append(out)
            else:
                skipped.append(out)
    return tuple(findings), tuple(skipped)
