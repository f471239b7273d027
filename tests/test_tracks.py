"""Side inputs as Timelines: the step tracker's measurements and counter logs' counters track."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import whyidle
from whyidle.analyses import causes as C
from whyidle.analyses.counters import analyse_counters
from whyidle.capture.fakes import FakeClock, FakeDevice, FakeLoader
from whyidle.capture.tracker import StepTracker
from whyidle.capture.tracker_timeline import COPY, DATA_WAIT, DEVICE_WORK
from whyidle.sources import load
from whyidle.timeline.counters import CounterLog
from whyidle.timeline.model import Kind, LaneKind
from tlbuild import TL

MS = 1_000_000


def _tracked(device: bool) -> StepTracker[list[int]]:
    clock = FakeClock()
    tr = StepTracker(FakeLoader(clock, [3 * MS, MS, 2 * MS, MS]), device_timer=FakeDevice(6 * MS) if device else None, clock=clock)
    for i, _ in enumerate(tr):
        with tr.copy():
            clock.advance((i + 1) * 100_000)
        clock.advance(8 * MS)
    return tr


@pytest.mark.parametrize("device", [True, False])
def test_the_tracker_timeline_holds_every_step_figure(device: bool) -> None:
    tr = _tracked(device)
    st, tl = tr.stats(), tr.timeline()
    assert tl.meta.source_format == "whyidle.track" and tl.meta.quality == list(st.notes)

    def rows(kind: Kind, name: str | None = None) -> np.ndarray:
        sel = tl.kind == int(kind)
        if name is not None:
            sel &= np.array([tl.strings[i] == name for i in tl.name], dtype=np.bool_)
        return np.flatnonzero(sel)

    steps, waits, copies, work = rows(Kind.STEP), rows(Kind.CPU_OP, DATA_WAIT), rows(Kind.CPU_OP, COPY), rows(Kind.KERNEL, DEVICE_WORK)
    assert [tl.name_of(int(r)) for r in steps] == [f"ProfilerStep#{s.number}" for s in st.steps]
    assert tl.start_ns[steps].tolist() == [s.start_ns for s in st.steps] and tl.end_ns[steps].tolist() == [s.end_ns for s in st.steps]
    assert tl.dur_ns[waits].tolist() == [s.data_wait_ns for s in st.steps]
    assert tl.shape0[waits].tolist() == [s.samples for s in st.steps]
    assert tl.dur_ns[copies].tolist() == [s.copy_ns for s in st.steps]
    assert tl.dur_ns[work].tolist() == ([s.device_ns for s in st.steps] if device else [])
    assert {ln.kind for ln in tl.lanes} == ({LaneKind.CPU_THREAD, LaneKind.GPU_STREAM} if device else {LaneKind.CPU_THREAD})


def test_the_shared_pipeline_reads_a_tracker_timeline_but_cannot_name_the_data_wait() -> None:
    """What is left before the tracker's report can come from the shared pipeline: the gap
    attribution needs the launch of the work that ended each gap, which the tracker does not
    record, so the data wait the tracker measured reads as unattributed idle."""
    tr = _tracked(device=True)
    own, shared = tr.report(), whyidle.diagnose(tr.timeline())
    assert shared.window.steps == own.window.all_steps  # the same steps (the shared window keeps the first)
    assert own.idle_by_cause_ns[C.INPUT_PIPELINE.key] > 0
    assert shared.idle_by_cause_ns[C.INPUT_PIPELINE.key] == 0
    assert shared.idle_by_cause_ns[C.NO_LAUNCH_INFO.key] > 0


DMON = """#Date       Time        gpu    pwr     sm    mem
#YYYYMMDD   HH:MM:SS    Idx      W      %      %
 20250301   12:00:01      0     61     97     40
 20250301   12:00:02      0     60     10     40
 20250301   12:00:03      0     62     95     41
"""


def test_a_counter_log_is_a_timeline_with_a_typed_counters_track(tmp_path: Path) -> None:
    p = tmp_path / "gpu.dmon.log"
    p.write_text(DMON)
    utc = load(p, counters_utc_offset_min=0)
    east = load(p, counters_utc_offset_min=120)
    assert len(utc) == 0 and isinstance(utc.meta.counters, CounterLog) and isinstance(east.meta.counters, CounterLog)
    assert utc.meta.counters.source_format == "nvidia-smi dmon" and utc.meta.counters.gpu_ids == ("0",)
    assert any("UTC+02:00 (as given)" in q for q in east.meta.quality)
    # the same wall-clock samples read two hours east are two hours earlier in UTC
    t_utc = utc.meta.counters.get("0", "gpu_util_pct")
    t_east = east.meta.counters.get("0", "gpu_util_pct")
    assert t_utc is not None and t_east is not None
    assert (t_utc.time_ns - t_east.time_ns).tolist() == [2 * 3600 * 10**9] * 3
    assert len(analyse_counters(utc.meta.counters, whyidle.Config().attribution).gpus) == 1


def test_a_timeline_without_a_counters_track_is_a_usage_error_for_the_counter_analysis(tmp_path: Path) -> None:
    t = TL()
    t.work("k", 0, 10)
    with pytest.raises(whyidle.UsageError, match="no counters track"):
        analyse_counters(t.build().meta.counters, whyidle.Config().attribution)
