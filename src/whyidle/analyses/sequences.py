"""Kernel sequences a compiler would fuse: memory-bound chains of small eager kernels, and
attention computed as GEMM + softmax + GEMM instead of one fused kernel.

A **fusion chain** is a run of consecutive kernels on one stream (no other kernel between them),
each launched by an eager op that only moves data (elementwise, normalisation, softmax,
reduction: ``analyses/flops.py``'s bytes-only families, memory-bound by construction) and each
shorter than ``Config.fusion_max_kernel_ns``, from at least two ops::

    stream 7  [layer_norm][add][gelu]   [mm ............]   [layer_norm][add][gelu]
              '--- chain (3 ops) ---'                       '--- same sequence ---'

Chains are grouped by their op names; a sequence seen at least ``Config.fusion_min_repeats``
times is a fusion candidate. Its fused form reads the chain's inputs once and writes its output
once: each op after the first does not read back the tensor the op before it wrote (an input of
that size is taken to be it), and only the last op's output is written. The estimate is that
traffic at the device's memory bandwidth, and never less than the chain's shortest kernel::

    fused bytes = reads(op 1) + sum over later ops of (reads - the previous op's output) + output(last)
    est. ns     = max(fused bytes / bandwidth, shortest kernel of the chain)

An **unfused attention** is, on one stream, a GEMM (``bmm``/``matmul``) whose output the next
ops scale or mask (elementwise), a ``softmax`` of it, maybe dropout, then a GEMM by V. Its fused
form (``scaled_dot_product_attention``) does the two GEMMs' FLOPs and moves Q, K, V and the
output once; the estimate is the roofline time of that at ``Config.roofline_near_fraction`` of
the bound (what the report calls near the roofline; flash kernels reach about that).

Neither looks inside compiled regions (``torch.compile`` ranges), CUDA graph launches, Triton
kernels or the optimizer's step and zero_grad (their levers are a fused optimizer and
``set_to_none``): that work is fused already or has a fix of its own. Everything here is an estimate from the roofline, and says so.
"""

from __future__ import annotations

import math
import re

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.analyses.advice_context import COMPILED_RANGE
from whyidle.analyses.calls import is_graph_launch
from whyidle.analyses.flops import itemsize
from whyidle.analyses.gemm_shapes import gemm_dims
from whyidle.analyses.hostops import python_line
from whyidle.analyses.nesting import OpenIndex
from whyidle.analyses.peaks import DevicePeak
from whyidle.analyses.work import OpKernels
from whyidle.config import AttributionSettings
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["Chain", "Attention", "fusion_chains", "unfused_attention", "fusible_kernels"]

I64 = npt.NDArray[np.int64]
FUSIBLE = frozenset(("elementwise", "norm", "softmax", "reduction"))
_SKIPPED_RANGE = re.compile(f"{COMPILED_RANGE.pattern}|^Optimizer\\.(step|zero_grad)#")
_ATTN_GEMM = frozenset(("aten::bmm", "aten::matmul", "aten::baddbmm"))
_SIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


class Chain(msgspec.Struct, frozen=True):
    """One sequence of ops whose kernels ran back to back, summed over its occurrences."""

    ops: tuple[str, ...]
    streams: tuple[str, ...]
    count: int
    kernels: int
    kernel_ns: int
    nbytes: int  # each op's traffic, as the work model counts it
    fused_nbytes: int  # the fused form's (an estimate)
    est_ns: int  # the fused form's time (an estimate)
    line: str = ""  # the Python line of its first op most occurrences ran (with_stack), '' if none


class Attention(msgspec.Struct, frozen=True):
    """Attention computed op by op: the op sequence and its shape, summed over occurrences."""

    ops: tuple[str, ...]
    shape: tuple[int, int, int, int]  # (batch x heads, query length, key length, head dim)
    precision: str
    count: int
    kernel_ns: int
    flops: int
    fused_nbytes: int
    est_ns: int  # the fused kernel's time (an estimate)


def _inside(tl: Timeline, ranges: I64, rows: I64) -> npt.NDArray[np.bool_]:
    """Whether each row starts inside one of ``ranges`` on its own thread."""
    out = np.zeros(rows.size, dtype=np.bool_)
    for lane in unique_sorted(tl.lane[ranges]).tolist():
        on = ranges[tl.lane[ranges] == lane]
        s, reach = tl.start_ns[on], np.maximum.accumulate(tl.end_ns[on])
        q = np.flatnonzero(tl.lane[rows] == lane)
        t = tl.start_ns[rows[q]]
        pos = np.searchsorted(s, t, side="right") - 1
        out[q] = (pos >= 0) & (reach[np.maximum(pos, 0)] > t)
    return out


