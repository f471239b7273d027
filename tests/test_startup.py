"""Start-up of ``whyidle diagnose``: what a fresh process imports and does before the analysis.

On a small trace the fixed costs are most of the run (docs/performance.md, "What `whyidle
diagnose TRACE` does in its first half second"), so these tests pin the imports that were cut.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from whyidle.analyses import hostwork
from whyidle.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200"

# Runs the command line in this process (not os._exit, as `whyidle` does) and prints the modules
# it imported, as JSON, after the report.
_LIST_MODULES = """
import contextlib, io, json, sys
from whyidle.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "report": len(out.getvalue()), "modules": sorted(sys.modules), "ma_from": WHO}))
"""
# Set before the command runs: records where numpy.ma was first imported from (whyidle's frames).
_WATCH_MA = """
import sys, traceback
WHO = []
class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy.ma" and not WHO:
            WHO.extend(f"{f.filename.split('/whyidle/')[-1]}:{f.lineno}: {f.line}" for f in traceback.extract_stack() if "/whyidle/" in f.filename)
        return None
sys.meta_path.insert(0, _Watch())
"""


def _run(*argv: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", _WATCH_MA + _LIST_MODULES, *argv], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert res["rc"] == 0 and res["report"] > 0
    return res


def _modules_after(*argv: str) -> set[str]:
    return set(_run(*argv)["modules"])


def test_diagnose_imports_no_other_command() -> None:
    mods = _modules_after("diagnose", str(H200 / "lab_sync_cuda.pt.trace.json.gz"), "--json")
    others = {f"whyidle.commands.{c}" for c in COMMANDS if c != "diagnose"}
    assert "whyidle.commands.diagnose" in mods
    assert not mods & others, sorted(mods & others)


def test_the_full_parser_still_lists_every_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "whyidle", "--help"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60, check=False
    )
    assert proc.returncode == 0
    assert all(re.search(rf"^\s+{c}\s", proc.stdout, re.M) for c in COMMANDS), proc.stdout


@pytest.mark.parametrize(
    "name",
    [
        "inference/tracelens__b200_eager_llm_prefill_rank0.json.gz",
        "kineto/resnet50_num_workers_0.pt.trace.json.gz",
        "hta/negative_queue_length_values_check__rank0.json.gz",
        "hta/call_stack__backward_thread.json",  # SM counts from grids over blocks per SM: a median of floats
    ],
)
def test_a_diagnosis_does_not_import_numpy_ma(name: str) -> None:
    """numpy 2's ``np.unique(a)`` (and ``np.isin`` when it sorts), ``np.quantile`` and the median of
    floats import numpy.ma to ask whether ``a`` is masked: 6 ms of a 0.2 s run, in the what-if
    helper's path where the command line waited for it. The analyses use the sort-based helpers of
    whyidle.timeline.arrays and profcost.linear_quantile instead. In one process (``--jobs 1``), so
    that the what-if graph's imports are seen too."""
    res = _run("diagnose", str(shared_trace(name)), "--json", "--jobs", "1")
    assert "numpy" in res["modules"]
    assert "numpy.ma" not in res["modules"], (
        "a diagnosis imported numpy.ma (6 ms on the diagnose path). whyidle's frames, outermost first; the last is the call:\n"
        + "\n".join(res["ma_from"])
        + "\nReplace it: np.unique(a) -> whyidle.timeline.arrays.unique_sorted; np.quantile/np.percentile -> "
        "analyses.profcost.linear_quantile or a discrete method=; np.median of floats -> the median of the sorted values "
        "(tests/test_speed_rules.py lists the forms it can see in the source)"
    )


def test_a_non_ascii_name_goes_to_the_pattern() -> None:
    name = "preproce\u017fs"  # a long s: re.I matches it to "s", str.lower() keeps it
    assert hostwork._DATA_WORD_RE.search(name) and "preprocess" not in name.lower()
    assert hostwork.classify(name) == hostwork.WorkClass.DATA
    assert not hostwork.may_contain("train.py(12): step", hostwork._COLD_HINTS)


def test_no_helper_child_where_there_is_no_what_if_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The B200 trace has no step markers, so no what-if graph: forking a helper for it only
    cost time (the parent's copy-on-write faults). A trace with steps still gets one."""
    import whyidle.pipeline as P
    from whyidle.parallel import Beside, Errand, Helpers
    from whyidle.render import render
    from whyidle.sources import load

    forks: list[bool] = []

    def recording(self: Helpers, errand: Errand[Any, Any, Any, Any]) -> Beside[Any, Any, Any]:
        forks.append(self.fork)
        return Beside(errand)  # the answer is made here: the test needs no child

    monkeypatch.setattr(Helpers, "beside", recording)
    stepless = load(shared_trace("inference/tracelens__b200_eager_llm_prefill_rank0.json.gz"))
    stepped = load(H200 / "lab_sync_cuda.pt.trace.json.gz")
    assert render(P.diagnose(stepless, jobs=2), "json") == render(P.diagnose(stepless, jobs=1), "json")
    P.diagnose(stepped, jobs=2)
    assert forks == [False, False, True]


def test_the_forked_split_and_decode_of_a_real_trace_is_the_serial_one() -> None:
    from tlbuild import assert_same_timeline

    from whyidle.parallel import can_fork
    from whyidle.sources import load

    if not can_fork():
        pytest.skip("a forked helper needs Linux and two usable cores")
    trace = shared_trace("inference/tracelens__b200_eager_llm_prefill_rank0.json.gz")  # 14 MB: over the fork threshold
    assert_same_timeline(load(trace, jobs=2), load(trace, jobs=1))
