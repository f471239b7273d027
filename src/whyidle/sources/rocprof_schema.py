"""The rocprofv3 JSON output (``rocprofv3 --output-format json``, the rocprofiler-sdk tool's
schema) as typed msgspec structs: only the fields whyidle reads, so that the rest (agent
topology, code objects, counters) is skipped while decoding, never built as Python objects.

::

    {"rocprofiler-sdk-tool": [           one entry per profiled process (a list; a dict in early
      {"metadata":  {pid, ...},           versions)
       "agents":    [{id: {handle}, type (1 CPU, 2 GPU), name ("gfx950"), product_name
                      ("AMD Instinct MI350X"), gpu_index, cu_count, wave_front_size}],
       "kernel_symbols": [{kernel_id, formatted_kernel_name, ...}],
       "strings":   {buffer_records: [{kind: "KERNEL_DISPATCH", operations: [...]}]   (indexed by
                                      a record's kind, then its operation: "hipLaunchKernel")
                     marker_api:     [{key: correlation id, value: "range name"}]},
       "buffer_records": {kernel_dispatch, memory_copy, hip_api, hsa_api, marker_api, rccl_api:
                          [{kind, operation, thread_id, correlation_id: {internal, external},
                            start_timestamp, end_timestamp (ns), ...}]}}]}

An API call and the device work it enqueued share ``correlation_id.internal``. The record
layout follows rocprofiler-sdk's ``cxx/serialization.hpp``.

Each list is kept as :class:`msgspec.Raw` (a view into the text) and decoded kind by kind, so
only one kind's records exist as objects at a time.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

__all__ = [
    "Handle",
    "Correlation",
    "Dim3",
    "DispatchInfo",
    "Dispatch",
    "Copy",
    "ApiCall",
    "Agent",
    "Symbol",
    "KindNames",
    "MarkerText",
    "Strings",
    "Metadata",
    "Records",
    "Process",
    "Document",
    "looks_like_rocprof",
    "MAX_TIME_NS",
]

# No event time reaches 2**62 ns (146 years after the clock's zero); a larger one is damage, and
# would wrap in int64 arithmetic.
MAX_TIME_NS = 1 << 62
Ns = Annotated[int, msgspec.Meta(ge=0, lt=MAX_TIME_NS)]
Id = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Size = Annotated[int, msgspec.Meta(ge=0, lt=1 << 31)]

_HEAD = re.compile(rb'\s*\{\s*"rocprofiler-sdk-tool"\s*:')


def looks_like_rocprof(head: bytes) -> bool:
    """Whether decompressed text starts as rocprofv3's JSON output does (its only top-level key)."""
    return bool(_HEAD.match(head))


class Handle(msgspec.Struct, frozen=True):
    handle: Id = 0


class Correlation(msgspec.Struct, frozen=True):
    internal: Id = 0


class Dim3(msgspec.Struct, frozen=True):
    x: Size = 0
    y: Size = 0
    z: Size = 0


class DispatchInfo(msgspec.Struct, frozen=True):
    agent_id: Handle
    queue_id: Handle = Handle()
    kernel_id: Id = 0
    workgroup_size: Dim3 = Dim3()
    grid_size: Dim3 = Dim3()


class Dispatch(msgspec.Struct, frozen=True):
    """A kernel dispatch (buffer_records.kernel_dispatch)."""

    start_timestamp: Ns
    end_timestamp: Ns
    dispatch_info: DispatchInfo
    thread_id: Id = 0
    correlation_id: Correlation = Correlation()
    stream_id: Handle | None = None  # rocprofiler-sdk 1.0 and later


class Copy(msgspec.Struct, frozen=True):
    """A memory copy (buffer_records.memory_copy); ``operation`` names its direction."""

    start_timestamp: Ns
    end_timestamp: Ns
    dst_agent_id: Handle
    src_agent_id: Handle
    kind: Id = 0
    operation: Id = 0
    thread_id: Id = 0
    correlation_id: Correlation = Correlation()
    bytes: Id = 0
    stream_id: Handle | None = None


class ApiCall(msgspec.Struct, frozen=True):
    """A HIP, HSA, RCCL or marker API call; ``kind`` and ``operation`` index ``Strings.buffer_records``."""

    start_timestamp: Ns
    end_timestamp: Ns
    kind: Id
    operation: Id = 0
    thread_id: Id = 0
    correlation_id: Correlation = Correlation()


class Agent(msgspec.Struct, frozen=True):
    id: Handle
    type: int = 0  # 1 CPU, 2 GPU
    name: str = ""  # the GFX target: "gfx950"
    product_name: str = ""  # "AMD Instinct MI350X"
    gpu_index: int = -1
    cu_count: Size = 0
    wave_front_size: Size = 0
    node_id: Id = 0


class Symbol(msgspec.Struct, frozen=True):
    kernel_id: Id
    formatted_kernel_name: str = ""
    demangled_kernel_name: str = ""
    kernel_name: str = ""


class KindNames(msgspec.Struct, frozen=True):
    kind: str = ""
    operations: list[str] = []


class MarkerText(msgspec.Struct, frozen=True):
    key: Id
    value: str = ""


class Strings(msgspec.Struct, frozen=True):
    buffer_records: list[KindNames] = []
    marker_api: list[MarkerText] = []


class Metadata(msgspec.Struct, frozen=True):
    pid: Id = 0


class Records(msgspec.Struct, frozen=True):
    """The buffer records, each list still as text (decoded one kind at a time)."""

    kernel_dispatch: msgspec.Raw = msgspec.Raw(b"[]")
    memory_copy: msgspec.Raw = msgspec.Raw(b"[]")
    hip_api: msgspec.Raw = msgspec.Raw(b"[]")
    hsa_api: msgspec.Raw = msgspec.Raw(b"[]")
    marker_api: msgspec.Raw = msgspec.Raw(b"[]")
    rccl_api: msgspec.Raw = msgspec.Raw(b"[]")


class Process(msgspec.Struct, frozen=True):
    """One profiled process's output."""

    metadata: Metadata = Metadata()
    agents: list[Agent] = []
    kernel_symbols: list[Symbol] = []
    strings: Strings = Strings()
    buffer_records: Records = Records()


class Document(msgspec.Struct, frozen=True):
    tool: list[Process] | Process = msgspec.field(name="rocprofiler-sdk-tool")
