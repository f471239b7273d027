"""What a new user meets in their first hour: printing a report, saving it, help, messages, the
README's own snippets (run here, so they cannot drift), and the install metadata."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import whyidle
from whyidle.cli import COMMANDS, build_parser, main
from whyidle.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "tests" / "data" / "lab"
STARVED = LAB / "lab_starvation.pt.trace.json.gz"  # recorded on an H200 (tests/data/lab/RECORDED.md)


@pytest.fixture(scope="module")
def report() -> whyidle.Report:
    return whyidle.diagnose(STARVED)


# -- a report prints as the terminal report, and saves itself ------------------------------------


def test_print_report_is_the_terminal_report(report: whyidle.Report) -> None:
    from whyidle.render.terminal import render_terminal

    text = str(report)
    assert text == render_terminal(report, width=80)
    assert text.startswith("whyidle: why is this GPU idle?\nTrace          lab_starvation.pt.trace.json.gz (kineto, NVIDIA H200)")
    assert "Report(" not in text and "SourceInfo(" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "starvation / input_pipeline" in text


def test_save_picks_the_format_from_the_suffix(report: whyidle.Report, tmp_path: Path) -> None:
    assert report.save(tmp_path / "r.json") == "json"
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(report.to_dict()))
    assert report.save(tmp_path / "r.txt") == "terminal"
    assert (tmp_path / "r.txt").read_text() == str(report)
    assert report.save(tmp_path / "r.html") == "html"
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "lab_starvation.pt.trace.json.gz" in html
    assert report.save(tmp_path / "r.out", format="json") == "json"
    assert isinstance(report.render("json"), str) and report.render("json") == (tmp_path / "r.out").read_text()


def test_save_refuses_an_unknown_suffix_without_writing(report: whyidle.Report, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot tell the output format from"):
        report.save(tmp_path / "r.docx")
    with pytest.raises(UsageError, match="the folder .* does not exist"):
        report.save(tmp_path / "missing" / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_a_tracker_report_on_cpu_does_not_ask_about_a_gpu() -> None:
    tracker = whyidle.track([[1.0] * 4 for _ in range(6)], device="cpu")
    for _ in tracker:
        pass
    text = str(tracker.report())
    assert text.startswith("whyidle: why is this loop waiting? (a CPU run: no GPU here)")
    assert "GPU idle" not in text


# -- the command line -------------------------------------------------------------------------


def test_python_dash_m_whyidle_runs_the_command_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "whyidle", "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"whyidle {whyidle.__version__}"


def test_every_help_text_has_examples_of_its_own_command() -> None:
    parser = build_parser()
    assert "examples:\n  whyidle demo" in parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in COMMANDS:
        text = sub.choices[name].format_help()  # type: ignore[attr-defined]
        assert "examples:\n" in text, f"add EXAMPLES (a few command lines) to whyidle/commands/{name}.py"
        assert f"whyidle {name}" in text.split("examples:\n", 1)[1], name


def test_diagnose_help_names_every_input_format() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = " ".join(sub.choices["diagnose"].format_help().split())  # type: ignore[attr-defined]
    for fmt in (".json.gz", ".nsys-rep", ".sqlite", "nvidia-smi dmon", "dcgmi dmon", "whyidle watch", ".parquet", "one per rank"):
        assert fmt in text, fmt


def test_output_file_is_announced_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert main(["diagnose", str(STARVED), "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out == ""
    size_kb = out.stat().st_size / 1024
    assert cap.err == f"whyidle: wrote the JSON report to {out} ({size_kb:,.0f} KB)\n"
    html = tmp_path / "report.html"
    assert main(["diagnose", str(STARVED), "-o", str(html)]) == 0
    assert f"wrote the HTML report (open it in a browser) to {html}" in capsys.readouterr().err


def test_compare_output_file_is_announced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "diff.json"
    assert main(["compare", str(STARVED), str(LAB / "lab_none.pt.trace.json.gz"), "-o", str(out)]) == 0
    assert f"whyidle: wrote the comparison as JSON to {out}" in capsys.readouterr().err
    assert "verdict" in json.loads(out.read_text())


def test_scaling_questions_superlinear_efficiency(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scaling", "1:1000", "2:2600"]) == 0
    out = capsys.readouterr().out
    assert "130% efficiency per GPU; 30% more than linear" in out
    assert "Check the inputs: 130% efficiency per GPU" in out
    assert main(["scaling", "1:1000", "1:1260"]) == 0
    out = capsys.readouterr().out
    assert "1 GPU(s) again: 1260 samples/s, +26% on the baseline" in out and "efficiency" not in out.split("\n", 1)[1]
    assert main(["scaling", "1:1000", "4:2400"]) == 0
    out = capsys.readouterr().out
    assert "60% efficiency per GPU; 40% lost" in out and "Check the inputs" not in out


def test_demo_says_when_the_measured_gain_beats_the_prediction() -> None:
    """One prediction, one measured ratio (issue 25, item 6): the note compares the two and says
    why the measurement beat the prediction when it did."""
    from whyidle.commands.demo import gain_note

    lines = gain_note(2.0, 2.5, 50e6, 30e6)
    assert len(lines) == 1 and lines[0].startswith("The measurement beats the prediction because the compute between batches also fell, from 50.0 to 30.0 ms")
    assert gain_note(2.0, 2.02, 50e6, 30e6) == []  # within 5 %: nothing to explain
    assert gain_note(2.0, 2.5, 50e6, 50e6) == []  # the compute did not fall: no such reason


# -- the README, run ------------------------------------------------------------------------


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_python_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
    assert blocks, "the README has no python snippet"
    (tmp_path / "trace.pt.trace.json.gz").symlink_to(STARVED)
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("whyidle: why is this GPU idle?")
    assert "\nGPU busy 25%\nstarvation input_pipeline " in out  # the run-2 recording (RECORDED.md)
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_readme_quick_start_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    section = _readme().split("## 60-second quick start", 1)[1].split("```python", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in section.splitlines() if line.strip().startswith("whyidle ")]
    assert len(commands) >= 4
    (tmp_path / "trace.pt.trace.json.gz").symlink_to(STARVED)
    # `whyidle run -- python ...`: `python` is this interpreter; train.py a stand-in; the bundled
    # examples as in the repository (they need torch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "train.py").write_text("print('training')\n")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    has_torch = __import__("importlib").util.find_spec("torch") is not None
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        if argv[1] == "run" and "examples/starved_training.py" in argv and not has_torch:
            continue
        rc = main(argv[1:])
        assert rc in (0, 1), argv  # 1: the CI gate line fails on this starved trace, as it should
    assert (tmp_path / "report.json").is_file()
    err = capsys.readouterr().err
    assert "gate failed: finding in group starvation" in err
    assert commands[0][:2] == ["whyidle", "run"], "the quick start leads with whyidle run"
    if has_torch:
        assert (tmp_path / "runs" / "b" / "report.json").is_file() and "faster" in err


def test_readme_sample_outputs_are_what_whyidle_prints(resnet0: Path, resnet4: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README shows the first lines of a diagnosis and of a comparison on the shared ResNet-50
    traces: they are whyidle's output today, line for line."""
    readme = _readme()
    block = readme.split("On the TensorBoard plugin's own sample trace", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    assert block.count("\n") >= 20
    assert main(["diagnose", str(resnet0), "--width", "80"]) == 0
    assert capsys.readouterr().out.startswith(block)
    shown = readme.split("\n    Verdict:", 1)[1].split("\n\n", 2)
    lines = ("Verdict:" + shown[0] + "\n\n" + shown[1]).splitlines()
    assert len(lines) >= 5
    assert main(["compare", str(resnet0), str(resnet4)]) == 0
    out = capsys.readouterr().out
    assert "\n".join(ln[4:] for ln in lines) in out


def _readme_command_lines() -> list[str]:
    """Every whyidle command line the README shows: in code blocks and inline."""
    text = _readme()
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("    ") and ln.strip().startswith("whyidle ")]
    lines += re.findall(r"`(whyidle [^`]+)`", text)
    lines += [part.strip() for ln in text.splitlines() for part in ln.split("&&")[1:] if part.strip().startswith("whyidle ")]
    return lines


