#!/usr/bin/env bash
# One prepared GPU session: everything whyidle can only check on a CUDA device, in one command.
#
#     scripts/device_session.sh RESULTS_DIR
#
# 1. the lab fixtures (scripts/record_lab_traces.sh's job: `whyidle lab --record-all`) into
#    RESULTS_DIR/lab/ (commit them to tests/data/lab/);
# 2. `whyidle lab --flaw all --fix`: predicted vs measured speed-up of each flaw's fix;
# 3. `whyidle sweep` of the lab MLP's batch size; `whyidle batching --measure` on an encoder and the
#    simulator-vs-real-batcher benchmark;
# 4. scripts/device_measure.py pairs and sync finder (before/after traces per flaw; the script's
#    other stages, run on 2026-11-30: sweep, latency, workload traces, tracker overhead);
# 5. the CUDA-only tests (tests/test_lab.py, tests/test_capture.py).
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

stage lab 100 python3 -m whyidle.cli lab --record-all "$R/lab"
stage labfix 150 bash -c "python3 -m whyidle.cli lab --flaw all --fix --device cuda --json > $R/labfix.json"
stage sweep 100 python3 -m whyidle.cli sweep examples/sweep_lab.py:make --batch-size 256..8192 --workers 8 --pin-memory on --precision bf16 --steps 30 --warmup 5 --time-limit 40 -o "$R/sweep_h200.json"
stage batching 60 python3 -m whyidle.cli batching --measure whyidle.sweep.examples:encoder --device cuda --rate 125 --slo-ms 50 --save-latency "$R/h200_curve.json" -o "$R/batching.json"
stage batcher 40 python3 benchmarks/bench_batcher.py --model encoder --json "$R/batcher_encoder.json"
stage measure 60 python3 scripts/device_measure.py "$R/measure" --only pairs,syncs
mkdir -p tests/data/lab && cp -r "$R/lab/." tests/data/lab/ 2>/dev/null
stage cuda_tests 60 python3 -m pytest -q -p no:cacheprovider tests/test_lab.py tests/test_capture.py
pack
cat "$R/stages.txt"
