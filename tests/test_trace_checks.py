"""Trace-quality notes: step numbers missing from the sequence or going back in time, and
host/device clock skew (device work that starts before the call that launched it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import shared_trace
from tlbuild import TL
from whyidle.timeline.model import Kind
from whyidle.analyses.trace_checks import _missing, _ranges
from whyidle.pipeline import diagnose

LAB = Path(__file__).parent / "data" / "lab"


def _stepped(numbers: list[int]) -> TL:
    t = TL()
    for i, n in enumerate(numbers):
        s = i * 1000.0
        t.step(n, s, s + 900)
        t.work("k", s + 100, s + 600, launch_at=s + 50)
    return t


def _notes(t: TL) -> list[str]:
    return list(diagnose(t.build()).quality)


def test_missing_step_numbers_are_named() -> None:
    notes = _notes(_stepped([1, 2, 4, 5]))
    assert [n for n in notes if "missing" in n] == [
        "step #3 missing from #1..#5: their events were dropped (a full profiler buffer) or the trace joins two "
        "profiling cycles; per-step figures cover the 4 steps present"
    ]
    notes = _notes(_stepped([1, 2, 3, 7, 9]))
    assert any(n.startswith("steps #4..#6, #8 missing from #1..#9") and "the 5 steps present" in n for n in notes)
    assert not any("missing" in n or "back in time" in n for n in _notes(_stepped([5, 6, 7, 8])))


def test_step_numbers_going_back_in_time() -> None:
    notes = _notes(_stepped([3, 4, 1, 2]))
    assert any(n.startswith("step numbers go back in time 1 time(s) (step #1 starts after #4)") for n in notes)
    assert not any("missing" in n for n in notes)


def test_ranges_text() -> None:
    assert _missing([6, 8, 12]) == ([(7, 7), (9, 11)], 4)
    assert _ranges([(7, 7), (9, 11)]) == "#7, #9..#11" and _ranges([(1, 2), (4, 4)]) == "#1..#2, #4"
    assert _ranges([(2 * i, 2 * i) for i in range(30)], most=3) == "#0, #2, #4, and 27 more runs"


def test_far_apart_step_numbers_cost_nothing() -> None:
    """Steps numbered 1009 and 1000000000: the missing numbers are counted from the gaps between
    the numbers present, never listed one by one (that was a billion-element range)."""
    import time

    t0 = time.perf_counter()
    notes = [n for n in _notes(_stepped([1009, 1_000_000_000])) if "missing" in n]
    assert time.perf_counter() - t0 < 10
    assert notes and notes[0].startswith("steps #1010..#999999999 missing from #1009..#1000000000")


def test_a_step_number_of_5000_digits_is_not_a_number() -> None:
    """Python refuses int() of strings over 4,300 digits: such a step is numbered in time order."""
    t = TL()
    for i, name in enumerate(["ProfilerStep#1", "ProfilerStep#" + "9" * 5000, "ProfilerStep#3"]):
        t.host(name, i * 1000.0, i * 1000.0 + 900, Kind.STEP)
        t.work("k", i * 1000.0 + 100, i * 1000.0 + 600, launch_at=i * 1000.0 + 50)
    d = diagnose(t.build())
    assert "step markers carry no distinct numbers; they are numbered 1.. in time order" in d.quality


def test_clock_skew_device_work_before_its_launch() -> None:
    t = TL()
    t.work("a", 100, 200, launch_at=90)
    t.work("b", 300, 400, launch_at=310)  # starts 10 us before its launch call
    t.work("c", 500, 600, launch_at=530)  # 30 us before
    notes = [n for n in _notes(t) if n.startswith("clock skew")]
    assert notes == [
        "clock skew: 2 of 3 device events (67%) start before the host call that launched them, by up to 30.0 us "
        "(median 20.0 us): the host and device clocks disagree (CUPTI's clock conversion drifted, or the trace joins "
        "two clocks); idle attributed near launches is uncertain by about that much"
    ]


def test_rounding_within_a_microsecond_is_not_skew() -> None:
    t = TL()
    t.work("a", 100, 200, launch_at=100.5)
    t.work("b", 300, 400, launch_at=290)
    assert not any(n.startswith("clock skew") for n in _notes(t))


@pytest.mark.parametrize("path", [LAB / "lab_sync.pt.trace.json.gz", LAB / "lab_smallbatch.pt.trace.json.gz"])
def test_real_h200_traces_have_neither(path: Path) -> None:
    notes = diagnose(path).quality
    assert not any(n.startswith("clock skew") or "missing from" in n or "back in time" in n for n in notes)


def test_real_resnet_has_neither(resnet0: Path) -> None:
    notes = diagnose(resnet0).quality
    assert not any(n.startswith("clock skew") or "missing from" in n or "back in time" in n for n in notes)


def test_real_nsys_export_has_no_skew() -> None:
    notes = diagnose(shared_trace("nsys/pipit__a100_saxpy-mpi-cuda_perlmutter_nsys2022.2.1.sqlite")).quality
    assert not any(n.startswith("clock skew") for n in notes)
