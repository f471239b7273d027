"""The rule registry: declared rules, what they need, and that unmet needs keep a rule from running."""

from __future__ import annotations

from msgspec.structs import replace
from pathlib import Path

import whyidle
from whyidle.findings.settings import RuleSettings
from whyidle.findings.model import Finding, Skipped
from whyidle.findings.registry import NEEDS, RULES, Rule, apply_rules
from whyidle.pages import PAGES
from whyidle.pipeline import analyse

H200 = Path(__file__).parent / "data" / "h200"
ROOT = Path(__file__).resolve().parents[1]


def test_rules_are_declared_completely() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        assert r.description and callable(r.apply)
        assert r.docs in PAGES or (ROOT / r.docs.split("#")[0]).exists(), (r.name, r.docs)
        assert set(r.needs) <= set(NEEDS), (r.name, r.needs)


def test_a_rule_runs_only_where_its_needs_are_met() -> None:
    a = analyse(whyidle.load(H200 / "sync_after_each_kernel.pt.trace.json.gz"))
    calls: list[str] = []

    def probe(name: str) -> Rule:
        def apply(an: object, cfg: RuleSettings) -> list[Finding | Skipped]:
            calls.append(name)
            return [Skipped(name, "probe")]

        return Rule(name, "probe", (), "docs/causes/", apply)

    rules = (replace(probe("kineto_ok"), needs=("device_activity", "warm")), replace(probe("nsys_only"), needs=("nsys",)))
    findings, skipped = apply_rules(a, RuleSettings(), rules)
    assert calls == ["kineto_ok"] and findings == () and [s.rule for s in skipped] == ["kineto_ok"]


def test_registry_gives_the_pipelines_findings() -> None:
    """The registry is the pipeline's only source of findings: the report's are exactly its own, ranked."""
    tl = whyidle.load(H200 / "lab_h2d_cuda.pt.trace.json.gz")
    findings, skipped = apply_rules(analyse(tl), RuleSettings())
    report = whyidle.diagnose(tl)
    assert sorted(f.id for f in findings) == sorted(f.id for f in report.findings)
    assert {f.id for f in findings} >= {"h2d_copy.exposed"}
    assert skipped == report.skipped
