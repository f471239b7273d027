"""``whyidle run -- COMMAND``: the start-up hook, the launcher and the report, on CPU.

The torch tests run the bundled starved example (examples/starved_training.py, unchanged) under
``whyidle run`` in a child process, as a user would; the others need no torch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from whyidle.capture.launch import LaunchOptions, child_env, launch
from whyidle.capture.run_env import ENV_DIR, ENV_OPTIONS
from whyidle.capture.run_env import HookOptions, worker_name
from whyidle.capture.run_hook import Recorder, is_launcher
from whyidle.commands.run import parse_duration, parse_window
from whyidle.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "starved_training.py"
SRC = ROOT / "src"
# Kineto's own log lines (torch.profiler prints them when a session starts and stops)
KINETO_LINE = re.compile(r"^(USDT|STAGE|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d .*\n?", re.M)

needs_torch = pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"), reason="needs torch (pip install 'whyidle[torch]')")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop(ENV_DIR, None)
    env.update(extra)
    return env


def whyidle_run(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "whyidle", "run", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=240, **kw)  # type: ignore[call-overload,no-any-return]


def loop_line() -> int:
    """The line of the example's training loop, read from the file (not hard-coded)."""
    lines = EXAMPLE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith("for step, (x, y) in enumerate(loader)"))


# -- no torch needed ------------------------------------------------------------------------------


def test_durations_and_windows_parse() -> None:
    assert parse_duration("20s") == 20.0 and parse_duration("1.5m") == 90.0 and parse_duration("300ms") == pytest.approx(0.3)
    assert parse_window("20s+5s") == (20.0, 5.0)
    for bad in ("20s", "x+5s", "5s+0s"):
        with pytest.raises(UsageError):
            parse_window(bad)


def test_hook_options_travel_as_json() -> None:
    opts = HookOptions(tracker=False, profiler=True, schedule=(1, 1, 2), steps=7, window=(0.5, 2.0))
    assert HookOptions.from_json(opts.to_json()) == opts
    assert HookOptions.from_json("") == HookOptions()
    assert worker_name(3, 99) == "rank3" and worker_name(None, 99) == "pid99"


def test_the_torchrun_launcher_is_not_recorded_its_ranks_are() -> None:
    assert is_launcher(["/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"])
    assert is_launcher(["/lib/python3.11/site-packages/torch/distributed/run.py", "train.py"])
    assert not is_launcher(["train.py"]) and not is_launcher([]) and not is_launcher(["/home/me/torchrun_notes.py"])


def test_the_hook_is_first_on_pythonpath_and_the_env_says_where_to_write(tmp_path: Path) -> None:
    env = child_env(LaunchOptions(tmp_path / "run"), tmp_path / "site", base={"PYTHONPATH": "/user/lib"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "site"), "/user/lib"]
    assert env[ENV_DIR] == str((tmp_path / "run").resolve()) and json.loads(env[ENV_OPTIONS])["profiler"] is True
    assert child_env(LaunchOptions(tmp_path / "run", hook=None), tmp_path / "site", base={}) == {}


def test_the_users_sitecustomize_still_runs_and_sys_path_is_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("MARK = 'users own'\n")
    monkeypatch.setenv("PYTHONPATH", f"{user}{os.pathsep}{SRC}")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    out = tmp_path / "out.txt"
    code = f"import sys, sitecustomize; open({str(out)!r}, 'w').write(sitecustomize.MARK + '|' + str([p for p in sys.path if 'whyidle-site' in p]))"
    got = launch([sys.executable, "-c", code], LaunchOptions(tmp_path / "run", sampler=False, interval_s=0.02))
    assert got.returncode == 0
    assert out.read_text() == "users own|[]"
    assert not list(tmp_path.glob("whyidle-site-*")), "the private sitecustomize folder is removed after the run"
    assert got.records == [] and got.traces == []


