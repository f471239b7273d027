"""No dead code: vulture finds nothing unused in src/whyidle beyond tests/vulture_whitelist.py.

What vulture cannot see used (trainer callbacks, public API, struct fields serialised whole) is
listed in the whitelist with why; anything else it reports is code nothing calls: delete it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_vulture_finds_no_unused_code() -> None:
    pytest.importorskip("vulture", reason="vulture is in the [test] extra; install it to look for dead code")
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", "src/whyidle", "tests/vulture_whitelist.py", "--min-confidence", "60"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), f"unused code (delete it, or whitelist it with why):\n{proc.stdout}{proc.stderr}"
