"""Small Nsight Systems exports built in tests from the real schema dumps of each nsys version.

The dumps in ../shared/traces/nsys/schemas/ are ``sqlite3 .schema`` output with the ENUM tables'
CREATE lines removed; the CREATE TABLE statements are executed as they are, so the tests read
exactly the tables and columns each version writes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_TRACES

SCHEMAS = SHARED_TRACES / "nsys" / "schemas"
VERSIONS = ("2022.2.1.31", "2024.6.2.25", "2025.1.1.110")
EPOCH_NS = 1_700_000_000_000_000_000
US = 1000


def schema_sql(version: str) -> str:
    p = SCHEMAS / f"nsys_{version}.schema.sql"
    if not p.exists():
        pytest.skip(f"nsys schema dump {p.name} not available: ../shared/traces is absent on this machine")
    return p.read_text()


def gtid(pid: int, tid: int, hw: int = 1) -> int:
    return (hw << 48) | (pid << 24) | tid


def gpid(pid: int, hw: int = 1) -> int:
    return (hw << 48) | (pid << 24)


class NsysDB:
    """An nsys export under construction: ``db.row(table, col=value, ...)``; times in us."""

    def __init__(self, path: Path, version: str) -> None:
        self.path = path
        self.con = sqlite3.connect(path)
        for stmt in schema_sql(version).split(";\n"):
            s = stmt.strip()
            if s.upper().startswith("CREATE"):
                self.con.execute(s)
        self.strings: dict[str, int] = {}
        self.cols = {
            t: [(r[1], bool(r[3]), r[4]) for r in self.con.execute(f'PRAGMA table_info("{t}")')]
            for (t,) in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }

    def has(self, table: str) -> bool:
        return table in self.cols

    def sid(self, s: str) -> int:
        if s not in self.strings:
            self.strings[s] = len(self.strings) + 1
            self.con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (self.strings[s], s))
        return self.strings[s]

    def row(self, table: str, **values: Any) -> None:
        if table not in self.cols:
            return  # this version does not have the table: nsys writes it only when used
        data: dict[str, Any] = {}
        for name, notnull, default in self.cols[table]:
            if name in values:
                data[name] = values[name]
            elif notnull and default is None:
                data[name] = 0
        names = ", ".join(f'"{c}"' for c in data)
        self.con.execute(f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" for _ in data)})', list(data.values()))

    def close(self) -> Path:
        self.con.commit()
        self.con.close()
        return self.path


def standard_db(path: Path, version: str, osrt: bool = True, step: bool = False) -> Path:
    """The scenario of tests/test_nsys.py (see there for the timing diagram)."""
    db = NsysDB(path, version)
    A, B = 100, 200
    ta, tb = gtid(A, A), gtid(B, B)
    db.row("TARGET_INFO_SESSION_START_TIME", utcEpochNs=EPOCH_NS, utcTime="2023-11-14T22:13:20", localTime="2023-11-14T22:13:20")
    db.row(
        "TARGET_INFO_GPU", vmId=0, id=0, name="NVIDIA H100 80GB HBM3", busLocation="0000:45:00.0",
        uuid="9f8075aa-e02a-0953-1955-32f638fb2993", smCount=132, computeMajor=9, computeMinor=0,
    )  # fmt: skip
    db.row("ThreadNames", nameId=db.sid("trainer"), priority=0, globalTid=ta)

    def runtime(name: str, s: float, e: float, corr: int, tid: int = ta, cls: int = 0) -> None:
        db.row("CUPTI_ACTIVITY_KIND_RUNTIME", start=int(s * US), end=int(e * US), eventClass=cls, globalTid=tid, correlationId=corr, nameId=db.sid(name), returnValue=0)

    def kernel(name: str, s: float, e: float, corr: int, pid: int = A, stream: int = 7, grid: int = 264) -> None:
        db.row(
            "CUPTI_ACTIVITY_KIND_KERNEL", start=int(s * US), end=int(e * US), deviceId=0, contextId=1, streamId=stream,
            correlationId=corr, globalPid=gpid(pid), demangledName=db.sid(name), shortName=db.sid(name.split("(")[0]),
            gridX=grid, gridY=1, gridZ=1, blockX=256, blockY=1, blockZ=1,
        )  # fmt: skip

    runtime("cudaLaunchKernel_v7000", 10, 15, 1)
    runtime("cudaLaunchKernel", 10, 15, 1, cls=67)  # backtrace duplicate: dropped
    kernel("sgemm_backward_kernel(float*)", 20, 120, 1)
    runtime("cudaLaunchKernel_v7000", 16, 21, 2)
    kernel("relu_kernel(float*)", 121, 200, 2)
    runtime("cudaStreamSynchronize_v3020", 22, 205, 3)
    db.row("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=25 * US, end=205 * US, deviceId=0, contextId=1, streamId=7, correlationId=3, globalPid=gpid(A), syncType=3, deprecatedSyncType=3)
    if osrt:
        db.row("OSRT_API", start=300 * US, end=2300 * US, eventClass=27, globalTid=ta, nameId=db.sid("futex"), returnValue=0, nestingLevel=0)
    runtime("cudaLaunchKernel_v7000", 2400, 2405, 4)
    kernel("relu_kernel(float*)", 2410, 2500, 4)
    runtime("cudaMemcpyAsync_v3020", 2505, 2600, 5)
    db.row(
        "CUPTI_ACTIVITY_KIND_MEMCPY", start=2600 * US, end=2650 * US, deviceId=0, contextId=1, streamId=7, correlationId=5,
        globalPid=gpid(A), bytes=1 << 20, copyKind=1, srcKind=0, dstKind=2,
    )  # fmt: skip
    # Process B reuses correlation id 1; its kernel runs inside A's busy time on another stream.
    runtime("cudaLaunchKernel_v7000", 50, 55, 1, tid=tb)
    kernel("other_process_kernel(int)", 30, 40, 1, pid=B, stream=9)
    nvtx_type = 59
    db.row("NVTX_EVENTS", start=10 * US, end=16 * US, eventType=nvtx_type, globalTid=ta, text="aten::mm, seq = 3, sizes = [[4, 4]]")
    db.row("NVTX_EVENTS", start=2 * US, end=3 * US, eventType=nvtx_type, globalTid=ta, text="forward")
    if step:
        db.row("NVTX_EVENTS", start=5 * US, end=2700 * US, eventType=nvtx_type, globalTid=ta, text="train_step 1")
    db.row("META_DATA_EXPORT", name="EXPORT_PRODUCT_VERSION", value=version)
    db.row("EXPORT_META_DATA", name="EXPORT_PRODUCT_VERSION", value=version)
    return db.close()
