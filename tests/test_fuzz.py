"""A seeded, time-bounded fuzz run over every input surface (issues 14 and 24): each input gives a
report or one clear WhyidleError, no other exception escapes, inputs are byte-identical afterwards,
and the two Kineto readers agree. The registry below names the family that feeds each reader;
a reader without one fails the suite.

CI runs a fixed small budget (``_N`` inputs per family, at most ``_BUDGET_S`` seconds each). The
nightly size sets ``WHYIDLE_FUZZ_INPUTS`` (inputs per family; 1,000 over the fifteen families is
15,000 inputs)::

    WHYIDLE_FUZZ_INPUTS=1000 PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests/test_fuzz.py

or ``PYTHONPATH=src python3 scripts/fuzz_inputs.py --n 1000 --seed 1``, which prints the counts
per family (docs/inputs.md has the last run's).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("fuzz_inputs", Path(__file__).resolve().parents[1] / "scripts" / "fuzz_inputs.py")
assert _SPEC is not None and _SPEC.loader is not None
fuzz = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fuzz)

SRC = Path(__file__).resolve().parents[1] / "src" / "whyidle"

# inputs per family in CI, and the most seconds each may take on a loaded 2-core machine
_N = {"kineto": 200, "bytes": 200, "counters": 300, "nsys": 10, "report": 200, "requests": 300, "triton": 300, "latency": 300,
      "parquet": 150, "options": 150, "rocprof": 200, "xplane": 300, "runs": 150, "results": 200, "config": 200}  # fmt: skip
_BUDGET_S = 45.0
_NIGHTLY = int(os.environ.get("WHYIDLE_FUZZ_INPUTS", "0"))

# Every function that reads an input (a public load*/parse*/read* function anywhere in the
# package), and the fuzz family that feeds it hostile inputs.
READERS = {
    "whyidle.sources:load": "kineto",
    "whyidle.sources:read": "kineto",
    "whyidle.sources._io:read_bytes": "bytes",
    "whyidle.sources.kineto:load_kineto": "kineto",
    "whyidle.sources.kineto:parse_kineto": "kineto",
    "whyidle.sources.kineto_stream:parse_kineto_stream": "kineto",
    "whyidle.sources.kineto_stream:load_kineto_stream": "bytes",
    "whyidle.sources.nsys:load_nsys": "nsys",
    "whyidle.sources.nsys:load_exported_report": "nsys",
    "whyidle.sources.nsys_host:read_runtime": "nsys",
    "whyidle.sources.nsys_host:read_sync": "nsys",
    "whyidle.sources.nsys_host:read_nvtx": "nsys",
    "whyidle.sources.nsys_host:read_osrt": "nsys",
    "whyidle.sources.nsys_host:read_sched": "nsys",
    "whyidle.sources.nsys_device:read_kernels": "nsys",
    "whyidle.sources.nsys_device:read_memcpy": "nsys",
    "whyidle.sources.nsys_device:read_memset": "nsys",
    "whyidle.sources.nsys_device:read_graphs": "nsys",
    "whyidle.sources.counters:parse_counters": "counters",
    "whyidle.sources.counters:load_counters": "counters",
    "whyidle.sources.counters_dcgmi:parse_dcgmi": "counters",
    "whyidle.sources.counters_dmon:parse_dmon": "counters",
    "whyidle.sources.counters_query:parse_query": "counters",
    "whyidle.sources.parquet:load_parquet": "parquet",
    "whyidle.serving.requestlog:load_requests": "requests",
    "whyidle.serving.latency:load_latency": "latency",
    "whyidle.serving.latency:parse_curve": "options",
    "whyidle.findings.saved:load_report": "report",
    "whyidle:load_report": "report",
    "whyidle.findings.saved:read_saved": "results",
    "whyidle.sources.rocprof:load_rocprof": "rocprof",
    "whyidle.sources.rocprof:parse_rocprof": "rocprof",
    "whyidle.sources.xplane:load_xplane": "xplane",
    "whyidle.sources.xplane:parse_xplane": "xplane",
    "whyidle.commands.run:parse_duration": "options",
    "whyidle.commands.run:parse_window": "options",
    "whyidle.findings.saved:load_saved": "report",
    "whyidle.diagnosis:load_report": "report",
    "whyidle.comparison.analysis:read_side": "report",
    "whyidle.ranks.scaling:load_run_report": "report",
    "whyidle.ranks.scaling:parse_point": "options",
    "whyidle.comparison.analysis:parse_regression": "options",
    "whyidle.commands.diagnose:parse_steps": "options",
    "whyidle.commands.sweep:parse_batch_range": "options",
    "whyidle.commands.sweep:parse_values": "options",
    "whyidle.ranks.run:read_run_folder": "runs",
    "whyidle.commands._configfile:load_config": "config",
}
# Readers that take no input a user hands over, with the reason.
NOT_INPUTS = {
    "whyidle.sweep.child:load_target": "imports the user's own training function (MODULE:FUNCTION): code, not data",
    "whyidle.sweep.runner:read_steps": "reads the step file that whyidle's own sweep child wrote",
    "whyidle.capture.launch:read_records": "reads the step records that whyidle run's own hook wrote into its run folder",
}
# Formats read inside one reader, each with its own family.
FORMATS = {"whyidle.serving.requestlog:load_requests": ("requests", "triton")}
_READER_NAME = re.compile(r"^(load|parse|read)(_[a-z0-9_]+)?$")


def _readers() -> set[str]:
    out = set()
    for path in SRC.rglob("*.py"):
        mod = ".".join(("whyidle", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and _READER_NAME.match(node.name):
                out.add(f"{mod}:{node.name}")
    return out


def test_every_reader_has_a_fuzz_family() -> None:
    found = _readers()
    missing = sorted(found - set(READERS) - set(NOT_INPUTS))
    assert not missing, f"readers with no fuzz family: {missing}; add a family (tests/hostile_surfaces.py, scripts/fuzz_inputs.py) and list it in READERS"
    stale = sorted((set(READERS) | set(NOT_INPUTS)) - found)
    assert not stale, f"listed readers that no longer exist: {stale}"
    used = set(READERS.values()) | {f for fams in FORMATS.values() for f in fams}
    assert used == set(fuzz.FAMILIES) == set(_N), (sorted(used), fuzz.FAMILIES, sorted(_N))


@pytest.mark.parametrize("family", fuzz.FAMILIES)
def test_fuzz_family(family: str, tmp_path: Path) -> None:
    if family == "nsys":
        from nsysbuild import VERSIONS, schema_sql

        schema_sql(VERSIONS[-1])  # skips without the shared schema dumps
    if family == "parquet":
        pytest.importorskip("pyarrow")
    n = _NIGHTLY or _N[family]
    res = fuzz.run_family(family, n, seed=24 if _NIGHTLY else 14, budget_s=max(_BUDGET_S, n * 2.0) if _NIGHTLY else _BUDGET_S, work=tmp_path)
    print(res)  # the counts, with -s
    assert res["inputs"] >= min(n, 10), res  # the time budget still runs a useful number
    assert res["escaped"] == {}, res
    assert res.get("readers disagree", 0) == 0 and res.get("inputs modified", 0) == 0, res
    assert res.get("reports", 0) + res.get("clear errors", 0) == res["inputs"]
