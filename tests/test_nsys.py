"""Nsight Systems SQLite exports: small exports built from the real schema of several nsys versions
with exactly known gaps and causes, and every real sample end to end (read-only, checksummed).

The built scenario (times in us after the session start; process A, thread "trainer")::

    A host   [mm][L1][L2][cudaStreamSynchronize ....]      futex (OSRT) ......       [L4]   [memcpyAsync]
             10  15  21  22                       205      300            2300       2400   2505      2600
    device        [K1 20..120][K2 121..200]                                          [K4 2410..2500]  [HtoD pageable 2600..2650]
    B host              [L1' 50..55]   (process B reuses correlation id 1)
    B device      [KB 30..40 on stream 9]

Expected device-idle gaps: [120, 121) kernel boundaries (K2 was queued); [200, 2410) drained by
the sync: the 5 us in the sync and the 195 us with nothing traced around the futex are what the
sync serialised (host sync, 200 us); the futex [300, 2300) is a blocked thread, waiting on
something the trace does not show, not host work: untraced host, which also takes the 10 us
launch tail as the gap's dominant cause (2010 us).
Without the OS-runtime table (older schemas) the futex is unseen and the sync owns all 2210 us.
[2500, 2600) 5 us host overhead, then the pageable copy's 95 us staging: H2D copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from nsysbuild import EPOCH_NS, VERSIONS, NsysDB, standard_db

from conftest import SHARED_TRACES
from whyidle.analyses.links import link_launches
from whyidle.cli import main
from whyidle.pipeline import diagnose
from whyidle.errors import InputError, UnsupportedInputError
from whyidle.sources import load
from whyidle.sources.nsys import DEFAULT_STEP_PATTERN, decode_global_tid, load_exported_report, memcpy_name, strip_api_version
from whyidle.timeline.model import Kind, LaneKind

US = 1000

EXPECTED_GAPS = [
    (120 * US, 121 * US, {"underfilled/kernel_boundaries": 1_000}),
    (200 * US, 2410 * US, {"unattributed/untraced_host": 2_010_000, "synchronization/host_sync": 200_000}),
    (2500 * US, 2600 * US, {"underfilled/host_overhead": 5_000, "starvation/h2d_copy": 95_000}),
]
WITHOUT_OSRT = (200 * US, 2410 * US, {"synchronization/host_sync": 2_210_000})


@pytest.mark.parametrize("version", VERSIONS + ("2024.5.1.113",))
def test_exact_gaps_and_causes_per_schema_version(tmp_path: Path, version: str) -> None:
    p = standard_db(tmp_path / "run.sqlite", version)
    r = diagnose(p)
    got = sorted((g.start_ns - EPOCH_NS, g.end_ns - EPOCH_NS, dict(g.causes_ns)) for g in r.gaps)
    has_osrt = any(s == "futex" for s in load(p).strings)
    assert got == (EXPECTED_GAPS if has_osrt else [EXPECTED_GAPS[0], WITHOUT_OSRT, EXPECTED_GAPS[2]])
    assert r.idle_by_cause_ns["unattributed/untraced_host"] == (2_010_000 if has_osrt else 0)
    assert r.idle_by_cause_ns["underfilled/host_overhead"] == 5_000
    assert r.source.format == "nsys"
    assert version in r.source.version


def test_osrt_blocking_call_is_not_host_work(tmp_path: Path) -> None:
    """With the futex read as host work the gap would be host overhead (or the sync's); it is a
    blocked thread, waiting on something untraced, whether or not a sync came before it."""
    with_osrt = diagnose(standard_db(tmp_path / "a.sqlite", "2022.2.1.31", osrt=True))
    without = diagnose(standard_db(tmp_path / "b.sqlite", "2022.2.1.31", osrt=False))
    assert with_osrt.idle_by_cause_ns["unattributed/untraced_host"] == 2_010_000
    assert with_osrt.idle_by_cause_ns["underfilled/host_overhead"] == without.idle_by_cause_ns["underfilled/host_overhead"] == 5_000
    assert without.idle_by_cause_ns["synchronization/host_sync"] == 2_210_000
    tl = load(tmp_path / "a.sqlite")
    futex = [i for i in range(len(tl)) if tl.name_of(i) == "futex"]
    assert len(futex) == 1 and tl.kind[futex[0]] == Kind.ANNOTATION


def test_rows_names_and_kinds(tmp_path: Path) -> None:
    tl = load(standard_db(tmp_path / "run.sqlite", "2022.2.1.31"))
    kinds = {Kind(k).name: int(n) for k, n in zip(*np.unique(tl.kind, return_counts=True))}
    # 6 runtime rows (the event-class-67 backtrace duplicate dropped), 4 kernels, 1 copy, 1 sync
    # record, 2 NVTX ranges (one an emit_nvtx op), 1 OSRT call.
    assert kinds == {"KERNEL": 4, "MEMCPY": 1, "RUNTIME": 6, "SYNC": 1, "CPU_OP": 1, "ANNOTATION": 2}
    names = set(tl.strings)
    assert "cudaLaunchKernel" in names and "cudaLaunchKernel_v7000" not in names
    assert "Memcpy HtoD (Pageable -> Device)" in names
    assert "aten::mm" in names  # "aten::mm, seq = 3, sizes = ..." -> the op name
    sync = int(np.flatnonzero(tl.kind == Kind.SYNC)[0])
    assert tl.name_of(sync) == "Stream Sync" and tl.lanes[tl.lane[sync]].name == "trainer"
    k1 = int(np.flatnonzero(tl.kind == Kind.KERNEL)[0])
    assert tl.blocks_per_sm[k1] == pytest.approx(2.0)  # grid 264 / 132 SMs
    dev = tl.meta.devices[0]
    assert dev["pci_bus_id"] == "0000:45:00.0" and dev["uuid"].startswith("9f8075aa") and dev["computeMajor"] == 9
    assert tl.start_ns.min() >= EPOCH_NS  # shifted to the UTC epoch clock


def test_correlation_ids_join_per_process(tmp_path: Path) -> None:
    tl = load(standard_db(tmp_path / "run.sqlite", "2025.1.1.110"))
    links = link_launches(tl)
    for row, launch in zip(links.device_rows.tolist(), links.launch_of.tolist()):
        assert launch >= 0
        dev_pid = tl.lanes[tl.lane[row]].pid
        host = tl.lanes[tl.lane[launch]]
        assert host.kind is LaneKind.CPU_THREAD and host.pid == dev_pid


def test_nvtx_step_ranges(tmp_path: Path) -> None:
    p = standard_db(tmp_path / "run.sqlite", "2024.6.2.25", step=True)
    r = diagnose(p)
    assert r.window.basis == "steps"
    # the window ends with the device work launched in the last step (the copy, at 2650), not
    # with the step's host range (2700)
    assert (r.window.start_ns - EPOCH_NS, r.window.end_ns - EPOCH_NS) == (5 * US, 2650 * US)
    # a pattern that matches nothing: back to the device-activity window
    r2 = diagnose(p, step_range=r"^never$")
    assert r2.window.basis == "device activity"


@pytest.mark.parametrize(
    "name,step",
    [("ProfilerStep#12", True), ("train_step", True), ("training_step 3", True), ("step 7", True), ("Iteration#2", True),
     ("batch_5", True), ("Optimizer.step#SGD.step", False), ("step", False), ("forward", False)],
)  # fmt: skip
def test_default_step_pattern(name: str, step: bool) -> None:
    import re

    assert bool(re.search(DEFAULT_STEP_PATTERN, name)) is step


def test_helpers() -> None:
    assert strip_api_version("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties_v2"
    assert strip_api_version("cuGetProcAddress_v2") == "cuGetProcAddress_v2"
    assert decode_global_tid((1 << 48) | (50556 << 24) | 50557) == (50556, 50557)
    assert memcpy_name(2, 2, 1) == "Memcpy DtoH (Device -> Pinned)"


def test_no_kernels_says_so(tmp_path: Path) -> None:
    db = NsysDB(tmp_path / "empty.sqlite", "2025.5.1.121")
    db.row("CUPTI_ACTIVITY_KIND_RUNTIME", start=1000, end=2000, eventClass=0, globalTid=(1 << 48) | (5 << 24) | 5, correlationId=1, nameId=db.sid("cudaMemsetAsync_v3020"))
    db.row("CUPTI_ACTIVITY_KIND_MEMSET", start=3000, end=4000, deviceId=0, streamId=7, correlationId=1, globalPid=(1 << 48) | (5 << 24), bytes=64, memKind=2)
    r = diagnose(db.close())
    assert any("no kernels" in q for q in r.quality)


def test_not_an_nsys_database(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(UnsupportedInputError, match="not an Nsight Systems export"):
        load(p)
    assert main(["diagnose", str(p)]) == 2


def test_nsys_rep_without_nsys_says_which_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(UnsupportedInputError, match="nsys export --type sqlite"):
        load(rep)


def test_nsys_rep_exported_with_a_fake_nsys(tmp_path: Path) -> None:
    """The exporter runs `nsys export --type sqlite --output OUT REP`, reads OUT, then removes it."""
    built = standard_db(tmp_path / "built.sqlite", "2025.1.1.110")
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"report")
    fake = tmp_path / "nsys"
    fake.write_text(
        f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\nassert args[:3] == ['export', '--type', 'sqlite'], args\n"
        f"shutil.copy({str(built)!r}, args[args.index('--output') + 1])\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    tl = load_exported_report(rep, nsys=str(fake))
    assert tl.meta.path == str(rep)
    assert int((tl.kind == Kind.KERNEL).sum()) == 4
    failing = tmp_path / "nsys-fails"
    failing.write_text(f"#!{sys.executable}\nimport sys\nprint('Error: report is corrupt', file=sys.stderr)\nsys.exit(3)\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(InputError, match="report is corrupt"):
        load_exported_report(rep, nsys=str(failing))


# -- the real samples ------------------------------------------------------------------------

REAL = sorted((SHARED_TRACES / "nsys").glob("*.sqlite")) if (SHARED_TRACES / "nsys").is_dir() else []


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.skipif(not REAL, reason="real nsys samples not available: ../shared/traces is absent on this machine")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name.split("__")[0])
def test_real_samples_end_to_end_read_only(path: Path, tmp_path: Path) -> None:
    before = _sha(path)
    mtime = os.stat(path).st_mtime_ns
    r = diagnose(path)
    out = tmp_path / "r.json"
    assert main(["diagnose", str(path), "-o", str(out)]) in (0, 1)
    assert out.stat().st_size > 0
    assert _sha(path) == before and os.stat(path).st_mtime_ns == mtime
    assert not list(path.parent.glob(path.name + "-*"))  # no journal/wal files left beside it
    assert r.source.format == "nsys"


def _real(name: str) -> Path:
    for p in REAL:
        if p.name.startswith(name):
            return p
    pytest.skip(f"real nsys sample {name} not available")


def test_real_pipit_2022_backtrace_rows_dropped() -> None:
    tl = load(_real("pipit"))
    assert int((tl.kind == Kind.RUNTIME).sum()) == 57  # 95 rows minus 38 of event class 67
    assert int((tl.kind == Kind.KERNEL).sum()) == 5 and int((tl.kind == Kind.MEMCPY).sum()) == 15
    assert not any(s.endswith(("_v3020", "_v7000")) for s in tl.strings)
    links = link_launches(tl)
    assert links.n_device_without_launch == 0


def test_real_cross_entropy_two_processes_correlation_collide() -> None:
    tl = load(_real("nvfuser__h200_pytest_cross_entropy"))
    links = link_launches(tl)
    assert links.n_device_without_launch == 0
    for row, launch in zip(links.device_rows.tolist(), links.launch_of.tolist()):
        assert tl.lanes[tl.lane[launch]].pid == "50556" == tl.lanes[tl.lane[row]].pid
    assert any("2 processes" in q for q in tl.meta.quality)
    assert tl.meta.devices[0]["pci_bus_id"] == "0000:45:00.0" and tl.meta.devices[0]["cuda_ordinal"] == 0


def test_real_truncated_rtx4060_has_no_kernels() -> None:
    r = diagnose(_real("weatherbench2"))
    assert any("this capture has no kernels" in q for q in r.quality)
    assert r.findings == ()


def test_real_sample_copied_and_made_read_only_still_loads(tmp_path: Path) -> None:
    src = _real("nvfuser__h200_test_matmul")
    p = tmp_path / "ro.sqlite"
    shutil.copy(src, p)
    p.chmod(0o444)
    tl = load(p)
    assert int((tl.kind == Kind.KERNEL).sum()) == 19


# -- nsys findings: the API calls behind the gaps ----------------------------------------------


def _sync_loop_db(path: Path, version: str, sync_name: str = "cudaStreamSynchronize_v3020") -> Path:
    """20 iterations of: launch, kernel 100 us, a synchronising call until the kernel ends, 88 us of Python.

    Each of the 19 gaps [b+110, b+210) is drained by the sync: 100 us of host sync each.
    """
    from nsysbuild import gpid, gtid

    db = NsysDB(path, version)
    t = gtid(7, 7)
    db.row("TARGET_INFO_SESSION_START_TIME", utcEpochNs=EPOCH_NS, utcTime="", localTime="")
    for i in range(20):
        b = i * 200
        db.row("CUPTI_ACTIVITY_KIND_RUNTIME", start=b * US, end=(b + 5) * US, eventClass=0, globalTid=t, correlationId=2 * i + 1, nameId=db.sid("cudaLaunchKernel_v7000"))
        db.row(
            "CUPTI_ACTIVITY_KIND_KERNEL", start=(b + 10) * US, end=(b + 110) * US, deviceId=0, streamId=7, correlationId=2 * i + 1,
            globalPid=gpid(7), demangledName=db.sid("conv_backward"), shortName=db.sid("conv_backward"),
        )  # fmt: skip
        db.row("CUPTI_ACTIVITY_KIND_RUNTIME", start=(b + 6) * US, end=(b + 112) * US, eventClass=0, globalTid=t, correlationId=2 * i + 2, nameId=db.sid(sync_name))
    return db.close()


@pytest.mark.parametrize("version", ("2022.2.1.31", "2025.1.1.110"))
def test_frequent_sync_calls_attributed_to_their_gaps(tmp_path: Path, version: str) -> None:
    r = diagnose(_sync_loop_db(tmp_path / "s.sqlite", version))
    assert r.gap_count == 19
    assert r.idle_by_cause_ns["synchronization/host_sync"] == 19 * 100 * US
    f = {x.id: x for x in r.findings}["api.sync_calls"]
    facts = dict(f.evidence.facts)
    assert f.idle_ns == 19 * 100 * US and f.evidence.gap_count == 19
    assert facts["calls"] == 20 and facts["frequent"] is True and facts["part_of"] == "synchronization/host_sync"
    assert facts["calls_per_s"] == pytest.approx(20 / 3.9e-3, rel=1e-3)  # window [10 us, 3910 us)
    assert "cudaStreamSynchronize" in f.title


def test_synchronous_memcpy_attributed(tmp_path: Path) -> None:
    r = diagnose(_sync_loop_db(tmp_path / "m.sqlite", "2024.6.2.25", sync_name="cudaMemcpy_v3020"))
    f = {x.id: x for x in r.findings}["api.sync_memcpy"]
    # each gap is drained by the blocking cudaMemcpy: its 100 us of host sync
    assert f.idle_ns == 19 * 100 * US and "api.sync_calls" not in {x.id for x in r.findings}
    assert dict(f.evidence.facts)["apis"] == "cudaMemcpy"


def test_pageable_async_copy_attributed(tmp_path: Path) -> None:
    r = diagnose(standard_db(tmp_path / "p.sqlite", "2025.1.1.110"), min_finding_share_of_window=0.01)
    f = {x.id: x for x in r.findings}["api.pageable_memcpy"]
    assert f.idle_ns == 95 * US  # from the cudaMemcpyAsync call (2505 us) to the copy (2600 us)
    assert f.group == "starvation" and dict(f.evidence.facts)["pageable_bytes"] == 1 << 20
    # the API findings are nsys-only: the same timeline labelled as another source has none
    tl = load(standard_db(tmp_path / "q.sqlite", "2025.1.1.110"))
    tl.meta.source_format = "kineto"
    r2 = diagnose(tl, min_finding_share_of_window=0.01)
    assert not any(x.id.startswith("api.") for x in r2.findings)


def test_blocked_host_names_the_os_calls(tmp_path: Path) -> None:
    r = diagnose(standard_db(tmp_path / "b.sqlite", "2022.2.1.31"))
    f = {x.id: x for x in r.findings}["api.blocked_host"]
    # the futex [300, 2300) inside gap [200, 2410)'s untraced host side
    assert f.idle_ns == 2000 * US and f.group == "starvation"  # training: a backward kernel is in the capture
    facts = dict(f.evidence.facts)
    assert facts["blocking_calls"] == "futex 2.0 ms" and facts["part_of"] == "unattributed/untraced_host"
    assert "api.blocked_host" not in {x.id for x in diagnose(standard_db(tmp_path / "c.sqlite", "2022.2.1.31", osrt=False)).findings}


def test_cuda_graph_launch_links_every_node_kernel(tmp_path: Path) -> None:
    """Kernels of a graph replay carry the correlation id of the one cudaGraphLaunch call."""
    from nsysbuild import gpid, gtid

    db = NsysDB(tmp_path / "g.sqlite", "2024.6.2.25")
    db.row("CUPTI_ACTIVITY_KIND_RUNTIME", start=0, end=5 * US, eventClass=0, globalTid=gtid(3, 3), correlationId=9, nameId=db.sid("cudaGraphLaunch_v10000"))
    for i in range(3):
        db.row(
            "CUPTI_ACTIVITY_KIND_KERNEL", start=(10 + 20 * i) * US, end=(25 + 20 * i) * US, deviceId=0, streamId=7, correlationId=9,
            globalPid=gpid(3), demangledName=db.sid(f"node{i}"), shortName=db.sid(f"node{i}"), graphNodeId=i + 1,
        )  # fmt: skip
    tl = load(db.close())
    links = link_launches(tl)
    assert links.n_device_without_launch == 0 and len(set(links.launch_of.tolist())) == 1
    assert tl.name_of(int(links.launch_of[0])) == "cudaGraphLaunch"


def test_cli_step_range_option(tmp_path: Path) -> None:
    p = standard_db(tmp_path / "s.sqlite", "2025.1.1.110", step=True)
    out = tmp_path / "r.json"
    assert main(["diagnose", str(p), "--step-range", "^never$", "-o", str(out)]) in (0, 1)
    import json

    assert json.loads(out.read_text())["window"]["basis"] == "device activity"
    assert main(["diagnose", str(p), "--step-range", "([unclosed"]) == 2


def test_thread_scheduled_out_is_a_blocked_thread_and_the_on_cpu_share_is_said(tmp_path: Path) -> None:
    """SCHED_EVENTS: the launching thread is scheduled out [300, 2300) during the drained gap
    [200, 2410) (no OS-runtime table): blocked, not host work the sync serialised."""
    from nsysbuild import gtid

    p = standard_db(tmp_path / "s.sqlite", "2022.2.1.31", osrt=False)
    db = sqlite3.connect(p)
    ta = gtid(100, 100)
    db.executemany(
        "INSERT INTO SCHED_EVENTS (start, cpu, isSchedIn, globalTid) VALUES (?, ?, ?, ?)",
        [(250 * US, 3, 1, ta), (300 * US, 3, 0, ta), (2300 * US, 5, 1, ta)],
    )
    db.commit()
    db.close()
    tl = load(p)
    off = [i for i in range(len(tl)) if tl.name_of(i) == "thread off CPU (scheduled out)"]
    assert [(tl.start_ns[i] - EPOCH_NS, tl.end_ns[i] - EPOCH_NS) for i in off] == [(300 * US, 2300 * US)]
    r = diagnose(p)
    gap = next(g for g in r.gaps if g.start_ns - EPOCH_NS == 200 * US)
    assert dict(gap.causes_ns) == {"unattributed/untraced_host": 2_010_000, "synchronization/host_sync": 200_000}
    f = next(f for f in r.findings if f.key == "unattributed/untraced_host")
    facts = dict(f.evidence.facts)
    # of the gap's host side [200, 2400) the thread was scheduled out 2000 us
    assert facts["thread_scheduled_out_ns"] == 2_000_000 and facts["thread_on_cpu_share"] == round(1 - 2000 / 2200, 3)


@pytest.mark.parametrize("gpu_id", ["x", None, b"\x00\xff", 2**63 - 1])
def test_odd_cuda_device_gpu_id_is_not_an_ordinal(tmp_path: Path, gpu_id: object) -> None:
    """Issue 24: text, NULL or a BLOB in TARGET_INFO_CUDA_DEVICE.gpuId was an internal error."""
    p = standard_db(tmp_path / "n.sqlite", VERSIONS[-1])
    con = sqlite3.connect(p)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    if "TARGET_INFO_CUDA_DEVICE" not in tables:
        con.close()
        pytest.skip("this export version has no TARGET_INFO_CUDA_DEVICE")
    con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE (gpuId, cudaId, pid) VALUES (?, 0, 100)", (gpu_id,))
    con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE (gpuId, cudaId, pid) VALUES (0, 3, 100)")
    con.commit()
    con.close()
    tl = load(p)
    assert [d.get("cuda_ordinal") for d in tl.meta.devices] == [3]