def test_readme_command_lines_parse() -> None:
    """Each command line of the README names a command and options that exist (parsed, not run)."""
    import shlex

    lines = _readme_command_lines()
    assert len(lines) >= 25
    parser = build_parser()
    for line in lines:
        argv = shlex.split(line, comments=True)[1:]
        argv = [a.replace("CAUSE", "starvation") for a in argv]
        if len(argv) == 1:  # a command named in prose
            assert argv[0] in COMMANDS, line
            continue
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse's error exit
            raise AssertionError(f"README: {line!r} does not parse") from exc
        assert args.command, line


def test_readme_names_exist() -> None:
    """Every whyidle.NAME(...) called in the README and docs/capture.md is public API."""
    text = _readme() + (ROOT / "docs" / "capture.md").read_text()
    names = set(re.findall(r"\bwhyidle\.([A-Za-z_]\w*)\(", text))
    assert {"track", "diagnose", "schedule", "handler", "sync_finder", "LightningCallback", "HFCallback"} <= names
    for name in names:
        assert name in whyidle.__all__, name
        try:
            assert callable(getattr(whyidle, name)), name
        except whyidle.MissingExtraError:  # a trainer callback without its library
            assert name in ("LightningCallback", "HFCallback")


class _Tensor:
    """Stands in for a CPU tensor in the README loop, whose .cuda() needs a GPU."""

    def cuda(self, non_blocking: bool = False) -> "_Tensor":
        return self


