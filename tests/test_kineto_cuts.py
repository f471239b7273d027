"""The in-memory reader's batches cut without decoding: proved by decoding, repaired when wrong.

Every plan is checked against the reader that splits the event array by decoding it
(``_parse_split``): the same Timeline, or the same error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tlbuild import assert_same_timeline

from whyidle.errors import TraceFormatError
from whyidle.lab.synthetic import training_trace
from whyidle.sources import kineto as K

# Text that looks like an event's end to the cutter, inside an event: a nested object whose first
# key is an event field, and strings holding '}, {"ph"' and ']' (escaped quotes in the JSON).
NESTED = {"inputs": [{"a": 1}, {"name": "x", "ph": "X"}, {"id": 2}], "note": '}, {"ph": "X"} ] ]'}


def _tricky(steps: int = 3, tail: bool = True) -> dict[str, Any]:
    doc = training_trace("none", steps=steps)
    for i, ev in enumerate(doc["traceEvents"]):
        if i % 3 == 0:
            ev.setdefault("args", {}).update(NESTED)
    if tail:  # fields after the array, as Kineto writes some: ']' and '}, {"id"' after the events
        props = doc.pop("deviceProperties", [{"id": 0, "name": "GPU"}])
        events = doc.pop("traceEvents")
        doc["traceEvents"] = events
        doc["deviceProperties"] = props + [{"id": 1, "name": "GPU ]", "maxThreadsDim": [1024, 1024, 64]}]
        doc["traceName"] = "t.json"
        doc["warnings"] = ["a ]", "b"]
    return doc


def _split(raw: bytes) -> Any:
    try:
        return K._parse_split([raw], "t.json")
    except TraceFormatError as exc:
        return str(exc)


def _cut(raw: bytes) -> Any:
    try:
        return K._parse([raw], "t.json")
    except TraceFormatError as exc:
        return str(exc)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        assert_same_timeline(a, b)


def _wrong_cuts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the batches that did not decode (a cut in the wrong place, then joined)."""
    failed: list[int] = []
    decode = K._decode_batch

    def counting(text: bytes, p: K._Plan, a: int, b: int, path: str) -> Any:
        loc = decode(text, p, a, b, path)
        if loc is None:
            failed.append(a)
        return loc

    monkeypatch.setattr(K, "_decode_batch", counting)
    return failed


@pytest.mark.parametrize("indent", [None, 1, 4])
def test_cut_batches_read_what_the_split_reads_at_every_batch_size(monkeypatch: pytest.MonkeyPatch, indent: int | None) -> None:
    raw = json.dumps(_tricky(), indent=indent).encode()
    want = _split(raw)
    failed = _wrong_cuts(monkeypatch)
    for size in range(64, 4000, 61):
        monkeypatch.setattr(K, "_BATCH_BYTES", size)
        p = K._cut_plan(raw)
        assert p is not None and len(p.bounds) > 1
        assert p.doc.deviceProperties[-1]["maxThreadsDim"] == [1024, 1024, 64]  # the fields after the array
        _same(_cut(raw), want)
    assert failed  # some cuts fell inside an event's args and were repaired


def test_a_cut_repaired_gives_one_batch_of_the_two(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = json.dumps(_tricky()).encode()
    monkeypatch.setattr(K, "_BATCH_BYTES", 300)
    p = K._cut_plan(raw)
    assert p is not None
    # a cut forced inside the first event's args: the first side fails and is joined with the
    # next batch, whose join decodes
    a, b = p.bounds[0]
    inner = raw.index(b'}, {"name"', a) + 1
    assert inner < b
    after = raw.index(b"{", inner)
    p.bounds[0:1] = [(a, inner), (after, b)]
    failed = _wrong_cuts(monkeypatch)
    cols = K._assemble(raw, p, "t.json", lambda k: K._decode_batch(raw, p, *p.bounds[k], "t.json"))
    assert cols is not None and failed[0] == a and after not in failed
    _same(cols.finish(p.doc), _split(raw))


@given(
    steps=st.integers(1, 4),
    size=st.integers(40, 3000),
    indent=st.sampled_from([None, 0, 2]),
    tail=st.booleans(),
    bare=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_cut_reader_is_the_split_reader(steps: int, size: int, indent: int | None, tail: bool, bare: bool) -> None:
    doc = _tricky(steps, tail)
    raw = json.dumps(doc["traceEvents"] if bare else doc, indent=indent).encode()
    old = K._BATCH_BYTES
    K._BATCH_BYTES = size
    try:
        _same(_cut(raw), _split(raw))
    finally:
        K._BATCH_BYTES = old


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s[:-40],  # truncated
        lambda s: s.replace('"ts": ', '"ts": "soon", "x": ', 1),  # a time that is not a number
        lambda s: s.replace('"traceEvents": [', '"traceEvents": [[1], ', 1),  # not an event
        lambda s: s.replace('"traceEvents": [', '"traceEvents": []', 1),  # empty, then garbage
        lambda s: s + " x",  # text after the JSON
        lambda s: s.replace("}", "}}", 1),
    ],
)
def test_a_damaged_trace_gets_the_split_readers_error(monkeypatch: pytest.MonkeyPatch, damage: Any) -> None:
    monkeypatch.setattr(K, "_BATCH_BYTES", 500)
    raw = damage(json.dumps(_tricky(), indent=1)).encode()
    want = _split(raw)
    assert isinstance(want, str)
    assert _cut(raw) == want


def test_an_unusual_layout_is_split_by_decoding() -> None:
    """Events whose first key is no event field: no cut is found, the reader splits by decoding."""
    doc = training_trace("none", steps=2)
    doc["traceEvents"] = [{"zz": 0, **ev} for ev in doc["traceEvents"]]
    raw = json.dumps(doc).encode()
    assert K._cut_plan(raw) is None
    _same(_cut(raw), _split(raw))
