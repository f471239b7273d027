"""Hostile inputs and outputs (issue 14): one test per defect, each failing without its fix.

Inputs are never modified and nothing is written beside them; outputs are atomic, never over an
input, never replace a symlink, FIFO or device; every failed write is an error; memory stays
bounded on small hostile files; trace strings cannot steer the terminal; malformed numbers and
structure give one clear InputError, never an internal exception.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import hostile
import whyidle
from whyidle.cli import main
from whyidle.errors import InputError, OutputError, TraceFormatError, UsageError
from whyidle.output import clean, one_line, write_atomic, write_stdout
from whyidle.sources import _io, load
from whyidle.sources import kineto_stream as ks
from whyidle.sources.kineto import parse_kineto

SRC = str(Path(whyidle.__file__).parents[1])
ENV = dict(os.environ, PYTHONPATH=SRC)


def _cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "whyidle.cli", *args], capture_output=True, text=True, timeout=timeout, env=ENV, **kw)


@pytest.fixture(scope="module")
def trace_doc() -> dict[str, Any]:
    return hostile.base_trace(3)


@pytest.fixture
def trace(tmp_path: Path, trace_doc: dict[str, Any]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace_doc))
    return p


def _one_clear_line(err: str, *names: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err and "could not be analysed" not in err, err
    for n in names:
        assert n in err, (n, err)


# --- 1. -o never overwrites an input -------------------------------------------------------------


def test_output_that_is_the_input_is_refused_and_the_input_kept(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = trace.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(trace)
    hard = tmp_path / "hard.json"
    os.link(trace, hard)
    for out in (trace, link, hard, tmp_path / "." / "t.json"):
        assert main(["diagnose", str(trace), "-o", str(out)]) == 2
        _one_clear_line(capsys.readouterr().err, str(out), "is the input")
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(before))
    assert main(["diagnose", str(gz), "-o", str(gz)]) == 2  # would become its own Perfetto export
    assert main(["compare", str(trace), str(gz), "-o", str(gz)]) == 2
    assert main(["diagnose", str(tmp_path), "-o", str(trace), "--format", "json"]) == 2  # a file inside the input folder
    assert trace.read_bytes() == before and gzip.decompress(gz.read_bytes()) == before


def test_convert_refuses_to_overwrite_its_input(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    pq = tmp_path / "t.parquet"
    assert main(["convert", str(trace), "-o", str(pq)]) == 0
    before = pq.read_bytes()
    capsys.readouterr()
    assert main(["convert", str(pq), "-o", str(pq)]) == 2
    _one_clear_line(capsys.readouterr().err, "is the input")
    assert pq.read_bytes() == before


# --- 2. symlinks, FIFOs and devices are written through, never replaced --------------------------


def test_output_symlink_keeps_the_link_and_replaces_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_output_fifo_and_device_are_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    write_atomic("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # as root, a rename would have replaced it
    assert not list(Path("/dev").glob(".null.*.tmp"))


def test_output_folder_and_missing_folder_name_the_output(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(trace), "-o", str(tmp_path), "--format", "json"]) == 2
    _one_clear_line(capsys.readouterr().err, str(tmp_path), "is a folder")
    missing = tmp_path / "no" / "r.json"
    assert main(["diagnose", str(trace), "-o", str(missing)]) == 2
    _one_clear_line(capsys.readouterr().err, str(missing), "does not exist")


# --- 3 and 8. every write is checked; output errors name the output ------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_on_stdout_is_an_error(trace: Path) -> None:
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "whyidle.cli", "diagnose", str(trace), "--json"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=ENV)
    assert p.returncode == 2
    _one_clear_line(p.stderr, "<stdout>", "No space left")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_on_an_output_file_names_the_output(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(trace), "-o", "/dev/full", "--format", "json"]) == 2
    err = capsys.readouterr().err
    _one_clear_line(err, "/dev/full", "No space left")
    assert str(trace) not in err  # the input is not blamed


def test_reader_going_away_is_status_141(trace: Path) -> None:
    import fcntl

    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: a small pipe, so the report does not fit in it
    p = subprocess.Popen([sys.executable, "-m", "whyidle.cli", "diagnose", str(trace), "--json"], stdout=w, stderr=subprocess.PIPE, env=ENV)
    os.close(w)
    os.read(r, 10)  # like `| head -c 10`
    os.close(r)
    assert p.stderr is not None
    assert p.wait(120) == 141
    assert b"Traceback" not in p.stderr.read()


def test_write_stdout_raises_output_error_on_failure() -> None:
    class Full:
        def write(self, s: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

    with pytest.raises(OutputError, match="No space left"):
        write_stdout("x", Full())  # type: ignore[arg-type]


# --- 9. closed streams ---------------------------------------------------------------------------


def test_closed_stdout_is_one_line_on_stderr(trace: Path) -> None:
    p = subprocess.run(f'"{sys.executable}" -m whyidle.cli diagnose "{trace}" >&-', shell=True, capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 2
    _one_clear_line(p.stderr, "<stdout>", "closed")


def test_closed_stderr_never_sends_errors_to_stdout(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    p = subprocess.run(f'"{sys.executable}" -m whyidle.cli diagnose "{bad}" 2>&-', shell=True, capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 2 and p.stdout == ""


# --- 4. bounded memory on small hostile inputs ---------------------------------------------------

_LIMIT = 2 << 30  # the whole process tree, workers included (the tiny-events bomb peaks at 1.1-1.3 GB)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bombs")
    spaces = hostile.gzip_bomb(d / "spaces.json.gz", 4 << 30)  # size field small: the in-memory reader first
    streamed = hostile.gzip_bomb(d / "streamed.json.gz", 4 << 30, last_member_bytes=300 << 20)  # the out-of-core reader
    ev = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},'
    events = hostile.gzip_bomb(d / "events.json.gz", 4 << 30, body=ev)  # every byte an event
    return {"spaces": spaces, "streamed": streamed, "events": events}


@pytest.mark.parametrize("kind", ["spaces", "streamed", "events"])
def test_gzip_bomb_is_refused_in_bounded_memory(bombs: dict[str, Path], kind: str) -> None:
    p = bombs[kind]
    assert p.stat().st_size < 16 << 20  # 4 GiB of text in a few MB
    r = hostile.run_bounded([sys.executable, "-m", "whyidle.cli", "diagnose", str(p)], _LIMIT, 300, env=ENV)
    assert not r["killed"], (r["killed"], r["peak_bytes"] >> 20)
    assert r["rc"] == 2
    _one_clear_line(r["stderr"], str(p))


def test_gzip_ratio_cap_in_both_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whyidle.config import ReadSettings

    p = tmp_path / "b.json.gz"
    hostile.gzip_bomb(p, 32 << 20, body=b'{"ph": "i", "name": "n", "ts": 1},')
    monkeypatch.setattr(ReadSettings, "gzip_ratio_floor_bytes", 1 << 20)  # 32 MiB from 32 KB: over 100x
    with pytest.raises(TraceFormatError, match="gzip bomb"):
        _io.read_bytes(p)
    with pytest.raises(TraceFormatError, match="gzip bomb"):
        ks.parse_kineto_stream(p, jobs=1)


def test_huge_world_size_costs_nothing(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    for r in (0, 1):
        d = dict(trace_doc, distributedInfo={"rank": r, "world_size": 10**9})
        (tmp_path / f"rank{r}.json").write_text(json.dumps(d))
    res = hostile.run_bounded([sys.executable, "-m", "whyidle.cli", "diagnose", str(tmp_path), "--jobs", "2"], _LIMIT, 120, env=ENV)
    assert not res["killed"] and res["rc"] == 0, res["stderr"]


def test_plausible_but_large_world_size_lists_only_a_few_missing_ranks(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    from whyidle.ranks.run import diagnose_ranks

    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text(json.dumps(dict(trace_doc, distributedInfo={"rank": r, "world_size": 1 << 24})))
    t0 = time.perf_counter()
    m = diagnose_ranks(tmp_path, jobs=1)
    assert time.perf_counter() - t0 < 60
    note = next(n for n in m.notes if "ranks present" in n)
    assert "2 of 16777216 ranks present; missing: 2, 3," in note and "and 16777198 more" in note


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_non_regular_inputs_are_refused_at_once(tmp_path: Path, path: str) -> None:
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    for args in (["diagnose", path], ["compare", path, path], ["convert", path, "-o", str(tmp_path / "o.parquet")]):
        r = hostile.run_bounded([sys.executable, "-m", "whyidle.cli", *args], _LIMIT, 60, env=ENV)
        assert not r["killed"] and r["rc"] == 2, (args, r)
        if args[0] != "convert" or "pyarrow" in r["stderr"]:
            continue
        _one_clear_line(r["stderr"], path, "not a regular file")


def test_counter_log_with_a_far_future_sample_stays_small(tmp_path: Path) -> None:
    rows = ["timestamp, index, utilization.gpu [%], utilization.memory [%]"]
    rows += [f"2025/07/09 01:17:{s:02d}.000, 0, {50 + s % 40}, 10" for s in range(60)]
    rows.append("2200/07/09 01:18:00.000, 0, 50, 10")
    p = tmp_path / "gpu.csv"
    p.write_text("\n".join(rows) + "\n")
    r = hostile.run_bounded([sys.executable, "-m", "whyidle.cli", "diagnose", str(p)], 512 << 20, 120, env=ENV)
    assert not r["killed"] and r["rc"] == 0, r["stderr"]
    p.write_text("\n".join(rows[:-1] + ["9999/07/09 01:18:00.000, 0, 50, 10"]) + "\n")
    assert any("outside 1970-2262" in q for q in whyidle.diagnose(p).quality)  # the row is skipped, never wrapped


# --- 5 and 15. terminal injection; one-line errors ------------------------------------------------

_EVIL = "\x1b[2J\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x07\u202e"


def test_trace_strings_cannot_steer_the_terminal(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    d = json.loads(json.dumps(trace_doc))
    for e in d["traceEvents"]:
        if e.get("ph") == "X":
            e["name"] = _EVIL + e["name"]
    d["deviceProperties"] = [{"id": 0, "name": _EVIL + "GPU", "computeMajor": 8, "computeMinor": 0}]
    p = tmp_path / f"t{_EVIL[:4]}.json"
    p.write_text(json.dumps(d))
    from whyidle.render.terminal import render_terminal

    report = whyidle.diagnose(p)
    for color in (False, True):
        text = render_terminal(report, width=100, color=color)
        assert "\x07" not in text and "\u202e" not in text and "\x1b]" not in text and "\x1b[2J" not in text
        if not color:
            assert "\x1b" not in text
    r = _cli("diagnose", str(p))
    assert r.returncode == 0 and "\x1b" not in r.stdout and "\\x1b" in r.stdout


def test_errors_are_one_terminal_safe_line(tmp_path: Path) -> None:
    p = tmp_path / "t\x1b[2J.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "' + "1\n" * 3000 + '", "dur": 1}]}')
    r = _cli("diagnose", str(p))
    assert r.returncode == 2 and "\x1b" not in r.stderr
    _one_clear_line(r.stderr, "\\x1b[2J")
    assert len(r.stderr) < 1200
    assert one_line("a\nb\x1b" + "x" * 5000).startswith("a\\x0ab\\x1bx") and len(one_line("x" * 5000)) < 450
    assert clean("tab\tnew\nline") == "tab\tnew\nline"


# --- 6. hidden crashes become InputErrors naming the file and the field ---------------------------

_EV = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}


def _doc(**top: Any) -> dict[str, Any]:
    events = top.pop("events", [dict(_EV)])
    return {"traceEvents": events, **top}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}", "nested"),
        (json.dumps(_doc(events=[dict(_EV, ts=2**63)])).encode(), "'ts'.*too large"),
        (json.dumps(_doc(events=[dict(_EV, ts=2**60)])).encode(), "'ts'.*too large"),  # x1000 wrapped into a negative time
        (json.dumps(_doc(events=[dict(_EV, ts=1e19)])).encode(), "'ts'.*too large"),
        (json.dumps(_doc(events=[dict(_EV, dur=-1e300)])).encode(), "'dur'.*too large"),
        (json.dumps(_doc(baseTimeNanoseconds=2**64)).encode(), "baseTimeNanoseconds"),
        (json.dumps(_doc(baseTimeNanoseconds=2**61, events=[dict(_EV, ts=2**52)])).encode(), "overflow|too large"),
    ],
    ids=["deep-nesting", "ts-2**63", "ts-wraps", "ts-1e19", "dur-1e300", "base-2**64", "base-overflows"],
)
def test_malformed_numbers_and_structure_are_input_errors(tmp_path: Path, text: bytes, match: str) -> None:
    p = tmp_path / "m.json"
    p.write_bytes(text)
    for read in (lambda: whyidle.diagnose(p), lambda: ks.parse_kineto_stream(p, jobs=1)):
        with pytest.raises(InputError, match=match) as e:
            read()
        assert e.value.path == str(p)


def test_odd_values_in_ids_and_args_are_read_not_crashed(tmp_path: Path) -> None:
    ev = [
        dict(_EV, args={"correlation": 2**64, "stream": "inf", "device": "nan", "bytes": "1e400"}),
        dict(_EV, cat=["not", "hashable"]),
        dict(_EV, cat={"x": 1}),
        dict(_EV, ts=2, args={"correlation": "1e999", "blocks per SM": "inf"}),
    ]
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_doc(events=ev, distributedInfo={"rank": 2**70, "world_size": -5})))
    r = whyidle.diagnose(p)
    assert r.source.rank is None and r.source.world_size is None
    assert any("world_size" in q for q in r.quality)


def test_dcgmi_second_header_with_more_columns(tmp_path: Path) -> None:
    rows = ["#Entity   GPUTL   SMACT", "ID"] + [f"GPU 0   {40 + i % 20}   0.5" for i in range(20)]
    rows += ["#Entity   GPUTL   SMACT   DRAMA   EXTRA", "ID"] + ["GPU 0   50   0.5   0.1   3"] * 5
    p = tmp_path / "gpu.txt"
    p.write_text("\n".join(rows) + "\n")
    r = whyidle.diagnose(p)
    assert any("second '#Entity' header" in q for q in r.quality)


def test_nsys_blobs_and_huge_integers(tmp_path: Path) -> None:
    from nsysbuild import VERSIONS, standard_db

    p = standard_db(tmp_path / "n.sqlite", VERSIONS[-1])
    con = sqlite3.connect(p)
    con.execute("update ThreadNames set globalTid = ? where rowid in (select rowid from ThreadNames limit 1)", (b"\x00\xff",))
    kt = "CUPTI_ACTIVITY_KIND_KERNEL"
    con.execute(f"update {kt} set correlationId = ? where rowid in (select rowid from {kt} limit 1)", (b"\x00\xff",))
    con.execute(f"update {kt} set streamId = ? where rowid in (select rowid from {kt} limit 1)", (2**63 - 1,))
    con.commit()
    con.close()
    whyidle.diagnose(p)  # a report; the damaged cells count as unknown
    con = sqlite3.connect(p)
    con.execute(f"update {kt} set start = ? where rowid in (select rowid from {kt} limit 1)", (2**63 - 1,))
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="event time"):
        whyidle.diagnose(p)


def test_saved_report_with_odd_fields_is_an_input_error(tmp_path: Path, trace: Path) -> None:
    from whyidle.render.json import render_json

    doc = json.loads(render_json(whyidle.diagnose(trace)))
    for field, value in (("batch_size", "32"), ("batch_size", 0), ("batch_size", 2**70)):
        bad = json.loads(json.dumps(doc))
        bad["throughput"][field] = value
        p = tmp_path / "r.json"
        p.write_text(json.dumps(bad))
        r = _cli("compare", str(p), str(trace))
        assert r.returncode == 2, r.stderr
        _one_clear_line(r.stderr, str(p), "batch_size")
    bad = json.loads(json.dumps(doc))
    bad["utilization"]["idle_ns"] = 1e300
    p.write_text(json.dumps(bad))
    with pytest.raises(TraceFormatError, match="malformed"):
        from whyidle.findings.saved import load_report

        load_report(p)


# --- 7. both Kineto readers agree -----------------------------------------------------------------


def test_float_base_time_and_trailing_text_read_alike(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    from tlbuild import assert_same_timeline

    p = tmp_path / "b.json"
    for base in (1.7e18, 1700000000000000123.0, "1700000000000000123"):
        d = dict(trace_doc, baseTimeNanoseconds=base)
        p.write_text(json.dumps(d))
        a, b = parse_kineto(p.read_bytes(), str(p)), ks.parse_kineto_stream(p, jobs=1)
        assert_same_timeline(a, b)
        assert int(a.start_ns.min()) > 10**18  # applied by both
    p.write_text(json.dumps(trace_doc["traceEvents"]) + " trailing")
    for read in (lambda: parse_kineto(p.read_bytes(), str(p)), lambda: ks.parse_kineto_stream(p, jobs=1)):
        with pytest.raises(TraceFormatError):
            read()


# The differential test over mutated inputs (both readers: the same timeline or both an error)
# is tests/test_fuzz.py, families kineto and bytes.


# --- 10. nothing is written beside an input -------------------------------------------------------


def test_wal_mode_sqlite_gets_no_files_beside_it(tmp_path: Path) -> None:
    from nsysbuild import VERSIONS, standard_db

    d = tmp_path / "ro"
    d.mkdir()
    p = standard_db(d / "n.sqlite", VERSIONS[-1])
    con = sqlite3.connect(p)
    assert con.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
    con.close()
    before = sorted(x.name for x in d.iterdir())
    whyidle.diagnose(p)
    assert sorted(x.name for x in d.iterdir()) == before  # no n.sqlite-wal / -shm


# --- 11. multi-member gzip ------------------------------------------------------------------------


def test_multi_member_gzip_with_equal_member_sizes(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    text = json.dumps(trace_doc).encode()
    half = len(text) // 2
    first, second = text[:half], text[half:]
    second = second + b" " * (len(first) - len(second))  # the last member's size field equals the first's
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(first) + gzip.compress(second))
    assert _io.read_bytes(p) == first + second
    assert len(load(p)) > 0


# --- 12. Ctrl-C with a process pool ---------------------------------------------------------------


def test_ctrl_c_with_a_pool_prints_one_line(tmp_path: Path, trace_doc: dict[str, Any]) -> None:
    d = json.loads(json.dumps(trace_doc))
    d["traceEvents"] = d["traceEvents"] * 300  # a second or two per rank on this machine
    for r in range(4):
        (tmp_path / f"rank{r}.json").write_text(json.dumps(d))
    p = subprocess.Popen([sys.executable, "-m", "whyidle.cli", "diagnose", str(tmp_path), "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    import psutil

    deadline = time.monotonic() + 60
    while p.poll() is None and len(psutil.Process(p.pid).children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # until the pool's workers run
    time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    _, err = p.communicate(timeout=120)
    if p.returncode == 0:
        pytest.skip("the run finished before the interrupt")
    assert p.returncode == 130
    assert err.decode().count("\n") == 1 and b"Traceback" not in err and b"KeyboardInterrupt" not in err, err.decode()


def _pid_after_a_while(_: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def test_pool_workers_leave_ctrl_c_to_the_parent(tmp_path: Path, trace_doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker waiting for work when Ctrl-C arrives would die printing a KeyboardInterrupt
    traceback; with quiet_worker it ignores SIGINT, and both of whyidle's pools use it."""
    from concurrent.futures import ProcessPoolExecutor

    import whyidle.ranks.run as ranks
    from whyidle.sources._twoway import quiet_worker

    with ProcessPoolExecutor(max_workers=2, initializer=quiet_worker) as pool:
        ran: set[int] = set()
        deadline = time.monotonic() + 30
        while len(ran) < 2 and time.monotonic() < deadline:  # both started (a task runs after the initializer), now idle
            ran.update(pool.map(_pid_after_a_while, range(4)))
        assert ran == set(pool._processes)
        for pid in list(pool._processes):
            os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert [f.result(timeout=30) for f in [pool.submit(int, "2"), pool.submit(int, "3")]] == [2, 3]  # still alive
    made: list[Any] = []

    class Recording(ProcessPoolExecutor):
        def __init__(self, *a: Any, **kw: Any) -> None:
            made.append(kw.get("initializer"))
            super().__init__(*a, **kw)

    monkeypatch.setattr(ranks, "ProcessPoolExecutor", Recording)
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", Recording)
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text(json.dumps(trace_doc))
    ranks.map_local([str(tmp_path / "rank0.json"), str(tmp_path / "rank1.json")], whyidle.Config(), jobs=2)
    ks._Batches(None, False, 2).close()  # type: ignore[arg-type]
    assert made == [quiet_worker, quiet_worker]


