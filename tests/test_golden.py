"""Golden reports: the terminal and JSON reports of a few real traces, byte for byte.

Any change to what whyidle says about these traces shows up here as a diff against the files in
``tests/golden/``. When a change is intended, regenerate them and review the diff in the commit::

    python3 -m pytest tests/test_golden.py --update-golden

The traces are the committed H200 recordings (always present) and real traces from
``../shared/traces`` (skipped, with the reason, when that folder is absent). Paths in the reports
are relative to the trace's folder, so the files do not depend on where the checkout lives.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from conftest import SHARED_TRACES

from whyidle.render import render

GOLDEN = Path(__file__).parent / "golden"
DATA = Path(__file__).parent / "data"

# name -> (base folder, path under it). Chosen to cover each input kind and workload the
# pipeline distinguishes: training (Kineto, with and without workers), serving, offline
# inference, per-kernel syncs, the exposed-copy finding, Nsight Systems, counter logs, an
# AMD trace, and an 8-rank job.
CASES: dict[str, tuple[Path, str]] = {
    "h200_serving_queue_wait": (DATA / "h200", "serving_queue_wait.pt.trace.json.gz"),
    "h200_offline_inference_numpy": (DATA / "h200", "offline_inference_numpy_preprocessing.pt.trace.json.gz"),
    "h200_sync_after_each_kernel": (DATA / "h200", "sync_after_each_kernel.pt.trace.json.gz"),
    "h200_lab_h2d": (DATA / "h200", "lab_h2d_cuda.pt.trace.json.gz"),
    "h200_watch_counters": (DATA / "h200", "watch_bursty_matmul.counters.csv"),
    "cpu_lab_starvation": (DATA / "lab", "lab_starvation.pt.trace.json.gz"),
    "resnet50_num_workers_0": (SHARED_TRACES, "kineto/resnet50_num_workers_0.pt.trace.json.gz"),
    "b200_llm_prefill": (SHARED_TRACES, "inference/tracelens__b200_eager_llm_prefill_rank0.json.gz"),
    "hta_negative_queue_rank0": (SHARED_TRACES, "hta/negative_queue_length_values_check__rank0.json.gz"),
    "amd_mi250": (SHARED_TRACES, "hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    "nsys_h200_cross_entropy": (SHARED_TRACES, "nsys/nvfuser__h200_pytest_cross_entropy_nsys2025.1.1.sqlite"),
    "nsys_rtx4060_unet": (SHARED_TRACES, "nsys/weatherbench2__rtx4060_climate_train_unet_truncated_nsys2025.5.1.sqlite"),
    "dcgmi_gh100": (SHARED_TRACES, "counters/ai-inference-energy__GH100_stable-diffusion_1785MHz_run0.dcgmi.txt"),
    "multirank_dlrm": (SHARED_TRACES, "multirank/param__v100x8_dlrm_step12"),
}


def _reports(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    base, rel = CASES[name]
    if not (base / rel).exists():
        pytest.skip(f"{rel} not available: ../shared/traces is absent on this machine")
    monkeypatch.chdir(base)
    if (base / rel).is_dir():
        from whyidle.ranks.run import diagnose_ranks

        report: object = diagnose_ranks(rel, jobs=1)
    else:
        from whyidle import diagnose

        report = diagnose(rel)
    out = {}
    for fmt, suffix in (("terminal", "txt"), ("json", "json")):
        text = render(report, fmt, width=100)
        assert isinstance(text, str)
        out[suffix] = text if text.endswith("\n") else text + "\n"
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_report(name: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    update = request.config.getoption("--update-golden")
    for suffix, text in _reports(name, monkeypatch).items():
        path = GOLDEN / f"{name}.{suffix}"
        if update or not path.exists():
            if not update:
                pytest.fail(f"no golden file {path.name}: run pytest tests/test_golden.py --update-golden and review it")
            path.write_text(text, encoding="utf-8")
            continue
        want = path.read_text(encoding="utf-8")
        if text != want:
            diff = "".join(list(difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"golden/{path.name}", "now"))[:80])
            pytest.fail(f"{path.name} changed (if intended: pytest tests/test_golden.py --update-golden, and review the diff)\n{diff}")


def test_every_golden_file_has_a_case() -> None:
    """A renamed or removed case must not leave a stale golden file behind."""
    names = {p.name.rsplit(".", 1)[0] for p in GOLDEN.glob("*.*")}
    assert names <= set(CASES), sorted(names - set(CASES))


@pytest.mark.parametrize("name", sorted(n for n, (_, rel) in CASES.items() if Path(rel).suffix))  # files, not rank folders
def test_golden_json_with_a_helper_process(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's default, jobs=2 (a forked child decodes part of the trace and replays the
    predictions beside the analyses), gives the golden JSON byte for byte."""
    from whyidle import diagnose
    from whyidle.parallel import can_fork

    if not can_fork():
        pytest.skip("a forked helper needs Linux and two usable cores")
    base, rel = CASES[name]
    if not (base / rel).exists():
        pytest.skip(f"{rel} not available: ../shared/traces is absent on this machine")
    monkeypatch.chdir(base)
    text = render(diagnose(rel, jobs=2), "json", width=100)
    assert isinstance(text, str)
    assert (text if text.endswith("\n") else text + "\n") == (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
