"""Scale benchmark: time and peak memory of reading very large Kineto traces.

Builds large traces by tiling a real one (every copy shifted in time, with fresh correlation,
flow and step ids) to 0.5 GB and 2 GB of uncompressed JSON (8 GB with --with-8gb), then measures,
each in a fresh child process:

* floor      whyidle's in-memory reader, single-threaded: read the whole text, decode every
             event, build the columns (sources.kineto.parse_kineto) - the parse floor
* stream x1  the out-of-core reader, one process (sources.kineto_stream, jobs=1)
* stream xN  the out-of-core reader, chunks decoded in N processes (default: all cores)
* diagnose   the library's whole pipeline, ``whyidle.diagnose(path)`` (reader chosen by size, then
             every analysis; one process beside the reader's chunk workers, the library's default)
* command    ``whyidle diagnose path`` as a user runs it: the same with the command's default
             ``--jobs 2`` (a forked helper makes the kernel tables and the what-if graph beside
             the analyses) and the terminal report rendered
* hta        HolisticTraceAnalysis parsing the same file (TraceAnalysis(trace_dir=...)), when it
             is installed, for sizes up to --hta-max-gb

Peak memory is the largest resident set of the child's whole process tree (sampled every 20 ms
with psutil, so a worker pool is counted in full), and the child's own max RSS from
resource.getrusage(RUSAGE_CHILDREN). A forked helper shares its parent's pages, which the sum of
resident sets counts twice: the tree's proportional set size (PSS, each shared page split between
its processes; sampled every 100 ms) is printed beside it. A child whose tree grows past --kill-gb is stopped and
reported as such (so HTA cannot take the machine down).

    python3 benchmarks/bench_scale.py                 # 0.5 GB and 2 GB
    python3 benchmarks/bench_scale.py --sizes 0.5     # quick
    python3 benchmarks/bench_scale.py --with-8gb      # also 8 GB (needs ~10 GB of disk)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
DEFAULT_BASE = TRACES / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


# -- building tiled traces ------------------------------------------------------------------


def build_tiled(base: Path, target_bytes: int, out: Path) -> tuple[int, int]:
    """Write ``out`` (plain JSON) by tiling ``base`` until it holds ``target_bytes``; (copies, bytes)."""
    import gzip

    import msgspec

    raw = gzip.open(base).read() if base.name.endswith(".gz") else base.read_bytes()
    doc = json.loads(raw)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    span_us = int(hi - lo) + 1000
    ids = [int(e["args"][k]) for e in events for k in ("correlation", "External id") if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)]
    ids += [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
    id_step = max(ids, default=0) + 1
    steps = [int(m.group(1)) for e in events if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))]
    step_step = (max(steps) + 1) if steps else 0
    doc.setdefault("distributedInfo", {"backend": "nccl", "rank": 0, "world_size": 1})
    head = msgspec.json.encode({k: v for k, v in doc.items() if k != "baseTimeNanoseconds"})
    enc = msgspec.json.Encoder()
    written = 0
    copies = 0
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(head[:-1] + b', "traceEvents": [\n')
        while written < target_bytes:
            k = copies
            shifted = []
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * span_us
                a = e2.get("args")
                if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += k * id_step
                    e2["args"] = a
                if isinstance(e2.get("id"), int):
                    e2["id"] += k * id_step
                name = e2.get("name")
                if step_step and isinstance(name, str) and name.startswith("ProfilerStep#"):
                    m = _STEP.match(name)
                    if m:
                        e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_step}"
                shifted.append(e2)
            body = enc.encode(shifted)[1:-1]
            if copies:
                f.write(b",\n")
            f.write(body)
            written += len(body)
            copies += 1
        tail = b"\n]"
        if "baseTimeNanoseconds" in doc:
            tail += b', "baseTimeNanoseconds": ' + str(doc["baseTimeNanoseconds"]).encode()
        f.write(tail + b"}\n")
    os.replace(tmp, out)
    return copies, out.stat().st_size


# -- measuring one child --------------------------------------------------------------------

_CHILD = {
    "floor": "from whyidle.sources._io import read_bytes; from whyidle.sources.kineto import parse_kineto; from pathlib import Path; "
    "tl = parse_kineto(read_bytes(Path(P)), path=P); print('events', len(tl))",
    "stream x1": "from whyidle.sources.kineto_stream import parse_kineto_stream; tl = parse_kineto_stream(P, jobs=1); print('events', len(tl))",
    "stream xN": "from whyidle.sources.kineto_stream import parse_kineto_stream; tl = parse_kineto_stream(P, jobs=J); print('events', len(tl))",
    "diagnose": "import whyidle; r = whyidle.diagnose(P); print('busy', r.utilization.busy_fraction)",
    "command": "import contextlib, io\nfrom whyidle.cli import main\nout = io.StringIO()\n"
    "with contextlib.redirect_stdout(out):\n    rc = main(['diagnose', P])\nprint('rc', rc, 'report', len(out.getvalue()))\nraise SystemExit(rc)",
    "hta": "import os, tempfile; from hta.trace_analysis import TraceAnalysis; d = tempfile.mkdtemp(); "
    "os.symlink(P, os.path.join(d, 'rank-0.json')); a = TraceAnalysis(trace_dir=d); print('events', len(a.t.get_trace(0)))",
}

_LAUNCHER = r"""
import resource, subprocess, sys, time, json
import psutil
code, limit = sys.argv[1], float(sys.argv[2])
t0 = time.perf_counter()
p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
proc = psutil.Process(p.pid)
peak = 0
pss_peak = 0
tick = 0
killed = False
while p.poll() is None:
    try:
        tree = [proc] + proc.children(recursive=True)
        rss = 0
        for q in tree:
            try:
                rss += q.memory_info().rss
            except psutil.Error:
                pass
        peak = max(peak, rss)
        tick += 1
        if tick % 5 == 0 and hasattr(proc, "memory_full_info"):  # every 100 ms: reading smaps costs more
            pss = 0
            for q in tree:
                try:
                    pss += getattr(q.memory_full_info(), "pss", 0)
                except psutil.Error:
                    pass
            pss_peak = max(pss_peak, pss)
        if rss > limit:
            for q in reversed(tree):
                try:
                    q.kill()
                except psutil.Error:
                    pass
            killed = True
    except psutil.Error:
        pass
    time.sleep(0.02)
