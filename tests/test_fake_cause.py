"""Adding a cause is one catalogue entry, one detector and one doc section, nothing else.

The fixture registers a cause whyidle does not ship, ``synchronization/fake_barrier``, through
the three public registration points only (``CATALOGUE.register``,
``analyses.detectors.register``, ``pages.register_section``), and removes it afterwards. A trace
built in code spends most of a gap inside a ``fake::barrier`` op on the launching thread; the
cause must then be attributed, ranked as a finding with the entry's lever, rendered in every
format, saved and loaded back, with no other file of whyidle touched. The entry's own knowledge
goes where whyidle's does: its lever for a JAX job (``CauseEntry.idioms``) is the advice in a JAX
trace, and the test it names for "was its lever applied" (``CauseEntry.applied``, registered
with ``findings.applied.registered``) decides whether ``whyidle compare`` checks its prediction.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec.structs
import numpy as np
import pytest

import whyidle
from whyidle.analyses import causes as C
from whyidle.analyses import detectors
from whyidle.analyses.detectors import HostDetector, HostView
from whyidle.catalogue import CATALOGUE, CauseEntry, Lever
from whyidle.errors import WhyidleError
from whyidle.findings import applied
from whyidle.findings.model import DiagnosisData
from whyidle.findings.labels import cause_label
from whyidle.pages import page_text, section_registered
from whyidle.render.html import CAUSE_COLORS
from whyidle.timeline.intervals import Intervals

from tlbuild import TL, US, causes

KEY = "synchronization/fake_barrier"
LEVER = Lever(
    title="Fake barrier: the loop waits at a barrier nobody needs",
    summary="Remove the fake barrier from the training loop.",
    steps=("Delete the call to fake_barrier() inside the loop.",),
    code="# fake_barrier()  # removed",
    verify="Re-profile: the fake::barrier op should be gone from the launching thread.",
    docs="synchronization",
)
JAX_LEVER = Lever(
    title="Fake barrier: the jitted step waits at a barrier nobody needs",
    summary="Take the fake barrier out of the step function before jax.jit traces it.",
    steps=("Delete the call to fake_barrier() inside the jitted step.",),
    code="@jax.jit\ndef train_step(state, batch):\n    return update(state, batch)  # no fake_barrier()",
    verify="Re-profile: the fake::barrier op should be gone from the launching thread.",
    docs="synchronization",
)
APPLIED_TEST = "fake_barrier_gone"
ENTRY = CauseEntry(
    "synchronization", "fake_barrier", "fake barrier", "#3a5f0b", "synchronization", {"": LEVER}, idioms={"jax": JAX_LEVER}, host_side=True, applied=APPLIED_TEST
)
SECTION = "## Fake barrier\n\n`synchronization/fake_barrier`: the thread waits in `fake::barrier` (a cause made up by the test suite).\n"


def _barrier(v: HostView) -> Intervals:
    """The launching thread's time inside ``fake::barrier`` ops."""
    rows = np.flatnonzero((v.tl.lane == v.lane) & v.tl.name_mask(lambda s: s == "fake::barrier"))
    return Intervals.union_of(v.tl.start_ns[rows], v.tl.end_ns[rows])


DETECTOR = HostDetector(KEY, _barrier)


@contextmanager
def _registered(entry: CauseEntry = ENTRY) -> Iterator[None]:
    # ahead of host overhead: an op of the thread is host overhead unless a detector names it first
    with CATALOGUE.registered(entry), detectors.registered(DETECTOR, before="underfilled/host_overhead"), section_registered(KEY, SECTION):
        yield


@pytest.fixture
def fake_cause() -> Iterator[None]:
    with _registered():
        yield


def _barrier_gone(before: DiagnosisData, after: DiagnosisData, variant: str) -> bool:
    """The fake cause's lever-applied test: the after run has no fake::barrier op."""
    return after.name_times is not None and "fake::barrier" not in after.name_times.ops_ns


def _trace(barrier_us: int = 600) -> TL:
    """device ███|........ idle 610 us ........|█████
    host        [ fake::barrier 100-700 ]  [launch 705]
    (with the default ``barrier_us``; 0: no barrier op)"""
    t = TL()
    t.step(1, 0, 400 + barrier_us)
    t.host("Optimizer.step#SGD.step", -50, -40)
    t.work("k0", 0, 100, launch_at=-10)
    if barrier_us:
        t.host("fake::barrier", 100, 100 + barrier_us, stack="train.py(20): main")
    t.work("k1", 110 + barrier_us, 400 + barrier_us, launch_at=105 + barrier_us)
    return t


