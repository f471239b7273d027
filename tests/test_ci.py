"""CI runs strict mypy over the package after installing the [test] extra, which brings mypy."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_mypy_after_the_install_and_before_the_tests() -> None:
    steps = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    install = next(i for i, ln in enumerate(steps) if re.search(r"pip install .*-e \"?\.\[test\]", ln))
    mypy = steps.index("python3 -m mypy")
    tests = next(i for i, ln in enumerate(steps) if ln.startswith("python3 -m pytest"))
    assert install < mypy < tests


def test_mypy_is_strict_over_the_package_and_in_the_test_extra() -> None:
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(re.match(r"mypy\b", req) for req in py["project"]["optional-dependencies"]["test"])
    assert py["tool"]["mypy"]["strict"] is True
    assert py["tool"]["mypy"]["packages"] == ["whyidle"]
