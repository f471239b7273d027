"""MTIA device events (Kineto category ``mtia_ccp_events``) read as device work where they are
work: operator executions as kernels, DMA requests as copies with their direction, event records
and waits as marks on a stream (not work)."""

from __future__ import annotations

import json
from collections import Counter

from conftest import shared_trace
from whyidle.pipeline import diagnose
from whyidle.render.terminal import render_terminal
from whyidle.sources import load
from whyidle.sources.kineto import parse_kineto
from whyidle.timeline import Kind


def _ccp(name: str, ts: float, dur: float, tid: int = 3910, **args: object) -> dict:
    return {"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": 17, "tid": tid, "ts": ts, "dur": dur, "args": {"stream": tid % 100, **args}}


def test_each_mtia_event_kind() -> None:
    events = [
        _ccp("fc-dtype_Float", 0, 100),
        _ccp("dma_request", 100, 20, tid=3672, direction="HOST_TO_DEVICE", size=1024),
        _ccp("dma_request", 130, 10, tid=3672, direction="DEVICE_TO_HOST", size=16),
        _ccp("event_record", 140, 0.2, tid=3672),
        _ccp("event_wait", 150, 500, tid=3774, wait_on_stream=72),  # the stream waits 500 us on another: not work
        _ccp("pe_exe", 700, 50),
    ]
    tl = parse_kineto(json.dumps({"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 17, "name": "ARTEMIS"}]}).encode())
    got = sorted((Kind(int(k)).name, tl.strings[int(n)]) for k, n in zip(tl.kind, tl.name))
    assert got == [
        ("GPU_ANNOTATION", "event_record"),
        ("GPU_ANNOTATION", "event_wait"),
        ("KERNEL", "fc-dtype_Float"),
        ("KERNEL", "pe_exe"),
        ("MEMCPY", "Memcpy DtoH (MTIA DMA)"),
        ("MEMCPY", "Memcpy HtoD (MTIA DMA)"),
    ]
    r = diagnose(tl)
    # device work: [0,120), [130,140) and [700,750); the event wait [150,650) is idle, not busy
    assert r.utilization.busy_ns == 180_000 and r.utilization.idle_ns == 750_000 - 180_000
    assert r.utilization.memcpy_ns == 30_000
    assert not r.no_device_activity


def test_real_mtia_traces_have_device_work() -> None:
    p = shared_trace("hta/mtia_inference_trace__mtia_inference_rank_0.json.gz")
    tl = load(p)
    kinds = Counter(Kind(int(k)).name for k in tl.kind)
    # 877 dma_request, 291 event_record + 48 event_wait, 24 pe_exe + 36 merge + 37 remote in the file
    assert kinds["MEMCPY"] == 877 and kinds["GPU_ANNOTATION"] == 339 and kinds["KERNEL"] == 97
    r = diagnose(p)
    assert not r.no_device_activity and r.utilization.busy_fraction > 0.5
    assert not any("mtia_ccp_events" in q for q in r.quality)  # no longer ignored
    text = render_terminal(r)
    assert "Tensor cores" not in text  # tensor-core name markers are NVIDIA's: nothing to say here
    train = diagnose(shared_trace("hta/mtia_trace_single_rank__mtia_rank_0.json.gz"))
    assert train.kernels.count == 3453 and train.utilization.busy_ns > 0
    assert any("(22361 of them are MTIA DMA requests, which carry no correlation id" in q for q in train.quality)


def _mtia_with_host(after_gaps: str) -> bytes:
    host = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 0, "dur": 990, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 2, "args": {"correlation": 9}},
    ]
    dev = [_ccp("fc-dtype_Float", 10, 90)]
    for ts, dur in ((500, 20), (900, 50)):
        dev.append(_ccp("dma_request", ts, dur, tid=3672, direction="HOST_TO_DEVICE") if after_gaps == "dma" else _ccp("pe_exe", ts, dur))
    return json.dumps({"schemaVersion": 1, "traceEvents": host + dev, "deviceProperties": [{"id": 17, "name": "ARTEMIS"}]}).encode()


def test_gaps_before_uncorrelatable_dma_say_no_capture_links_them() -> None:
    """Idle before MTIA DMA requests is unattributed, and the advice is not 're-capture with CPU
    and device activities' (they carry no correlation id in any capture); before ordinary device
    work without a launch record it is."""
    r = diagnose(parse_kineto(_mtia_with_host("dma")))
    (f,) = [f for f in r.findings if f.cause == "no_launch_info"]
    assert f.variant == "no_correlation" and "no capture" in f.title
    assert any("no capture option links to a launch" in q for q in r.quality)
    assert not any("ProfilerActivity.CPU" in q for q in r.quality)
    r = diagnose(parse_kineto(_mtia_with_host("kernel")))
    (f,) = [f for f in r.findings if f.cause == "no_launch_info"]
    assert f.variant == "" and any("ProfilerActivity.CPU" in q for q in r.quality)
