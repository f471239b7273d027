"""Measure on a CUDA GPU what only a GPU can show, and save real traces for the tests.

    python3 scripts/device_measure.py OUT_DIR [--device cuda|cpu] [--only NAME,...]

Writes ``OUT_DIR/measured.json`` (every number below, with the GPU, torch and CUDA versions) and
small gzipped traces (``OUT_DIR/traces/*.pt.trace.json.gz``, each checked under 2 MiB):

* ``pairs``     each lab flaw before and after its lever (``whyidle.lab``): tracker samples/s and
                step time of both, and both traces: the measured "after" that a predicted speed-up
                is checked against, offline;
* ``sweep``     the lab model's samples/s and peak memory at batch sizes 256..8192 (bf16 autocast);
* ``latency``   a small transformer encoder's inference latency per batch size (CUDA events,
                median and p90 of 20 after warm-up): the latency curve batching is tuned against;
* ``workloads`` traces of other kinds of job, for the attribution tests: a serving loop that waits
                on a request queue (demand), offline inference with Python preprocessing on the
                host (host work outside torch ops), a device sync after every kernel, and a cold
                start (the profiler running from the first call);
* ``syncs``     the sync finder on a loop with ``.item()`` and ``.cpu()``: the lines it names;
* ``overhead``  the lab's well-fed loop with and without the step tracker (wall time per step).

Every stage is independent: one that fails records its error and the others still run. With
``--device cpu`` the stages that can run on a CPU do (a smoke test of this script).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

MAX_TRACE_BYTES = 2 * 1024 * 1024
RESULTS: dict[str, Any] = {}


def _save(out: Path) -> None:
    (out / "measured.json").write_text(json.dumps(RESULTS, indent=1, sort_keys=True) + "\n")


def _keep_trace(src: Path | str, out: Path, name: str) -> dict[str, Any]:
    dest = out / "traces" / f"{name}.pt.trace.json.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = Path(src)
    if src.suffix == ".gz":
        shutil.copyfile(src, dest)
    else:
        with open(src, "rb") as f, gzip.open(dest, "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
    size = dest.stat().st_size
    if size > MAX_TRACE_BYTES:
        dest.unlink()
        return {"trace": None, "trace_bytes": size, "trace_dropped": "over 2 MiB"}
    return {"trace": dest.name, "trace_bytes": size}


def _stats(run: Any) -> dict[str, Any]:
    st = run.tracker_stats
    steps = [s.duration_ns for s in st.steps[st.skip_first :]] if st is not None else []
    steps.sort()
    return {
        "samples_per_s": st.samples_per_s if st is not None else None,
        "step_ns_median": steps[len(steps) // 2] if steps else None,
        "step_ns_mean": sum(steps) / len(steps) if steps else None,
        "data_wait_share": st.data_wait_share if st is not None else None,
        "steps": len(steps),
        "wall_s": run.wall_s,
    }


# --- pairs: each flaw, then its lever ------------------------------------------------------


def stage_pairs(out: Path, dev: str) -> dict[str, Any]:
    from whyidle.lab.check import check_report
    from whyidle.lab.job import apply_fix, run_job, spec_for

    levers: dict[str, tuple[str, Callable[[Any], tuple[Any, str]]]] = {
        "starvation": ("input_pipeline", lambda s: apply_fix(s, "input_pipeline")),
        "h2d": ("h2d_copy", lambda s: apply_fix(s, "h2d_copy")),
        "sync": ("host_sync", lambda s: apply_fix(s, "host_sync")),
        "smallbatch": ("batch_size", lambda s: (replace(s, batch_size=128), "batch size 4 -> 128")),
        "launch": ("fused_optimizer", lambda s: (replace(s, fused_optimizer=True), "AdamW(fused=True) instead of foreach=False")),
    }
    flaws = ["none", *levers] if dev == "cuda" else ["none", "starvation"]
    res: dict[str, Any] = {}
    for flaw in flaws:
        entry: dict[str, Any] = {}
        try:
            spec = spec_for(flaw, dev, steps=None if dev == "cuda" else 12, profile_steps=3)
            with tempfile.TemporaryDirectory() as tmp:
                run = run_job(spec, trace_dir=tmp)
                entry["before"] = {**_stats(run), "job": _job(spec)}
                if run.trace_path is not None:
                    entry["before"].update(_keep_trace(run.trace_path, out, f"lab_{flaw}_{dev}"))
                if run.trace_report is not None:
                    chk = check_report(flaw, run.trace_report, "trace")
                    entry["before"]["check"] = {"passed": chk.passed, "message": chk.message, "found": list(chk.found)}
            if flaw in levers:
                lever, fn = levers[flaw]
                fixed, what = fn(spec)
                with tempfile.TemporaryDirectory() as tmp:
                    run2 = run_job(fixed, trace_dir=tmp)
                    entry["after"] = {**_stats(run2), "job": _job(fixed), "lever": lever, "change": what}
                    if run2.trace_path is not None:
                        entry["after"].update(_keep_trace(run2.trace_path, out, f"lab_{flaw}_{dev}_fixed"))
                    if run2.trace_report is not None:
                        entry["after"]["findings"] = [f.key for f in run2.trace_report.findings]
                b, a = entry["before"]["samples_per_s"], entry["after"]["samples_per_s"]
                entry["speedup_samples_per_s"] = a / b if a and b else None
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-2000:]
        res[flaw] = entry
        RESULTS["pairs"] = res
        _save(out)
    return res


def _job(spec: Any) -> dict[str, Any]:
    return {"batch_size": spec.batch_size, "width": spec.width, "depth": spec.depth, "in_dim": spec.in_dim, **spec.loader_kwargs(), "io_latency_s": spec.io_latency_s, "non_blocking": spec.non_blocking, "cpu_metrics": spec.cpu_metrics, "fused_optimizer": spec.fused_optimizer}


# --- sweep: samples/s by batch size --------------------------------------------------------


def stage_sweep(out: Path, dev: str) -> list[dict[str, Any]]:
    from whyidle.lab.job import run_job, spec_for

    rows: list[dict[str, Any]] = []
    sizes = [256, 512, 1024, 2048, 4096, 8192] if dev == "cuda" else [32, 64]
    for bs in sizes:
        spec = replace(spec_for("none", dev, steps=25, profile_steps=0), batch_size=bs, io_latency_s=0.0)
        row: dict[str, Any] = {"batch_size": bs}
        try:
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            run = run_job(spec)
            row.update(_stats(run))
            if dev == "cuda":
                row["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
        RESULTS["sweep"] = {"model": "lab MLP (in 256, width 8192, depth 3, 1000 classes), AdamW fused, bf16 autocast, 8 workers", "rows": rows}
        _save(out)
    return rows


# --- latency: inference latency per batch size ----------------------------------------------


def _encoder(dev: str, layers: int = 6) -> Any:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).to(dev).eval()


def stage_latency(out: Path, dev: str) -> dict[str, Any]:
    model = _encoder(dev)
    seq = 128
    rows = []
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256] if dev == "cuda" else [1, 2]
    with torch.inference_mode(), torch.autocast(dev, dtype=torch.bfloat16):
        for bs in sizes:
            x = torch.randn(bs, seq, 1024, device=dev)
            for _ in range(5):
                model(x)
            times = []
            for _ in range(20):
                if dev == "cuda":
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    model(x)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) * 1e6)
                else:
                    t = time.perf_counter_ns()
                    model(x)
                    times.append(time.perf_counter_ns() - t)
            times.sort()
            rows.append({"batch_size": bs, "latency_ns_median": times[len(times) // 2], "latency_ns_p90": times[int(len(times) * 0.9)], "samples_per_s": bs / (times[len(times) // 2] / 1e9)})
    res = {"model": "TransformerEncoder d_model 1024, 16 heads, ffn 4096, 6 layers, seq 128, bf16 autocast, inference_mode", "timing": "CUDA events around one forward, 20 after 5 warm-up" if dev == "cuda" else "perf_counter", "rows": rows}
    RESULTS["latency"] = res
    _save(out)
    return res


# --- workloads: traces of other kinds of job ------------------------------------------------


def _profile(fn: Callable[[Any], None], steps: int, warmup: int, out: Path, name: str, dev: str, wait: int = 0) -> dict[str, Any]:
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        with torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
            with_stack=True,
            record_shapes=True,
        ) as prof:
            for i in range(wait + warmup + steps):
                fn(i)
                prof.step()
        info = _keep_trace(path, out, name)
    return info


def stage_workloads(out: Path, dev: str) -> dict[str, Any]:
    import numpy as np

    res: dict[str, Any] = {}

    def record(name: str, what: str, make: Callable[[], tuple[Callable[[Any], None], int, int, int]]) -> None:
        try:
            fn, steps, warmup, wait = make()
            t0 = time.perf_counter()
            info = _profile(fn, steps, warmup, out, name, dev, wait)
            res[name] = {"what": what, **info, "wall_s": time.perf_counter() - t0}
        except Exception as exc:
            res[name] = {"what": what, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        RESULTS["workloads"] = res
        _save(out)

    # 1. Serving loop: requests arrive ~every 8 ms (a Poisson process, fixed seed) on a queue; the
    # server takes whatever has arrived (up to 8) and runs one forward. Most of the time the GPU
    # waits for requests: insufficient demand, with the thread blocked in queue.get.
    def serving() -> tuple[Callable[[Any], None], int, int, int]:
        model = _encoder(dev, layers=2)
        q: queue.Queue[Any] = queue.Queue()
        rng = np.random.default_rng(0)
        stop = threading.Event()

        def client() -> None:
            while not stop.is_set():
                time.sleep(float(rng.exponential(0.008)))
                q.put(torch.randn(1, 64, 1024))

        threading.Thread(target=client, daemon=True, name="client").start()

        def serve_one(i: int) -> None:
            with torch.profiler.record_function("serve_batch"):
                reqs = [q.get()]
                while len(reqs) < 8:
                    try:
                        reqs.append(q.get_nowait())
                    except queue.Empty:
                        break
                with torch.inference_mode(), torch.autocast(dev, dtype=torch.bfloat16):
                    y = model(torch.cat(reqs).to(dev, non_blocking=True))
                y.float().mean().item()  # the response goes back to the client

        return serve_one, 15, 3, 0

    record("serving_queue_wait", "a serving loop: requests arrive ~every 8 ms on a queue.Queue; the server blocks in queue.get, batches what has arrived (<= 8), runs a 2-layer encoder, returns .item()", serving)

    # 2. Offline inference with host preprocessing in Python/numpy between batches (decode,
    # normalise): the GPU idles while the host does work that is not a torch op.
    def offline() -> tuple[Callable[[Any], None], int, int, int]:
        model = _encoder(dev)
        rng = np.random.default_rng(1)

        def decode_and_normalise(n: int) -> Any:
            raw = rng.integers(0, 255, size=(n, 64, 1024), dtype=np.uint8)
            x = raw.astype(np.float32) / 255.0
            x = (x - x.mean(axis=(1, 2), keepdims=True)) / (x.std(axis=(1, 2), keepdims=True) + 1e-6)
            return np.ascontiguousarray(x)

        def step(i: int) -> None:
            x = torch.from_numpy(decode_and_normalise(64))
            with torch.inference_mode(), torch.autocast(dev, dtype=torch.bfloat16):
                y = model(x.to(dev))
            _ = y.argmax(-1).cpu()

        return step, 4, 1, 0

    record("offline_inference_numpy_preprocessing", "offline batch inference: each batch decoded and normalised with numpy on the host (not torch ops), then a 6-layer encoder forward, argmax .cpu()", offline)

    # 3. A device sync after every kernel (a common debugging habit left in), with host work between.
    def sync_each() -> tuple[Callable[[Any], None], int, int, int]:
        a = torch.randn(2048, 2048, device=dev)

        def step(i: int) -> None:
            x = a
            for _ in range(20):
                x = torch.tanh(x @ a)
                if dev == "cuda":
                    torch.cuda.synchronize()
                sum(range(20000))  # host bookkeeping between kernels
        return step, 3, 1, 0

    record("sync_after_each_kernel", "20 matmul+tanh per step, torch.cuda.synchronize() after each, a little Python between", sync_each)

    # 4. Cold start: the profiler runs from the very first call (no warm-up): cuBLAS handle,
    # first kernels, lazy module loading are in the trace.
    def cold() -> tuple[Callable[[Any], None], int, int, int]:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 128, 3, 2, 1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10))
        opt: list[Any] = []

        def step(i: int) -> None:
            if i == 0:
                model.to(dev)
                opt.append(torch.optim.SGD(model.parameters(), lr=0.01))
            x = torch.randn(64, 3, 224, 224, device=dev)
            loss = model(x).logsumexp(-1).mean()
            loss.backward()
            opt[0].step()
            opt[0].zero_grad()

        return step, 3, 0, 0

    record("cold_start_no_warmup", "a small CNN trained with the profiler active from the very first step (model moved to the GPU inside the first step, no warm-up)", cold)
    return res


# --- syncs: the sync finder names the lines -------------------------------------------------


def stage_syncs(out: Path, dev: str) -> dict[str, Any]:
    from whyidle.capture.sync import sync_finder

    w = torch.randn(512, 512, device=dev)
    with sync_finder() as found:
        for _ in range(10):
            y = torch.relu(torch.randn(256, 512, device=dev) @ w)
            v = y.sum().item()  # SYNC-LINE-A
            host = y[:4].cpu()  # SYNC-LINE-B
            del v, host
    res = {"available": found.available, "reason": found.reason, "total": found.total, "sites": [{"where": s.where, "count": s.count, "code": s.code} for s in found.sites], "summary": found.summary(steps=10)}
    src = Path(__file__).read_text().splitlines()
    expect = {n + 1 for n, line in enumerate(src) if "# SYNC-LINE-" in line and "expect" not in line}
    named = {s.line for s in found.sites if s.file.endswith("device_measure.py")}
    res["expected_lines"] = sorted(expect)
    res["named_lines"] = sorted(named)
    res["passed"] = (expect <= named) if dev == "cuda" else (not found.available)
    RESULTS["syncs"] = res
    _save(out)
    return res


# --- overhead: the tracker on a well-fed loop -----------------------------------------------


def stage_overhead(out: Path, dev: str) -> dict[str, Any]:
    from whyidle.lab.job import run_job, spec_for

    spec = replace(spec_for("none", dev, steps=60, profile_steps=0), io_latency_s=0.0, num_workers=2 if dev == "cuda" else 0)
    rows = []
    for rep in range(3):
        for tracked in (False, True):
            t = run_job(spec, tracker=tracked)
            rows.append({"tracked": tracked, "rep": rep, "wall_s": t.wall_s})
    off = sorted(r["wall_s"] for r in rows if not r["tracked"])
    on = sorted(r["wall_s"] for r in rows if r["tracked"])
    res = {"what": "the lab's well-fed job, 60 steps, with and without the step tracker, 3 alternating reps; whole-run wall time (includes model build and worker start)", "rows": rows, "median_ratio_tracked_over_untracked": on[1] / off[1]}
    RESULTS["overhead"] = res
    _save(out)
    return res


STAGES: dict[str, Callable[[Path, str], Any]] = {
    "pairs": stage_pairs,
    "syncs": stage_syncs,
    "workloads": stage_workloads,
    "latency": stage_latency,
    "sweep": stage_sweep,
    "overhead": stage_overhead,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default=",".join(STAGES))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    RESULTS["env"] = {
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu",
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if a.device == "cuda" else None,
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count if a.device == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "recorded_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    RESULTS["errors"] = {}
    for name in a.only.split(","):
        t0 = time.perf_counter()
        print(f"[device_measure] {name} ...", flush=True)
        try:
            STAGES[name](out, a.device)
        except Exception as exc:
            RESULTS["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        RESULTS.setdefault("stage_s", {})[name] = round(time.perf_counter() - t0, 1)
        print(f"[device_measure] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
        _save(out)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        rc = main()
    sys.stdout.flush()
    os._exit(rc)  # the serving stage's client thread may still be sleeping
