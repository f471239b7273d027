"""Multi-rank analysis: the real 2-rank job end to end, and rank sets built by replaying a real
rank with injected delays (the right straggler AND the right cause must be named)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from whyidle.ranks.analysis import COMPUTE_CAUSE, SHAPES_CAUSE, RankProfile, StepProfile, cross_rank
from whyidle.cli import main
from whyidle.config import Config
from whyidle.ranks.run import RankResult, assign_ranks, diagnose_ranks, rank_from_name
from whyidle.ranks.render_json import render_multi_rank_json

TRACES = Path(__file__).parents[1].parent / "shared" / "traces"
HTA = TRACES / "hta"
RANK0 = HTA / "trace_filter__sampled_rank-0.json.gz"
RANK1 = HTA / "trace_filter__sampled_rank-1.json.gz"
needs_traces = pytest.mark.skipif(not RANK1.exists(), reason=f"real traces not found in {HTA}")

DELAY_US = 50_000  # 50 ms injected per step


# -- replay: a real rank's events with injected delays ---------------------------------------


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])


def _is_device(e: dict[str, Any]) -> bool:
    return e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def _shift_after(events: list[dict[str, Any]], t: float, d: int, keep: dict[str, Any] | None = None) -> None:
    """Everything that starts at/after ``t`` moves ``d`` later; host ranges around ``t`` stretch."""
    for e in events:
        if e.get("ph") != "X" or e is keep:
            continue
        if e["ts"] >= t:
            e["ts"] += d
        elif e["ts"] + e.get("dur", 0) > t and not _is_device(e):
            e["dur"] += d


def _first_collective_after(events: list[dict[str, Any]], t: float) -> dict[str, Any]:
    return min((e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower() and e["ts"] > t), key=lambda e: e["ts"])


def replay(base: dict[str, Any], world: int, flaws: dict[int, str], delay_us: int = DELAY_US) -> list[dict[str, Any]]:
    """``world`` copies of ``base``; rank r gets flaw ``flaws[r]`` in every step, the others wait.

    Flaws: "input" (a slow DataLoader call before the step's first collective), "sync" (a
    blocking cudaStreamSynchronize there), "shapes" (a 1.5x larger batch: 1.5x leading input
    dimensions and extra compute on the device). A late rank reaches the step's first collective
    ``delay_us`` later; every other rank's copy of that collective lasts ``delay_us`` longer
    (it waits), so collectives still end together, as they do on a real job.
    """
    docs = []
    for r in range(world):
        d = copy.deepcopy(base)
        d["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": world}
        docs.append(d)
    main_tid = _steps(base["traceEvents"])[0]["tid"]
    for k in range(len(_steps(base["traceEvents"]))):
        for r, doc in enumerate(docs):
            ev = doc["traceEvents"]
            step = _steps(ev)[k]
            t = step["ts"] + 20
            coll = _first_collective_after(ev, t)
            flaw = flaws.get(r)
            if flaw is None:  # wait at the collective
                _shift_after(ev, coll["ts"] + 1, delay_us, keep=coll)
                coll["dur"] += delay_us
                continue
            _shift_after(ev, t, delay_us)
            pid = step["pid"]
            if flaw == "input":
                ev.append({"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": pid, "tid": main_tid, "ts": t, "dur": delay_us, "args": {}})
            elif flaw == "sync":
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid, "tid": main_tid, "ts": t, "dur": delay_us, "args": {"correlation": 0}})
            elif flaw == "shapes":
                corr = 90_000_000 + k
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": main_tid, "ts": t, "dur": 5, "args": {"correlation": corr}})
                ev.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "pid": coll["pid"], "tid": 7, "ts": t + 6, "dur": delay_us - 10, "args": {"device": coll["args"]["device"], "stream": 7, "correlation": corr}})
                for e in ev:
                    dims = (e.get("args") or {}).get("Input Dims")
                    if e.get("cat") == "cpu_op" and step["ts"] <= e["ts"] < step["ts"] + step["dur"] and dims and isinstance(dims[0], list) and dims[0] and isinstance(dims[0][0], int):
                        dims[0][0] = dims[0][0] * 3 // 2
            else:  # pragma: no cover - test helper misuse
                raise ValueError(flaw)
    return docs


def write_run(tmp: Path, docs: list[dict[str, Any]], names: list[str] | None = None) -> Path:
    run = tmp / "run"
    run.mkdir()
    for r, d in enumerate(docs):
        name = names[r] if names else f"trace_rank-{r}.json.gz"
        (run / name).write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1, mtime=0))
    return run


# -- the real 2-rank job ---------------------------------------------------------------------


@needs_traces
def test_real_two_rank_job_end_to_end(tmp_path: Path) -> None:
    run = tmp_path / "job"
    run.mkdir()
    for p in (RANK0, RANK1):
        (run / p.name).symlink_to(p)
    rep = diagnose_ranks(run, jobs=2)
    assert rep.rank_basis == "distributedInfo"
    assert rep.world_size == 128
    assert [e.rank for e in rep.ranks] == [0, 1]
    assert all(e.report is not None and not e.error for e in rep.ranks)
    assert any("2 of 128 ranks present" in n for n in rep.notes)
    cr = rep.cross_rank
    assert cr.ranks == (0, 1)
    # Both ranks run 10 NCCL SendRecv kernels in steps 551-552; all of them match.
    assert len(cr.collectives) == 10 and cr.unmatched_collectives == 0
    # waiting + transfer = time in collectives, per rank and overall
    for c in cr.comm:
        assert c.waiting_ns + c.transfer_ns == c.collective_ns
        assert c.overlap_fraction is not None and 0.0 <= c.overlap_fraction <= 1.0
    assert cr.waiting_ns + cr.transfer_ns == cr.collective_ns
    # Each collective's transfer is its shortest duration; the last rank is the one with it.
    for m in cr.collectives:
        assert m.transfer_ns == min(m.dur_ns)
        assert m.dur_ns[cr.ranks.index(m.last_rank)] == m.transfer_ns
    # Rank 1 computes ~30% longer per step than rank 0 in this trace (135.5 vs 106.3 ms in 551).
    assert [s.slowest_rank for s in cr.steps] == [1, 1]
    assert cr.mean_compute_spread is not None and cr.mean_compute_spread > 0.2
    assert {s.rank for s in cr.stragglers} <= {0, 1}
    # JSON: a `ranks` list with one entry per rank holding `rank` and its report.
    doc = json.loads(render_multi_rank_json(rep))
    assert doc["kind"] == "multi_rank"
    assert [(e["rank"], e["report"]["source"]["rank"]) for e in doc["ranks"]] == [(0, 0), (1, 1)]
    assert len(doc["cross_rank"]["collectives"]) == 10


@needs_traces
def test_cli_run_dir_json_and_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "job"
    run.mkdir()
    for p in (RANK0, RANK1):
        (run / p.name).symlink_to(p)
    assert main(["diagnose", str(run), "--json", "--jobs", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["rank"] for e in doc["ranks"]] == [0, 1]
    assert main(["diagnose", str(run), "--jobs", "1", "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "ranks from distributedInfo" in out and "Collectives:" in out
    assert main(["diagnose", str(run), "--jobs", "0"]) == 2
    capsys.readouterr()
    # CI gates apply to every rank
    assert main(["diagnose", str(run), "--jobs", "1", "--json", "--min-busy", "0.9"]) == 1
    err = capsys.readouterr().err
    assert "rank 0: device busy" in err and "rank 1: device busy" in err
    assert main(["diagnose", str(run), "-o", str(tmp_path / "r.svg")]) == 2
    assert "is reported as terminal, json, html, perfetto, not svg" in capsys.readouterr().err
    assert not (tmp_path / "r.svg").exists()


# -- built rank sets with known stragglers ---------------------------------------------------


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    if not RANK0.exists():
        pytest.skip(f"real traces not found in {HTA}")
    return _load(RANK0)


@pytest.mark.parametrize(
    ("flaw", "cause"),
    [("input", "starvation/input_pipeline"), ("sync", "synchronization/host_sync"), ("shapes", SHAPES_CAUSE)],
)
def test_injected_straggler_named_with_its_cause(base: dict[str, Any], tmp_path: Path, flaw: str, cause: str) -> None:
    world, slow = 4, 2
    run = write_run(tmp_path, replay(base, world, {slow: flaw}))
    rep = diagnose_ranks(run, jobs=1)
    cr = rep.cross_rank
    assert cr.ranks == (0, 1, 2, 3)
    top = cr.stragglers[0]
    assert top.rank == slow
    assert top.steps == (551, 552)
    # Last at the first collective of each step, by exactly the injected delay.
    assert top.collectives_last == 2
    assert top.lateness_ns == 2 * DELAY_US * 1000
    assert top.max_lateness_ns == DELAY_US * 1000
    assert len(cr.stragglers) == 1  # nobody else is late
    assert top.cause is not None and top.cause.key == cause
    if flaw != "shapes":
        # Its own idle in that cause exceeds the other ranks' by most of the delay, per step.
        assert 0.8 * DELAY_US * 1000 <= top.cause.excess_ns_per_step <= 1.05 * DELAY_US * 1000
    else:
        facts = dict(top.cause.facts)
        assert facts["ratio"] == pytest.approx(1.5, rel=0.02)
        assert any(c.key == COMPUTE_CAUSE for c in top.other_causes)
    # The waiting ranks spent the delay waiting in the collective; the straggler did not.
    waits = {c.rank: c.waiting_ns for c in cr.comm}
    assert waits[slow] < min(w for r, w in waits.items() if r != slow)
    assert all(waits[r] >= 2 * DELAY_US * 1000 for r in waits if r != slow)


def test_ranks_from_file_names_and_missing_rank(base: dict[str, Any], tmp_path: Path) -> None:
    docs = replay(base, 3, {1: "input"})
    for d in docs:
        del d["distributedInfo"]
    run = write_run(tmp_path, docs, names=["w_rank0.json.gz", "w_rank1.json.gz", "w_rank3.json.gz"])
    (run / "w_rank4.json").write_text("{not json")
    rep = diagnose_ranks(run, jobs=1)
    assert rep.rank_basis == "file name"
    assert [e.rank for e in rep.ranks] == [0, 1, 3, 4]
    assert rep.ranks[-1].report is None and "not valid JSON" in rep.ranks[-1].error
    assert any("missing: 2" in n for n in rep.notes)
    assert any("w_rank4.json: could not be read" in n for n in rep.notes)
    assert rep.cross_rank.stragglers[0].rank == 1


@needs_traces
def test_rank_without_gpu_activity_is_reported_not_fatal(tmp_path: Path) -> None:
    run = tmp_path / "mixed"
    run.mkdir()
    (run / "a_rank-0.json.gz").symlink_to(RANK0)
    (run / "a_rank-1.json.gz").symlink_to(RANK1)
    (run / "a_rank-2.json.gz").symlink_to(HTA / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    (run / "a_rank-3.json.gz").symlink_to(HTA / "rank_non_gpu__rank_non_gpu.json.gz")
    rep = diagnose_ranks(run, jobs=1)
    # distributedInfo repeats or lacks ranks across these files: the names decide, and it says so
    assert rep.rank_basis == "file name"
    assert [(e.rank, e.report is not None and e.report.no_device_activity) for e in rep.ranks] == [(0, False), (1, False), (2, True), (3, True)]
    assert "rank 2 (a_rank-2.json.gz) has no GPU activity" in rep.notes
    assert rep.cross_rank.ranks == (0, 1)
    assert rep.cross_rank.notes == ("ranks without GPU activity, left out of the comparison: 2, 3",)
    assert len(rep.cross_rank.collectives) == 10


def test_assign_ranks_rules() -> None:
    def res(path: str, rank: int | None, error: str = "") -> RankResult:
        return RankResult(path, rank, None, None, None, error)

    assert rank_from_name("x_rank-12.pt.trace.json.gz") == 12
    assert rank_from_name("trace.json") is None
    ranks, basis, _ = assign_ranks([res("a_rank1.json", 5), res("b_rank0.json", 4)])
    assert (ranks, basis) == ([5, 4], "distributedInfo")
    ranks, basis, notes = assign_ranks([res("a_rank1.json", 0), res("b_rank0.json", 0)])
    assert (ranks, basis) == ([1, 0], "file name") and notes
    ranks, basis, _ = assign_ranks([res("a.json", None), res("b.json", None)])
    assert (ranks, basis) == ([0, 1], "file order")


def _profile(rank: int, durs: list[int], idle: tuple[int, ...], compute: int, active: bool = True) -> RankProfile:
    from whyidle.analyses import causes as C
    from whyidle.ranks.analysis import CollectiveCall

    steps = (StepProfile(1, 10_000_000, compute, 0, sum(idle), idle + (0,) * (len(C.CAUSES) - len(idle)), 64),)
    calls = tuple(CollectiveCall(1, "ncclAllReduce", 1000 * i, d) for i, d in enumerate(durs))
    return RankProfile(rank, calls, steps, sum(durs), sum(durs) // 2, compute, active)


def test_cross_rank_exact_on_built_profiles() -> None:
    # Three ranks, two all-reduces; rank 2 joins the first 3 ms late (it has 3 ms more input idle).
    p0 = _profile(0, [4_000_000, 500_000], (0,), 5_000_000)
    p1 = _profile(1, [3_900_000, 520_000], (0,), 5_000_000)
    p2 = _profile(2, [1_000_000, 510_000], (3_000_000,), 5_000_000)
    idle = _profile(3, [], (), 0, active=False)
    cr = cross_rank([p2, idle, p0, p1], Config().attribution)
    assert cr.ranks == (0, 1, 2)
    assert any("without GPU activity" in n and "3" in n for n in cr.notes)
    first, second = cr.collectives
    assert (first.transfer_ns, first.last_rank, first.lateness_ns) == (1_000_000, 2, 3_000_000)
    assert (second.transfer_ns, second.last_rank, second.lateness_ns) == (500_000, 0, 20_000)
    assert len(cr.stragglers) == 1  # 20 us is below the 100 us threshold
    s = cr.stragglers[0]
    assert (s.rank, s.steps, s.collectives_last, s.lateness_ns) == (2, (1,), 1, 3_000_000)
    assert s.cause is not None and s.cause.key == "starvation/input_pipeline" and s.cause.excess_ns_per_step == 3_000_000
    comm = {c.rank: c for c in cr.comm}
    assert comm[0].waiting_ns == 3_000_000 + 0 and comm[0].transfer_ns == 1_500_000
    assert comm[1].waiting_ns == 2_900_000 + 20_000
    assert comm[2].waiting_ns == 10_000
    assert comm[0].overlap_fraction == pytest.approx(0.5, abs=1e-6)


# -- scaling efficiency ----------------------------------------------------------------------


def test_scaling_points(capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.ranks.scaling import efficiencies, parse_point

    rows = efficiencies([parse_point("4:2400"), parse_point("1:1000"), parse_point("8:4000")])
    assert [(p.gpus, per, round(eff, 6)) for p, per, eff in rows] == [(1, 1000.0, 1.0), (4, 600.0, 0.6), (8, 500.0, 0.5)]
    assert main(["scaling", "1:1000", "4:2400"]) == 0
    assert "600 per GPU = 60% efficiency per GPU; 40% lost" in capsys.readouterr().out
    assert main(["scaling", "4"]) == 2
    assert main(["scaling", "1:1000"]) == 2


def _report_doc(step_ms: float, compute_ms: float, comm_ms: float, idle: dict[str, float]) -> dict[str, Any]:
    ms = 1_000_000
    step = {
        "duration_ns": int(step_ms * ms),
        "compute_ns": int(compute_ms * ms),
        "communication_ns": int(comm_ms * ms),
        "memcpy_ns": 0,
        "memset_ns": 0,
        "idle_by_cause_ns": {k: int(v * ms) for k, v in idle.items()},
    }
    return {"steps": [step, step]}


def test_scaling_loss_breakdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from whyidle.ranks.scaling import loss_breakdown, step_composition

    before = _report_doc(100, 80, 5, {"starvation/input_pipeline": 15})
    one = _report_doc(125, 80, 20, {"starvation/input_pipeline": 25})
    after = {
        "kind": "multi_rank",
        "ranks": [{"rank": r, "report": one} for r in range(4)],
        "cross_rank": {"collective_ns": 100, "waiting_ns": 75, "transfer_ns": 25},
    }
    b, gb = step_composition(before)
    a, ga = step_composition(after)
    assert (gb, ga) == (1, 4)
    assert a["communication: waiting for the slowest rank"] == pytest.approx(15e6)
    parts = {k: (d, share) for k, d, share in loss_breakdown(b, a)}
    # 25 ms more per step: 15 ms waiting, 10 ms input pipeline; transfer 5 -> 5 unchanged
    assert parts["communication: waiting for the slowest rank"] == (pytest.approx(15e6), pytest.approx(0.6))
    assert parts["idle: starvation/input_pipeline"] == (pytest.approx(10e6), pytest.approx(0.4))
    assert "compute" not in parts and "communication: transfer" not in parts
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))
    assert main(["scaling", "--before", str(tmp_path / "b.json"), "--after", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "80% efficiency per GPU" in out and "waiting for the slowest rank" in out
