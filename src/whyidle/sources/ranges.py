"""What the trace readers that see user ranges and kernel names by text share (Nsight Systems,
rocprofv3): which kernels are communication, and what a user range is (a step, a PyTorch op
emitted as a range, or an annotation).
"""

from __future__ import annotations

import re

from whyidle.timeline.model import Kind

__all__ = ["COLLECTIVE_KERNEL", "DEFAULT_STEP_PATTERN", "range_kind"]

# A communication kernel by its name: NCCL's and RCCL's (ncclDevKernel_Generic, ncclKernel_AllReduce...).
# Case is ignored for ASCII letters only: under re.IGNORECASE alone a foreign name's long s (U+017F)
# matches "s" and the Kelvin sign "k" (reduce_\u017fcatter would be a collective).
COLLECTIVE_KERNEL = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.IGNORECASE | re.ASCII)

# ProfilerStep#N (torch.profiler, also under emit_nvtx), and the range names trainers commonly
# push: "train_step", "training_step 12", "step 3", "iteration 7", "Iteration#2", "batch_5".
DEFAULT_STEP_PATTERN = (
    r"(?i)^(?:ProfilerStep#\d+"
    r"|(?:train(?:ing)?[ _-]?)(?:step|iter(?:ation)?|batch)(?:[ _#:-]*\d+)?"
    r"|(?:step|iter(?:ation)?|batch)[ _#:-]*\d+)$"
)

# A PyTorch op emitted as a range (torch.autograd.profiler.emit_nvtx, on ROCm as ROCTx):
# "aten::mm, seq = 12, op_id = 3".
_EMIT_OP = re.compile(r"^((?:aten|c10d|prim|torch|_c10d_functional)::[\w.]+)(?:, seq = \d+.*)?$")


def range_kind(text: str, step_re: re.Pattern[str]) -> tuple[Kind, str]:
    """(kind, name) of a user range: a step, a PyTorch op (named without its sequence number) or an annotation."""
    if step_re.search(text):
        return Kind.STEP, text
    m = _EMIT_OP.match(text)
    if m:
        return Kind.CPU_OP, m.group(1)
    return Kind.ANNOTATION, text