def fusible_kernels(tl: Timeline, ok: OpKernels) -> npt.NDArray[np.bool_]:
    """The kernels an eager op launched outside compiled regions, graphs and the optimizer step."""
    eager = ok.op >= 0
    ranges = np.flatnonzero(tl.kind_name_mask(_SKIPPED_RANGE.search, Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON))
    launch = np.maximum(ok.launch, 0)
    eager &= ~tl.name_mask(is_graph_launch, launch) & ~tl.name_mask(lambda n: n.startswith("triton"), ok.rows)
    if ranges.size:
        eager &= ~_inside(tl, ranges, launch)
    return eager


def _run_bounds(tl: Timeline, ok: OpKernels, member: npt.NDArray[np.bool_], must: npt.NDArray[np.bool_] | None = None) -> tuple[I64, I64]:
    """Runs of two or more consecutive kernels on one stream that are all members (and hold at
    least one ``must`` kernel, when given): (their kernel indices, run after run, in stream and
    start order; where each run begins in them)."""
    lane = tl.lane[ok.rows]
    order = np.lexsort((tl.start_ns[ok.rows], lane))
    m, ln = member[order], lane[order]
    start = m.copy()
    start[1:] &= ~(m[:-1] & (ln[1:] == ln[:-1]))
    sel = order[m]
    first = np.flatnonzero(start[m])
    size = np.diff(np.append(first, sel.size))
    keep = size >= 2
    if must is not None and sel.size:
        keep &= np.add.reduceat(must[sel].astype(np.int64), first) > 0
    kept = size[keep]
    return sel[np.repeat(keep, size)], np.cumsum(kept) - kept


def _run_instances(ok: OpKernels, sel: I64, first: I64) -> tuple[I64, I64, I64]:
    """The op instances of runs (:func:`_run_bounds`): each op once however many kernels it ran in
    a row, run after run; where each run's instances begin in them, and how many it has."""
    op = ok.op[sel]
    new = np.ones(sel.size, dtype=np.bool_)  # a kernel that starts an op instance of its run
    new[1:] = op[1:] != op[:-1]
    new[first] = True
    n_inst = np.add.reduceat(new.astype(np.int64), first) if first.size else np.zeros(0, dtype=np.int64)
    return op[new].astype(np.int64), np.cumsum(n_inst) - n_inst, n_inst


def _lines(tl: Timeline, rows: list[int]) -> list[str]:
    """The Python line of each op: its own call stack's, or that of the innermost op around it on
    its thread that has one (Kineto gives the outer op, ``aten::layer_norm``, the stack; the op
    that launches, ``aten::native_layer_norm``, none). '' where there is none."""
    out = [""] * len(rows)
    if not rows or not (tl.stack >= 0).any():  # no call stacks recorded (with_stack=False)
        return out
    q = np.array(rows, dtype=np.int64)
    parsed: dict[int, str] = {}
    for lane in unique_sorted(tl.lane[q]).tolist():
        on = np.flatnonzero((tl.lane == lane) & (tl.kind == int(Kind.CPU_OP)))
        index = OpenIndex(tl.start_ns[on], tl.end_ns[on], np.flatnonzero(tl.stack[on] >= 0))
        mine = np.flatnonzero(tl.lane[q] == lane)
        for i, p in zip(mine.tolist(), index.last_spanning_at(tl.start_ns[q[mine]]).tolist(), strict=True):
            if p >= 0:
                sid = int(tl.stack[on[p]])
                if sid not in parsed:
                    parsed[sid] = python_line(tl.strings[sid])
                out[i] = parsed[sid]
    return out


def _most_common(lines: list[str]) -> str:
    named = [ln for ln in lines if ln]
    return max(set(named), key=lambda ln: (named.count(ln), ln)) if named else ""


def _tensor_bytes(tl: Timeline, key: int, cache: dict[int, list[int]]) -> list[int]:
    """The bytes of each tensor input of an op whose recorded inputs are string ``key`` (a copy:
    callers edit it)."""
    if key not in cache:
        cache[key] = _decode_bytes(tl.strings[key]) if key >= 0 else []
    return list(cache[key])


def _decode_bytes(text: str) -> list[int]:
    try:
        dims, types, *_ = msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError, TypeError):
        return []
    if type(dims) is not list or type(types) is not list:
        return []
    out = []
    for d, t in zip(dims, types, strict=False):
        size = itemsize(str(t))
        if type(d) is list and size and all(type(x) is int for x in d):
            out.append(math.prod(d) * size)
    return out


