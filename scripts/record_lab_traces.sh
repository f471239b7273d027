#!/usr/bin/env bash
# Record every flaw lab trace on a CUDA GPU: the real-hardware fixtures under tests/data/lab/.
#
# Run once on a machine with an NVIDIA GPU (it refuses to run without one, exit 2):
#     scripts/record_lab_traces.sh            # -> tests/data/lab/lab_<flaw>.pt.trace.json.gz + RECORDED.md
# It runs `whyidle lab --record-all`: each flaw (none starvation h2d sync smallbatch launch) with
# torch.profiler (1 warm-up + 3 active steps, gzipped, each checked under 2 MiB), checks each
# diagnosis names its flaw, and checks that the step tracker adds no host sync (PyTorch's sync
# debug mode set to "error" around a tracked loop). Exit status 1 if any check fails: read
# RECORDED.md, fix, rerun. Then commit tests/data/lab/ (the traces and RECORDED.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-tests/data/lab}"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 2)" || {
  echo "record_lab_traces: needs a CUDA GPU visible to torch; nothing recorded" >&2
  exit 2
}
python3 -m pip install -q -e ".[torch,test]"
python3 -m whyidle.cli lab --record-all "$OUT"
ls -l "$OUT"
