"""The serving loop's rate and latency curve from a trace, and the demand finding's batching line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tlbuild import TL
from whyidle.analyses.serving_loop import serving_loop
from whyidle.config import Config
from whyidle.findings.settings import RuleSettings
from whyidle.findings.demand import batching_command, demand_facts, demand_steps
from whyidle.timeline import Kind

H200 = Path(__file__).parent / "data" / "h200"
SHARED = Path("/work/shared/traces/inference")


def _loop(batches: list[tuple[float, float, int]], *, shapes: bool = True, requests: bool = False, waits: tuple[tuple[float, float], ...] | list[tuple[float, float]] = (), name: str = "serve_batch") -> TL:
    """Batch ranges [start, end) us of size k, each with an op (shape k when ``shapes``) that
    launches one kernel of 10 us; optional nested request ranges and queue.get waits."""
    t = TL()
    for s, e, k in batches:
        t.host(name, s, e, Kind.ANNOTATION)
        t.b.add(int((s + 1) * 1000), int((s + 2) * 1000), t.main, Kind.CPU_OP, "aten::to", shape0=k if shapes else -1)
        t.work("gemm", s + 5, s + 15, launch_at=s + 3)
        if requests:
            for r in range(k):
                t.host("handle_request", s + 2 + r * 0.1, s + 2 + r * 0.1 + 0.05, Kind.ANNOTATION)
    for s, e in waits:
        t.host("queue.py(154): get", s, e, Kind.PYTHON)
    return t


def test_rate_and_curve_from_shapes_exactly() -> None:
    # 4 batches of 2 then 4: busy 1 ms and 2 ms; the loop blocks in queue.get 3 ms before each
    batches = [(0, 1000, 2), (4000, 6000, 4), (9000, 10000, 2), (13000, 15000, 4)]
    waits = [(1000, 4000), (6000, 9000), (10000, 13000)]
    loop = serving_loop(_loop(batches, waits=waits).build(), Config().attribution)
    assert loop.batch_range == "serve_batch" and loop.batches == 4 and loop.sizes_from == "input shapes"
    assert loop.requests == 12 and loop.mean_batch == 3.0
    assert loop.batches_per_s == pytest.approx(4 / 0.015)
    assert loop.requests_per_s == pytest.approx(12 / 0.015)
    # it waited before the second batch: the rate counts 10 requests over 4 ms .. 15 ms
    assert loop.backlog_batches == 1 and loop.arrival_requests == 10
    assert loop.arrival_per_s == pytest.approx(10 / 0.011)
    assert [(p.batch_size, p.batches, p.median_ns, p.device_median_ns) for p in loop.curve] == [(2, 2, 1e6, 10_000), (4, 2, 2e6, 10_000)]
    assert loop.curve_arg() == "2:1:1,4:2:2" and loop.missing == ()
    assert batching_command(loop) == "whyidle batching --curve 2:1:1,4:2:2 --rate 909 --slo-ms SLO_MS"


def test_a_wait_inside_the_batch_range_is_not_service_time() -> None:
    # the loop blocks in queue.get inside its range (as the H200 serving loop does): 3 ms of 4
    batches = [(0, 4000, 1), (4000, 8000, 1), (8000, 12000, 3)]
    loop = serving_loop(_loop(batches, waits=[(0, 3000), (4000, 7000), (8000, 11000)]).build(), Config().attribution)
    assert [(p.batch_size, p.median_ns) for p in loop.curve] == [(1, 1e6), (3, 1e6)]
    assert loop.backlog_batches == 0 and loop.arrival_per_s == pytest.approx(5 / 0.012)


def test_sizes_from_request_ranges_without_shapes() -> None:
    batches = [(0, 1000, 3), (5000, 6000, 1), (10000, 11000, 3)]
    loop = serving_loop(_loop(batches, shapes=False, requests=True).build(), Config().attribution)
    assert loop.sizes_from == "request ranges" and loop.requests == 7
    assert loop.arrival_per_s is None  # never seen waiting: no arrival rate, the served one is used
    assert "--rate 636" in batching_command(loop)


def test_what_is_missing_is_said() -> None:
    no_sizes = serving_loop(_loop([(0, 1000, 3), (5000, 6000, 1), (10000, 11000, 3)], shapes=False).build(), Config().attribution)
    assert no_sizes.requests is None and no_sizes.batches_per_s == pytest.approx(3 / 0.011)
    assert "record_shapes=True" in no_sizes.missing[0]
    assert batching_command(no_sizes) == "whyidle batching --measure MODULE:FUNCTION --requests LOG --slo-ms SLO_MS"
    one_size = serving_loop(_loop([(0, 1000, 4), (5000, 6000, 4), (10000, 11000, 4)]).build(), Config().attribution)
    assert "other than 4" in one_size.missing[0] and "--measure MODULE:FUNCTION --rate" in batching_command(one_size)
    none = serving_loop(_loop([(0, 1000, 4)], name="forward").build(), Config().attribution)
    assert none.batch_range == "" and "record_function('serve_batch')" in none.missing[0]
    facts = dict(demand_facts(_loop([(0, 1000, 4)], name="forward").build(), RuleSettings()))
    seen = demand_steps(facts, ("Use dynamic batching.", "Find the settings: whyidle batching --latency CURVE.csv ..."))
    assert any(s.startswith("Missing from the trace: the rate") for s in seen)
    assert not any("latency objective" in s for s in seen if s.startswith("Missing"))  # said in the command line instead
    assert seen[-1] == "Use dynamic batching."  # the generic tuner step gives way to the concrete one
    assert facts["missing"][-1].startswith("the latency objective")


def test_h200_serving_trace_demand_finding_gives_the_batching_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 loop (tests/data/h200/serving_queue_wait): 15 serve_batch ranges, record_shapes on;
    10 batches of 8 drain a backlog, then it waits for each request in queue.get inside its range."""
    import whyidle
    from whyidle.cli import main

    r = whyidle.diagnose(H200 / "serving_queue_wait.pt.trace.json.gz")
    f = next(f for f in r.findings if f.key == "insufficient_demand/idle_host")
    facts = dict(f.evidence.facts)
    assert facts["batches"] == 15 and facts["requests"] == 85 and facts["batch_sizes_from"] == "input shapes"
    assert facts["backlog_batches"] == 11 and facts["arrival_per_s"] == pytest.approx(139.4, abs=0.1)
    curve = {p["batch_size"]: p for p in facts["latency_curve"]}
    assert sorted(curve) == [1, 8] and curve[1]["batches"] == 5 and curve[8]["batches"] == 10
    assert 3e6 < curve[1]["latency_ns_median"] < 4e6 and 3.5e6 < curve[8]["latency_ns_median"] < 4.5e6
    cmd = facts["batching_command"]
    assert cmd == "whyidle batching --curve 1:3.49:3.66,8:4.06:4.49 --rate 139 --slo-ms SLO_MS"
    assert any(cmd in s for s in f.fix.steps)
    # the line runs as written once the objective is filled in
    assert main(cmd.replace("SLO_MS", "20").split()[1:]) == 0
    assert "Recommended: max batch 8" in capsys.readouterr().out
    # and the JSON report carries it
    assert main(["diagnose", str(H200 / "serving_queue_wait.pt.trace.json.gz"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jf = next(x for x in doc["findings"] if x["cause"] == "idle_host")
    assert jf["evidence"]["facts"]["batching_command"] == cmd


@pytest.mark.skipif(not (SHARED / "tracelens__b200_eager_llm_prefill_rank0.json.gz").exists(), reason="shared inference traces not present (/work/shared/traces/inference)")
def test_vllm_trace_one_engine_step_says_what_is_missing() -> None:
    """vLLM v1, one prefill: the engine step (execute_model) is found, but one batch gives no rate."""
    from whyidle.sources import load

    loop = serving_loop(load(SHARED / "tracelens__b200_eager_llm_prefill_rank0.json.gz"), Config().attribution)
    assert loop.batch_range == "execute_model" and loop.batches == 1 and loop.requests is None
    assert "capture longer" in loop.missing[0] and "request log" in loop.missing[0]
    assert "profile_latency" in loop.missing[1]


def test_batching_curve_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.cli import main

    assert main(["batching", "--curve", "1:2:2.2,8:3", "--rate", "100", "--slo-ms", "20", "--json", "--requests-per-run", "2000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["settings"]["triton"].startswith("max_batch_size: 8")
    for bad in ("1:x", "1:3,1:4", "0:3"):
        assert main(["batching", "--curve", bad, "--rate", "100", "--slo-ms", "20"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--curve" in err
    assert main(["batching", "--curve", "1:2", "--latency", "x.csv", "--rate", "100", "--slo-ms", "20"]) == 2


def test_an_engine_step_is_the_batch_and_its_token_shapes_are_not_requests() -> None:
    t = _loop([(0, 1000, 888), (5000, 6000, 512), (10000, 11000, 64)], name="vllm/v1/worker/gpu_model_runner.py(2907): execute_model")
    t.host("serve_batch", 20000, 21000, Kind.ANNOTATION)  # an engine step wins over a named range
    loop = serving_loop(t.build(), Config().attribution)
    assert loop.batch_range == "execute_model" and loop.batches == 3
    assert loop.requests is None and "record_shapes=True" in loop.missing[0]
