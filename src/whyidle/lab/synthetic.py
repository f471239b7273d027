"""Synthetic Kineto traces from a small host/device simulation.

This is not a recording: it is a discrete-event model of one host thread feeding one CUDA stream,
written out in the PyTorch profiler's trace format. It serves as the bundled example for
``whyidle demo`` (labelled as synthetic) and as a source of traces with exactly known causes for
the tests. The model::

    host   [op][launch]......[op][launch]....[sync: blocked until the device is done]
    device         [kernel ..........][kernel ......]

* a launch costs host time and queues work; the work starts when the device is free and the launch
  has reached it (``launch_latency_us``), with a small start-up cost between queued kernels;
* a synchronising call blocks the host until all queued work is done;
* a pageable host-to-device copy blocks the host for the copy, then synchronises.

Times are microseconds (floats) in the model and are written as Kineto writes them.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whyidle.errors import ArgumentError

__all__ = ["Sim", "training_trace", "FLAWS", "write_trace"]

FLAWS = ("none", "starvation", "starvation_workers", "h2d", "sync", "launch", "inference_idle")


@dataclass
class Sim:
    pid: int = 1000
    tid: int = 1000
    stream: int = 7
    device: int = 0
    launch_us: float = 5.0  # host time of one cudaLaunchKernel
    launch_latency_us: float = 4.0  # launch -> earliest device start
    boundary_us: float = 1.0  # device start-up cost between queued kernels
    schema: str = "new"  # "new" (cpu_op, kernel, ac2g...) or "2021" (Operator, Kernel...)
    device_name: str = "NVIDIA A100-SXM4-80GB"
    compute_capability: tuple[int, int] = (8, 0)
    t: float = 1000.0  # host clock
    dev_free: float = 0.0  # device clock: when the stream is free
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 0
    _ext: int = 0

    # -- categories per schema --------------------------------------------------------------
    def _cat(self, what: str) -> str:
        if self.schema == "2021":
            return {"cpu_op": "Operator", "runtime": "Runtime", "kernel": "Kernel", "memcpy": "Memcpy", "memset": "Memset", "annotation": "Operator", "python": "python_function"}[what]
        return {"cpu_op": "cpu_op", "runtime": "cuda_runtime", "kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "annotation": "user_annotation", "python": "python_function"}[what]

    def _host_event(self, cat: str, name: str, ts: float, dur: float, args: dict[str, Any] | None = None, tid: int | None = None) -> None:
        self.events.append(
            {"ph": "X", "cat": self._cat(cat), "name": name, "pid": self.pid, "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur, "args": args or {}}
        )

    # -- host activity ----------------------------------------------------------------------
    @contextlib.contextmanager
    def op(self, name: str, cat: str = "cpu_op", stack: str | None = None, input_dims: Any = None) -> Iterator[None]:
        start = self.t
        self.t += 1.0  # dispatcher entry
        yield
        self.t += 1.0
        args: dict[str, Any] = {"External id": self._next_ext()}
        if stack:
            args["Call stack"] = stack
        if input_dims is not None:
            args["Input Dims"] = input_dims
        self._host_event(cat, name, start, self.t - start, args)

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def busy(self, us: float) -> None:
        """Host work inside the current op (Python, dispatch): time passes, nothing is launched."""
        self.t += us

    def idle(self, us: float) -> None:
        """Host time outside any traced op."""
        self.t += us

    def step(self, n: int) -> contextlib.AbstractContextManager[None]:
        return self.op(f"ProfilerStep#{n}", cat="annotation" if self.schema == "new" else "cpu_op")

    def _queue(
        self, kind: str, name: str, dur: float, launch_name: str, host_dur: float, extra: dict[str, Any] | None = None, staging_us: float = 0.0
    ) -> float:
        self._corr += 1
        corr = self._corr
        launch_at = self.t
        self._host_event("runtime", launch_name, launch_at, host_dur, {"correlation": corr, "cbid": 211})
        start = max(self.dev_free + self.boundary_us, launch_at + self.launch_latency_us + staging_us)
        args: dict[str, Any] = {"device": self.device, "context": 1, "stream": self.stream, "correlation": corr, "External id": self._ext}
        if kind == "kernel":
            args.update({"blocks per SM": 4.0, "est. achieved occupancy %": 50, "grid": [432, 1, 1], "block": [256, 1, 1]})
        if extra:
            args.update(extra)
        self.events.append(
            {"ph": "X", "cat": self._cat(kind), "name": name, "pid": self.device, "tid": self.stream, "ts": start, "dur": dur, "args": args}
        )
        self.dev_free = start + dur
        self.t += host_dur
        return start + dur

    def launch(self, kernel: str, dur_us: float) -> None:
        self._queue("kernel", kernel, dur_us, "cudaLaunchKernel", self.launch_us)

    def sync(self, name: str = "cudaStreamSynchronize") -> None:
        start = self.t
        self.t = max(self.t + 2.0, self.dev_free + 3.0)  # wakes shortly after the device is done
        self._host_event("runtime", name, start, self.t - start, {"correlation": 0})

    def h2d(self, nbytes: int, dur_us: float, pageable: bool = True, batch: int | None = None) -> None:
        """``tensor.to('cuda')``: pageable copies block the host, then synchronise."""
        dims = [[batch, 3, 224, 224]] if batch else None
        with self.op("aten::to", input_dims=dims):
            with self.op("aten::_to_copy"):
                with self.op("aten::copy_"):
                    kind = "Pageable" if pageable else "Pinned"
                    # Pageable memory is first staged by the CPU into a pinned buffer (about as
                    # long as the DMA itself), and the call returns only when the copy is done.
                    staging = dur_us if pageable else 0.0
                    host = 2 * dur_us + 5.0 if pageable else 6.0
                    self._queue("memcpy", f"Memcpy HtoD ({kind} -> Device)", dur_us, "cudaMemcpyAsync", host, {"bytes": nbytes}, staging)
                    if pageable:
                        self.sync()

    def item(self, stack: str | None = None) -> None:
        """``loss.item()``: a device-to-host copy of one scalar, then a sync."""
        with self.op("aten::item", stack=stack):
            with self.op("aten::_local_scalar_dense"):
                self._queue("memcpy", "Memcpy DtoH (Device -> Pageable)", 2.0, "cudaMemcpyAsync", 6.0, {"bytes": 4})
                self.sync()

    # -- output -----------------------------------------------------------------------------
    def trace(self) -> dict[str, Any]:
        meta = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "args": {"name": "python"}},
            {"name": "thread_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": self.tid, "args": {"name": "thread 1000 (python)"}},
        ]
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [
                {"id": 0, "name": self.device_name, "computeMajor": self.compute_capability[0], "computeMinor": self.compute_capability[1], "numSms": 108}
            ],
            "traceEvents": meta + sorted(self.events, key=lambda e: (e["ts"], -e["dur"])),
            "whyidle_synthetic": "generated by whyidle.lab.synthetic; not recorded on a GPU",
        }
        return doc


def _train_step(sim: Sim, n: int, kernels: int, kernel_us: float, flaw: str) -> None:
    with sim.step(n):
        if flaw == "starvation":
            with sim.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", stack="train.py(41): train"):
                sim.busy(30_000)  # decode + augment in the training process
        elif flaw == "starvation_workers":
            with sim.op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", stack="train.py(41): train"):
                sim.busy(30_000)  # waiting on workers that cannot keep up
        else:
            with sim.op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", stack="train.py(41): train"):
                sim.busy(30)
        sim.h2d(32 * 3 * 224 * 224 * 4, 4_000 if flaw == "h2d" else 150, pageable=(flaw == "h2d"), batch=32)
        for phase, stack in (("forward", "train.py(44): train"), ("backward", "train.py(45): train")):
            with sim.op(f"## {phase} ##", cat="annotation"):
                for k in range(kernels // 2):
                    name = "aten::addmm" if phase == "forward" else "AddmmBackward0"
                    with sim.op(name, stack=stack):
                        sim.busy(8.0 if flaw != "launch" else 12.0)
                        sim.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", kernel_us)
        with sim.op("Optimizer.step#AdamW.step", stack="train.py(46): train"):
            sim.busy(10)
            sim.launch("void at::native::multi_tensor_apply_kernel<FusedAdamW>", kernel_us)
        if flaw == "sync":
            sim.item(stack="train.py(47): train")
            with sim.op("aten::to", stack="train.py(48): train"):
                sim.busy(3_000)  # logging work after the sync, with nothing queued on the GPU


def training_trace(flaw: str = "none", steps: int = 5, schema: str = "new") -> dict[str, Any]:
    """A synthetic training trace with one injected flaw (see FLAWS)."""
    if flaw not in FLAWS:
        raise ArgumentError(f"unknown flaw {flaw!r}; expected one of {', '.join(FLAWS)}")
    sim = Sim(schema=schema)
    if flaw == "inference_idle":
        # A server loop: each request is handled, then the thread blocks in queue.get until the
        # next one arrives (python_function frames, as with_stack=True records them).
        t0 = sim.t
        for n in range(steps):
            with sim.step(n):
                with sim.op("aten::linear", stack="serve.py(20): handle"):
                    for _ in range(20):
                        sim.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 200)
                with sim.op("aten::item", stack="serve.py(22): handle"):
                    with sim.op("aten::_local_scalar_dense"):
                        sim._queue("memcpy", "Memcpy DtoH (Device -> Pageable)", 2.0, "cudaMemcpyAsync", 6.0, {"bytes": 4})
                        sim.sync()
            wait = sim.t
            sim.idle(20_000)  # waiting for the next request
            sim._host_event("python", "queue.py(154): get", wait, 20_000)
            sim._host_event("python", "<built-in method acquire of _thread.lock object at 0x7f0000000000>", wait + 2, 19_996)
        sim._host_event("python", "serve.py(30): serve_forever", t0, sim.t - t0)
        return sim.trace()
    kernels, kernel_us = {"launch": (400, 10.0), "h2d": (60, 100.0)}.get(flaw, (60, 500.0))
    for n in range(1, steps + 1):
        _train_step(sim, n, kernels, kernel_us, flaw)
    # Let the last step's device work finish before the capture ends.
    sim.t = max(sim.t, sim.dev_free + 10)
    return sim.trace()


def write_trace(doc: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    data = json.dumps(doc).encode()
    if p.name.endswith(".gz"):
        p.write_bytes(gzip.compress(data, mtime=0))
    else:
        p.write_bytes(data)
    return p
