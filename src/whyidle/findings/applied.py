"""Was a finding's lever applied between two runs? Named tests on the two runs' diagnoses.

``whyidle compare`` takes the cause whose idle fell most as the fix applied and checks the before
report's prediction for it against the after run, but only where the after run shows the change
the prediction replayed: more DataLoader workers are seen in the advice context's loader, pinned
copies in its copy counts. Which test shows a cause's change is the cause's own knowledge: its
catalogue entry names one of :data:`APPLIED` (``CauseEntry.applied``, ``BusyEntry.applied``,
read by ``catalogue.applied_test``). A cause without one (a host sync: no record of the job names
it) is taken as applied when its idle fell, and so is every cause where either report has no
advice context (a report saved before they existed): nothing says what the job does.

A cause added at run time adds its test with :func:`register` (or :func:`registered`) and names
it in its entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from whyidle.catalogue import applied_test
from whyidle.findings.model import DiagnosisData

__all__ = ["AppliedTest", "APPLIED", "register", "unregister", "registered", "lever_applied"]

# (before, after, the finding's lever variant) -> whether the after run shows the lever applied.
AppliedTest = Callable[[DiagnosisData, DiagnosisData, str], bool]


def _loader_workers(before: DiagnosisData, after: DiagnosisData, variant: str) -> bool:
    """The after run loads in worker processes, and the before run did not (or its advice was
    for loaders that already had workers: cheaper samples do not show in the loader's kind)."""
    b, a = before.advice, after.advice
    assert b is not None and a is not None
    return a.loader == "multi_process" and (b.loader != "multi_process" or variant == "multi_process")


def _launches_batched(before: DiagnosisData, after: DiagnosisData, variant: str) -> bool:
    """The after run compiles, replays CUDA graphs or steps a fused/foreach optimizer, and the
    before run did not."""
    b, a = before.advice, after.advice
    assert b is not None and a is not None
    return (a.compiled and not b.compiled) or (a.cuda_graphs and not b.cuda_graphs) or (
        a.optimizer_impl in ("fused", "foreach") and b.optimizer_impl == "per_parameter"
    )


def _copies_pinned(before: DiagnosisData, after: DiagnosisData, variant: str) -> bool:
    """Fewer copies from pageable memory, or more from pinned memory, in the after run."""
    b, a = before.advice, after.advice
    assert b is not None and a is not None
    return a.pageable_copies < b.pageable_copies or a.pinned_copies > b.pinned_copies


def _tensor_core_math(before: DiagnosisData, after: DiagnosisData, variant: str) -> bool:
    """A smaller share of kernel time in FP32 matrix math in the after run."""
    return after.kernels.fp32_math_share < before.kernels.fp32_math_share


APPLIED: dict[str, AppliedTest] = {
    "loader_workers": _loader_workers,
    "launches_batched": _launches_batched,
    "copies_pinned": _copies_pinned,
    "tensor_core_math": _tensor_core_math,
}


def register(name: str, test: AppliedTest) -> None:
    """Add a test under ``name`` (a ValueError for a name already used)."""
    if name in APPLIED:
        raise ValueError(f"a lever-applied test named {name!r} is already registered")
    APPLIED[name] = test


def unregister(name: str) -> None:
    del APPLIED[name]


@contextmanager
def registered(name: str, test: AppliedTest) -> Iterator[AppliedTest]:
    """The tests with ``test`` added under ``name`` for the duration of the block."""
    register(name, test)
    try:
        yield test
    finally:
        unregister(name)


def lever_applied(cause: str, variant: str, before: DiagnosisData, after: DiagnosisData) -> bool:
    """Whether the after run shows the change the lever of a finding on ``cause`` (its name) in
    ``variant`` makes, by the test its catalogue entry names (see the module's docstring)."""
    if before.advice is None or after.advice is None:
        return True
    name = applied_test(cause)
    if not name:
        return True
    if name not in APPLIED:
        raise KeyError(f"cause {cause!r} names the lever-applied test {name!r}, which is not registered; known: {', '.join(APPLIED)}")
    return APPLIED[name](before, after, variant)
