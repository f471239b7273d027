"""GPU counter logs: every format parsed by header names, exact time-weighted figures, the
burst/pause rhythm, underfilled work, counter-only reports and the join with a trace; the real
logs end to end, read-only (checksummed)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_TRACES
from whyidle.analyses.counters import analyse_counters, burst_pattern, time_weights, weighted_quantiles
from whyidle.cli import main
from whyidle.config import Config
from whyidle.pipeline import diagnose
from whyidle.errors import TraceFormatError
from whyidle.lab.synthetic import training_trace, write_trace
from whyidle.sources import load
from whyidle.sources.counters import load_counters, looks_like_counter_log, parse_counters
from whyidle.timeline.counters import METRICS, CounterLog, CounterSeries, counter_file_header, counter_file_row

S = 1_000_000_000
MS = 1_000_000


def _vals(log: CounterLog, metric: str, gpu: str = "0") -> list[float]:
    s = log.get(gpu, metric)
    assert s is not None, f"{metric} missing"
    return [None if np.isnan(v) else float(v) for v in s.value]  # type: ignore[misc]


# -- nvidia-smi dmon -----------------------------------------------------------------------------

DMON_DT = """\
#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
 20250301   12:00:01      0     61     34      -     97     40      0      0      0      0   1593   1410
 20250301   12:00:01      1     55     30      -      3      1      0      0      0      0   1593    210
 20250301   12:00:02      0     62     34      -      -     41      0      0      0      0   1593   1410
#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
 20250301   12:00:03      0     63     35      -     95     42      0      0      0      0   1593   1410