def _fused_nbytes(tl: Timeline, keys: list[int], reduction: list[bool], cache: dict[int, list[int]]) -> int:
    """Bytes the chain moves when fused (see the module docstring): ``keys``, its ops' recorded
    inputs (string ids); ``reduction``, whether each op reduces (it writes no output of its size)."""
    total, prev_out = 0, 0
    for j, (key, reduces) in enumerate(zip(keys, reduction, strict=True)):
        reads = _tensor_bytes(tl, key, cache)
        out = 0 if reduces else max(reads, default=0)
        if j and prev_out in reads:
            reads.remove(prev_out)
        total += sum(reads)
        prev_out = out
    return total + prev_out


class _Group:
    """One op sequence's chains, summed as they are found."""

    __slots__ = ("count", "kernels", "kernel_ns", "nbytes", "fused", "est", "lanes", "firsts")

    def __init__(self) -> None:
        self.count = self.kernels = self.kernel_ns = self.nbytes = self.fused = self.est = 0
        self.lanes: set[int] = set()
        self.firsts: list[int] = []  # each chain's first op row


def fusion_chains(tl: Timeline, ok: OpKernels, peak: DevicePeak | None, cfg: AttributionSettings, eager: npt.NDArray[np.bool_]) -> tuple[Chain, ...]:
    """The frequent memory-bound chains of small eager kernels, most estimated saving first (pure).

    The runs' sums are taken in numpy and only their op instances go through Python (a kernel
    table's worth of Python ints would be ~60 MB on a 2 GB trace)."""
    fam = np.append(ok.works.family_is(FUSIBLE), False)
    member = eager & fam[ok.op] & (ok.ns <= cfg.fusion_max_kernel_ns)
    sel, first = _run_bounds(tl, ok, member)
    if sel.size == 0:
        return ()
    ns = ok.ns[sel]
    inst, inst_at, n_inst = _run_instances(ok, sel, first)
    inst_rows = ok.ops[inst]
    # Per op instance, as lists read in the loop below: its op, row, name, recorded inputs, and
    # whether it reduces; per run, the sum of its ops' bytes.
    per_inst = (inst.tolist(), inst_rows.tolist(), tl.name[inst_rows].tolist(), tl.inputs[inst_rows].tolist(), ok.works.family_is(("reduction",))[inst].tolist())
    runs = zip(
        inst_at.tolist(),
        n_inst.tolist(),
        np.diff(np.append(first, sel.size)).tolist(),
        np.add.reduceat(ns, first).tolist(),
        np.minimum.reduceat(ns, first).tolist(),
        tl.lane[ok.rows[sel[first]]].tolist(),
        np.add.reduceat(ok.works.nbytes[inst], inst_at).tolist(),
        strict=True,
    )
    groups: dict[tuple[str, ...], _Group] = {}
    cache = dict[int, list[int]]()
    op_ns: I64 | None = None  # each op's kernel time, for the bandwidth when the peak is unknown
    ops_of, rows_of, name_of, keys_of, reduces_of = per_inst
    # A step repeats its chains: the fused bytes and the names of each distinct sequence of ops
    # (names and recorded inputs, which decide whether an op reduces) are found once.
    seen: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, tuple[str, ...]]] = {}
    for at, n, kernels, took, shortest, lane, nbytes in runs:
        if n < 2:
            continue
        sig = (tuple(name_of[at : at + n]), tuple(keys_of[at : at + n]))
        known = seen.get(sig)
        if known is None:
            known = seen[sig] = (_fused_nbytes(tl, keys_of[at : at + n], reduces_of[at : at + n], cache), tuple(tl.strings[i] for i in sig[0]))
        fused, key = known
        if peak is not None:
            bw = peak.mem_tbps * 1e3
        else:
            if op_ns is None:
                op_ns = np.zeros(ok.ops.size, dtype=np.int64)
                np.add.at(op_ns, ok.op[ok.op >= 0], ok.ns[ok.op >= 0])
            bw = max(ok.works[o].nbytes / max(int(op_ns[o]), 1) for o in ops_of[at : at + n])
        g = groups.get(key) or groups.setdefault(key, _Group())
        g.count += 1
        g.kernels += kernels
        g.kernel_ns += took
        g.nbytes += nbytes
        g.fused += fused
        g.est += min(max(int(fused / bw), shortest), took)  # bytes / (bytes per ns), at least one kernel
        g.lanes.add(lane)
        g.firsts.append(rows_of[at])
    kept = {k: g for k, g in groups.items() if g.count >= cfg.fusion_min_repeats}
    firsts = sorted({r for g in kept.values() for r in g.firsts})
    line_of = dict(zip(firsts, _lines(tl, firsts), strict=True))
    out = [
        Chain(
            key,
            tuple(sorted({tl.lanes[ln].label for ln in g.lanes})),
            g.count,
            kernels=g.kernels,
            kernel_ns=g.kernel_ns,
            nbytes=g.nbytes,
            fused_nbytes=g.fused,
            est_ns=g.est,
            line=_most_common([line_of[r] for r in g.firsts]),
        )
        for key, g in kept.items()
    ]
    return tuple(sorted(out, key=lambda c: -(c.kernel_ns - c.est_ns)))


