"""The command line: outputs, exit codes, gates and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from whyidle.cli import main
from whyidle.lab.synthetic import training_trace, write_trace

REQUIRED = ["schema_version", "window", "utilization", "steps", "idle_ns", "findings", "quality"]


@pytest.fixture
def starved(tmp_path: Path) -> Path:
    return write_trace(training_trace("starvation"), tmp_path / "starved.pt.trace.json.gz")


@pytest.fixture
def healthy(tmp_path: Path) -> Path:
    return write_trace(training_trace("none"), tmp_path / "healthy.pt.trace.json.gz")


def test_json_report_has_the_documented_fields(starved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(starved), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in REQUIRED:
        assert key in d
    assert d["schema_version"] == "1.1"
    assert {"start_ns", "end_ns"} <= d["window"].keys()
    assert {"busy_fraction", "kernel_busy_fraction"} <= d["utilization"].keys()
    f = d["findings"][0]
    assert {"group", "cause", "idle_ns", "share_of_idle", "evidence", "fix"} <= f.keys()
    assert f["group"] == "starvation"
    assert [x["idle_ns"] for x in d["findings"]] == sorted((x["idle_ns"] for x in d["findings"]), reverse=True)


def test_terminal_report_fits_80_columns(starved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(starved)]) == 0
    out = capsys.readouterr().out
    assert "GPU busy" in out and "starvation" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_output_file_and_format_inference(starved: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["diagnose", str(starved), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["findings"]
    assert main(["diagnose", str(starved), "-o", str(tmp_path / "r.weird")]) == 2


def test_output_file_honours_the_umask(starved: Path, tmp_path: Path) -> None:
    import os

    out = tmp_path / "shared.json"
    old = os.umask(0o022)
    try:
        assert main(["diagnose", str(starved), "-o", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644


def test_gates(starved: Path, healthy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(starved), "--fail-on", "starvation"]) == 1
    assert "gate failed" in capsys.readouterr().err
    assert main(["diagnose", str(healthy), "--fail-on", "starvation,synchronization"]) == 0
    assert main(["diagnose", str(starved), "--min-busy", "0.95"]) == 1
    assert main(["diagnose", str(healthy), "--min-busy", "0.95"]) == 0
    assert main(["diagnose", str(healthy), "--fail-on", "bogus"]) == 2
    assert main(["diagnose", str(healthy), "--min-busy", "7"]) == 2


def test_bad_input_is_one_line_exit_2_and_no_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    out = tmp_path / "report.json"
    assert main(["diagnose", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_usage_errors_exit_2(starved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(starved), "--steps", "x-y"]) == 2
    assert main(["diagnose", str(starved), "--steps", "90-95"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["diagnose"])
    assert e.value.code == 2


def test_console_script_in_a_fresh_process(starved: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "whyidle.cli", "diagnose", str(starved), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["cause"] == "input_pipeline"


def test_a_reader_that_goes_away_is_not_an_error_message(starved: Path) -> None:
    # `whyidle diagnose trace | head`: the pipe closes before whyidle writes. No traceback, no
    # "could not be analysed"; the status says what happened (128 + SIGPIPE, as a shell does).
    proc = subprocess.Popen([sys.executable, "-m", "whyidle.cli", "diagnose", str(starved)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""