def test_a_cause_added_in_one_entry_detector_and_section_goes_everywhere(fake_cause: None, tmp_path: Path) -> None:
    d = whyidle.diagnose(_trace().build())
    # attributed: the barrier and the launch after it (the tail follows the gap's dominant cause)
    assert causes(d)[KEY] == 605 and sum(causes(d).values()) == 610
    # ranked: the finding, with the entry's lever and its doc page
    top = d.findings[0]
    assert (top.key, top.fix.docs, top.fix.steps[-1]) == (KEY, "synchronization", LEVER.steps[0])
    assert top.title.startswith("Fake barrier") and "fake::barrier" in str(top.evidence)
    # rendered in every format, under its label and colour; its section is in its group's page
    assert cause_label(KEY) == "fake barrier" and CAUSE_COLORS[KEY] == "#3a5f0b"
    terminal = str(d.render("terminal", width=200))
    assert LEVER.title in terminal
    report = json.loads(d.render("json"))
    assert report["idle_by_cause_ns"][KEY] == 605 * US and report["findings"][0]["cause"] == "fake_barrier"
    page = str(d.render("html"))
    assert "fake barrier" in page and "#3a5f0b" in page and "a cause made up by the test suite" in page
    assert "made up by the test suite" in page_text("synchronization")
    trace = json.loads(gzip.decompress(bytes(d.render("perfetto", gzip=True))))
    assert any(e.get("name") == "fake barrier" and e.get("ph") == "B" for e in trace["traceEvents"])
    for fmt in ("png", "svg"):
        assert d.render(fmt)
    # saved and loaded back: the same diagnosis
    path = tmp_path / "r.json"
    d.save(path)
    back = whyidle.load_report(path)
    assert isinstance(back, whyidle.Diagnosis)
    assert back.findings[0].key == KEY and back.idle_by_cause_ns == d.idle_by_cause_ns
    assert back.render("json") == d.render("json")


def test_without_the_registration_the_cause_is_gone(tmp_path: Path) -> None:
    """Outside the fixture nothing of the cause is left, and no file of whyidle names it."""
    with CATALOGUE.registered(ENTRY), detectors.registered(DETECTOR, before="underfilled/host_overhead"), section_registered(KEY, SECTION):
        path = tmp_path / "r.json"
        whyidle.diagnose(_trace().build()).save(path)
    d = whyidle.diagnose(_trace().build())
    assert KEY not in causes(d) and causes(d)["underfilled/host_overhead"] == 610  # the op is host overhead again
    with pytest.raises(KeyError):
        C.cause(KEY)
    assert "fake_barrier" not in page_text("synchronization")
    with pytest.raises(WhyidleError, match="fake_barrier"):
        whyidle.load_report(path)  # a report naming a cause this whyidle does not know
    src = Path(whyidle.__file__).parent
    assert not [p for p in src.rglob("*") if p.is_file() and p.suffix in (".py", ".md") and "fake_barrier" in p.read_text(encoding="utf-8")]


def test_registration_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="already in the catalogue"):
        CATALOGUE.register(CauseEntry("starvation", "h2d_copy", "x", "#000000", "starvation", {"": LEVER}))
    with pytest.raises(ValueError, match="group 'nope'"):
        CATALOGUE.register(CauseEntry("nope", "x", "x", "#000000", "nope", {"": LEVER}))
    with pytest.raises(ValueError, match="built in"):
        CATALOGUE.unregister("starvation/h2d_copy")
    with pytest.raises(KeyError, match="not in the cause catalogue"):
        detectors.register(DETECTOR)
    with CATALOGUE.registered(ENTRY):
        with pytest.raises(KeyError, match="no detector of cause"):
            detectors.register(DETECTOR, before="starvation/nothing")
        with pytest.raises(ValueError, match="backticks"):
            section_registered(KEY, "no key here").__enter__()


def test_a_registered_cause_brings_its_idiom_levers(fake_cause: None) -> None:
    """The same trace read as a JAX profile: the finding's advice is the entry's JAX lever, not
    its PyTorch one."""
    t = _trace()
    t.b.meta.source_format = "jax"
    d = whyidle.diagnose(t.build())
    top = d.findings[0]
    assert d.advice is not None and d.advice.idiom == "jax" and top.key == KEY
    assert (top.title, top.fix.summary, top.fix.code) == (JAX_LEVER.title, JAX_LEVER.summary, JAX_LEVER.code)
    assert top.fix.steps[-1] == JAX_LEVER.steps[0] and LEVER.steps[0] not in top.fix.steps
    assert JAX_LEVER.title in str(d.render("terminal", width=200))


def test_a_registered_cause_brings_its_lever_applied_test() -> None:
    """``whyidle compare`` checks the before run's prediction for the cause whose idle fell most
    only where the cause's test says its lever was applied. A prediction needs a replay lever:
    host_sync's (syncs that no longer wait: no gain here, the barrier being no CUDA sync); what
    is checked is who decides, not the replay."""
    replayed = msgspec.structs.replace(ENTRY, replay={"": "host_sync"})
    with _registered(replayed), applied.registered(APPLIED_TEST, _barrier_gone):
        before = whyidle.diagnose(_trace().build())
        assert before.findings[0].key == KEY and before.findings[0].prediction is not None
        gone, shorter = whyidle.diagnose(_trace(0).build()), whyidle.diagnose(_trace(200).build())
        assert whyidle.compare(before, gone).to_dict()["prediction"]["applied"] == KEY
        # the barrier's idle fell, but the barrier is still there: not the lever applied
        assert causes(shorter)[KEY] < causes(before)[KEY]
        assert whyidle.compare(before, shorter).to_dict()["prediction"] is None
    assert APPLIED_TEST not in applied.APPLIED
    # without a test named, a cause is taken as applied when its idle fell
    with _registered(msgspec.structs.replace(replayed, applied="")):
        assert whyidle.compare(before, shorter).to_dict()["prediction"]["applied"] == KEY