def _attention_at(tl: Timeline, ok: OpKernels, ops: list[int], fam: list[str], j: int) -> tuple[list[int], tuple[int, int, int, int], str] | None:
    """The attention pattern around the softmax at ``ops[j]`` (``fam``: each op's family): (its op
    instances, shape, precision)."""
    a = j - 1
    while a >= 0 and fam[a] in ("elementwise", "copy"):
        a -= 1
    b = j + 1
    while b < len(ops) and fam[b] in ("elementwise", "copy"):
        b += 1
    if a < 0 or b >= len(ops):
        return None
    names = [tl.name_of(int(ok.ops[ops[i]])) for i in (a, b)]
    if not all(n in _ATTN_GEMM for n in names):
        return None
    qk, pv = (gemm_dims(n, tl.inputs_of(int(ok.ops[ops[i]]))) for n, i in zip(names, (a, b), strict=True))
    if qk is None or pv is None or pv.k != qk.n or pv.m != qk.m or qk.batch != pv.batch:
        return None
    return ops[a : b + 1], (qk.batch, qk.m, qk.n, pv.n), qk.precision


def unfused_attention(
    tl: Timeline, ok: OpKernels, peak: DevicePeak | None, cfg: AttributionSettings, eager: npt.NDArray[np.bool_]
) -> tuple[tuple[Attention, ...], npt.NDArray[np.bool_]]:
    """Attention computed as GEMM, softmax, GEMM by eager ops, most estimated saving first, and
    which kernels it ran (pure; a fusion chain inside it is not counted twice). Needs the device's
    peaks for the estimate."""
    used = np.zeros(ok.ops.size + 1, dtype=np.bool_)
    if peak is None:
        return (), used[ok.op]
    op_ns = np.zeros(ok.ops.size + 1, dtype=np.int64)
    np.add.at(op_ns, ok.op[ok.op >= 0], ok.ns[ok.op >= 0])
    groups: dict[tuple[tuple[str, ...], tuple[int, int, int, int], str], list[tuple[int, int, int, int]]] = {}
    soft = np.append(ok.works.family_is(("softmax",)), False)[ok.op]
    inst, inst_at, n_inst = _run_instances(ok, *_run_bounds(tl, ok, eager, soft))
    family = [w.family for w in ok.works.table]
    inst_l, fam_l = inst.tolist(), [family[w] for w in ok.works.index[inst].tolist()]
    for at, n in zip(inst_at.tolist(), n_inst.tolist(), strict=True):
        ops, fam = inst_l[at : at + n], fam_l[at : at + n]
        for j, f in enumerate(fam):
            if f != "softmax":
                continue
            hit = _attention_at(tl, ok, ops, fam, j)
            if hit is None:
                continue
            chain, shape, precision = hit
            flops = ok.works[chain[0]].flops + ok.works[chain[-1]].flops
            size = max(_SIZE.get(precision, 0), 1)
            bh, sq, sk, d = shape
            nbytes = bh * (2 * sq * d + 2 * sk * d) * size  # Q, K, V read and the output written
            p = peak.tflops(precision)
            if p is None:
                continue
            t_bound = max(flops / (p * 1e3), nbytes / (peak.mem_tbps * 1e3))  # ns
            ns = int(op_ns[chain].sum())
            est = min(int(t_bound / cfg.roofline_near_fraction), ns)
            used[chain] = True
            key = (tuple(tl.name_of(int(ok.ops[c])) for c in chain), shape, precision)
            groups.setdefault(key, []).append((ns, flops, nbytes, est))
    out = [Attention(k[0], k[1], k[2], len(v), *(sum(x[i] for x in v) for i in range(4))) for k, v in groups.items()]
    return tuple(sorted(out, key=lambda a: -(a.kernel_ns - a.est_ns))), used[ok.op]

