"""whyidle sweep end to end on CPU with small real torch models (built here, no downloads): each
trial a real subprocess. A batch sweep finds a plateau, a workers sweep finds the data-starved
setting and its fix, bf16 runs with the quality guard, torch.compile counts a deliberate graph
break, accumulation and checkpointing are measured; a trial that raises, one that is killed,
one that runs out of memory and one that hangs are recorded and the sweep goes on."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from whyidle.cli import main
from whyidle.sweep.runner import CommandRunner, FunctionRunner
from whyidle.config import SweepConfig
from whyidle.sweep.search import Space, plateaued, run_sweep
from whyidle.sweep.trial import Trial

torch = pytest.importorskip("torch")

SPEC = textwrap.dedent(
    """
    import os, signal, time
    import torch
    import whyidle

    IO_S = float(os.environ.get("SWEEP_TEST_IO_S", "0"))

    class Batches(torch.utils.data.Dataset):
        def __init__(self, batch):
            self.batch = batch
        def __len__(self):
            return 10_000
        def __getitem__(self, i):
            if IO_S:
                time.sleep(IO_S)  # simulated storage latency
            g = torch.Generator().manual_seed(i)
            return torch.randn(self.batch, 32, generator=g), torch.randint(0, 4, (self.batch,), generator=g)

    class Net(torch.nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.a, self.b, self.c = torch.nn.Linear(32, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 4)
        def hidden(self, x):
            return torch.relu(self.b(x))
        def forward(self, x):
            x = torch.relu(self.a(x))
            x = self.cfg.checkpoint(self.hidden, x)
            torch._dynamo.graph_break()  # deliberate: torch.compile must count it
            return self.c(x)

    def make(cfg):
        torch.set_num_threads(1)
        model = Net(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        fwd = cfg.compile_model(model)
        loader = torch.utils.data.DataLoader(Batches(cfg.batch_size), batch_size=None, **cfg.loader_kwargs())
        n = [0]
        def step(batch):
            x, y = batch
            with cfg.autocast():
                loss = torch.nn.functional.cross_entropy(fwd(x), y)
            (loss / cfg.accumulation).backward()
            n[0] += 1
            if n[0] % cfg.accumulation == 0:
                opt.step()
                opt.zero_grad()
            return loss.detach()
        return whyidle.Workload(step=step, loader=loader, samples_per_step=cfg.batch_size)

    def ragged(cfg):
        # every fourth batch is one sample short: a compiled model recompiles for the new shape
        model = cfg.compile_model(torch.nn.Linear(32, 4))
        loader = [torch.randn(cfg.batch_size - (i % 4 == 3), 32) for i in range(8)]
        def step(x):
            loss = model(x).square().mean()
            loss.backward()
            return loss.detach()
        return whyidle.Workload(step=step, loader=loader, samples_per_step=cfg.batch_size)

    def broken(cfg):
        if cfg.batch_size == 16:
            raise ValueError("this trial raises")
        if cfg.batch_size == 32:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        if cfg.batch_size == 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB (simulated)")
        if cfg.batch_size == 128:
            time.sleep(600)
        return make(cfg)
    """
)

TRACKED = textwrap.dedent(
    """
    import sys, torch, whyidle
    bs = int(sys.argv[1])
    torch.set_num_threads(1)
    model = torch.nn.Linear(256, 256)
    data = [torch.randn(bs, 256) for _ in range(4)]
    for x in whyidle.track(data * 25_000):  # far more than needed: the sweep stops it once steady
        model(x).sum().backward()
    """
)


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "spec.py"
    p.write_text(SPEC)
    return p


def test_failing_trials_are_results_and_the_sweep_goes_on(spec: Path) -> None:
    runner = FunctionRunner(f"{spec}:broken", warmup=2, max_steps=10, time_limit_s=8)
    rs = {b: runner.run(Trial(batch_size=b)) for b in (16, 32, 64, 128)}
    assert rs[16].status == "error" and rs[16].message == "ValueError: this trial raises"
    assert rs[32].status == "killed" and rs[32].message.startswith("killed by SIGKILL")
    assert rs[64].status == "oom" and "out of memory" in rs[64].message
    assert rs[128].status == "timeout" and rs[128].wall_ns < 12e9
    # the OOM at 64 is the memory edge of a sweep that started below it
    sw = run_sweep(Space(batch_lo=8, batch_hi=64), FunctionRunner(f"{spec}:broken", warmup=2, max_steps=10, time_limit_s=30))
    assert [t.trial.batch_size for t in sw.trials] == [8, 16]
    assert sw.batch.edge == 16 and sw.batch.edge_status == "error" and sw.best is not None and sw.best.trial.batch_size == 8


def test_cli_sweep_finds_a_plateau_and_measures_every_lever(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    argv = ["sweep", f"{spec}:make", "--batch-size", "64..16384", "--precision", "fp32,bf16", "--compile", "off,eager"]
    argv += ["--accumulation", "1,2", "--checkpointing", "off,on", "--steps", "50", "--warmup", "3", "--time-limit", "60", "-o", str(out)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    batch = [t for t in doc["trials"] if t["stage"] == "batch_size"]
    # Stopped by the rule, at the first batch where it held (on a CPU the rate may keep creeping up
    # until the last batch of the range, so where it stops is the machine's, not the test's), and
    # the chosen batch is the knee below the end of the range.
    rates, rule = [t["samples_per_s"] for t in batch], SweepConfig()
    assert doc["batch"]["plateau"] and plateaued(rates, rule)
    assert not any(plateaued(rates[:i], rule) for i in range(1, len(rates)))
    assert doc["batch"]["chosen"] < 16384
    assert all(t["status"] == "ok" and t["samples_per_s"] > 0 and t["peak_host_bytes"] > 0 for t in doc["trials"])
    by_stage = {t["stage"]: t for t in doc["trials"]}
    chosen = doc["batch"]["chosen"]
    bf16 = by_stage["precision"]
    assert bf16["trial"]["precision"] == "bf16" and bf16["trial"]["batch_size"] == chosen
    assert bf16["guard"]["checked"] and bf16["guard"]["max_rel_dev"] < 0.05  # bf16 trains like fp32 here
    comp = by_stage["compile"]
    assert comp["graph_breaks"] >= 1 and any("graph_break" in r for r in comp["graph_break_reasons"])
    assert comp["warmup_ns"] > 0 and comp["guard"]["checked"]
    acc = by_stage["accumulation"]["trial"]
    assert acc["accumulation"] == 2 and acc["batch_size"] * 2 == chosen  # the effective batch held
    assert by_stage["checkpointing"]["trial"]["checkpointing"] is True
    assert doc["best"]["code"].startswith(f"batch_size = {doc['best']['trial']['batch_size']}")


def test_a_workers_sweep_finds_the_starved_setting_and_its_fix(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_TEST_IO_S", "0.02")  # 20 ms of storage wait per batch
    sw = run_sweep(Space(batch_lo=32, batch_hi=32, levers={"num_workers": [0, 4]}), FunctionRunner(f"{spec}:make", warmup=3, max_steps=50, time_limit_s=60))
    starved, fed = sw.trials
    assert starved.trial.num_workers == 0 and starved.data_wait_share is not None and starved.data_wait_share > 0.5
    # 4 workers overlap the storage waits: still waiting (the step is tiny), but about 4x the rate
    assert fed.data_wait_share is not None and fed.data_wait_share < starved.data_wait_share
    assert fed.samples_per_s is not None and starved.samples_per_s is not None and fed.samples_per_s > 2 * starved.samples_per_s
    assert sw.best is not None and sw.best.trial.num_workers == 4 and sw.entries[-1].kept


def test_the_plain_command_form_measures_a_tracked_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRACKED)
    runner = CommandRunner([sys.executable, str(script), "{batch_size}"], warmup=3, max_steps=50, time_limit_s=60)
    res = runner.run(Trial(batch_size=64))
    assert res.status == "ok", res.message
    assert res.samples_per_s is not None and res.samples_per_s > 0 and res.measured_steps >= 15
    # stopped by a rule (steady, or 50 steps in three windows), long before its 100,000 steps
    assert (res.steady or res.measured_steps >= 50) and res.wall_ns < 30e9


def test_compile_counts_recompilations_with_their_reasons(spec: Path) -> None:
    res = FunctionRunner(f"{spec}:ragged", warmup=2, max_steps=20, time_limit_s=60).run(Trial(batch_size=16, compile="eager"))
    assert res.status == "ok", res.message
    assert res.recompilations is not None and res.recompilations >= 1
    assert any("size mismatch" in r for r in res.recompile_reasons), res.recompile_reasons
    assert res.graph_breaks == 0 and res.compiled_graphs is not None and res.compiled_graphs >= 2
