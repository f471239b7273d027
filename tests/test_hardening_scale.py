"""Work bounded by the input's size (issue 24): inputs whose size made a reader or an analysis
quadratic. Each test counts the work, or compares two sizes in the same run, never absolute
seconds; each fails without its fix."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import hostile
from whyidle.analyses.counters import analyse_counters
from whyidle.config import Config
from whyidle.errors import TraceFormatError
from whyidle.sources.kineto import parse_kineto
from whyidle.sources.kineto_batches import _Batches
from whyidle.sources.kineto_stream import parse_kineto_stream
from whyidle.sources.counters_query import parse_query
from whyidle.timeline.counters import CounterSeries


def _query_log(gpus: int, samples: int) -> str:
    rows = ["timestamp, index, uuid, utilization.gpu [%], utilization.memory [%], power.draw [W]"]
    for s in range(samples):
        rows += [f"2024/01/01 00:00:{s:02d}.000, {g}, GPU-{g:08d}, {(g * 37 + s * 11) % 101} %, 5 %, 100.0 W" for g in range(gpus)]
    return "\n".join(rows) + "\n"


class _Counted(tuple[CounterSeries, ...]):
    """A log's series that count how many of them are visited."""

    visits = 0

    def __iter__(self) -> Iterator[CounterSeries]:
        for s in super().__iter__():
            _Counted.visits += 1
            yield s


def test_query_gpu_log_of_many_gpus_is_analysed_in_linear_work() -> None:
    """A --query-gpu log of 5,000 GPUs took 21 s: each GPU's series were looked up by scanning
    every series of the log (3 metrics x 5,000 GPUs, 5,000 times). Every series is visited a
    bounded number of times, whatever the number of GPUs."""
    for gpus in (50, 400):
        log = parse_query("q.csv", _query_log(gpus, 3), 0, None)
        assert len(log.series) == 3 * gpus and len(log.gpu_ids) == gpus
        counted = msgspec.structs.replace(log, series=_Counted(log.series))
        _Counted.visits = 0
        a = analyse_counters(counted, Config().attribution)
        assert len(a.gpus) == gpus and [g.gpu for g in a.gpus] == [str(i) for i in range(gpus)]
        assert _Counted.visits <= 4 * len(log.series), f"{gpus} GPUs: {_Counted.visits} visits of {len(log.series)} series"


def _decoded_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the out-of-core reader decodes at the end of the event array."""
    sizes: list[int] = []
    real = _Batches.decode_now

    def counted(self: _Batches, text: bytes) -> Any:
        sizes.append(len(text))
        return real(self, text)

    monkeypatch.setattr(_Batches, "decode_now", counted)
    return sizes


@pytest.mark.parametrize("brackets", [2_000, 40_000])
def test_stream_reader_finds_the_array_end_in_linear_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, brackets: int) -> None:
    """The out-of-core reader tried every ']' from the right and decoded a copy of the prefix for
    each: a 2 MB trace ending in a million of them took over 30 s (quadratic). It now decodes the
    remaining text a bounded number of times, and gives the in-memory reader's answer."""
    events = json.dumps(hostile.base_trace(3)["traceEvents"])
    p = tmp_path / "t.json"
    p.write_bytes(('{"traceEvents": ' + events + "]" * brackets + "}").encode())
    sizes = _decoded_bytes(monkeypatch)
    with pytest.raises(TraceFormatError) as streamed:
        parse_kineto_stream(p, jobs=1)
    assert sizes and sum(sizes) <= 16 * p.stat().st_size, f"{len(sizes)} decodes, {sum(sizes):,} bytes for a {p.stat().st_size:,}-byte trace"
    with pytest.raises(TraceFormatError):
        parse_kineto(p.read_bytes(), str(p))
    assert "not valid JSON" in str(streamed.value)


def test_stream_reader_still_reads_a_tail_with_lists(tmp_path: Path) -> None:
    """Kineto writes fields after the events (deviceProperties, a list): the array's end is still
    the first ']' tried from the right that decodes, and the same timeline comes back."""
    doc = hostile.base_trace(3)
    doc = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}, "x": [[1], [2, [3]], "]"]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    a, b = parse_kineto_stream(p, jobs=1), parse_kineto(p.read_bytes(), str(p))
    assert len(a) == len(b) > 0 and (a.start_ns == b.start_ns).all()


def test_terminal_report_of_many_gpus_draws_a_bounded_number_of_tables(tmp_path: Path) -> None:
    """The terminal report drew a table per GPU: 5,000 of them for a log of 5,000 GPUs (10.7 s, 5 MB
    of text). It draws the first 64 (and names 64 in its header) and says where the others are; the JSON report keeps all."""
    import whyidle

    p = tmp_path / "q.csv"
    p.write_text(_query_log(100, 3))
    d = whyidle.diagnose(p)
    text = d.render("terminal")
    assert isinstance(text, str)
    titles = [line.strip() for line in text.splitlines() if re.fullmatch(r"GPU \d+", line.strip())]
    assert titles == [f"GPU {i}" for i in range(64)], titles[-3:]
    assert "... and 36 more GPUs: every GPU's figures are in the JSON and HTML reports" in text
    assert "GPU 65, GPU 66 and 36 more)" in " ".join(text.split()), text[:600]
    assert len(json.loads(d.render("json"))["counters"]["gpus"]) == 100
