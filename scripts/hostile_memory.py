"""Peak memory of the whole process tree while ``whyidle diagnose`` reads small hostile inputs.

    PYTHONPATH=src python3 scripts/hostile_memory.py [--limit-gb 6] [--keep DIR]

Builds the inputs of docs/inputs.md ("Limits") with tests/hostile.py (gzip bombs of blank space
and of tiny events, a folder claiming a world size of 10^9, a counter log with a sample dated
2200), runs ``python -m whyidle.cli diagnose`` on each under ``hostile.run_bounded`` (the tree is
killed past the limit) and prints one JSON line each: exit status, peak MB, killed, last error.
Point PYTHONPATH at another checkout's src to measure it (the "before" column).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import hostile  # noqa: E402


def build(d: Path) -> list[Path]:
    ev = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},'
    out = [
        hostile.gzip_bomb(d / "spaces.json.gz", 4 << 30),
        hostile.gzip_bomb(d / "spaces_streamed.json.gz", 4 << 30, last_member_bytes=300 << 20),
        hostile.gzip_bomb(d / "events.json.gz", 4 << 30, body=ev),
    ]
    ws = d / "world"
    ws.mkdir()
    for r in (0, 1):
        doc = dict(hostile.base_trace(2), distributedInfo={"rank": r, "world_size": 10**9})
        (ws / f"rank{r}.json").write_text(json.dumps(doc))
    out.append(ws)
    rows = ["timestamp, index, utilization.gpu [%], utilization.memory [%]"]
    rows += [f"2025/07/09 01:{m:02d}:{s:02d}.000, 0, {50 + s % 40}, 10" for m in range(20) for s in range(60)]
    rows.append("2200/07/09 01:18:00.000, 0, 50, 10")
    far = d / "far_future.csv"
    far.write_text("\n".join(rows) + "\n")
    out.append(far)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit-gb", type=float, default=6.0)
    ap.add_argument("--keep", type=Path, help="build the inputs here (kept) instead of a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for p in build(d):
            r = hostile.run_bounded([sys.executable, "-m", "whyidle.cli", "diagnose", str(p)], int(args.limit_gb * (1 << 30)), 600)
            size = sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size
            print(json.dumps({"input": p.name, "bytes": size, "rc": r["rc"], "peak_mb": r["peak_bytes"] >> 20, "killed": r["killed"],
                              "error": r["stderr"].strip().splitlines()[-1][:200] if r["stderr"].strip() else ""}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