out, err = p.communicate()
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
maxrss = ru.ru_maxrss * 1024
print(json.dumps({"rc": p.returncode, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "tree_peak_bytes": peak, "tree_pss_peak_bytes": pss_peak, "child_maxrss_bytes": maxrss,
                  "killed": killed, "out": out.decode()[-300:], "err": err.decode()[-600:]}))
"""


def measure(what: str, path: Path, jobs: int, kill_bytes: int) -> dict[str, Any]:
    code = f"P = {str(path)!r}; J = {jobs}\n" + _CHILD[what]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _LAUNCHER, code, str(kill_bytes)], capture_output=True, text=True, env=env)
    try:
        out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"rc": -1, "err": res.stderr[-600:], "wall_s": float("nan"), "cpu_s": float("nan"), "tree_peak_bytes": 0, "child_maxrss_bytes": 0, "killed": False}
    return out


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0.5,2", help="uncompressed sizes in GB (default 0.5,2)")
    ap.add_argument("--with-8gb", action="store_true", help="also 8 GB (long; needs disk and time)")
    ap.add_argument("--base", type=Path, default=DEFAULT_BASE, help="the real trace to tile")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/whyidle-bench"), help="where tiled traces are kept")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for 'stream xN'")
    ap.add_argument("--hta-max-gb", type=float, default=0.5, help="run HTA on sizes up to this (it needs several times the trace)")
    ap.add_argument("--kill-gb", type=float, default=16.0, help="stop a child whose process tree exceeds this RSS")
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(_CHILD))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if not args.base.exists():
        print(f"bench_scale: base trace {args.base} not found (the real traces live in ../shared/traces)", file=sys.stderr)
        return 2
    sizes = [float(s) for s in args.sizes.split(",") if s] + ([8.0] if args.with_8gb else [])
    args.workdir.mkdir(parents=True, exist_ok=True)
    whats = [w for w in _CHILD if not args.only or w in args.only.split(",")]
    if "hta" in whats and not _have("hta"):
        print("bench_scale: HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis); skipping HTA", file=sys.stderr)
        whats.remove("hta")
    results = []
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; base trace {args.base.name}; "
        f"stream xN uses {args.jobs} processes"
    )
    for gb in sizes:
        path = args.workdir / f"tiled_{gb:g}GB.json"
        target = int(gb * 1e9)
        if not path.exists() or abs(path.stat().st_size - target) > 0.05 * target:
            t = time.perf_counter()
            copies, size = build_tiled(args.base, target, path)
            print(f"built {path.name}: {copies} copies, {size / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s")
        size = path.stat().st_size
        rows: dict[str, dict[str, Any]] = {}
        for what in whats:
            if what == "hta" and gb > args.hta_max_gb:
                continue
            r = measure(what, path, args.jobs, int(args.kill_gb * 1e9))
            rows[what] = r
            results.append({"size_bytes": size, "what": what, **r})
            status = "killed (over --kill-gb)" if r.get("killed") else ("ok" if r["rc"] == 0 else f"failed rc={r['rc']}: {r.get('err', '')[-200:]}")
            print(
                f"{size / 1e9:5.2f} GB  {what:<10} {r['wall_s']:8.1f} s (cpu {r.get('cpu_s', float('nan')):6.1f} s)  peak tree RSS {r['tree_peak_bytes'] / 1e9:6.2f} GB  "
                f"(PSS {r.get('tree_pss_peak_bytes', 0) / 1e9:5.2f} GB, max process {r['child_maxrss_bytes'] / 1e9:5.2f} GB)  {status}",
                flush=True,
            )
        floor = rows.get("floor")
        if floor and floor["rc"] == 0:
            for what, r in rows.items():
                if what != "floor" and r["rc"] == 0:
                    print(
                        f"        {what:<10} time x{r['wall_s'] / floor['wall_s']:.2f} of the floor "
                        f"(cpu x{r.get('cpu_s', 0) / max(floor.get('cpu_s', 0), 1e-9):.2f}), "
                        f"peak memory x{r['tree_peak_bytes'] / max(floor['tree_peak_bytes'], 1):.2f} of the floor, "
                        f"x{r['tree_peak_bytes'] / size:.2f} of the trace size"
                    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
