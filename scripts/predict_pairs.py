"""Predicted vs measured speed-up for recorded before/after pairs of the flaw lab.

    python3 scripts/predict_pairs.py [MEASURED_JSON]     (default: tests/data/h200/measured.json)
    python3 scripts/predict_pairs.py LABFIX_JSON TRACE_DIR [--profiled]
        (e.g. tests/data/h200/run2/labfix.json tests/data/lab: the table of docs/gpu-validation.md)

Each fix is predicted from the flawed run's trace alone (whyidle's what-if replay, on the untraced
basis: the profiler's own host time removed) and checked against the step tracker's median step of
both runs, as recorded by scripts/device_measure.py, or against the speed-up a saved
``whyidle lab --flaw all --fix --json`` measured (``--profiled``: the replay keeps the profiler's
host time). To predict and measure afresh on this machine's GPU: ``whyidle lab --flaw all --fix``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from whyidle.lab.predict import recorded_labfix, recorded_pairs


def main(argv: list[str]) -> int:
    if len(argv) >= 2:
        labfix, traces = Path(argv[0]), Path(argv[1])
        if not labfix.is_file() or not traces.is_dir():
            print(f"predict_pairs: expected a labfix JSON file and a trace folder, got {labfix} and {traces}", file=sys.stderr)
            return 2
        untraced = "--profiled" not in argv[2:]
        print(f"Predicted (from {traces}/lab_<flaw>.pt.trace.json.gz) vs measured (saved in {labfix}) speed-up:")
        for r in recorded_labfix(labfix, traces, untraced=untraced):
            print("  " + r.line())
        return 0
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