# --- 13. out of memory names the file -------------------------------------------------------------


def test_out_of_memory_names_the_input(trace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import whyidle.pipeline as pl

    def boom(*a: Any, **k: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(pl, "diagnose", boom)
    assert main(["diagnose", str(trace)]) == 2
    err = capsys.readouterr().err
    _one_clear_line(err, str(trace), "out of memory")


# --- 14. the tracker never raises into the training loop ------------------------------------------


def test_tracker_warning_never_becomes_an_exception_in_the_loop() -> None:
    from whyidle.capture.tracker import StepTracker

    calls = iter(range(0, 10**9, 1000))

    def clock() -> int:
        v = next(calls)
        if v >= 5000:
            raise RuntimeError("clock broke")
        return v

    tr = StepTracker(range(10), clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(tr) == list(range(10))  # the loop ran to the end
    assert tr.broken and any("stopped measuring" in n for n in tr.stats(wait=False).notes)


def test_tracker_copy_before_the_loop_is_no_step() -> None:
    import itertools

    from whyidle.capture.tracker import StepTracker

    c = itertools.count(0, 1000)
    tr = StepTracker([[1, 2]] * 3, clock=lambda: next(c), skip_first=0)
    with tr.copy():  # model.to(device) before the loop
        pass
    for b in tr:
        tr.step(b)
    assert len(tr.stats().steps) == 3


@pytest.mark.parametrize("bad", [0, -4, 2.5, "8"])
def test_tracker_batch_size_must_be_positive(bad: Any) -> None:
    with pytest.raises(UsageError, match="batch_size"):
        whyidle.track([1], batch_size=bad)


def test_ctrl_c_while_the_diagnosis_helper_works_prints_one_line_and_leaves_no_child() -> None:
    """Ctrl-C (the whole process group) while the diagnosis's helper process is still making the
    what-if graph: one line, exit 130, and the helper is gone (this process stops it)."""
    import psutil

    trace = Path(__file__).parent / "data" / "h200" / "lab_sync_cuda.pt.trace.json.gz"
    driver = (
        "import sys, time\n"
        "import whyidle.pipeline as pipeline\n"
        "real = pipeline.prediction_graph\n"
        "pipeline.prediction_graph = lambda *a: (time.sleep(60), real(*a))[1]  # a helper still at work\n"
        "from whyidle.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", driver, "diagnose", str(trace), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    deadline = time.monotonic() + 60
    children: list[Any] = []
    while p.poll() is None and not children and time.monotonic() < deadline:
        children = psutil.Process(p.pid).children()
        time.sleep(0.02)
    assert children, "no helper process was forked"
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert err.decode().count("\n") == 1 and b"Traceback" not in err and b"KeyboardInterrupt" not in err, err.decode()
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
