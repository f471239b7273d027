"""The consistency checker (whyidle.findings.consistency) catches each kind of contradiction a
careful reader would: every check is shown failing on a report broken in that one way, and
passing on the report it was broken from. tests/conftest.py runs it on every diagnosis the suite
makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import whyidle
from whyidle.findings.consistency import contradictions
from whyidle.findings.model import DiagnosisData, Finding

from tlbuild import TL

TRAINING = "Optimizer.step#SGD.step"


def _report() -> DiagnosisData:
    t = TL()
    t.work("k0", -30, 0, launch_at=-40)
    for n in range(4):
        s = n * 1000.0
        t.step(n + 1, s, s + 1000)
        t.host(TRAINING, s + 601, s + 604)
        t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s, s + 600)
        t.work("gemm", s + 605, s + 1000, launch_at=s + 600)
    return whyidle.diagnose(t.build())


def _top(d: DiagnosisData, **change: Any) -> DiagnosisData:
    f = msgspec.structs.replace(d.findings[0], **change)
    return msgspec.structs.replace(d, findings=(f, *d.findings[1:]))


def _predict(d: DiagnosisData, **change: Any) -> DiagnosisData:
    p = d.findings[0].prediction
    assert p is not None
    return _top(d, prediction=msgspec.structs.replace(p, **change))


def _fix(d: DiagnosisData, **change: Any) -> DiagnosisData:
    return _top(d, fix=msgspec.structs.replace(d.findings[0].fix, **change))


BREAKS: dict[str, tuple[Callable[[DiagnosisData], DiagnosisData], str]] = {
    "prediction over its finding, unexplained": (lambda d: _predict(d, step_ns_after=1.0, step_ns_low=1.0, note=""), "without saying why"),
    "snippet's workers not the prediction's": (lambda d: _fix(d, code=d.findings[0].fix.code.replace("num_workers=4", "num_workers=8")), "another num_workers"),
    "snippet's dtype not the prediction's": (
        lambda d: _fix(_predict(d, lever="tensor cores (float16 autocast with a GradScaler)"), code="with torch.autocast('cuda', dtype=torch.bfloat16):"),
        "uses bfloat16",
    ),
    "ranked finding worth nothing": (lambda d: _top(d, idle_ns=0, compute_wait_ns=0, affected_busy_ns=0), "ranked with no time"),
    "share outside 0..1": (lambda d: _top(d, share_of_idle=1.4), "outside 0..1"),
    "text quoting another number": (lambda d: _fix(d, expected="up to 9.9 ms of device idle can be recovered"), "quotes neither its idle time"),
    "a raw address": (lambda d: _fix(d, steps=("see <built-in method acquire of _thread.lock object at 0x7fa790e161c0>",)), "raw address"),
    "an unfilled placeholder": (lambda d: _fix(d, code="loader = DataLoader(ds, num_workers={workers})"), "unfilled placeholder"),
    "a quantity of nothing": (lambda d: _fix(d, steps=("Seen here: for 0.0 ms the kernels ran",)), "quotes '0.0 ms'"),
    "causes not adding up to idle": (lambda d: msgspec.structs.replace(d, idle_by_cause_ns={**d.idle_by_cause_ns, "unattributed/untraced_host": 5}), "the causes hold"),
}


def test_the_report_broken_here_is_consistent() -> None:
    d = _report()
    f: Finding = d.findings[0]
    assert f.cause == "input_pipeline" and f.prediction is not None and "num_workers=4" in f.fix.code
    assert contradictions(d) == ()


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_each_kind_of_contradiction_is_caught(kind: str) -> None:
    brk, words = BREAKS[kind]
    found = contradictions(brk(_report()))
    assert any(words in c for c in found), found


def test_counter_words_do_not_contradict_their_numbers() -> None:
    """Issue 25, item 5: a rhythm's period is said only where it is regular and holds a pause, and
    'busy' in the rhythm names what it was read from (the headline's share is a time-weighted mean)."""
    from whyidle.analyses.counters import BurstPattern
    from whyidle.findings.counter_rules import _every
    from whyidle.render.helpers import rhythm_words
    from whyidle.units import format_ns

    # bursts every 500 ms with pauses of 3.2 s on average: the period is not the rhythm
    odd = BurstPattern("gpu_util_pct", 50.0, 0.2, 500_000_000, 0.9, 4, 3.2e9, True)
    assert _every(odd) == "" and "every" not in rhythm_words(odd, format_ns)
    regular = BurstPattern("sm_active_pct", 21.0, 0.84, 2_000_000_000, 0.7, 6, 3e8, True)
    assert _every(regular).startswith(" every 2")
    words = rhythm_words(regular, format_ns)
    assert "SM activity at or above 21% in 84% of the samples" in words and "busy 84% of the time" not in words


def test_a_window_without_kernels_says_so() -> None:
    t = TL()
    t.work("Memcpy HtoD (Pageable -> Device)", 0, 1.5, launch_at=-1, kind=whyidle.Kind.MEMCPY)
    r = whyidle.diagnose(t.build())
    assert "no kernel ran (copies and memsets only)" in str(r.render("terminal", width=300))
