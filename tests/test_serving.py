"""Request logs: reading the formats, traffic figures, and the demand / batching / host-pipeline verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import whyidle
from whyidle.errors import InputError
from whyidle.serving.requestlog import from_records, load_requests
from whyidle.serving.requests import diagnose_requests
from whyidle.serving.traffic import analyse_requests, traffic_from_log

MS = 1_000_000


def _log(rows: list[tuple[float, float, float]], batch: list[int] | None = None) -> list[dict[str, float]]:
    out = []
    for i, (a, s, f) in enumerate(rows):
        r = {"arrival_ms": a, "start_ms": s, "finish_ms": f}
        if batch is not None:
            r["batch_id"] = batch[i]
        out.append(r)
    return out


def test_exact_figures_on_a_small_log() -> None:
    # r0 and r1 run together 2..5 (r1 waited 1 ms), r2 arrives at 10 and runs alone 10..13
    log = from_records(_log([(0, 2, 5), (1, 2, 5), (10, 10, 13)]))
    assert log.batch.tolist()[0] == log.batch.tolist()[1] != log.batch.tolist()[2]  # inferred from (start, finish)
    st = analyse_requests(log)
    assert st.window_ns == 13 * MS
    assert st.rate_per_s == pytest.approx(2 / 0.010)
    gaps = np.array([1.0, 9.0])
    assert st.burstiness == pytest.approx(gaps.var() / gaps.mean() ** 2)
    assert st.batch_sizes == {1: 1, 2: 1} and st.mean_batch == 1.5
    assert st.server_busy_ns == 6 * MS
    assert st.idle_no_request_ns == 5 * MS  # 5..10
    assert st.idle_requests_waiting_ns == 2 * MS  # 0..2: r0 queued, nothing running
    # in the system: r0 0-5, r1 1-5, r2 10-13 -> integral 5 + 4 + 3 = 12 ms over 13 ms
    assert st.concurrency_mean == pytest.approx(12 / 13) and st.concurrency_max == 2
    assert st.queue_depth_mean == pytest.approx((2 + 1) / 13) and st.queue_depth_max == 2
    assert st.latency_p50_ns == 4 * MS and st.latency_p99_ns == 5 * MS
    assert st.left_behind_batches == 0
    assert st.arrivals_to_idle_server == 1.0
    # a 10 ms arrival span: peak windows of 1 ms, at most one arrival in any of them
    assert st.peak_window_ns == MS and st.peak_rate_per_s == 1000.0


def test_a_single_request_has_no_rate() -> None:
    st = analyse_requests(from_records(_log([(0, 1, 3)])))
    assert np.isnan(st.rate_per_s) and np.isnan(st.peak_rate_per_s) and np.isnan(st.burstiness)
    assert st.latency_p99_ns == 3 * MS and st.server_busy_ns == 2 * MS


def _demand_log() -> list[dict[str, float]]:
    # a request every 100 ms, served alone at once in 3 ms
    return _log([(100 * i, 100 * i, 100 * i + 3) for i in range(50)])


def _batching_log() -> list[dict[str, float]]:
    # 8 requests at once every 20 ms; the server takes them one at a time, 2 ms each
    rows = []
    for burst in range(20):
        t0 = 20 * burst
        for k in range(8):
            rows.append((t0, t0 + 2 * k, t0 + 2 * k + 2))
    return _log(rows)


def _host_log() -> list[dict[str, float]]:
    # a request every 10 ms, in the server 8 ms each (the device works 2 of them)
    return _log([(10 * i, 10 * i, 10 * i + 8) for i in range(50)])


def test_verdict_demand() -> None:
    d = diagnose_requests(from_records(_demand_log()), device_busy_share=0.03)
    assert d.verdict is not None and d.verdict.key == "insufficient_demand/idle_host"
    assert d.verdict.share_of_window == pytest.approx(1 - 50 * 3 / (49 * 100 + 3))
    assert "whyidle batching" in d.verdict.lever


def test_verdict_batching() -> None:
    d = diagnose_requests(from_records(_batching_log()), device_busy_share=0.8)
    assert d.verdict is not None and d.verdict.key == "underfilled/small_batches"
    st = d.stats
    # in each burst the first 7 batches leave requests behind: 7 x 2 ms of 20 ms
    assert st.left_behind_batches == 7 * 20
    assert st.left_behind_busy_ns == 7 * 20 * 2 * MS


def test_verdict_host_pipeline() -> None:
    d = diagnose_requests(from_records(_host_log()), device_busy_share=0.2, device_busy_basis="test")
    assert d.verdict is not None and d.verdict.key == "starvation/host_pipeline"
    window = 49 * 10 + 8
    assert d.verdict.share_of_window == pytest.approx(50 * 8 / window - 0.2)
    # without the device's busy share the cause is skipped, and said so
    d2 = diagnose_requests(from_records(_host_log()))
    assert all(c.group != "starvation" for c in d2.causes)
    assert any(s.startswith("starvation/host_pipeline") for s in d2.skipped)


def test_formats(tmp_path: Path) -> None:
    rows = _batching_log()[:10]
    jl = tmp_path / "log.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    csv = tmp_path / "log.csv"
    csv.write_text("arrival_ms,start_ms,finish_ms\n" + "".join(f"{r['arrival_ms']},{r['start_ms']},{r['finish_ms']}\n" for r in rows))
    a, b = load_requests(jl), load_requests(csv)
    assert a.arrival_ns.tolist() == b.arrival_ns.tolist() and a.finish_ns.tolist() == b.finish_ns.tolist()
    assert (a.format, b.format) == ("jsonl", "csv")
    # vLLM RequestMetrics names, seconds
    vl = tmp_path / "vllm.json"
    vl.write_text(json.dumps([{"request_id": "x", "arrival_time": 1.5, "first_scheduled_time": 1.5025, "finished_time": 1.6}]))
    v = load_requests(vl)
    assert v.arrival_ns.tolist() == [1_500_000_000] and v.start_ns.tolist() == [1_502_500_000]
    # Triton trace: entries of one id merged; batch inferred from shared compute times
    tr = tmp_path / "trace.json"
    tr.write_text(json.dumps([
        {"id": 1, "model_name": "m", "model_version": 1},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 100}, {"name": "QUEUE_START", "ns": 110}, {"name": "COMPUTE_START", "ns": 200}, {"name": "COMPUTE_END", "ns": 300}, {"name": "REQUEST_END", "ns": 310}]},
        {"id": 2, "model_name": "m", "timestamps": [{"name": "REQUEST_START", "ns": 150}, {"name": "COMPUTE_START", "ns": 200}, {"name": "REQUEST_END", "ns": 310}]},
    ]))
    t = load_requests(tr)
    assert t.format == "triton" and t.arrival_ns.tolist() == [100, 150] and t.start_ns.tolist() == [200, 200]
    assert t.batch[0] == t.batch[1]
    iso = tmp_path / "iso.jsonl"
    iso.write_text('{"arrival": "2026-01-01T00:00:00Z", "finish": "2026-01-01T00:00:00.250Z"}\n')
    i = load_requests(iso)
    assert int(i.finish_ns[0] - i.arrival_ns[0]) == 250 * MS and not i.has_start


def test_bad_logs_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text('{"id": 1, "t": 2}\n')
    with pytest.raises(InputError, match="x.jsonl.*no arrival"):
        load_requests(f)
    f.write_text('{"arrival_ms": 5, "finish_ms": 1}\n')
    with pytest.raises(InputError, match="finishes before it arrives"):
        load_requests(f)
    f.write_text('{"arrival_ms": "soon", "finish_ms": 1}\n')
    with pytest.raises(InputError, match="not a number"):
        load_requests(f)


def test_replayed_traffic_keeps_the_gaps() -> None:
    log = from_records(_log([(0, 0, 1), (1, 1, 2), (5, 5, 6)]))
    tr = traffic_from_log(log, 6)
    assert tr.rate_per_s == pytest.approx(2 / 0.005)
    # gaps 1 and 4 ms, mean 2.5: unit gaps 0.4 and 1.6, tiled three times
    assert np.diff(tr.unit_times_s).tolist() == pytest.approx([0.4, 1.6] * 3)


# -- the command line ----------------------------------------------------------------------

H200 = Path(__file__).parent / "data" / "h200"


def _write_jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_serving_command_with_the_real_serving_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 serving loop (requests ~every 8 ms, batches <= 8, a 2-layer encoder) kept the
    device busy 6% of its trace; a log of that traffic gets the cause the trace's own attribution
    also finds (insufficient_demand/idle_host)."""
    from whyidle.cli import main

    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(8.0, 150))
    rows = [{"arrival_ms": float(a), "start_ms": float(a), "finish_ms": float(a) + 1.0} for a in arrivals]
    log = _write_jsonl(tmp_path / "serve.jsonl", rows)
    # the log is on its own clock (ms from 0): not joinable by time, so the trace is used only as asserted
    rc = main(["serving", str(log), "--trace", str(H200 / "serving_queue_wait.pt.trace.json.gz"), "--assume-same-period", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert "--assume-same-period" in doc["device_busy_basis"]
    assert doc["verdict"]["group"] == "insufficient_demand" and doc["verdict"]["cause"] == "idle_host"
    assert 0.05 < doc["device_busy_share"] < 0.07
    page = tmp_path / "serving.html"
    assert main(["serving", str(log), "--device-busy", "0.06", "-o", str(page)]) == 0
    assert "insufficient_demand/idle_host" in page.read_text() and "whyidle-data" in page.read_text()
    import whyidle

    # The trace's own attribution has the demand finding from the thread blocked in queue.get
    # (21% of its idle); its largest cause is the Python dispatch of each batch under the
    # profiler's Python tracer (host overhead, tests/test_trace_labels.py).
    trace_keys = [f.key for f in whyidle.diagnose(H200 / "serving_queue_wait.pt.trace.json.gz").findings]
    assert "insufficient_demand/idle_host" in trace_keys


def test_batching_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.cli import main

    rc = main(["batching", "--latency", str(H200 / "measured.json"), "--rate", "125", "--slo-ms", "50",
               "--max-batch", "1,8,32", "--delays-ms", "0,2", "--requests-per-run", "3000", "--gpu", "NVIDIA H200", "--memory-gb", "2"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Recommended: max batch 32" in out and "max_batch_size: 32" in out and "batchSize: 32" in out
    assert "1g.18gb" in out and "add no throughput" in out
    html = tmp_path / "b.html"
    assert main(["batching", "--latency", str(H200 / "measured.json"), "--rate", "125", "--slo-ms", "50", "--max-batch", "1,8", "--requests-per-run", "2000", "-o", str(html)]) == 0
    assert "<svg" in html.read_text()
    # a request log replayed as the traffic
    log = _write_jsonl(tmp_path / "r.jsonl", _demand_log())
    assert main(["batching", "--latency", str(H200 / "measured.json"), "--requests", str(log), "--slo-ms", "20", "--max-batch", "1,8", "--requests-per-run", "2000", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rate_per_s"] == pytest.approx(10.0) and doc["settings"]["triton"].startswith("max_batch_size: 8")


def test_bad_input_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.cli import main

    missing = tmp_path / "nope.csv"
    assert main(["batching", "--latency", str(missing), "--rate", "1", "--slo-ms", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.csv" in err
    assert main(["batching", "--latency", str(H200 / "measured.json"), "--slo-ms", "5"]) == 2
    assert "--requests LOG or --rate" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\"x\": 1}\n")
    out = tmp_path / "o.json"
    assert main(["serving", str(bad), "-o", str(out)]) == 2
    assert not out.exists()


def test_the_trace_demand_finding_points_to_the_tuner() -> None:
    import whyidle

    r = whyidle.diagnose(H200 / "serving_queue_wait.pt.trace.json.gz")
    f = next(f for f in r.findings if f.key == "insufficient_demand/idle_host")
    assert any("whyidle batching" in s for s in f.fix.steps)
    assert any("whyidle serving" in s for s in f.fix.steps)


SERVING_TRACE = H200 / "serving_queue_wait.pt.trace.json.gz"  # 76 ms of device work, UTC epoch times


def _wall_clock_log(tmp_path: Path, start_ns: int, seconds: float, n: int = 100) -> Path:
    """A log on the wall clock (Unix seconds, as vLLM writes): n requests of 1 ms over ``seconds``."""
    rows = []
    for i in range(n):
        t = (start_ns + int(i * seconds / n * 1e9)) / 1e9
        rows.append({"arrival_time": t, "first_scheduled_time": t, "finished_time": t + 0.001})
    return _write_jsonl(tmp_path / "wall.jsonl", rows)


def test_serving_refuses_a_trace_from_another_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25, item 2: the 76 ms trace from another time applied to a 30.8 s log flipped the
    verdict; a trace that does not overlap the log on the wall clock is refused (exit 2, one line
    naming the trace) unless --assume-same-period, and then the basis says it was not joined."""
    from whyidle.cli import main

    win = whyidle.diagnose(SERVING_TRACE).window
    log = _wall_clock_log(tmp_path, win.end_ns + 3_600 * 10**9, 30.8)  # an hour later
    assert main(["serving", str(log), "--trace", str(SERVING_TRACE), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(SERVING_TRACE) in err and "does not overlap" in err and "--assume-same-period" in err
    assert main(["serving", str(log), "--trace", str(SERVING_TRACE), "--assume-same-period", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "not joined by time" in doc["device_busy_basis"]
    # a log on its own clock cannot be joined either
    rel = _write_jsonl(tmp_path / "rel.jsonl", [{"arrival_ms": float(i), "start_ms": float(i), "finish_ms": i + 0.5} for i in range(50)])
    assert main(["serving", str(rel), "--trace", str(SERVING_TRACE)]) == 2
    assert "wall clock" in capsys.readouterr().err


def test_serving_joins_the_trace_over_the_overlap(tmp_path: Path) -> None:
    """A 30.8 s log that holds the trace's 76 ms: the busy share is the device's over the overlap
    (the trace's whole window, so its own figure), and the basis says how much of the log that is."""
    from whyidle.serving.join import device_busy_over_log, log_window
    from whyidle.serving.requestlog import load_requests

    d = whyidle.diagnose(SERVING_TRACE)
    lo, hi = d.window.start_ns, d.window.end_ns
    log = load_requests(_wall_clock_log(tmp_path, lo - 10**9, 30.8))
    share, basis = device_busy_over_log(d, log, "t.json")
    assert share == pytest.approx(d.utilization.busy_fraction, rel=1e-9)
    assert "overlaps the log on the wall clock (0% of the log's period)" in basis
    # a log over the trace's second half only: the busy share of that half, from the activity
    mid = (lo + hi) // 2
    half = load_requests(_wall_clock_log(tmp_path, mid, (hi - mid) / 1e9 * 2, n=20))
    share2, basis2 = device_busy_over_log(d, half, "t.json")
    assert d.activity is not None
    a, b = log_window(half)  # a: mid, to the float seconds' resolution
    busy = sum((dev.compute | dev.communication | dev.copies).clip(a, hi).total() for dev in d.activity)
    assert share2 == pytest.approx(busy / ((hi - a) * d.utilization.n_devices)) and share2 != pytest.approx(share)
    assert f"({(hi - a) / (b - a):.0%} of the log's period)" in basis2 and b > hi