"""


def test_dmon_by_header_names_with_date_time_and_missing() -> None:
    log = parse_counters(DMON_DT.encode(), "dmon.log", utc_offset_min=60)
    assert log.source_format == "nvidia-smi dmon" and log.clock == "epoch"
    assert log.gpu_ids == ("0", "1")
    assert _vals(log, "gpu_util_pct") == [97.0, None, 95.0]  # '-' is missing, not zero
    assert _vals(log, "sm_clock_mhz") == [1410.0] * 3
    assert _vals(log, "gpu_util_pct", "1") == [3.0]
    # 12:00:01 at UTC+01:00 is 11:00:01 UTC
    assert int(log.get("0", "power_w").time_ns[0]) == 1740826801 * S  # type: ignore[union-attr]
    assert log.interval_ns == S
    assert any("UTC+01:00" in q for q in log.quality)


def test_dmon_other_selection_order_and_csv() -> None:
    text = "# gpu, rxpci, txpci, sm\n# Idx, MB/s, MB/s, %\n 0, 12, 3, 50\n 0, 14, 4, 60\n"
    log = parse_counters(text.encode(), "dmon.csv", interval_ms=250)
    assert _vals(log, "pcie_rx_bytes_per_s") == [12e6, 14e6]
    assert _vals(log, "gpu_util_pct") == [50.0, 60.0]
    assert log.clock == "relative"
    assert list(log.get("0", "gpu_util_pct").time_ns) == [0, 250 * MS]  # type: ignore[union-attr]


def test_dmon_time_only_is_relative_and_wraps_midnight() -> None:
    text = "#Time        gpu     sm\n#HH:MM:SS    Idx      %\n 23:59:59      0     10\n 00:00:00      0     20\n"
    log = parse_counters(text.encode(), "t.log")
    assert log.clock == "relative"
    assert list(log.get("0", "gpu_util_pct").time_ns) == [0, S]  # type: ignore[union-attr]


# -- nvidia-smi --query-gpu ----------------------------------------------------------------------

QUERY_UNITS = """\
timestamp, index, pci.bus_id, utilization.gpu [%], utilization.memory [%], power.draw [W], clocks.sm [MHz]
2025/07/09 01:17:36.754, 0, 00000000:3B:00.0, 90 %, 30 %, 250.12 W, 1410 MHz
2025/07/09 01:17:37.754, 0, 00000000:3B:00.0, [N/A], 31 %, 251.00 W, 1410 MHz
"""


def test_query_gpu_with_units() -> None:
    log = parse_counters(QUERY_UNITS.encode(), "q.csv", utc_offset_min=0)
    assert log.source_format == "nvidia-smi --query-gpu"
    assert _vals(log, "gpu_util_pct") == [90.0, None]
    assert _vals(log, "power_w") == [250.12, 251.0]
    assert log.gpus["0"]["pci_bus_id"] == "00000000:3B:00.0"
    t = log.get("0", "power_w").time_ns  # type: ignore[union-attr]
    assert int(t[1] - t[0]) == S and int(t[0]) == 1752023856 * S + 754 * MS


def test_query_gpu_noheader_needs_fields() -> None:
    rows = "2025/07/09 01:17:36.754, 0, 90, 250.12\n2025/07/09 01:17:37.754, 0, 80, 240.00\n"
    assert looks_like_counter_log(rows.encode())
    with pytest.raises(TraceFormatError, match="without a header"):
        parse_counters(rows.encode(), "q.csv")
    log = parse_counters(rows.encode(), "q.csv", fields=["timestamp", "index", "utilization.gpu", "power.draw"])
    assert _vals(log, "gpu_util_pct") == [90.0, 80.0]


# -- dcgmi dmon ----------------------------------------------------------------------------------


def _dcgmi(rows: int, power_w: float = 100.0, step_mj: float = 5000.0) -> str:
    out = ["#Entity   GPUTL  SMACT  POWER   TOTEC", "ID                      W       mJ"]
    for i in range(rows):
        util = "N/A" if i == 0 else ("100" if i % 10 < 4 else "0")
        sm = "N/A" if i == 0 else ("0.900" if i % 10 < 4 else "0.000")
        out.append(f"GPU 0     {util}  {sm}  {power_w:.3f}  {int(1_000_000 + i * step_mj)}")
    return "\n".join(out) + "\n"


def test_dcgmi_interval_from_energy_and_power() -> None:
    log = parse_counters(_dcgmi(100).encode(), "d.txt")  # 5 J per sample at 100 W: 50 ms
    assert log.source_format == "dcgmi dmon" and log.clock == "relative"
    assert log.interval_ns == 50 * MS
    assert _vals(log, "sm_active_pct")[:2] == [None, 90.0]  # ratio -> percent, N/A missing
    assert any("inferred as 50 ms" in q for q in log.quality)


def test_dcgmi_field_ids_and_given_interval() -> None:
    text = "#Entity   203   1002\nID\nGPU 0     50    0.250\nGPU 0     60    0.300\n"
    log = parse_counters(text.encode(), "d.txt", interval_ms=200)
    assert _vals(log, "gpu_util_pct") == [50.0, 60.0] and _vals(log, "sm_active_pct") == [25.0, 30.0]
    assert log.interval_ns == 200 * MS


# -- whyidle's own counter file ------------------------------------------------------------------


def test_whyidle_counter_file_round_trip() -> None:
    metrics = ["gpu_util_pct", "power_w", "mem_used_mib"]
    text = counter_file_header(metrics, {"0": {"name": "NVIDIA A100", "uuid": "GPU-abc", "pci_bus_id": "00000000:07:00.0"}})
    text += counter_file_row(10 * S, "0", {"gpu_util_pct": 87, "power_w": 312.5, "mem_used_mib": None}, metrics)
    text += counter_file_row(10 * S + 250 * MS, "0", {"gpu_util_pct": 0, "power_w": float("nan"), "mem_used_mib": 1024}, metrics)
    log = parse_counters(text.encode(), "w.csv")
    assert log.source_format == "whyidle counters" and log.clock == "epoch"
    assert _vals(log, "gpu_util_pct") == [87.0, 0.0]
    assert _vals(log, "power_w") == [312.5, None]
    assert _vals(log, "mem_used_mib") == [None, 1024.0]
    assert log.gpus["0"] == {"name": "NVIDIA A100", "uuid": "GPU-abc", "pci_bus_id": "00000000:07:00.0"}
    assert log.interval_ns == 250 * MS
    with pytest.raises(ValueError):
        counter_file_header(["not_a_metric"])
    assert set(metrics) <= set(METRICS)


# -- analyses ------------------------------------------------------------------------------------


def test_time_weighted_mean_and_quantiles_exact() -> None:
    s = CounterSeries("0", "gpu_util_pct", np.array([0, S, 3 * S], dtype=np.int64), np.array([0.0, 100.0, 50.0]))
    log = CounterLog("whyidle counters", "x", "epoch", S, (s,))
    g = analyse_counters(log, Config().attribution).gpus[0]
    d = g.dist("gpu_util_pct")
    assert d is not None
    assert d.mean == pytest.approx(62.5)  # weights 1 s, 2 s, 1 s
    assert (d.p5, d.p50, d.p95) == (0.0, 50.0, 100.0)  # cumulative weights 1/4, 2/4, 4/4
    assert g.span_ns == 4 * S and g.busy_ns == pytest.approx(2.5 * S)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=40), st.lists(st.integers(1, 5), min_size=40, max_size=40))
def test_weighted_quantiles_match_repeated_samples(values: list[float], reps: list[int]) -> None:
    """Integer weights give the same quantiles as repeating each sample that many times."""
    v = np.array(values)
    w = np.array(reps[: len(values)], dtype=np.float64)
    expanded = np.repeat(v, w.astype(int))
    for q in (0.05, 0.5, 0.95):
        (got,) = weighted_quantiles(v, w, (q,))
        k = int(np.ceil(q * expanded.size - 1e-9)) - 1
        assert got == np.sort(expanded)[max(k, 0)]


def test_time_weights_cap_holes() -> None:
    w = time_weights(np.array([0, 1, 2, 100], dtype=np.int64) * S, S)
    assert list(w) == [S, S, S, S]  # a 98 s hole (sampler stopped) counts one interval


def test_burst_pattern_period_and_duty_cycle() -> None:
    busy = np.tile(np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], dtype=bool), 30)
    p = burst_pattern(busy, 100 * MS, "gpu_util_pct", 50.0, Config().attribution)
    assert p.regular and p.period_ns == S and p.duty_cycle == pytest.approx(0.4)
    assert p.pauses == 30 and p.mean_pause_ns == pytest.approx(600 * MS)
    noise = np.random.default_rng(7).random(300) < 0.4
    assert not burst_pattern(noise, 100 * MS, "gpu_util_pct", 50.0, Config().attribution).regular


def test_counter_only_report_findings_and_exit_codes(tmp_path: Path) -> None:
    p = tmp_path / "dcgmi.txt"
    p.write_text(_dcgmi(300))
    r = diagnose(p)
    assert r.window.basis == "counter log" and r.counters is not None and not r.no_device_activity
    ids = {f.id: f for f in r.findings}
    assert "counters.burst_pause" in ids
    bp = ids["counters.burst_pause"]
    facts = dict(bp.evidence.facts)
    assert facts["period_ns"] == 500 * MS and facts["duty_cycle"] == pytest.approx(0.4, abs=0.01)
    assert bp.group == "unattributed"  # counters alone cannot tell starvation from synchronization
    assert r.utilization.busy_fraction == pytest.approx(0.4, abs=0.01)
    out = tmp_path / "r.json"
    assert main(["diagnose", str(p), "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["counters"]["gpus"][0]["pattern"]["regular"] is True
    assert "gpu_util_pct" in d["counters"]["explanations"]
    assert "not how much of the GPU" in d["counters"]["explanations"]["gpu_util_pct"]
    assert main(["diagnose", str(p), "--min-busy", "0.9"]) == 1
    assert main(["diagnose", str(p), "--fail-on", "unattributed"]) == 1
    bad = tmp_path / "bad.txt"
    bad.write_text("#Entity GPUTL\nID\n")
    assert main(["diagnose", str(bad)]) == 2


def test_underfilled_from_sm_activity(tmp_path: Path) -> None:
    lines = ["#Entity   GPUTL  SMACT", "ID"] + ["GPU 0     100    0.100"] * 50
    p = tmp_path / "u.txt"
    p.write_text("\n".join(lines) + "\n")
    r = diagnose(p, counters_interval_ms=100)
    f = {x.id: x for x in r.findings}["counters.underfilled"]
    assert f.group == "underfilled" and f.affected_busy_ns == 50 * 100 * MS
    text_out = tmp_path / "r.txt"
    assert main(["diagnose", str(p), "--counters-interval-ms", "100", "-o", str(text_out)]) == 0
    text = " ".join(text_out.read_text().split())
    assert "GPU counters (dcgmi dmon, every 100 ms)" in text
    assert "is the share of time at least one kernel was running, not how much of the GPU it used" in text


# -- joined with a trace ---------------------------------------------------------------------------

BASE_NS = 1_750_000_000 * S


def _trace(tmp_path: Path) -> Path:
    doc = training_trace("sync", steps=5)
    doc["baseTimeNanoseconds"] = BASE_NS
    return write_trace(doc, tmp_path / "t.json")


def _whyidle_log(tmp_path: Path, start_ns: int, n: int = 400, step_ns: int = 1 * MS) -> Path:
    metrics = ["gpu_util_pct", "sm_active_pct"]
    text = counter_file_header(metrics, {"0": {"name": "NVIDIA A100-SXM4-80GB"}})
    for i in range(n):
        busy = 100 if (i % 10) < 6 else 0
        text += counter_file_row(start_ns + i * step_ns, "0", {"gpu_util_pct": busy, "sm_active_pct": busy * 0.9}, metrics)
    p = tmp_path / "gpu.csv"
    p.write_text(text)
    return p


def test_join_with_trace_by_utc_time(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    plain = diagnose(trace)
    log = _whyidle_log(tmp_path, plain.window.start_ns - 10 * MS)
    r = diagnose(trace, counters=log)
    assert r.counters is not None and r.counters.joined
    g = r.counters.gpus[0]
    assert g.start_ns >= plain.window.start_ns and g.end_ns <= plain.window.end_ns + MS
    assert any("joined with the trace by UTC time" in q for q in r.quality)
    # the counters' rhythm is evidence for the trace's findings, said as a note: never a ranked
    # finding worth no time, nor a second claim on the idle the trace attributes (issue 25, item 5)
    assert not any(f.id.startswith("counters.") for f in r.findings)
    (rhythm,) = [q for q in r.quality if q.startswith("GPU-counter evidence over the trace's window (counters.burst_pause)")]
    assert "attributes most of its device idle to synchronization" in rhythm
    assert r.findings[0].id == "host_sync"
    # the log is busy 6 samples in 10; the window (ending with the last step's device work) cuts
    # the pattern at a sample boundary, so the mean over it reads 60-61%
    assert any(re.search(r"mean GPU-Util of 6[01]%", q) for q in r.quality)
    assert main(["diagnose", str(trace), "--counters", str(log), "--json"]) in (0, 1)


def test_join_says_why_it_cannot_align(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    far = _whyidle_log(tmp_path, BASE_NS - 3600 * S)
    r = diagnose(trace, counters=far)
    assert r.counters is not None and not r.counters.joined
    assert any("does not overlap" in q for q in r.quality)
    dc = tmp_path / "d.txt"
    dc.write_text(_dcgmi(50))
    r2 = diagnose(trace, counters=dc)
    assert any("no absolute timestamps" in q for q in r2.quality)


# -- real logs -------------------------------------------------------------------------------------

REAL = sorted((SHARED_TRACES / "counters").glob("ai-inference-energy__G*")) if (SHARED_TRACES / "counters").is_dir() else []


@pytest.mark.skipif(not REAL, reason="real counter logs not available: ../shared/traces is absent on this machine")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name.split("__")[1][:14])
def test_real_logs_end_to_end_read_only(path: Path, tmp_path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    r = diagnose(path)
    assert r.counters is not None and r.counters.gpus
    for fmt in ("r.json", "r.txt"):
        assert main(["diagnose", str(path), "-o", str(tmp_path / fmt)]) in (0, 1)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _real(part: str) -> Path:
    for p in REAL:
        if part in p.name:
            return p
    pytest.skip(f"real counter log {part} not available")


def test_real_v100_dcgmi() -> None:
    log = load_counters(_real("GV100"))
    assert log.interval_ns == 50 * MS  # -d 50, inferred from TOTEC / POWER
    assert len(log.get("0", "gpu_util_pct")) == 2323  # type: ignore[arg-type]
    r = diagnose(_real("GV100"))
    assert {f.id for f in r.findings} >= {"counters.underfilled"}  # GPU-Util ~52% with SM activity < 1%


def test_real_h100_dcgmi_na_rows() -> None:
    log = load_counters(_real("GH100"))
    util = log.get("0", "gpu_util_pct")
    assert util is not None and np.isnan(util.value).all()  # GPUTL is N/A throughout on this H100 log
    sm = log.get("0", "sm_active_pct")
    assert sm is not None and np.isnan(sm.value[:3]).all() and np.isfinite(sm.value).sum() > 500
    g = analyse_counters(log, Config().attribution).gpus[0]
    assert g.busy_basis == "sm_active_pct"


def test_real_a100_query_gpu_mostly_idle() -> None:
    r = diagnose(_real("GA100"), counters_utc_offset_min=0)
    assert r.source.format == "nvidia-smi --query-gpu"
    assert "counters.low_utilization" in {f.id for f in r.findings}
    assert r.utilization.busy_fraction < 0.01


def test_help_query_gpu_text_is_not_a_log() -> None:
    p = SHARED_TRACES / "counters" / "ai-inference-energy__nvidia-smi-help-query-gpu.txt"
    if not p.exists():
        pytest.skip("real file not available")
    assert main(["diagnose", str(p)]) == 2
    with pytest.raises(Exception):
        load(p)


# -- malformed rows, idle shares, the busy basis, logs without GPU readings ------------------------

H200_WATCH = Path(__file__).parent / "data" / "h200" / "watch_bursty_matmul.counters.csv"


def _samples(log: CounterLog, metric: str = "gpu_util_pct", gpu: str = "0") -> int:
    s = log.get(gpu, metric)
    return 0 if s is None else len(s)


def test_query_gpu_truncated_timestamps_are_skipped_and_counted() -> None:
    # As pasted into notes: one timestamp cut short, one row cut after two cells.
    text = QUERY_UNITS + "2025/07/09 01:17:3, 0, 00000000:3B:00.0, 70 %, 30 %, 250.12 W, 1410 MHz\n2025/07/09 01:17:39.754, 0\n"
    text += "2025/07/09 01:17:40.754, 0, 00000000:3B:00.0, 60 %, 30 %, 250.12 W, 1410 MHz\n"
    log = parse_counters(text.encode(), "q.csv", utc_offset_min=0)
    assert _vals(log, "gpu_util_pct") == [90.0, None, 60.0]
    note = [q for q in log.quality if "could not be read" in q]
    assert note == ["2 of 5 sample rows could not be read and were skipped (first: line 4 has timestamp '2025/07/09 01:17:3'; "
                    "expected YYYY/MM/DD HH:MM:SS.mmm as nvidia-smi writes it)"]  # fmt: skip


def test_dmon_and_dcgmi_partial_and_bad_rows_are_skipped_and_counted() -> None:
    dmon = DMON_DT + " 2025030   12:00:04      0     63     35      -     95     42      0      0      0      0   1593   1410\n 20250301   12:00:05   0  63\n"
    log = parse_counters(dmon.encode(), "dmon.log", utc_offset_min=0)
    assert _vals(log, "gpu_util_pct") == [97.0, None, 95.0]
    assert any(q.startswith("2 of 6 sample rows could not be read") and "line 9 has date '2025030'" in q for q in log.quality)
    dc = _dcgmi(20) + "GPU 0     100  0.9\n"
    log = parse_counters(dc.encode(), "d.txt", interval_ms=50)
    assert _samples(log) == 20
    assert any(q.startswith("1 of 21 sample rows could not be read") and "line 23 has 2 values; expected 4" in q for q in log.quality)


def test_a_log_with_no_readable_row_is_one_clear_error(tmp_path: Path) -> None:
    text = "timestamp, index, utilization.gpu [%]\n2025/07/09 01:17, 0, 90 %\n2025/07/09 01:1, 0, 80 %\n"
    with pytest.raises(TraceFormatError, match=r"none of whose 2 sample rows could be read \(first: line 2 has timestamp '2025/07/09 01:17'"):
        parse_counters(text.encode(), "q.csv")
    p = tmp_path / "q.csv"
    p.write_text(text)
    assert main(["diagnose", str(p)]) == 2


def test_real_h200_watch_log_with_broken_rows(tmp_path: Path) -> None:
    """The NVML log recorded by `whyidle watch` on an H200, with a truncated time and a cut last line."""
    lines = H200_WATCH.read_text().splitlines()
    full = load_counters(H200_WATCH)
    first_row = next(i for i, ln in enumerate(lines) if ln[:1].isdigit())
    broken = list(lines)
    broken[first_row + 10] = broken[first_row + 10][:9] + "," + broken[first_row + 10].split(",", 1)[1]  # the time cut to 9 digits
    broken[-1] = broken[-1][: len(broken[-1]) // 3]
    p = tmp_path / "w.csv"
    p.write_text("\n".join(broken) + "\n")
    log = load_counters(p)
    rows = len(lines) - first_row  # data rows: every line from the first row on
    assert any(q.startswith(f"2 of {rows} sample rows could not be read") for q in log.quality)
    lost = [lines[first_row + 10].split(",")[1], lines[-1].split(",")[1]].count("0")
    assert _samples(log) == _samples(full) - lost
    assert log.gpu_ids == ("0",)  # the host process tree is not a GPU


def test_real_h200_watch_log_reads_one_gpu_and_the_host(tmp_path: Path) -> None:
    r = diagnose(H200_WATCH)
    assert r.counters is not None and [g.gpu for g in r.counters.gpus] == ["0"]
    assert r.source.devices == ("NVIDIA H200",) and r.utilization.n_devices == 1
    assert {d.metric for d in r.counters.host} == {"host_cpu_pct", "host_rss_mib"}
    g = r.counters.gpus[0]
    assert g.pattern is not None and g.pattern.regular and g.pattern.pauses == 6  # the command ran 6 bursts, each followed by a sleep
    assert r.utilization.idle_ns == g.idle_ns
    bp = {f.id: f for f in r.findings}["counters.burst_pause"]
    assert bp.idle_ns == g.pause_idle_ns <= g.idle_ns and 0 < bp.share_of_idle <= 1.0
    facts = dict(bp.evidence.facts)
    assert facts["host_cpu_pause_pct"] == pytest.approx(g.host_cpu_pause_pct, abs=0.05)
    out = tmp_path / "r.txt"
    assert main(["diagnose", str(H200_WATCH), "-o", str(out)]) in (0, 1)
    text = out.read_text()
    assert "GPU host" not in text and "Host (the watched command's process tree): CPU mean" in text


def _whyidle_rows(values: list[float], interval_ns: int = 100 * MS, gpu_metric: str = "gpu_util_pct") -> str:
    metrics = [gpu_metric]
    text = counter_file_header(metrics, {"0": {"name": "GPU"}})
    for i, v in enumerate(values):
        text += counter_file_row(BASE_NS + i * interval_ns, "0", {gpu_metric: v}, metrics)
    return text


def test_pause_idle_is_part_of_idle_exactly(tmp_path: Path) -> None:
    # 20 cycles of 90, 100, 30, 0, 0 % at 100 ms: busy 220 ms per cycle, idle 280 ms, of which 270 ms in
    # the three pause samples (below 50 %) and 10 ms inside the 90 % sample of the burst.
    p = tmp_path / "w.csv"
    p.write_text(_whyidle_rows([90, 100, 30, 0, 0] * 20))
    r = diagnose(p)
    g = r.counters.gpus[0]  # type: ignore[union-attr]
    assert g.busy_ns == pytest.approx(20 * 220 * MS) and g.idle_ns == 20 * 280 * MS
    assert g.pause_idle_ns == 20 * 270 * MS
    bp = {f.id: f for f in r.findings}["counters.burst_pause"]
    assert bp.idle_ns == 20 * 270 * MS and bp.share_of_idle == pytest.approx(270 / 280)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 5.0, 30.0, 49.0, 50.0, 80.0, 100.0, float("nan")]), min_size=3, max_size=120))
def test_counter_findings_never_claim_more_than_the_idle_time(values: list[float]) -> None:
    from whyidle.findings.counter_rules import counter_only_report
    from whyidle.findings.settings import RuleSettings
    from whyidle.pipeline import analyse, report_from

    if not any(v == v for v in values):
        values = [*values, 0.0]
    log = parse_counters(_whyidle_rows(values).encode(), "w.csv")
    from whyidle.sources.counters import counter_timeline

    timeline = counter_timeline(Path("w.csv"), _whyidle_rows(values).encode())
    r = counter_only_report(report_from(analyse(timeline, Config()), Config()), analyse_counters(log, Config().attribution), RuleSettings.of(Config()))
    assert all(0.0 <= f.share_of_idle <= 1.0 for f in r.findings)
    assert sum(f.idle_ns for f in r.findings) <= r.utilization.idle_ns


def test_sm_activity_basis_is_never_time_without_a_kernel(tmp_path: Path) -> None:
    p = tmp_path / "d.txt"
    p.write_text("#Entity   SMACT\nID\n" + "GPU 0     0.400\n" * 30)
    out = tmp_path / "r.txt"
    assert main(["diagnose", str(p), "--counters-interval-ms", "100", "-o", str(out)]) in (0, 1)
    text = " ".join(out.read_text().split())
    assert "without a kernel running" not in text
    assert "1.80 s of unused SM time" in text and "SM activity (the log has no GPU-Util)" in text
    js = tmp_path / "r.json"
    assert main(["diagnose", str(p), "--counters-interval-ms", "100", "-o", str(js)]) in (0, 1)
    assert "SM activity" in json.loads(js.read_text())["utilization"]["basis"]


def test_real_h100_sm_basis_report_words() -> None:
    r = diagnose(_real("GH100"))
    from whyidle.render.terminal import render_terminal

    text = " ".join(render_terminal(r).split())
    assert "without a kernel running" not in text and "of unused SM time" in text


def test_a_log_without_gpu_readings_says_so(tmp_path: Path) -> None:
    metrics = ["gpu_util_pct", "host_cpu_pct", "host_rss_mib"]
    text = counter_file_header(metrics)
    for i in range(10):
        text += counter_file_row(BASE_NS + i * 100 * MS, "host", {"host_cpu_pct": 100.0, "host_rss_mib": 500.0}, metrics)
        text += counter_file_row(BASE_NS + i * 100 * MS, "0", {}, metrics)  # NVML could not read the GPU
    p = tmp_path / "w.csv"
    p.write_text(text)
    r = diagnose(p)
    assert r.counters is not None and r.counters.gpus == () and len(r.counters.host) == 2
    assert not any(f.id.startswith("counters.") and f.idle_ns for f in r.findings)
    assert any("no GPU readings" in q for q in r.quality)
    out = tmp_path / "r.txt"
    main(["diagnose", str(p), "-o", str(out)])
    t = " ".join(out.read_text().split())
    assert "GPU busy unknown: the log has no GPU readings" in t and "GPU host" not in t and "0.0%" not in t


def _query_rows() -> list[str]:
    return ["timestamp, index, utilization.gpu [%], utilization.memory [%]"] + [f"2025/07/09 01:17:{s:02d}.000, 0, {50 + s % 40}, 10" for s in range(60)]


def test_query_gpu_row_with_a_stray_cr_is_rejected_not_a_crash(tmp_path: Path) -> None:
    """Issue 24: a CR inside a --query-gpu row was csv's 'new-line character seen in unquoted field'."""
    rows = _query_rows()
    rows[10] = rows[10].replace(", 0, ", ", 0\r, ")
    p = tmp_path / "gpu.csv"
    p.write_bytes(("\n".join(rows) + "\n").encode())
    tl = load(p)
    assert tl.meta.counters is not None and len(tl.meta.counters.series[0]) == 59


def test_query_gpu_field_past_the_csv_limit_names_the_line(tmp_path: Path) -> None:
    rows = _query_rows()
    rows[5] = '"' + "9" * 200_000 + '", 0, 5, 5'
    p = tmp_path / "gpu.csv"
    p.write_bytes(("\n".join(rows) + "\n").encode())
    with pytest.raises(TraceFormatError, match=r"line 7: not a CSV row \(field larger than field limit"):
        load(p)
