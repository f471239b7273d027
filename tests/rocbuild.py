"""rocprofv3 JSON documents built in code (the rocprofiler-sdk tool's layout, as the shared MI350X
capture has it), for the reader's tests and the fuzz family.

:class:`RocDoc` collects records with the fields rocprofv3 writes; :meth:`RocDoc.doc` gives the
document. Kind and operation numbers index the ``strings.buffer_records`` table built here.
"""

from __future__ import annotations

from typing import Any

KINDS = ["NONE", "HSA_CORE_API", "HIP_RUNTIME_API", "MARKER_CORE_API", "MARKER_CORE_RANGE_API", "MEMORY_COPY", "KERNEL_DISPATCH", "RCCL_API"]
OPS = {
    "HSA_CORE_API": ["hsa_init", "hsa_signal_store_screlease", "hsa_queue_load_write_index"],
    "HIP_RUNTIME_API": ["hipLaunchKernel", "hipMemcpyAsync", "hipDeviceSynchronize", "hipMemcpyWithStream", "hipStreamSynchronize"],
    "MARKER_CORE_API": ["roctxMarkA", "roctxRangePushA", "roctxRangePop"],
    "MARKER_CORE_RANGE_API": ["roctxMarkA", "roctxThreadRangeA"],
    "MEMORY_COPY": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST", "MEMORY_COPY_DEVICE_TO_DEVICE"],
    "KERNEL_DISPATCH": ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"],
    "RCCL_API": ["ncclAllGather", "ncclAllReduce"],
}
CPU, GPU0, GPU1 = 100, 200, 201  # agent handles
PID = 908


def _kind(name: str) -> int:
    return KINDS.index(name)


def _op(kind: str, op: str) -> int:
    return OPS[kind].index(op)


