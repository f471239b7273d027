"""Predicted vs measured speed-up for recorded before/after pairs of the flaw lab.

    python3 scripts/predict_pairs.py [MEASURED_JSON]     (default: tests/data/h200/measured.json)

Each fix is predicted from the flawed run's trace alone (whyidle's what-if replay) and checked
against the step tracker's median step of both runs, as recorded by scripts/device_measure.py.
To predict and measure afresh on this machine's GPU: ``whyidle lab --flaw all --fix``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from whyidle.lab.predict import recorded_pairs


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "tests/data/h200/measured.json"
    if not path.is_file():
        print(f"predict_pairs: {path} is not a file; expected the measured.json of scripts/device_measure.py", file=sys.stderr)
        return 2
    print(f"Predicted (from the flawed trace) vs measured (tracker median steps) speed-up, {path}:")
    for r in recorded_pairs(path):
        print("  " + r.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
