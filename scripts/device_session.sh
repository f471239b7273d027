#!/usr/bin/env bash
# One prepared GPU session: everything whyidle can only check on a CUDA device, in one command.
#
#     scripts/device_session.sh RESULTS_DIR
#
# 1. the lab fixtures (scripts/record_lab_traces.sh's job: `whyidle lab --record-all`) into
#    RESULTS_DIR/lab/ (commit them to tests/data/lab/);
# 2. scripts/device_measure.py: before/after pairs per flaw, batch sweep, inference latency curve,
#    other workload traces, sync finder, tracker overhead -> RESULTS_DIR/measure/;
# 3. `whyidle watch` (NVML + process CPU) around a bursty job, and its counter report;
# 4. the CUDA-only tests (tests/test_lab.py, tests/test_capture.py).
# Each stage has its own time limit and its own log; a failed stage does not stop the others.
# Works without installing whyidle (PYTHONPATH=src), for machines that cannot reach a registry.
set -uo pipefail
cd "$(dirname "$0")/.."
R="${1:?usage: scripts/device_session.sh RESULTS_DIR}"
mkdir -p "$R"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/device.tar.gz" -C "$R" . 2>/dev/null; true; }
stage() {  # stage NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  echo "== $name (limit ${secs}s)"
  timeout "$secs" "$@" >"$R/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $((SECONDS - t0))s"; tail -n 15 "$R/$name.log"
  echo "$name rc=$rc $((SECONDS - t0))s" >>"$R/stages.txt"
  pack
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$R/gpu.txt" 2>&1; cat "$R/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"

stage lab 150 python3 -m whyidle.cli lab --record-all "$R/lab"
stage measure 220 python3 scripts/device_measure.py "$R/measure"
stage watch 30 python3 -m whyidle.cli watch --interval 0.1 -o "$R/watch.counters.csv" -- python3 -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
for burst in range(6):
    t = time.time()
    while time.time() - t < 0.8:
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize(); time.sleep(0.7)
"
stage watch_report 20 python3 -m whyidle.cli diagnose "$R/watch.counters.csv" --json -o "$R/watch.report.json"
mkdir -p tests/data/lab && cp -r "$R/lab/." tests/data/lab/ 2>/dev/null
stage cuda_tests 110 python3 -m pytest -q -p no:cacheprovider tests/test_lab.py tests/test_capture.py
pack
cat "$R/stages.txt"
