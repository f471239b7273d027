"""Hostile request logs and latency curves (issue 24): each ends in one InputError naming the file
and the request, entry or line, within bounded time and memory; each test fails without its fix."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hostile
import whyidle
from whyidle.errors import InputError, UsageError
from whyidle.serving.latency import load_latency, parse_curve
from whyidle.serving.requestlog import load_requests

ENV = dict(os.environ, PYTHONPATH=str(Path(whyidle.__file__).parents[1]))
_LIMIT = 1 << 30


def _one_line(r: dict[str, Any], *names: str) -> None:
    err = r["stderr"]
    assert not r["killed"] and r["rc"] == 2, (r["killed"], r["rc"], err[-2000:])
    assert err.count("\n") == 1 and "Traceback" not in err and "could not be analysed" not in err, err
    for n in names:
        assert n in err, (n, err)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"arrival": Infinity, "finish": 2}', "arrival=inf is not a number"),
        (b'{"arrival": 1e300, "finish": 2}', "arrival=1e+300 is not a number"),
        (b'{"arrival": "1e400", "finish": 2}', "arrival='1e400' is not a number"),
        (b'{"arrival_ms": 100000000000000000000000000000, "finish": 2}', "is not a number"),
        (b'{"arrival": 1, "finish": 2, "batch_id": 1e300}', "batch_id=1e+300 is not an integer batch number"),
        (b'{"arrival": 1, "finish": 2, "batch_id": NaN}', "batch_id=nan is not an integer batch number"),
        (b'{"arrival": [1], "finish": 2}', "arrival=[1] is not a number"),
        (b'{"arrival": "9999-12-31T23:59:59", "finish": 2}', "arrival='9999-12-31T23:59:59' is not a number or an ISO 8601 time (2.53e+20 is out of range)"),
    ],
)
def test_request_log_numbers_out_of_range(tmp_path: Path, line: bytes, says: str) -> None:
    p = tmp_path / "r.jsonl"
    p.write_bytes(line + b"\n")
    with pytest.raises(InputError) as e:
        load_requests(p)
    assert str(e.value).startswith(f"{p}: request 1: ") and says in str(e.value), str(e.value)


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([{"id": 1, "timestamps": None}], "entry 1: timestamps is None"),
        ([{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": "soon"}]}], "entry 1: timestamp 'REQUEST_START' has ns='soon'"),
        ([{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1e300}]}], "has ns=1e+300"),
    ],
)
def test_triton_trace_with_odd_timestamps(tmp_path: Path, entries: list[Any], says: str) -> None:
    p = tmp_path / "triton.json"
    p.write_text(json.dumps(entries))
    with pytest.raises(InputError) as e:
        load_requests(p)
    assert str(e.value).startswith(str(p)) and says in str(e.value), str(e.value)


def test_triton_ids_of_any_json_type(tmp_path: Path) -> None:
    p = tmp_path / "triton.json"
    stamps = [{"name": "REQUEST_START", "ns": 10}, {"name": "COMPUTE_START", "ns": 20}, {"name": "REQUEST_END", "ns": 40}]
    p.write_text(json.dumps([{"id": [1, 2], "timestamps": stamps}, {"id": {"a": 1}, "timestamps": stamps}]))
    log = load_requests(p)
    assert log.requests == 2 and log.arrival_ns.tolist() == [10, 10] and log.finish_ns.tolist() == [40, 40]


def test_csv_with_an_oversized_field(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_bytes(b"arrival,finish\n1,2\n\"" + b"1" * 200_000 + b"\",3\n")
    with pytest.raises(InputError, match=r"line 3: not a CSV row \(field larger than field limit"):
        load_requests(p)


def test_csv_with_a_stray_cr_and_a_bom(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_bytes(b"\xef\xbb\xbfarrival,finish\r\n1,2\r\n3,5\r\n")
    assert load_requests(p).finish_ns.tolist() == [2_000_000_000, 5_000_000_000]
    p.write_bytes(b"arrival,finish\n1,2\n3\r4,5\n")
    with pytest.raises(InputError, match="request 2 has no arrival or no finish"):
        load_requests(p)


def test_deeply_nested_request_log(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(InputError, match="nests JSON too deeply"):
        load_requests(p)


def test_request_log_not_utf8_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_bytes(b"arrival,finish\n\xff\xfe,2\n")
    with pytest.raises(InputError, match=f"^{p}: is not UTF-8 text"):
        load_requests(p)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/stdin"])
def test_request_log_that_is_not_a_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path = kind
    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    for args in (["serving", path], ["batching", "--curve", "1:2,8:4", "--requests", path, "--slo-ms", "50"], ["batching", "--latency", path, "--rate", "10", "--slo-ms", "50"]):
        # stdin a pipe nobody writes to: reading /dev/stdin would block forever
        r = hostile.run_bounded([sys.executable, "-m", "whyidle", *args], _LIMIT, 30, env=ENV, stdin=subprocess.PIPE)
        _one_line(r, path, "not a regular file")


def test_request_log_gzip_bomb_in_bounded_memory(tmp_path: Path) -> None:
    p = hostile.gzip_bomb(tmp_path / "r.jsonl.gz", 2 << 30, body=b'{"arrival": 1, "finish": 2}\n')
    assert p.stat().st_size < 16 << 20
    r = hostile.run_bounded([sys.executable, "-m", "whyidle", "serving", str(p)], _LIMIT, 120, env=ENV)
    _one_line(r, str(p), "gzip bomb")


def test_plain_gzip_request_log_still_reads(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"arrival": 1, "finish": 2}\n{"arrival": 2, "finish": 3}\n'))
    assert load_requests(p).requests == 2


def test_latency_curve_with_a_huge_batch_size_is_refused_at_once(tmp_path: Path) -> None:
    p = tmp_path / "curve.csv"
    p.write_text("batch_size,latency_ms\n1,2\n100000000,5\n")
    r = hostile.run_bounded([sys.executable, "-m", "whyidle", "batching", "--latency", str(p), "--rate", "10", "--slo-ms", "50"], _LIMIT, 20, env=ENV)
    _one_line(r, str(p), "batch size 100000000; expected at most 65536")
    with pytest.raises(UsageError, match="at most 65536"):
        parse_curve("1:2,100000000:5")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("batch_size,latency_ms\n1e400,2\n", "row 1: expected an integer batch_size"),
        ("batch_size,latency_ms,latency_ms_p90\n1,2,inf\n", "p90 latency or a timed pass that is not a positive finite number"),
        ("batch_size,latency_ms,latency_ms_p90\n1,2,nan\n", "p90 latency or a timed pass"),
    ],
)
def test_latency_curve_numbers(tmp_path: Path, text: str, says: str) -> None:
    p = tmp_path / "curve.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_latency(p)
    assert str(e.value).startswith(str(p)) and says in str(e.value), str(e.value)


def test_a_plain_log_is_converted_column_by_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: a 1M-row log took 33 s, one Python conversion per value; plain numbers now go
    through numpy at once (the per-value path is only for what it must name or parse)."""
    import whyidle.serving.requestlog as rl

    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps({"arrival_ms": i * 0.5, "start_ms": i * 0.5 + 0.1, "finish_ms": i * 0.5 + 2, "batch_id": i // 8}) + "\n" for i in range(20_000)))

    def per_value(*_: Any) -> int:
        raise AssertionError("converted value by value")

    monkeypatch.setattr(rl, "_time_ns", per_value)
    log = load_requests(p)
    assert log.requests == 20_000 and log.arrival_ns[1] == 500_000 and log.finish_ns[-1] == 9_999_500_000 + 2_000_000
    assert log.batch[:9].tolist() == [0] * 8 + [1]


@pytest.mark.parametrize("seed", range(20))
def test_column_and_row_paths_agree(seed: int) -> None:
    import random

    from whyidle.serving.requestlog import _columns_at_once, _columns_by_row

    rng = random.Random(seed)
    unit = rng.choice(["", "_ms", "_us", "_ns", "_s"])
    kind = rng.choice([int, float, str])
    recs = []
    for i in range(rng.randint(1, 50)):
        a = rng.randint(0, 10**6) if kind is int else rng.uniform(0, 1e6)
        vals = {f"arrival{unit}": a, f"start{unit}": a + 1, f"finish{unit}": a + 2, "batch_id": i // 3}
        recs.append({k: (str(v) if kind is str else v) for k, v in vals.items()})
    fast = _columns_at_once(recs)
    assert fast is not None
    slow = _columns_by_row(recs, "x")
    assert {k: v.tolist() for k, v in fast.items()} == {k: v.tolist() for k, v in slow.items()}
