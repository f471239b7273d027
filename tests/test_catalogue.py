"""The cause catalogue is complete: every cause has every attribute, a doc page and a lever, and
every table that names causes is derived from it. Its colours are checked in test_palette.py."""

from __future__ import annotations

import re

import pytest

from whyidle.analyses import causes as C
from whyidle.analyses.advice_context import IDIOMS, AdviceContext
from whyidle.catalogue import CATALOGUE, GROUP_COLOURS, GROUP_LABELS, GROUPS, CauseEntry
from whyidle.findings.advice import CONDITIONS, fit_lever
from whyidle.findings.labels import CAUSE_LABELS
from whyidle.findings.levers import LEVERS
from whyidle.pages import PAGES, page_text
from whyidle.render.html import CAUSE_COLORS

HEX = re.compile(r"^#[0-9a-f]{6}$")
# PyTorch jobs that differ in everything a lever's conditions read.
CONTEXTS = [
    AdviceContext(workload=w, framework="pytorch", idiom="pytorch", compiled=c, cuda_graphs=g, loader=l)
    for w in ("training", "inference") for c in (False, True) for g in (False, True) for l in ("", "single_process")
]


@pytest.mark.parametrize("e", CATALOGUE, ids=lambda e: e.key)
def test_every_cause_has_every_attribute(e: CauseEntry) -> None:
    assert e.group in GROUPS and re.fullmatch(r"[a-z0-9_]+", e.cause)
    assert e.label and e.label == e.label.lower()
    assert HEX.match(e.colour)
    assert "" in e.levers, "a default lever"
    for variant, lever in e.levers.items():
        assert lever.title and lever.summary and lever.steps and lever.verify, (e.key, variant)
        assert lever.docs in PAGES, (e.key, variant, lever.docs)
        assert {c for c, _ in (*lever.when_steps, *lever.when_code)} <= set(CONDITIONS), (e.key, variant)
        for ctx in CONTEXTS:  # whatever the job, the lever fitted to it has code
            assert fit_lever(lever, ctx, 4).code, (e.key, variant, ctx.idiom, ctx.compiled, ctx.cuda_graphs)
    for idiom, lever in e.idioms.items():
        assert idiom in IDIOMS and idiom != "pytorch", (e.key, idiom)
        assert lever.title and lever.summary and lever.steps and lever.code and lever.verify and lever.docs in PAGES, (e.key, idiom)
        assert "torch" not in lever.code, (e.key, idiom)
    assert e.docs == e.group, "a cause's page is its group's"
    assert f"`{e.key}`" in page_text(e.docs), f"whyidle/data/causes/{e.docs}.md does not describe {e.key}"


def test_every_table_is_derived_from_the_catalogue() -> None:
    keys = [e.key for e in CATALOGUE]
    assert len(set(keys)) == len(keys)
    assert [c.key for c in C.CAUSES] == keys
    assert set(CAUSE_LABELS) == set(CAUSE_COLORS) == set(keys)
    assert {(e.cause, v) for e in CATALOGUE for v in e.levers} <= set(LEVERS)
    assert set(GROUP_LABELS) == set(GROUP_COLOURS) == set(GROUPS)
    assert {e.group for e in CATALOGUE} == set(GROUPS)
    assert [c.key for c in C.ARTIFACTS] == [e.key for e in CATALOGUE if e.artifact]


def test_a_detector_names_any_cause_by_its_key() -> None:
    """Adding a cause needs no constant in analyses/causes.py: causes.cause(key) finds every entry."""
    import pytest

    from whyidle.analyses import causes as C
    from whyidle.catalogue import CATALOGUE

    for e in CATALOGUE:
        assert C.cause(e.key) == C.CAUSES[C.cause_index(C.cause(e.key))] and C.cause(e.key).key == e.key
    with pytest.raises(KeyError, match="not in the cause catalogue"):
        C.cause("starvation/no_such_cause")


def test_what_the_features_know_of_a_cause_is_the_catalogues() -> None:
    """The replay lever, the sweep's knobs, the lab's flaws and the comparison's lever-applied test
    of a cause are fields of its entry (``replay``, ``sweep``, ``lab_flaws``, ``applied``); each
    names something its feature has."""
    from whyidle.catalogue import BUSY_FINDINGS, applied_test, lab_flaw_causes, replay_lever, replay_levers, sweep_knobs
    from whyidle.findings import predict
    from whyidle.findings.applied import APPLIED
    from whyidle.lab.check import EXPECTED
    from whyidle.lab.job import FLAWS
    from whyidle.sweep import trial

    for e in (*CATALOGUE, *BUSY_FINDINGS):
        assert set(e.replay.values()) <= set(predict.LEVERS), e.cause
        assert set(e.sweep) <= {"batch_size", *trial.LEVERS}, e.cause
        assert sweep_knobs(e.cause) == e.sweep
        assert applied_test(e.cause) == e.applied and (not e.applied or e.applied in APPLIED), e.cause
        for variant in e.replay:
            assert replay_lever(e.cause, variant) == e.replay[variant]
    for e in CATALOGUE:
        assert set(e.lab_flaws) <= set(FLAWS), e.key
    assert set(replay_levers()) <= set(predict.LEVERS)
    assert replay_lever("input_pipeline", "single_process") == "input_pipeline"  # a variant without its own: the default's
    assert replay_lever("input_pipeline", "multi_process") == "loader_speedup"
    assert replay_lever("idle_host") is None and replay_lever("no_such_cause") is None
    assert dict(EXPECTED) == {f: lab_flaw_causes(f) for f in FLAWS} and EXPECTED["none"] == ()
    assert EXPECTED["smallbatch"] == ("underfilled/host_overhead", "underfilled/kernel_boundaries")


def test_busy_findings_and_api_fixes_are_complete() -> None:
    """The catalogue's findings on busy time have a default lever (and idiom levers without
    torch), and each Nsight API fix refines a cause of the catalogue and has text for any job."""
    from whyidle.catalogue import API_FIXES, BUSY_FINDINGS

    assert len({b.cause for b in BUSY_FINDINGS}) == len(BUSY_FINDINGS)
    assert not {b.cause for b in BUSY_FINDINGS} & {e.cause for e in CATALOGUE}
    for b in BUSY_FINDINGS:
        assert "" in b.levers and all(lv.title and lv.steps and lv.verify and lv.docs in PAGES for lv in b.levers.values()), b.cause
        assert all(i in IDIOMS and i != "pytorch" and "torch" not in lv.code for i, lv in b.idioms.items()), b.cause
    for fid, t in API_FIXES.items():
        assert fid.startswith("api.") and C.cause(t.cause).key == t.cause
        assert "" in t.title and "" in t.steps and t.summary and t.verify, fid
        assert "" in t.code or {"pytorch", "cuda"} <= set(t.code), fid
