"""GEMM shapes too small or badly aligned to fill the device: each GEMM op shape's dims, where it
sits on the roofline, and the time it would take at the rate well-shaped GEMMs reach.

Tensor cores load operands in tiles: NVIDIA's matrix-multiplication guide (Deep Learning
Performance Guide, "Tensor Core Requirements") asks for dimensions that are multiples of 8 for
16-bit inputs and of 16 for 8-bit ones; a GEMM whose K (the reduction) or N (the output's leading
dimension, row-major) is not falls back to slower, narrower loads or pads tiles it then wastes.
A GEMM with a tiny M (decode: one token per sequence, a batch of a few rows) reads its whole
weight matrix to do a few rows of work: it cannot use the tiles it launches::

    well shaped   [4096 x 4096] x [4096 x 4096] bf16   0.71 of the compute bound
    misaligned    [4096 x 4093] x [4093 x 4096] bf16   0.23      -> est. at 0.71: 3.1x shorter
    tiny M        [4 x 4096] x [4096 x 4096] bf16      memory-bound, 0.20 of it

The estimate for a flagged shape is its kernel time scaled to the fraction of its bound that
the well-shaped GEMMs of the same precision reach in the same trace (time-weighted), or, when
there are none, to ``Config.roofline_near_fraction`` (the report's own line for "near the
roofline"): an estimate, not a measurement.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from whyidle.analyses.flops import OpWork, itemsize, precision_of
from whyidle.analyses.peaks import DevicePeak
from whyidle.analyses.work import OpKernels, roof
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import unique_inverse
from whyidle.timeline.model import Timeline

__all__ = ["GemmDims", "GemmShape", "gemm_dims", "gemm_shapes", "ALIGN"]

# The multiple each dimension should be for tensor cores, by the precision of the inputs.
ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16}


class GemmDims(msgspec.Struct, frozen=True):
    batch: int  # product of the batch dims (1 for mm)
    m: int
    n: int
    k: int
    precision: str
    itemsize: int


class GemmShape(msgspec.Struct, frozen=True):
    """One GEMM op shape flagged as too small or badly aligned, with its rate and the estimate."""

    name: str
    dims: GemmDims
    count: int
    kernel_ns: int
    tflops: float
    fraction: float  # of its roofline bound
    bound: str
    misaligned: tuple[str, ...]  # the dims ("K", "N") not a multiple of ALIGN[precision]
    tiny_m: bool
    reference: float  # the fraction the estimate assumes
    reference_from: str  # "trace" (well-shaped GEMMs of this precision) or "near_roofline"
    est_ns: int  # kernel time at the reference fraction (an estimate)


def gemm_dims(name: str, inputs_text: str) -> GemmDims | None:
    """(batch, M, N, K) of a GEMM op from its recorded inputs, None when they do not fit."""
    op = name[6:] if name.startswith("aten::") else name
    try:
        dims, types, *_ = msgspec.json.decode(inputs_text)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    if type(dims) is not list or type(types) is not list:
        return None
    first = 1 if op in ("addmm", "baddbmm") else 0
    if len(dims) < first + 2 or len(types) < first + 1:
        return None
    a, b = dims[first], dims[first + 1]
    if type(a) is not list or type(b) is not list or not all(type(x) is int for x in (*a, *b)) or not a or not b:
        return None
    t = str(types[first])
    size, precision = itemsize(t), precision_of(t)
    if op == "linear" and len(b) == 2 and a[-1] == b[1]:
        return GemmDims(1, math.prod(a[:-1]), b[0], b[1], precision, size)
    if op in ("mm", "addmm", "_scaled_mm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return GemmDims(1, a[0], b[1], a[1], precision, size)
    if op in ("bmm", "baddbmm", "matmul") and len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
        batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
        return GemmDims(batch, a[-2], b[-1], a[-1], precision, size)
    return None


def _shapes(tl: Timeline, ok: OpKernels) -> list[tuple[int, int, int, int]]:
    """(first op index, count, summed ns, group id) per GEMM (name, inputs) with kernel time."""
    op_ns = np.zeros(ok.ops.size, dtype=np.int64)
    has = ok.op >= 0
    np.add.at(op_ns, ok.op[has], ok.ns[has])
    gemm = ok.works.family_is(("gemm",))
    used = np.flatnonzero((op_ns > 0) & gemm) if gemm.size else np.zeros(0, dtype=np.int64)
    if used.size == 0:
        return []
    uniq, inverse = unique_inverse(tl.op_key(ok.ops[used]))
    count = np.bincount(inverse, minlength=uniq.size)
    ns = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(ns, inverse, op_ns[used])
    first = np.full(uniq.size, inverse.size, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(inverse.size, dtype=np.int64))
    return [(int(used[first[g]]), int(count[g]), int(ns[g]), g) for g in range(uniq.size)]


def gemm_shapes(tl: Timeline, ok: OpKernels, peak: DevicePeak | None, cfg: AttributionSettings) -> tuple[GemmShape, ...]:
    """The GEMM op shapes under the rate well-shaped GEMMs of their precision reach, that are
    misaligned or have a tiny M, longest estimated saving first (pure). Needs the device's peaks."""
    if peak is None:
        return ()
    rated: list[tuple[str, GemmDims, int, int, float, float, str, tuple[str, ...], bool]] = []
    for i, count, ns, _ in _shapes(tl, ok):
        row = int(ok.ops[i])
        d = gemm_dims(tl.name_of(row), tl.inputs_of(row))
        w = ok.works[i]
        if d is None or d.precision != w.precision:
            continue
        tflops, _, _, bound, fraction = roof(OpWork(w.flops * count, w.nbytes * count, w.precision, w.family), ns, peak)
        if fraction is None:
            continue
        align = ALIGN.get(d.precision)
        bad = tuple(n for n, v in (("K", d.k), ("N", d.n)) if align and v % align)
        rated.append((tl.name_of(row), d, count, ns, tflops, fraction, bound, bad, d.m <= cfg.gemm_tiny_m))
    out = []
    for name, d, count, ns, tflops, fraction, bound, bad, tiny in rated:
        if not bad and not tiny:
            continue
        good = [(f, t) for _, e, _, t, _, f, _, b, ti in rated if e.precision == d.precision and not b and not ti]
        good_ns = sum(t for _, t in good)
        ref, origin = (min(sum(f * t for f, t in good) / good_ns, 1.0), "trace") if good_ns else (cfg.roofline_near_fraction, "near_roofline")
        if fraction >= ref:
            continue
        out.append(GemmShape(name, d, count, ns, tflops, fraction, bound, bad, tiny, ref, origin, int(ns * fraction / ref)))
    return tuple(sorted(out, key=lambda s: -(s.kernel_ns - s.est_ns)))
