"""Reading Kineto traces: schemas, time formats, containers, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import whyidle
from whyidle.errors import InputError, TraceFormatError
from whyidle.sources.kineto import _fraction_style, parse_kineto
from whyidle.timeline import Kind


def doc(events: list[dict], **top: object) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **top}).encode()


def kernel(ts: object, dur: object, corr: int = 1, cat: str = "kernel", name: str = "k") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7, "correlation": corr}}


def launch(ts: object, dur: object, corr: int = 1, cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": ts, "dur": dur, "args": {"correlation": corr}}


def test_2021_and_new_categories_map_to_the_same_kinds() -> None:
    old = parse_kineto(doc([launch(10, 5, cat="Runtime"), kernel(20, 3, cat="Kernel"), {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 10, "tid": 10, "ts": 0, "dur": 100}]))
    new = parse_kineto(doc([launch(10, 5), kernel(20, 3), {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 10, "ts": 0, "dur": 100}]))
    for tl in (old, new):
        assert sorted(Kind(k).name for k in tl.kind) == ["KERNEL", "RUNTIME", "STEP"]
        assert tl.start_ns.tolist() == [0, 10_000, 20_000]


def test_integer_microseconds_and_sub_microsecond_kernels() -> None:
    tl = parse_kineto(doc([kernel(1623142623460111, 0)]))
    assert tl.start_ns[0] == 1623142623460111000 and tl.end_ns[0] == tl.start_ns[0]


def test_fractional_microseconds_keep_every_nanosecond() -> None:
    # 4458676983543.183 us is near the largest value float64 keeps to the nanosecond;
    # epoch microseconds with a fraction are beyond it and must be read from the text.
    raw = doc([kernel("@4458676983543.183@", "@41.407@"), kernel("@1711964646123456.789@", "@1.5@", corr=2)])
    tl = parse_kineto(raw.replace(b'"@', b"").replace(b'@"', b""))
    assert tl.start_ns.tolist() == [4458676983543183, 1711964646123456789]
    assert (tl.end_ns - tl.start_ns).tolist() == [41407, 1500]


def test_base_time_nanoseconds_makes_times_absolute() -> None:
    tl = parse_kineto(doc([kernel(2.5, 1.0)], baseTimeNanoseconds=1727743122000000000))
    assert tl.start_ns[0] == 1727743122000000000 + 2500


def test_unpadded_nanosecond_exporter_is_detected_and_read_as_nanoseconds() -> None:
    # The 2024 exporter wrote "{us}.{ns}" without padding: 10.5 is 10 us + 5 ns, 10.50 is 10 us + 50 ns.
    events = [kernel(f"@{1000 + i}.{ns}@", f"@3.{(ns * 7) % 1000}@", corr=i) for i, ns in enumerate([5, 50, 120, 7, 999, 310, 40, 8, 600, 11])]
    raw = json.dumps({"traceEvents": events}).replace('"@', "").replace('@"', "").encode()
    tl = parse_kineto(raw)
    assert tl.start_ns.tolist() == sorted(1_000_000 + 1000 * i + ns for i, ns in enumerate([5, 50, 120, 7, 999, 310, 40, 8, 600, 11]))
    assert any("without zero-padded" in q for q in tl.meta.quality)


def test_fraction_style_rules() -> None:
    assert _fraction_style(["1.005", "2.500", "3.120"]) == "decimal"  # padded
    assert _fraction_style(["1.5", "2.05", "3.12"]) == "decimal"  # Python float repr
    assert _fraction_style(["1.5", "2.50", "3.120"]) == "unpadded_ns"


def test_bare_event_list_and_metadata_in_another_clock_domain() -> None:
    raw = json.dumps([
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"name": "thread_name", "ph": "M", "ts": 99999999999, "pid": 10, "tid": 10, "args": {"name": "main thread"}},
        launch(1000, 5),
        kernel(1010, 20),
    ]).encode()
    tl = parse_kineto(raw)
    assert tl.start_ns.min() == 1_000_000  # metadata timestamps never set the span
    assert any(ln.name == "main thread" for ln in tl.lanes)


def test_flow_and_unknown_categories_are_ignored_with_a_note() -> None:
    tl = parse_kineto(doc([kernel(0, 1), {"ph": "X", "cat": "mystery", "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 1}, {"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 0}]))
    assert len(tl) == 1
    assert any("mystery (1)" in q for q in tl.meta.quality)


def test_collectives_are_told_apart_from_compute() -> None:
    tl = parse_kineto(doc([kernel(0, 5, name="ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"), kernel(10, 5, name="gemm")]))
    assert sorted(Kind(k).name for k in tl.kind) == ["COLLECTIVE", "KERNEL"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"not json at all", "not valid JSON"),
        (b'{"traceEvents": [', "truncated"),
        (b'{"hello": 1}', "without a 'traceEvents' list"),
        (b"[1, 2, 3]", "not a Chrome/Kineto trace"),
        (b'{"traceEvents": []}', "empty 'traceEvents'"),
        (doc([kernel("soon", 1)]), "time that is not a number"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 1}]}', "not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as info:
        whyidle.load(p)
    text = str(info.value)
    assert str(p) in text and message in text and "\n" not in text


def test_truncated_and_corrupt_gzip(tmp_path: Path) -> None:
    whole = gzip.compress(doc([kernel(0, 1)] * 200))
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        whyidle.load(tmp_path / "t.json.gz")
    (tmp_path / "c.json.gz").write_bytes(whole[:10] + b"\x00" * 50 + whole[60:])
    with pytest.raises(TraceFormatError, match="gzip"):
        whyidle.load(tmp_path / "c.json.gz")


def test_folders_missing_files_and_other_formats(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        whyidle.load(tmp_path / "nope.json")
    one = tmp_path / "one"
    one.mkdir()
    (one / "w.pt.trace.json").write_bytes(doc([kernel(0, 1)]))
    assert len(whyidle.load(one)) == 1
    (tmp_path / "x.nsys-rep").write_bytes(b"\x00")
    with pytest.raises(InputError, match="nsys export --type sqlite"):
        whyidle.load(tmp_path / "x.nsys-rep")
    (tmp_path / "x.bin").write_bytes(b"\x89PNG....")
    with pytest.raises(InputError, match="not a format whyidle reads"):
        whyidle.load(tmp_path / "x.bin")


def test_trace_without_device_events_is_not_an_error() -> None:
    raw = doc([{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 5}])
    r = whyidle.diagnose(parse_kineto(raw))
    assert r.no_device_activity and r.findings == ()
    assert any("no GPU activity in this trace" in q for q in r.quality)


def test_columns_are_int64_nanoseconds_sorted_by_start() -> None:
    tl = parse_kineto(doc([kernel(30, 1, corr=1), launch(10, 5, corr=1), kernel(20, 1, corr=2)]))
    assert tl.start_ns.dtype == np.int64 and (np.diff(tl.start_ns) >= 0).all()


def test_launch_dimensions_of_a_mixed_batch_are_each_values_product() -> None:
    """Kernels' grid/block lists beside copies (no dims) and odd values: the batch path gives what
    the one-value rule gives for every value."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from whyidle.sources.kineto_values import _dims, _dims_many

    dim = st.one_of(st.integers(-2, 2_000_000), st.floats(allow_nan=False), st.none(), st.text(max_size=2))
    value = st.one_of(st.none(), st.lists(st.integers(1, 1 << 20), min_size=3, max_size=3), st.lists(dim, max_size=4), st.integers(), st.text(max_size=3))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(value, max_size=30))
    def check(values: list[object]) -> None:
        assert _dims_many(values).tolist() == [_dims(v) for v in values]

    check()
