"""XPlane bytes built in code for the tests: a protobuf writer for the XSpace schema's fields.

Written from the schema (tsl/profiler/protobuf/xplane.proto), independently of the reader's
decoder, so that a test checks the reader against the wire format, not against itself.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 fields: two's complement in ten bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_int(num: int, v: int) -> bytes:
    return varint(num << 3) + varint(v)


def f_bytes(num: int, b: bytes | str) -> bytes:
    data = b.encode() if isinstance(b, str) else b
    return varint(num << 3 | 2) + varint(len(data)) + data


def f_double(num: int, v: float) -> bytes:
    return varint(num << 3 | 1) + struct.pack("<d", v)


@dataclass
class Ev:
    name: str
    start_ns: int  # absolute, on the capture's clock
    dur_ns: int
    stats: dict[str, int | str | float] = field(default_factory=dict)


@dataclass
class Ln:
    id: int
    name: str
    events: list[Ev]
    timestamp_ns: int = 1_000  # the line's base; events are offsets from it


def _stat(sid: int, v: int | str | float, ref: dict[str, int] | None) -> bytes:
    out = f_int(1, sid)
    if isinstance(v, str):
        if ref is not None and v in ref:
            return out + f_int(7, ref[v])
        return out + f_bytes(5, v)
    if isinstance(v, float):
        return out + f_double(2, v)
    return out + (f_int(4, v) if v < 0 else f_int(3, v))


def plane(pid: int, name: str, lines: Sequence[Ln], stats: dict[str, int | str | float] | None = None, *, refs: Iterable[str] = ()) -> bytes:
    """An XPlane: names of events and stats go to its metadata maps; ``refs``: string stat values
    written as ref_value (the id of a stat metadata named by the value), as the profiler does."""
    ev_ids: dict[str, int] = {}
    st_ids: dict[str, int] = {}

    def sid(n: str) -> int:
        return st_ids.setdefault(n, len(st_ids) + 1)

    ref = {r: sid(r) for r in refs}
    body = f_int(1, pid) + f_bytes(2, name)
    for ln in lines:
        evs = b""
        for e in ln.events:
            mid = ev_ids.setdefault(e.name, len(ev_ids) + 1)
            ev = f_int(1, mid) + f_int(2, (e.start_ns - ln.timestamp_ns) * 1000) + f_int(3, e.dur_ns * 1000)
            for k, v in e.stats.items():
                ev += f_bytes(4, _stat(sid(k), v, ref))
            evs += f_bytes(4, ev)
        body += f_bytes(3, f_int(1, ln.id) + f_bytes(2, ln.name) + f_int(3, ln.timestamp_ns) + evs + f_bytes(11, ln.name))
    for k, v in (stats or {}).items():
        body += f_bytes(6, _stat(sid(k), v, None))
    for n, i in ev_ids.items():
        body += f_bytes(4, f_int(1, i) + f_bytes(2, f_int(1, i) + f_bytes(2, n)))
    for n, i in st_ids.items():
        body += f_bytes(5, f_int(1, i) + f_bytes(2, f_int(1, i) + f_bytes(2, n)))
    return body


def space(planes: Sequence[bytes], hostnames: Sequence[str] = ("testhost",)) -> bytes:
    return b"".join(f_bytes(1, p) for p in planes) + b"".join(f_bytes(4, h) for h in hostnames)


def jax_gpu_capture(steps: int = 3, step_ns: int = 10_000_000, sync_ns: int = 6_000_000) -> bytes:
    """A JAX job on one GPU as jax.profiler.trace records it: per step the Python thread calls
    ``PjitFunction(train)`` and then waits in ``block_until_ready`` for ``sync_ns``; the XLA
    execute thread runs the program's two thunks, whose launches the GPU tracer writes on a
    line of their own; the kernels run on two streams; one host-to-device copy per step."""
    py, ex, rt, s1, s2 = [], [], [], [], []
    corr = 100
    for i in range(steps):
        t = 1_000_000 + i * step_ns
        py.append(Ev("PjitFunction(train)", t, 500_000))
        py.append(Ev("$api.py:3154 block_until_ready", t + step_ns - sync_ns, sync_ns - 1_000))
        py.append(Ev("$train.py:42 main", t + 600_000, 100_000))
        ex.append(Ev("PjRtStreamExecutorLoadedExecutable::ExecuteHelper", t + 100_000, 800_000))
        for j, (kname, k0, kd) in enumerate((("fusion_1", 200_000, 100_000), ("cudnn-conv", 400_000, 200_000))):
            ex.append(Ev(kname, t + k0, kd))
            rt.append(Ev("cuLaunchKernel", t + k0 + 10_000, 20_000, {"correlation_id": corr}))
            (s1 if j == 0 else s2).append(
                Ev(f"{kname}_kernel", t + k0 + 50_000, 1_000_000 * (j + 1), {"correlation_id": corr, "hlo_op": kname, "hlo_module": "jit_train"})
            )
            corr += 1
        rt.append(Ev("cuMemcpyHtoDAsync", t + 700_000, 10_000, {"correlation_id": corr}))
        s1.append(Ev("MemcpyH2D", t + 3_000_000, 300_000, {"correlation_id": corr}))
        corr += 1
    gpu = plane(
        1, "/device:GPU:0", [Ln(7, "Stream #7(Kernel)", s1), Ln(8, "Stream #8(Kernel)", s2)],
        {"device_vendor": "Nvidia", "compute_cap_major": 9, "compute_cap_minor": 0, "core_count": 132},
        refs=("fusion_1", "cudnn-conv", "jit_train"),
    )  # fmt: skip
    host = plane(0, "/host:CPU", [Ln(11, "python3", py, 0), Ln(12, "py_xla_execute/12", ex), Ln(583, "Host Threads/583", rt)])
    return space([gpu, host])
