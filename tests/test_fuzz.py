"""A seeded, time-bounded fuzz run over every input family (issue 14): each input gives a report
or one clear WhyidleError, no other exception escapes the API, and the two Kineto readers agree.
The longer run is ``scripts/fuzz_inputs.py`` (its counts are in the README)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("fuzz_inputs", Path(__file__).resolve().parents[1] / "scripts" / "fuzz_inputs.py")
assert _SPEC is not None and _SPEC.loader is not None
fuzz = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fuzz)

# inputs per family, and the most seconds each may take on a loaded 2-core machine
_N = {"kineto": 200, "bytes": 200, "counters": 300, "nsys": 10, "report": 200, "rocprof": 200, "xplane": 300}


@pytest.mark.parametrize("family", fuzz.FAMILIES)
def test_fuzz_family(family: str, tmp_path: Path) -> None:
    if family == "nsys":
        from nsysbuild import VERSIONS, schema_sql

        schema_sql(VERSIONS[-1])  # skips without the shared schema dumps
    res = fuzz.run_family(family, _N[family], seed=14, budget_s=45.0, work=tmp_path)
    assert res["inputs"] >= min(_N[family], 10), res  # the time budget still runs a useful number
    assert res["escaped"] == {}, res
    assert res.get("readers disagree", 0) == 0, res
    assert res.get("reports", 0) + res.get("clear errors", 0) == res["inputs"]
