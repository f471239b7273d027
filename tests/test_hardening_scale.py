"""Work bounded by the input's size (issue 24): inputs whose size made a reader or an analysis
quadratic. Each test counts the work, or compares two sizes in the same run, never absolute
seconds; each fails without its fix."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from whyidle.analyses.counters import analyse_counters
from whyidle.config import Config
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
        a = analyse_counters(counted, Config())
        assert len(a.gpus) == gpus and [g.gpu for g in a.gpus] == [str(i) for i in range(gpus)]
        assert _Counted.visits <= 4 * len(log.series), f"{gpus} GPUs: {_Counted.visits} visits of {len(log.series)} series"