class RocDoc:
    """A rocprofv3 document for one process, built record by record (times in ns)."""

    def __init__(self, pid: int = PID, product: str = "AMD Instinct MI350X", gfx: str = "gfx950", streams: bool = True) -> None:
        self.pid = pid
        self.product, self.gfx, self.streams = product, gfx, streams
        self.corr = 0
        self.symbols: dict[str, int] = {}
        self.markers: list[dict[str, Any]] = []
        self.records: dict[str, list[dict[str, Any]]] = {k: [] for k in ("kernel_dispatch", "memory_copy", "hip_api", "hsa_api", "marker_api", "rccl_api")}

    def _next(self) -> int:
        self.corr += 1
        return self.corr

    def _api(self, table: str, kind: str, op: str, start: int, end: int, tid: int, corr: int | None = None) -> int:
        c = self._next() if corr is None else corr
        self.records[table].append({"size": 48, "kind": _kind(kind), "operation": _op(kind, op), "correlation_id": {"internal": c, "external": 0},
                                    "start_timestamp": start, "end_timestamp": end, "thread_id": tid})
        return c

    def hip(self, op: str, start: int, end: int, tid: int = PID) -> int:
        """A HIP runtime call; its correlation id (give it to the work it launched)."""
        return self._api("hip_api", "HIP_RUNTIME_API", op, start, end, tid)

    def hsa(self, op: str, start: int, end: int, tid: int = PID) -> int:
        return self._api("hsa_api", "HSA_CORE_API", op, start, end, tid)

    def rccl(self, op: str, start: int, end: int, tid: int = PID) -> int:
        return self._api("rccl_api", "RCCL_API", op, start, end, tid)

    def marker(self, text: str, start: int, end: int, tid: int = PID, kind: str = "MARKER_CORE_RANGE_API") -> None:
        c = self._api("marker_api", kind, "roctxThreadRangeA" if kind == "MARKER_CORE_RANGE_API" else "roctxRangePushA", start, end, tid)
        self.markers.append({"key": c, "value": text})

    def kernel(self, name: str, start: int, end: int, corr: int | None = None, agent: int = GPU0, stream: int = 1, queue: int = 16,
               grid: tuple[int, int, int] = (1024, 1, 1), wg: tuple[int, int, int] = (256, 1, 1), tid: int = PID) -> None:
        kid = self.symbols.setdefault(name, len(self.symbols) + 1)
        c = self._next() if corr is None else corr
        rec: dict[str, Any] = {
            "size": 184, "kind": _kind("KERNEL_DISPATCH"), "operation": 2, "thread_id": tid, "correlation_id": {"internal": c, "external": 0},
            "start_timestamp": start, "end_timestamp": end,
            "dispatch_info": {"size": 72, "agent_id": {"handle": agent}, "queue_id": {"handle": queue}, "kernel_id": kid, "dispatch_id": c,
                              "private_segment_size": 0, "group_segment_size": 0,
                              "workgroup_size": dict(zip("xyz", wg)), "grid_size": dict(zip("xyz", grid))},
        }
        if self.streams:
            rec["stream_id"] = {"handle": stream}
        self.records["kernel_dispatch"].append(rec)

    def copy(self, direction: str, start: int, end: int, nbytes: int, corr: int | None = None, src: int = CPU, dst: int = GPU0, tid: int = PID) -> None:
        c = self._next() if corr is None else corr
        self.records["memory_copy"].append({"size": 80, "kind": _kind("MEMORY_COPY"), "operation": _op("MEMORY_COPY", direction), "thread_id": tid,
                                            "correlation_id": {"internal": c, "external": 0}, "start_timestamp": start, "end_timestamp": end,
                                            "dst_agent_id": {"handle": dst}, "src_agent_id": {"handle": src}, "bytes": nbytes})

    def process(self) -> dict[str, Any]:
        def agent(handle: int, typ: int, name: str, product: str, gpu_index: int, cus: int, node: int) -> dict[str, Any]:
            return {"size": 312, "id": {"handle": handle}, "type": typ, "cpu_cores_count": 0 if typ == 2 else 64, "simd_count": 1024 if typ == 2 else 0,
                    "wave_front_size": 64 if typ == 2 else 0, "cu_count": cus, "name": name, "vendor_name": "AMD" if typ == 2 else "CPU",
                    "product_name": product, "model_name": "", "node_id": node, "logical_node_id": node, "gpu_index": gpu_index,
                    "gfx_target_version": 90500 if typ == 2 else 0}

        return {
            "metadata": {"node": {"hostname": "node0"}, "pid": self.pid, "init_time": 1, "fini_time": 10**12, "command": ["python", "train.py"]},
            "agents": [agent(CPU, 1, "AMD EPYC", "AMD EPYC", -1, 64, 0), agent(GPU0, 2, self.gfx, self.product, 0, 256, 1), agent(GPU1, 2, self.gfx, self.product, 1, 256, 2)],
            "counters": [],
            "strings": {"callback_records": [], "buffer_records": [{"kind": k, "operations": OPS.get(k, [])} for k in KINDS], "marker_api": self.markers,
                        "correlation_id": {"external": []}},
            "code_objects": [],
            "kernel_symbols": [{"size": 88, "kernel_id": 0, "code_object_id": 0, "kernel_name": "", "formatted_kernel_name": "0"}]
            + [{"size": 88, "kernel_id": k, "code_object_id": 1, "kernel_name": n + ".kd", "formatted_kernel_name": n, "demangled_kernel_name": n + ".kd",
                "truncated_kernel_name": n} for n, k in self.symbols.items()],
            "host_functions": [],
            "callback_records": {"counter_collection": []},
            "buffer_records": self.records,
        }

    def doc(self) -> dict[str, Any]:
        return {"rocprofiler-sdk-tool": [self.process()]}


def hip_training(steps: int = 3, sync_gap_ns: int = 400_000) -> RocDoc:
    """A HIP program: per step a copy in, three kernels launched by hipLaunchKernel, then a
    hipDeviceSynchronize followed by host work (``sync_gap_ns``) before the next step's launches;
    each step inside a ROCTx range named ``step N``."""
    d = RocDoc()
    t = 1_000_000
    for s in range(steps):
        start = t
        c = d.hip("hipMemcpyAsync", t, t + 5_000)
        d.copy("MEMORY_COPY_HOST_TO_DEVICE", t + 6_000, t + 30_000, 1 << 20, corr=c)
        t += 10_000
        for k in range(3):
            c = d.hip("hipLaunchKernel", t, t + 4_000)
            d.kernel(f"gemm_kernel_{k}", max(t + 30_000, t + 6_000) + k * 100_000, t + 30_000 + k * 100_000 + 90_000, corr=c)
            t += 5_000
        end_dev = t + 30_000 + 2 * 100_000 + 90_000
        d.hip("hipDeviceSynchronize", t, end_dev + 2_000)
        t = end_dev + 2_000 + sync_gap_ns
        d.marker(f"step {s}", start, t)
    return d