def test_a_non_pytorch_command_keeps_its_output_and_status_and_is_offered_nsys(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "nsys").chmod(0o755)
    env = _env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "whyidle", "run", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and p.stdout == "hello\n"
    assert "the start-up hook recorded nothing" in p.stderr and "whyidle run: sampler: " in p.stderr
    assert "nsys profile -t cuda,nvtx,osrt -o whyidle-run --" in p.stderr and "whyidle diagnose whyidle-run.nsys-rep" in p.stderr
    p2 = subprocess.run([sys.executable, "-m", "whyidle", "run", "--", "no-such-command-xyz"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert p2.returncode == 127 and "command not found" in p2.stderr


def test_sigterm_to_whyidle_is_sent_on_to_the_program(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), sys.exit(5)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "whyidle", "run", "-o", str(tmp_path / "run"), "--no-sampler", "--", sys.executable, "-c", code]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5 and out == "got SIGTERM\n", err


def test_duration_interrupts_the_program_as_ctrl_c_would(tmp_path: Path) -> None:
    code = "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')\n    raise\n"
    t0 = time.monotonic()
    p = whyidle_run(["-o", str(tmp_path / "run"), "--duration", "0.5s", "--no-sampler", "--", sys.executable, "-c", code], tmp_path)
    assert p.returncode == 130 and p.stdout == "interrupted\n", p.stderr
    assert "(interrupted)" in p.stderr and time.monotonic() - t0 < 30


# -- torch: the hook in this process ----------------------------------------------------------------


@needs_torch
def test_without_an_optimizer_each_batch_is_a_step_and_its_wait_is_timed(tmp_path: Path) -> None:
    import torch

    class Slow(torch.utils.data.Dataset):  # type: ignore[type-arg,misc]
        def __len__(self) -> int:
            return 12

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(0.002)
            return torch.full((3,), float(i))

    real_next = torch.utils.data.dataloader._BaseDataLoaderIter.__next__
    rec = Recorder(torch, HookOptions(profiler=False), tmp_path)
    rec.install()
    try:
        seen = [float(x.sum()) for x in torch.utils.data.DataLoader(Slow(), batch_size=2)]
    finally:
        rec.uninstall()
    assert seen == [float(3 * (2 * i) + 3 * (2 * i + 1)) for i in range(6)], "the batches are the loader's own"
    # six batches, six steps: each ended by the next call of next() (the last by the loader's end)
    stats = rec.tracker.stats()
    assert rec.state.steps == 6 and rec.state.optimizer is None
    assert all(s.data_wait_ns >= 2 * 2_000_000 for s in stats.steps) and stats.loader.batch_size == 2
    assert stats.loop_line.startswith("test_run.py:") and rec.record()["step_source"] == "DataLoader batches"
    assert torch.utils.data.dataloader._BaseDataLoaderIter.__next__ is real_next, "uninstall restores the loader"


# -- torch: the command line on the bundled example ------------------------------------------------


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    if not __import__("importlib").util.find_spec("torch"):
        pytest.skip("needs torch (pip install 'whyidle[torch]')")
    d = tmp_path_factory.mktemp("starved")
    return whyidle_run(["-o", str(d / "run"), "--", sys.executable, str(EXAMPLE)], d), d / "run"


@needs_torch
def test_a_starved_script_is_diagnosed_with_its_own_loop_line(starved: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    p, run = starved
    assert p.returncode == 0, p.stderr
    assert "Input starvation: the DataLoader runs in the training process" in p.stderr
    assert f"starved_training.py:{loop_line()} in main" in p.stderr
    assert "steps from optimizer.step()" in p.stderr and "recorded 30 steps" in p.stderr
    m = re.search(r"overhead outside the profiled steps ([\d.]+) us per step = ([\d.]+)% of the median step", p.stderr)
    assert m and float(m.group(2)) < 5, "the hook's overhead is measured and small"
    for name in ("report.json", "report.html", "report.txt", "pid", "traces"):
        assert any(f.name.startswith(name) for f in run.iterdir()), name
    assert list(run.glob("traces/pid*.pt.trace.json.gz")), "the profiler's trace of the steady steps is in the run folder"
    record = json.loads(next(run.glob("pid*.steps.json")).read_text())
    assert record["profiler"] == "done" and record["steps"] == 30
    assert p.stdout.splitlines()[-1] == "done: 30 steps", "the program's stdout is its own"


@needs_torch
def test_the_fix_shows_the_gain(starved: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path) -> None:
    _, before = starved
    p = whyidle_run(["-o", str(tmp_path / "fixed"), "--baseline", str(before), "--no-profiler", "--", sys.executable, str(EXAMPLE), "--workers", "4"], tmp_path)
    assert p.returncode == 0, p.stderr
    a = json.loads((before / "report.json").read_text())["throughput"]
    b = json.loads((tmp_path / "fixed" / "report.json").read_text())["throughput"]
    assert b["samples_per_s"] > 1.5 * a["samples_per_s"], (a, b)
    assert re.search(r"Throughput \(samples/s\): [\d.]+% faster", p.stderr)
    assert "the DataLoader runs in the training process" not in p.stderr


@needs_torch
def test_outputs_losses_and_status_are_the_same_with_and_without_whyidle_run(starved: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path) -> None:
    p, _ = starved
    alone = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
    assert alone.returncode == p.returncode == 0
    assert alone.stdout == p.stdout and "loss" in alone.stdout
    program_err = p.stderr[: p.stderr.index("whyidle run:")]
    assert KINETO_LINE.sub("", program_err) == alone.stderr


@needs_torch
def test_ctrl_c_ends_the_program_and_leaves_a_report_of_what_was_recorded(tmp_path: Path) -> None:
    # the profiler records from step 3 on: the interrupt comes while it records
    cmd = [sys.executable, "-m", "whyidle", "run", "-o", str(tmp_path / "run"), "--no-sampler", "--schedule", "1,1,100000", "--", sys.executable, "-u", str(EXAMPLE), "--steps", "100000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step 14 "):
            break
    proc.send_signal(signal.SIGINT)  # to whyidle alone (no terminal): it sends it on to the program
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err and "(interrupted)" in err
    steps = int(re.search(r"recorded (\d+) steps", err).group(1))  # type: ignore[union-attr]
    assert steps >= 15
    assert json.loads((tmp_path / "run" / "report.json").read_text())["steps"]
    assert "Input starvation" in err
    assert list((tmp_path / "run").glob("traces/pid*.pt.trace.json.gz")), "the interrupted profiler's trace of what it recorded"


@needs_torch
def test_steps_stops_the_program_after_n_steps(tmp_path: Path) -> None:
    p = whyidle_run(["-o", str(tmp_path / "run"), "--steps", "6", "--no-profiler", "--no-sampler", "--", sys.executable, str(EXAMPLE)], tmp_path)
    assert p.returncode == 130
    record = json.loads(next((tmp_path / "run").glob("pid*.steps.json")).read_text())
    assert record["steps"] == 6 and record["profiler"] == "off"
    assert "stopped after 6 steps (--steps 6)" in p.stderr


@needs_torch
def test_a_queue_fed_server_gets_a_window_capture_and_a_demand_diagnosis(tmp_path: Path) -> None:
    serve = ROOT / "examples" / "serve_queue.py"
    p = whyidle_run(["-o", str(tmp_path / "run"), "--window", "0.3s+0.3s", "--no-sampler", "--", sys.executable, str(serve), "--requests", "60"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "served 60 requests"
    assert "steps from model calls" in p.stderr and "a time window (0.3 s after import torch, for 0.3 s)" in p.stderr
    assert list((tmp_path / "run").glob("traces/pid*.pt.trace.json.gz")), "the window's trace is in the run folder"
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["source"]["workload"] == "serving"
    assert [f["cause"] for f in report["findings"]][:1] == ["idle_host"], report["findings"]
    assert f"serve_queue.py:{_line_of(serve, 'out = model(request)')} in main" in p.stderr


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@needs_torch
@pytest.mark.skipif(not __import__("shutil").which("torchrun"), reason="needs torchrun on the PATH")
def test_torchrun_ranks_record_into_one_folder_and_the_straggler_is_named(tmp_path: Path) -> None:
    example = ROOT / "examples" / "ddp_straggler.py"
    p = whyidle_run(["-o", str(tmp_path / "run"), "--no-sampler", "--", "torchrun", "--nproc_per_node", "2", str(example), "--slow-rank", "1", "--slow-ms", "30"], tmp_path)
    assert p.returncode == 0, p.stderr
    run = tmp_path / "run"
    assert sorted(f.name for f in run.glob("rank*.steps.json")) == ["rank0.steps.json", "rank1.steps.json"]
    assert {f.name.split(".")[0] for f in run.glob("traces/*.pt.trace.json.gz")} == {"rank0", "rank1"}
    report = json.loads((run / "report.json").read_text())
    stragglers = report["cross_rank"]["stragglers"]
    assert [s["rank"] for s in stragglers] == [1], stragglers
    assert stragglers[0]["cause"]["cause"] == "compute/more_device_work"
    assert 20e6 < stragglers[0]["cause"]["excess_ns_per_step"] < 60e6, "about the 30 ms injected per step"
    assert "rank 1: last at" in p.stderr
    assert p.stdout.splitlines()[-1] == "done: 30 steps on 2 ranks"
