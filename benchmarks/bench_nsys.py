"""Reading an Nsight Systems export vs a plain sqlite3 SELECT of the same columns, same run.

    python3 benchmarks/bench_nsys.py [--kernels 200000] [--repeat 3]

Builds an export with the real nsys 2025.1 schema (../shared/traces/nsys/schemas) holding N
kernels, N launch calls, N/10 memcpys, N/2 NVTX ranges and N/4 OS-runtime calls, then times:

* baseline: ``sqlite3`` fetching exactly the columns whyidle reads from each table (and StringIds)
  into Python tuples, nothing else;
* whyidle: ``whyidle.sources.nsys.load_nsys`` (the same reads plus building the Timeline).

Prints the best of ``--repeat`` runs of each and the ratio (target: at most 2x).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SCHEMA = ROOT.parent / "shared" / "traces" / "nsys" / "schemas" / "nsys_2025.1.1.110.schema.sql"

from whyidle.sources.nsys import load_nsys  # noqa: E402

BASELINE = [
    "SELECT id, value FROM StringIds",
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, shortName, gridX, gridY, gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass NOT IN (67, 68, 69)",
    "SELECT start, end, globalTid, textId, text FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60, 70)",
    "SELECT start, end, globalTid, nameId FROM OSRT_API",
]


def build(path: Path, n: int) -> None:
    con = sqlite3.connect(path)
    for stmt in SCHEMA.read_text().split(";\n"):
        if stmt.strip().upper().startswith("CREATE"):
            con.execute(stmt)
    con.execute(
        "CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER)"
    )  # 2025.1 captures without --trace=osrt lack it; add the 2024.5 layout
    names = [f"void kernel_{i}<float>(float*, int)" for i in range(200)] + ["cudaLaunchKernel_v7000", "futex", "poll"]
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", list(enumerate(names, 1)))
    gp = (1 << 48) | (4242 << 24)
    gt = gp | 4242
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, "
        "shortName, mangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, dynamicSharedMemory, "
        "localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, launchType, cacheConfig) "
        "VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, ?, 128, 1, 1, 256, 1, 1, 32, 0, 0, 0, 0, ?, 0, 1, 0)",
        ((i * 3000 + 1000, i * 3000 + 2500, i, gp, 1 + i % 200, 1 + i % 200, 1 + i % 200, i) for i in range(n)),
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue) VALUES (?, ?, 0, ?, ?, 201, 0)",
        ((i * 3000, i * 3000 + 800, gt, i) for i in range(n)),
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind) "
        "VALUES (?, ?, 0, 1, 7, ?, ?, 4096, 1, 1, 2)",
        ((i * 30000 + 2600, i * 30000 + 2900, n + i, gp) for i in range(n // 10)),
    )
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text) VALUES (?, ?, 59, ?, ?)",
        ((i * 6000, i * 6000 + 5000, gt, f"layer{i % 50}") for i in range(n // 2)),
    )
    con.executemany(
        "INSERT INTO OSRT_API (start, end, eventClass, globalTid, nameId, returnValue, nestingLevel) VALUES (?, ?, 27, ?, 202, 0, 0)",
        ((i * 12000 + 100, i * 12000 + 900, gt) for i in range(n // 4)),
    )
    con.commit()
    con.close()


def baseline(path: Path) -> int:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    total = 0
    for sql in BASELINE:
        total += len(con.execute(sql).fetchall())
    con.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not SCHEMA.exists():
        sys.exit(f"bench_nsys: {SCHEMA} is not available (../shared/traces); nothing to measure")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.sqlite"
        t = time.perf_counter()
        build(path, args.kernels)
        print(f"built {path.stat().st_size / 2**20:.0f} MiB export ({args.kernels} kernels) in {time.perf_counter() - t:.1f} s")
        best_base = best_load = float("inf")
        rows = events = 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            rows = baseline(path)
            best_base = min(best_base, time.perf_counter() - t)
            t = time.perf_counter()
            tl = load_nsys(path)
            best_load = min(best_load, time.perf_counter() - t)
            events = len(tl)
        print(f"sqlite3 SELECT of the same columns: {best_base:.3f} s ({rows} rows)")
        print(f"whyidle load_nsys -> Timeline:       {best_load:.3f} s ({events} events)")
        print(f"ratio: {best_load / best_base:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
