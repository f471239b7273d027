"""The flaw lab: the self-check against known diagnoses, real runs on CPU, the CLI, GPU-only parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whyidle.cli import main
from whyidle.pipeline import diagnose
from whyidle.errors import UsageError
from whyidle.lab.check import CPU_FLAWS, EXPECTED, GPU_ONLY, check_report
from whyidle.lab.synthetic import training_trace, write_trace

torch = pytest.importorskip("torch")

from whyidle.lab.job import FLAWS, apply_fix, run_job, spec_for  # noqa: E402
from whyidle.lab.run import run_lab  # noqa: E402

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: this flaw shows only on a device with its own queue (see whyidle.lab.check.GPU_ONLY)")


def _synthetic(tmp_path: Path, flaw: str) -> object:
    return diagnose(write_trace(training_trace(flaw), tmp_path / f"{flaw}.pt.trace.json.gz"))


@pytest.mark.parametrize(("synthetic", "lab_flaw"), [("none", "none"), ("starvation", "starvation"), ("h2d", "h2d"), ("sync", "sync"), ("launch", "launch")])
def test_check_accepts_the_matching_trace_diagnosis(tmp_path: Path, synthetic: str, lab_flaw: str) -> None:
    """The self-check logic against traces whose cause is known exactly (synthetic model)."""
    r = _synthetic(tmp_path, synthetic)
    res = check_report(lab_flaw, r, "trace")  # type: ignore[arg-type]
    assert res.passed, res.message
    if lab_flaw == "sync":  # captured with stacks: the finding names the line that syncs
        assert r.findings[0].evidence.python_lines[0][0] == "train.py:47 in train"  # type: ignore[attr-defined]


def test_check_rejects_a_wrong_or_missing_diagnosis(tmp_path: Path) -> None:
    starved = _synthetic(tmp_path, "starvation")
    healthy = _synthetic(tmp_path, "none")
    bad = check_report("none", starved, "trace")  # type: ignore[arg-type]
    assert not bad.passed and "expected no problem finding, found starvation/input_pipeline" in bad.message
    bad2 = check_report("sync", healthy, "trace")  # type: ignore[arg-type]
    assert not bad2.passed and "found no problem finding" in bad2.message
    bad3 = check_report("h2d", starved, "trace")  # type: ignore[arg-type]
    assert not bad3.passed and "starvation/h2d_copy" in bad3.message
    with pytest.raises(ValueError):
        check_report("typo", healthy, "trace")  # type: ignore[arg-type]


def test_every_flaw_is_either_cpu_visible_or_says_why_not() -> None:
    assert set(FLAWS) == set(EXPECTED) == set(CPU_FLAWS) | set(GPU_ONLY)
    assert not set(CPU_FLAWS) & set(GPU_ONLY)


@pytest.mark.parametrize("flaw", CPU_FLAWS)
def test_lab_self_check_passes_on_cpu(flaw: str) -> None:
    res = run_lab(flaw, "cpu", steps=6)
    assert res.check.passed, res.check.message
    assert res.check.basis == "tracker"
    assert len(res.run.tracker_stats.steps) == 6 and len(res.run.losses) == 6
    d = res.report.to_dict()
    assert d["extra"]["lab"]["flaw"] == flaw and d["extra"]["lab"]["check"]["passed"]
    if flaw == "starvation":
        f = res.report.findings[0]
        assert f.id == "input_pipeline.single_process"
        assert f.evidence.share_of_step is not None and f.evidence.share_of_step > 0.2


@pytest.mark.parametrize("flaw", sorted(GPU_ONLY))
def test_gpu_only_flaws_are_refused_on_cpu_with_the_reason(flaw: str) -> None:
    with pytest.raises(UsageError, match=f"flaw '{flaw}' needs CUDA"):
        run_lab(flaw, "cpu")


@NEEDS_CUDA
@pytest.mark.parametrize("flaw", FLAWS)
def test_lab_self_check_passes_on_cuda(flaw: str, tmp_path: Path) -> None:  # pragma: no cover - GPU only
    res = run_lab(flaw, "cuda", trace_dir=tmp_path)
    assert res.check.basis == "trace" and res.check.passed, res.check.message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: sync debug mode checks CUDA synchronisations only")
def test_tracker_adds_no_host_sync_on_cuda() -> None:  # pragma: no cover - GPU only
    from whyidle.lab.record import tracker_adds_no_sync

    r = tracker_adds_no_sync(torch)
    assert r.passed, r.message


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_record_all_needs_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--record-all", str(tmp_path / "rec")]) == 2
    assert "--record-all needs CUDA" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()


def test_apply_fix_pulls_the_named_lever() -> None:
    spec = spec_for("starvation", "cpu")
    fixed, what = apply_fix(spec, "input_pipeline.single_process")
    assert spec.num_workers == 0 and fixed.num_workers >= 2 and fixed.prefetch_factor == 4
    assert "num_workers=" in what
    assert apply_fix(spec_for("sync", "cuda"), "host_sync")[0].cpu_metrics is False
    h2d, _ = apply_fix(spec_for("h2d", "cuda"), "h2d_copy")
    assert h2d.pin_memory and h2d.non_blocking
    with pytest.raises(ValueError, match="no automatic fix"):
        apply_fix(spec, "fp32_math")
    with pytest.raises(ValueError, match="unknown flaw"):
        spec_for("slow", "cpu")


def test_fixed_pipeline_keeps_the_data_and_the_losses() -> None:
    """Batches are seeded by index: workers change the speed, never the data."""
    from dataclasses import replace

    spec = replace(spec_for("starvation", "cpu", steps=4), io_latency_s=0.0, width=64)
    fixed, _ = apply_fix(spec, "input_pipeline.single_process")
    assert run_job(spec).losses == run_job(fixed).losses


def test_lab_cli_json_and_exit_codes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["lab", "--flaw", "none", "--device", "cpu", "--steps", "4", "--json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["extra"]["lab"]["check"]["passed"] is True and d["source"]["format"] == "whyidle.track"
    assert "PASS flaw=none device=cpu" in out.err
    assert main(["lab", "--flaw", "sync", "--device", "cpu"]) == 2
    assert "needs CUDA" in capsys.readouterr().err
    assert main(["lab", "--steps", "1"]) == 2

    # a self-check that fails exits 1
    import whyidle.lab.run as run_mod

    real = run_mod.run_lab

    def wrong(flaw: str, device: str = "auto", **kw: object) -> object:
        return real("none", device, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_mod, "run_lab", lambda flaw, dev, **kw: _relabel(wrong(flaw, dev, **kw), flaw))
    assert main(["lab", "--flaw", "starvation", "--device", "cpu", "--steps", "4"]) == 1
    assert "FAIL flaw=starvation" in capsys.readouterr().err


def _relabel(res: object, flaw: str) -> object:
    from dataclasses import replace

    rep = res.tracker_report  # type: ignore[attr-defined]
    return replace(res, check=check_report(flaw, rep, "tracker"))  # type: ignore[type-var]


def test_lab_trace_dir_on_cpu_saves_a_real_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--flaw", "none", "--device", "cpu", "--steps", "3", "--trace-dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["extra"]["lab"]["check"]["basis"] == "tracker"
    trace = Path(d["extra"]["lab"]["trace"])
    assert trace.parent == tmp_path and trace.read_bytes()[:2] == b"\x1f\x8b"
    assert "the trace has no device events" in out.err
    r = diagnose(trace)
    assert r.no_device_activity and r.window.steps  # a real CPU recording: steps, and no GPU events invented


LAB_DATA = Path(__file__).parent / "data" / "lab"


@pytest.mark.parametrize("flaw", FLAWS)
def test_recorded_gpu_trace_is_diagnosed_as_its_flaw(flaw: str) -> None:
    """The real-hardware fixtures written by scripts/record_lab_traces.sh on a GPU."""
    trace = LAB_DATA / f"lab_{flaw}.pt.trace.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace.relative_to(Path(__file__).parent)} not recorded yet: run scripts/record_lab_traces.sh on a CUDA machine")
    from whyidle.lab.record import MAX_TRACE_BYTES

    assert trace.stat().st_size <= MAX_TRACE_BYTES
    res = check_report(flaw, diagnose(trace), "trace")
    assert res.passed, res.message
