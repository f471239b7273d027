"""A JAX CPU profile recorded here (jax.profiler.trace to a tmp folder) with injected host stalls:
a sleep in the input pipeline and a block_until_ready every step. The diagnosis must name the
input pipeline, with the Python line of the generator that sleeps, and JAX's fixes.

Skipped when jax is not installed (``pip install jax`` gives the CPU build). The job runs in a
child process, so the profiler's state and jax's threads never touch the test process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import whyidle

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install jax)")

JOB = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import jax, jax.numpy as jnp

    @jax.jit
    def step(w, x):
        y = jnp.tanh(x @ w)
        return w - 0.01 * (x.T @ y), (y * y).mean()

    def batches():  # the input pipeline: a slow producer
        rng = np.random.default_rng(0)
        while True:
            time.sleep(STALL_S)
            yield rng.standard_normal((256, 256), dtype=np.float32)

    w = jnp.ones((256, 256), jnp.float32)
    it = batches()
    w, loss = step(w, next(it))  # compiled before the capture
    loss.block_until_ready()
    with jax.profiler.trace(sys.argv[1]):
        for i in range(6):
            w, loss = step(w, next(it))
            loss.block_until_ready()
    """
)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("jax")
    script = d / "input_stall.py"
    script.write_text(JOB.replace("STALL_S", "0.02"))
    out = d / "logs"
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=300, capture_output=True, env={"JAX_PLATFORMS": "cpu", "PATH": ""})
    assert list(out.glob("plugins/profile/*/*.xplane.pb"))
    return out


def test_the_input_stall_is_found_with_its_python_line(logdir: Path) -> None:
    d = whyidle.diagnose(logdir)  # the log folder: its newest profile run
    assert d.source.format == "xplane"
    assert d.advice is not None and d.advice.framework == "jax"
    top = d.findings[0]
    assert top.group == "starvation", top.key
    # the Python tracer names a frame by its function's first line
    line = next(i for i, text in enumerate(JOB.splitlines(), 1) if text.startswith("def batches"))
    assert top.evidence.python_lines and top.evidence.python_lines[0][0] == f"input_stall.py:{line} in batches"
    # the stall is the sleep: 6 steps of 20 ms, the first before the capture's first step
    assert top.evidence.idle_ns >= 5 * 18_000_000
    text = " ".join((top.fix.summary, *top.fix.steps, top.fix.code))
    assert "torch" not in text and "DataLoader" not in text
    assert len(d.window.steps) == 6


def test_the_cpu_backend_is_the_device(logdir: Path) -> None:
    from whyidle.sources import load
    from whyidle.timeline.model import Kind

    tl = load(logdir)
    kernels = tl.kind == int(Kind.KERNEL)
    assert kernels.any() and tl.meta.devices[0]["name"].startswith("XLA CPU device")
    # every program run is linked to the call on the Python thread that dispatched it
    launches = tl.kind == int(Kind.RUNTIME)
    assert set(tl.corr[kernels].tolist()) == set(tl.corr[launches].tolist())
    assert {tl.lanes[int(ln)].name for ln in tl.lane[launches]} == {tl.lanes[int(tl.lane[launches][0])].name}