def test_readme_training_loop_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = _readme().split("## In your training loop", 1)[1]
    code = textwrap.dedent(section.split("\n\n", 2)[1])
    assert code.startswith("tracker = whyidle.track(loader)") and "print(tracker.report())" in code
    seen = []
    env = {"whyidle": whyidle, "loader": [(_Tensor(), _Tensor()) for _ in range(6)], "train_step": lambda x, y: seen.append(x)}
    exec(compile(code, "README.md", "exec"), env)
    assert len(seen) == 6
    assert capsys.readouterr().out.startswith("whyidle: why is this loop waiting?")


def test_demo_hint_runs_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's 'In your own loop' hint defines everything it uses but the loader and the step."""
    from whyidle.commands.demo import OWN_LOOP

    seen = []
    env = {"whyidle": whyidle, "loader": [[1.0] * 4 for _ in range(5)], "train_step": seen.append}
    exec(compile(OWN_LOOP, "demo", "exec"), env)
    assert len(seen) == 5 and capsys.readouterr().out.startswith("whyidle: why is this loop waiting?")


def test_readme_says_what_the_suite_needs_and_a_missing_trace_skips_by_name() -> None:
    setup = _readme().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "../shared/traces/" in setup and "skip" in setup and "tests/data/" in setup
    from conftest import shared_trace

    with pytest.raises(pytest.skip.Exception, match="real trace kineto/not_there.json.gz not available"):
        shared_trace("kineto/not_there.json.gz")


def test_trainer_callbacks_are_documented_where_users_look() -> None:
    for doc in (_readme(), (ROOT / "docs" / "capture.md").read_text()):
        assert "whyidle.LightningCallback(" in doc and "whyidle.HFCallback(" in doc


# -- installing -----------------------------------------------------------------------------


def test_extras_pin_nothing_for_users() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*meta["dependencies"], *(r for extra in meta["optional-dependencies"].values() for r in extra)]
    assert not [r for r in reqs if "==" in r]
    assert 'pip install -q "torch==2.13.0"' in (ROOT / ".ci" / "run").read_text()


# -- fix steps from the trace, said once --------------------------------------------------------


def test_host_overhead_fix_uses_the_traces_optimizer_and_says_each_step_once() -> None:
    from conftest import shared_trace

    r = whyidle.diagnose(shared_trace("kineto/resnet50_num_workers_4.pt.trace.json.gz"))  # an SGD job
    f = next(f for f in r.findings if f.cause == "host_overhead")
    assert dict(f.evidence.facts)["optimizer"] == "SGD"
    assert "opt = torch.optim.SGD(model.parameters(), lr=lr, fused=True)  # SGD, as in this trace" in f.fix.code
    assert "AdamW" not in f.fix.code + " ".join(f.fix.steps)
    assert sum("set_to_none" in s for s in f.fix.steps) == 1  # the trace's zero_grad step, not the generic one too
    assert sum("fused" in s for s in f.fix.steps) == 1
    assert f.fix.steps[1] == "Seen here: SGD.step() launches 483 kernels per call (a per-parameter loop); use SGD(..., fused=True)."


def test_host_overhead_fix_names_adamw_from_the_h200_lab_trace() -> None:
    r = whyidle.diagnose(LAB / "lab_launch.pt.trace.json.gz")
    f = next(f for f in r.findings if f.cause == "host_overhead")
    assert dict(f.evidence.facts)["optimizer"] == "AdamW"
    assert "opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # AdamW, as in this trace" in f.fix.code
    assert sum("fused" in s for s in f.fix.steps) == 1


def test_fix_code_uses_the_batch_size_the_trace_shows() -> None:
    from whyidle.findings.cause_details import with_trace_batch_size

    code = "loader = DataLoader(dataset, batch_size=B, num_workers=8)"
    assert with_trace_batch_size(code, 32) == "loader = DataLoader(dataset, batch_size=32, num_workers=8)"
    assert with_trace_batch_size(code, None) == code  # unknown: the placeholder stays
    assert with_trace_batch_size("model = torch.compile(model)", 32) == "model = torch.compile(model)"
    r = whyidle.diagnose(Path(__file__).parent / "data" / "lab" / "lab_starvation.pt.trace.json.gz")
    (f,) = [f for f in r.findings if f.cause == "input_pipeline"]
    assert r.utilization.batch_size and f"batch_size={r.utilization.batch_size}," in f.fix.code and "batch_size=B" not in f.fix.code
