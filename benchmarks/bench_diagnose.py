"""Benchmark: `whyidle diagnose --json` against the parse floor and HTA, in the same run.

Each measurement runs in a fresh Python process (so imports and start-up count for everyone) and
records wall time and that process's peak RSS (os.wait4). Reported as ratios:

* whyidle / parse floor, where the floor is: read + gunzip + decode the same file with the
  fastest general JSON decoder available here (the faster of orjson and msgspec, measured);
* HTA / whyidle (speed-up) and whyidle / HTA peak memory, when HolisticTraceAnalysis is
  installed (pip install HolisticTraceAnalysis).

Byte code: pip compiles a package's modules when it installs a wheel (HTA's were compiled when it
was installed), but an editable install under PYTHONDONTWRITEBYTECODE=1 would recompile whyidle's
~80 modules in every run. So whyidle's package folder is byte-compiled first (compileall), as
an installed copy would be.

Usage: python3 benchmarks/bench_diagnose.py [--repeat 3] [TRACE ...]
Default traces: the two resnet50 traces (35 MB uncompressed) and the 25 MB HTA rank-0 trace from
../shared/traces.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = [
    SHARED / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz",
    SHARED / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz",
    SHARED / "hta" / "negative_queue_length_values_check__rank0.json.gz",
]

FLOOR = {
    "orjson": "import gzip, orjson, sys; orjson.loads(gzip.decompress(open(sys.argv[1], 'rb').read()))",
    "msgspec": "import gzip, msgspec, sys; msgspec.json.decode(gzip.decompress(open(sys.argv[1], 'rb').read()))",
}
HTA = (
    "import sys, logging; logging.disable(logging.CRITICAL)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "TraceAnalysis(trace_dir=sys.argv[1])\n"
)


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {err[-500:]}")
    return wall, usage.ru_maxrss / 1024


def median_of(cmd: list[str], repeat: int) -> tuple[float, float]:
    runs = [run(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def have(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true")
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    if not traces:
        print("no traces: ../shared/traces is absent; pass trace paths", file=sys.stderr)
        return 2
    import whyidle  # the copy the child processes import

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(whyidle.__file__).parent)], check=True)
    decoders = [name for name, mod in (("orjson", "orjson"), ("msgspec", "msgspec")) if have(mod)]
    hta = not args.no_hta and have("hta.trace_analysis")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeat {args.repeat} (median wall, max peak RSS)")
    print(f"floor decoders: {', '.join(decoders)}; HTA: {'yes' if hta else 'not installed'}")
    header = f"{'trace':44} {'MB':>5} {'floor s':>8} {'whyidle s':>9} {'x floor':>7}"
    if hta:
        header += f" {'HTA s':>7} {'speedup':>7} {'MiB':>5} {'HTA MiB':>7} {'mem x':>5}"
    print(header)
    for trace in traces:
        size_mb = len(gzip.decompress(trace.read_bytes())) / 1e6 if trace.name.endswith(".gz") else trace.stat().st_size / 1e6
        floor_s = min(median_of([sys.executable, "-c", FLOOR[d], str(trace)], args.repeat)[0] for d in decoders)
        w_s, w_mb = median_of([sys.executable, "-m", "whyidle.cli", "diagnose", str(trace), "--json"], args.repeat)
        line = f"{trace.name[:44]:44} {size_mb:5.1f} {floor_s:8.3f} {w_s:9.3f} {w_s / floor_s:7.2f}"
        if hta:
            with tempfile.TemporaryDirectory() as d:
                shutil.copy(trace, Path(d) / trace.name.replace(".pt.trace", ""))
                h_s, h_mb = median_of([sys.executable, "-c", HTA, d], args.repeat)
            line += f" {h_s:7.3f} {h_s / w_s:7.1f} {w_mb:5.0f} {h_mb:7.0f} {w_mb / h_mb:5.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
