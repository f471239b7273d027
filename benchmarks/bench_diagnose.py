"""Benchmark: `whyidle diagnose --json` against the parse floor and HTA, in the same run.

Each measurement runs in a fresh Python process (so imports and start-up count for everyone) and
records wall time and peak RSS (os.wait4, taken by a small launcher: see LAUNCHER; it is the
largest of the process and the children it waited for, and whyidle's decoding child shares its
parent's pages). The commands take turns, round after
round, and each reports its median. Reported as ratios:

* whyidle / parse floor, where the floor is: read + gunzip + decode the same file with the
  fastest general JSON decoder available here (the faster of orjson and msgspec, measured);
* HTA / whyidle (speed-up) and whyidle / HTA peak memory, when HolisticTraceAnalysis is
  installed (pip install HolisticTraceAnalysis).

Byte code: pip compiles a package's modules when it installs a wheel (HTA's were compiled when it
was installed), but an editable install under PYTHONDONTWRITEBYTECODE=1 would recompile whyidle's
~80 modules in every run. So whyidle's package folder is byte-compiled first (compileall), as
an installed copy would be.

whyidle is run from this checkout's ``src`` (PYTHONPATH is set for every child), whatever
copy an editable install points at.

Usage: python3 benchmarks/bench_diagnose.py [--repeat 3] [--no-generated] [TRACE ...]
Default traces, from ../shared/traces: the two resnet50 traces (35 MB uncompressed), the 25 MB HTA
rank-0 trace, and the B200 LLM prefill trace (14 MB, with ``python_function`` frames: the one
shared trace with Python stacks); and a GENERATED trace, written to a temporary folder
(benchmarks/gen_backward.py, seed 0, 50 MB uncompressed, gzipped): a compiled backward with
gradient accumulation, thousands of gaps under 27 levels of nested cpu_ops and no Python stacks,
the case where a per-gap search for a Python line walks the whole nest.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = [
    SHARED / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz",
    SHARED / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz",
    SHARED / "hta" / "negative_queue_length_values_check__rank0.json.gz",
    SHARED / "inference" / "tracelens__b200_eager_llm_prefill_rank0.json.gz",
]
SRC = ROOT / "src"
CHILD_ENV = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
GENERATED_MB = 50.0

FLOOR = {
    "orjson": "import gzip, orjson, sys; orjson.loads(gzip.decompress(open(sys.argv[1], 'rb').read()))",
    "msgspec": "import gzip, msgspec, sys; msgspec.json.decode(gzip.decompress(open(sys.argv[1], 'rb').read()))",
}
HTA = (
    "import sys, logging; logging.disable(logging.CRITICAL)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "TraceAnalysis(trace_dir=sys.argv[1])\n"
)


# Peak RSS needs care: Linux carries the exec'ing process's high-water mark into the new
# program's ru_maxrss, and subprocess spawns with vfork, i.e. from this (large) benchmark
# process. So each command runs under this small launcher, which forks and execs it and reports
# its wall time and peak RSS as wait4 gives them.
LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one fresh process."""
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], capture_output=True, text=True, check=False, env=CHILD_ENV)
    wall, rss_kib, rc = proc.stdout.split()
    if int(rc) != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {proc.stderr[-500:]}")
    return float(wall), int(rss_kib) / 1024


def interleaved(cmds: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float]]:
    """name -> (median wall s, max peak RSS MiB), the commands taking turns in each round, so that
    a slow spell of this (shared, virtual) machine falls on all of them alike."""
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            runs[name].append(run(cmd))
    return {k: (statistics.median(r[0] for r in v), max(r[1] for r in v)) for k, v in runs.items()}


def have(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, check=False, env=CHILD_ENV).returncode == 0


def generated(folder: Path) -> Path:
    """The generated compiled-backward trace, gzipped, in ``folder`` (deterministic: seed 0)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gen_backward import write_backward_trace

    plain = write_backward_trace(folder / "generated_compiled_backward.json", target_mb=GENERATED_MB, seed=0)
    gz = folder / "generated_compiled_backward.json.gz"
    with open(plain, "rb") as f, gzip.open(gz, "wb", compresslevel=6) as out:
        shutil.copyfileobj(f, out)
    plain.unlink()
    return gz


def measure(trace: Path, decoders: list[str], hta: bool, repeat: int) -> str:
    """One line of the table: the floor, whyidle and HTA on ``trace``, taking turns."""
    size_mb = len(gzip.decompress(trace.read_bytes())) / 1e6 if trace.name.endswith(".gz") else trace.stat().st_size / 1e6
    with tempfile.TemporaryDirectory() as d:
        cmds = {f"floor {dec}": [sys.executable, "-c", FLOOR[dec], str(trace)] for dec in decoders}
        cmds["whyidle"] = [sys.executable, "-m", "whyidle.cli", "diagnose", str(trace), "--json"]
        if hta:  # HTA reads a folder of traces
            shutil.copy(trace, Path(d) / trace.name.replace(".pt.trace", ""))
            cmds["HTA"] = [sys.executable, "-c", HTA, d]
        res = interleaved(cmds, repeat)
    floor_s = min(v[0] for k, v in res.items() if k.startswith("floor"))
    w_s, w_mb = res["whyidle"]
    line = f"{trace.name[:44]:44} {size_mb:5.1f} {floor_s:8.3f} {w_s:9.3f} {w_s / floor_s:7.2f}"
    if hta:
        h_s, h_mb = res["HTA"]
        line += f" {h_s:7.3f} {h_s / w_s:7.1f} {w_mb:5.0f} {h_mb:7.0f} {w_mb / h_mb:5.2f}"
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-generated", action="store_true", help="leave the generated trace out of the default set")
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    # The checkout's whyidle, byte-compiled as a wheel install would be (see the docstring).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(SRC / "whyidle")], check=True)
    decoders = [name for name, mod in (("orjson", "orjson"), ("msgspec", "msgspec")) if have(mod)]
    hta = not args.no_hta and have("hta.trace_analysis")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeat {args.repeat} (median wall, max peak RSS)")
    print(f"floor decoders: {', '.join(decoders)}; HTA: {'yes' if hta else 'not installed'}; whyidle from {SRC}")
    header = f"{'trace':44} {'MB':>5} {'floor s':>8} {'whyidle s':>9} {'x floor':>7}"
    if hta:
        header += f" {'HTA s':>7} {'speedup':>7} {'MiB':>5} {'HTA MiB':>7} {'mem x':>5}"
    with tempfile.TemporaryDirectory() as gen_dir:
        if not args.traces and not args.no_generated:
            traces.append(generated(Path(gen_dir)))
        if not traces:
            print("no traces: ../shared/traces is absent; pass trace paths", file=sys.stderr)
            return 2
        print(header)
        for trace in traces:
            print(measure(trace, decoders, hta, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
