"""Whether a lever was applied between two runs is the cause's catalogue knowledge: its entry names
a test of findings/applied.py, and ``whyidle compare`` checks a prediction only where it holds."""

from __future__ import annotations

from typing import Any

import msgspec.structs
import pytest

import whyidle
from whyidle.analyses.advice_context import AdviceContext
from whyidle.catalogue import BUSY_FINDINGS, CATALOGUE, CauseEntry, Lever, applied_test
from whyidle.findings.applied import APPLIED, lever_applied, register, registered
from whyidle.findings.model import DiagnosisData

from tlbuild import TL


@pytest.fixture(scope="module")
def base() -> DiagnosisData:
    t = TL()
    t.step(1, 0, 1000)
    t.work("k0", 0, 400, launch_at=-10)
    t.work("k1", 600, 1000, launch_at=550)
    return whyidle.diagnose(t.build())


def _run(base: DiagnosisData, fp32_ns: int = 0, **advice: Any) -> DiagnosisData:
    ctx = AdviceContext(workload="training", framework="pytorch", idiom="pytorch", **advice)
    kernels = msgspec.structs.replace(base.kernels, fp32_math_ns=fp32_ns)
    return msgspec.structs.replace(base, advice=ctx, kernels=kernels)


# (cause, variant, before's advice, after's advice, applied?)
CASES = [
    ("input_pipeline", "single_process", {"loader": "single_process"}, {"loader": "multi_process"}, True),
    ("input_pipeline", "single_process", {"loader": "single_process"}, {"loader": "single_process"}, False),
    ("input_pipeline", "", {"loader": "multi_process"}, {"loader": "multi_process"}, False),
    ("input_pipeline", "multi_process", {"loader": "multi_process"}, {"loader": "multi_process"}, True),
    ("host_overhead", "", {}, {"compiled": True}, True),
    ("host_overhead", "", {}, {"cuda_graphs": True}, True),
    ("host_overhead", "", {"optimizer_impl": "per_parameter"}, {"optimizer_impl": "foreach"}, True),
    ("host_overhead", "", {"compiled": True}, {"compiled": True}, False),
    ("h2d_copy", "", {"pageable_copies": 5}, {"pageable_copies": 2}, True),
    ("h2d_copy", "", {"pinned_copies": 1}, {"pinned_copies": 3}, True),
    ("h2d_copy", "", {"pageable_copies": 5}, {"pageable_copies": 5}, False),
    ("host_sync", "", {}, {}, True),  # no test: its idle having fallen is the evidence
]


@pytest.mark.parametrize(("cause", "variant", "before", "after", "applied"), CASES)
def test_each_cause_is_tested_by_its_entrys_test(base: DiagnosisData, cause: str, variant: str, before: dict[str, Any], after: dict[str, Any], applied: bool) -> None:
    assert lever_applied(cause, variant, _run(base, **before), _run(base, **after)) is applied


def test_a_busy_finding_names_its_test_too(base: DiagnosisData) -> None:
    assert applied_test("fp32_math") == "tensor_core_math"
    total = base.kernels.total_ns
    assert lever_applied("fp32_math", "", _run(base, total), _run(base, total // 2))
    assert not lever_applied("fp32_math", "", _run(base, total // 2), _run(base, total // 2))


def test_without_advice_contexts_every_lever_is_taken_as_applied(base: DiagnosisData) -> None:
    """A report saved before advice contexts existed says nothing of what the job does."""
    old = msgspec.structs.replace(base, advice=None)
    assert lever_applied("input_pipeline", "", old, _run(base, loader="single_process"))
    assert lever_applied("h2d_copy", "", _run(base), old)


def test_every_test_an_entry_names_is_registered() -> None:
    named = {e.applied for e in (*CATALOGUE, *BUSY_FINDINGS)} - {""}
    assert named == set(APPLIED), "each test is named by an entry, and each name has its test"


def test_an_unknown_or_repeated_test_says_what_is_wrong(base: DiagnosisData) -> None:
    lever = Lever("t", "s", ("x",), "y", "v", "synchronization")
    entry = CauseEntry("synchronization", "no_test_cause", "no test", "#123456", "synchronization", {"": lever}, applied="nowhere")
    with CATALOGUE.registered(entry):
        with pytest.raises(KeyError, match="'nowhere', which is not registered"):
            lever_applied("no_test_cause", "", _run(base), _run(base))
    with pytest.raises(ValueError, match="already registered"):
        register("copies_pinned", lambda b, a, v: True)
    with registered("always", lambda b, a, v: True):
        assert "always" in APPLIED
    assert "always" not in APPLIED
