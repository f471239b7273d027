"""The hostile-input caps of ``ReadSettings`` reach every reader they concern: a small cap set on a
Config (``diagnose(path, config=...)``) or given to ``load(..., settings=...)`` makes the reader
refuse the file, in one line naming the file and the setting, where the defaults read it.

Each cap was once read from ``ReadSettings()`` (the defaults) inside the reader, whatever the
caller set: the in-memory and out-of-core Kineto readers, gzip reading for every format (XPlane,
rocprofv3, counter logs, the counter log joined with ``--counters``) and the read-ahead thread."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import whyidle
from whyidle.config import Config, ReadSettings
from whyidle.errors import InputError
from whyidle.sources import ReadAhead, read

from hostile import base_trace
from rocbuild import hip_training
from xplanebuild import jax_gpu_capture

# Small limits: a gzip file of a few KB may inflate at most 2x (the floor far below its size).
TIGHT_GZIP: dict[str, Any] = {"max_gzip_ratio": 2.0, "gzip_ratio_floor_bytes": 1000}
STREAM: dict[str, Any] = {"stream_min_bytes": 100}  # every file below goes to the out-of-core reader


def _trace(tmp_path: Path, name: str = "t.json.gz", doc: dict[str, Any] | None = None) -> Path:
    p = tmp_path / name
    text = json.dumps(doc if doc is not None else base_trace()).encode()
    p.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return p


def _refused(p: Path, setting: str, **fields: Any) -> None:
    """Read with the defaults; refused, in one line naming the file and the setting, with ``fields``
    set on a Config (diagnose) and on the reading settings (load)."""
    assert len(whyidle.load(p)) > 0
    for call in (lambda: whyidle.diagnose(p, config=Config(**fields)), lambda: whyidle.load(p, settings=ReadSettings(**fields))):
        with pytest.raises(InputError) as e:
            call()
        msg = str(e.value)
        assert str(p) in msg and setting in msg and "\n" not in msg, msg


def test_gzip_ratio_reaches_the_in_memory_reader(tmp_path: Path) -> None:
    _refused(_trace(tmp_path), "max_gzip_ratio", **TIGHT_GZIP)


def test_gzip_floor_reaches_the_in_memory_reader(tmp_path: Path) -> None:
    """At the default 100x, a very repetitive trace is read under the 64 MiB floor, refused under a 1 KB one."""
    doc = base_trace()
    doc["traceEvents"] += [{"ph": "i", "name": "marker", "pid": 0, "tid": 1, "ts": 1, "s": "t"}] * 20_000
    p = _trace(tmp_path, doc=doc)
    assert len(p.read_bytes()) * 100 < len(json.dumps(doc))  # inflates more than 100x
    _refused(p, "gzip_ratio_floor_bytes", gzip_ratio_floor_bytes=1000)


def test_gzip_limits_reach_the_out_of_core_reader(tmp_path: Path) -> None:
    p = _trace(tmp_path)
    assert len(whyidle.load(p, settings=ReadSettings(**STREAM))) > 0
    _refused(p, "max_gzip_ratio", **STREAM, **TIGHT_GZIP)


def test_event_size_reaches_the_out_of_core_reader(tmp_path: Path) -> None:
    """The reader holds the JSON before the event list whole, checked as it grows past a read
    block (8 MiB): 9 MiB of it is read under the default 64 MiB, refused under 2,000 bytes."""
    doc = {"comment": "x" * (9 << 20), **base_trace()}
    p = _trace(tmp_path, "t.json", doc)
    assert len(whyidle.load(p, settings=ReadSettings(**STREAM))) > 0
    _refused(p, "max_event_bytes", **STREAM, max_event_bytes=2000)


def test_events_per_gzip_byte_reaches_the_out_of_core_reader(tmp_path: Path) -> None:
    """The cap is 100,000 events past the ratio: 0 per compressed byte refuses a trace of more."""
    doc = base_trace()
    doc["traceEvents"] += [{"ph": "i", "name": "m", "pid": 0, "tid": 1, "ts": 1, "s": "t"}] * 100_001
    p = _trace(tmp_path, doc=doc)
    assert len(whyidle.load(p, settings=ReadSettings(**STREAM))) > 0
    with pytest.raises(InputError, match="max_events_per_gzip_byte") as e:
        whyidle.load(p, settings=ReadSettings(**STREAM, max_events_per_gzip_byte=0.0))
    assert str(p) in str(e.value)


def test_gzip_limits_reach_the_xplane_reader(tmp_path: Path) -> None:
    p = tmp_path / "host.xplane.pb.gz"
    p.write_bytes(gzip.compress(jax_gpu_capture(steps=30)))  # 8.7 KB in 3.4 KB
    _refused(p, "max_gzip_ratio", **TIGHT_GZIP)


def test_gzip_limits_reach_rocprof_past_the_in_memory_range(tmp_path: Path) -> None:
    """rocprofv3 JSON over ``stream_min_bytes`` is read whole by its own call: the gzip limits too."""
    p = tmp_path / "run.json.gz"
    p.write_bytes(gzip.compress(json.dumps(hip_training().doc()).encode()))
    _refused(p, "max_gzip_ratio", **STREAM, **TIGHT_GZIP)


def test_gzip_limits_reach_the_joined_counter_log(tmp_path: Path) -> None:
    """``diagnose(trace, counters=log)`` reads the log with the Config's limits, as the trace."""
    trace = _trace(tmp_path, "t.json")
    log = tmp_path / "gpu.log.gz"
    rows = [f"20240101   00:00:{i:02d}    0     60     40      -     50     10      0      0   1593   1980" for i in range(60)]
    head = ["#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk",
            "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz"]  # fmt: skip
    log.write_bytes(gzip.compress("\n".join(head + rows * 20).encode() + b"\n"))
    assert len(whyidle.load(log)) == 0 and whyidle.load(log).meta.counters is not None
    whyidle.diagnose(trace, counters=log)  # read with the defaults (joined or not: no error)
    with pytest.raises(InputError) as e:
        whyidle.diagnose(trace, counters=log, config=Config(**TIGHT_GZIP))
    assert str(log) in str(e.value) and "max_gzip_ratio" in str(e.value)


def test_a_read_ahead_made_under_other_limits_is_not_handed_over(tmp_path: Path) -> None:
    """The command line reads the trace ahead in a thread: with the Config's limits, and a read
    made under other limits is read again rather than handed to a reader with tighter ones."""
    p = _trace(tmp_path)
    tight = ReadSettings(**TIGHT_GZIP)
    with ReadAhead() as ahead:
        ahead.start(p, tight.stream_min_bytes)  # the defaults' limits: it reads the whole file
        with pytest.raises(InputError, match="max_gzip_ratio"):
            read(p, read_ahead=ahead, settings=tight)
    with ReadAhead() as ahead:
        ahead.start(p, tight.stream_min_bytes, tight)
        assert ahead.pending() == [p]
        with pytest.raises(InputError, match="max_gzip_ratio"):
            read(p, read_ahead=ahead, settings=tight)
    with ReadAhead() as ahead:
        ahead.start(p, tight.stream_min_bytes, tight)
        assert len(read(p, read_ahead=ahead)) > 0  # the defaults: the tight read-ahead's refusal is not theirs
