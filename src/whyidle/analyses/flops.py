"""FLOPs and bytes of one op from its recorded inputs (``record_shapes``): the formulas.

An op's inputs are what the Kineto reader keeps (``Timeline.inputs``): the dims of each input, its
type (``float``, ``c10::BFloat16``, ``Scalar``...), the concrete values of scalar inputs
(``"[2, 2]"`` for a stride), the profiler's own ``flops`` count when ``with_flops=True``, and the
inputs' strides where recorded (a broadcast view, stride 0, is read once, not once per batch).

FLOPs follow ``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs; a bias add is not counted):

    GEMM         mm, addmm, _scaled_mm: 2·m·k·n; bmm, baddbmm: 2·b·m·k·n; matmul: the batch dims
                 broadcast; linear: 2·rows·in·out
    convolution  2·N·prod(weight)·prod(output spatial); the weight's shape already holds the
                 groups (C_in/groups). The output size comes from the stride, padding and dilation
                 the op recorded; without them stride 1, dilation 1 and no padding are assumed (the
                 op's note says so). convolution_backward: the forward count for each of the input
                 and weight gradients its output mask asks for (the output size from grad_output;
                 without the mask, both). FP32 convolutions count as TF32: cuDNN uses TF32 tensor
                 cores for them by default (``torch.backends.cudnn.allow_tf32``)
    attention    forward 2·B·Hq·Sq·Sk·(Dqk + Dv); backward 2·B·Hq·Sq·Sk·(3·Dqk + 2·Dv); a causal
                 mask (top-left aligned, as PyTorch's is_causal) keeps only the unmasked scores
                 (flop_counter counts the full matrix)

Everything else that moves data (elementwise, normalisation, softmax, reductions, copies,
embedding lookups) has bytes and no FLOPs, as in MFU: bytes read are every tensor input, bytes
written one tensor the size of the largest input (a reduction's small output is not counted;
an embedding writes the rows it gathers). Bytes are each tensor touched once: a lower bound on
memory traffic (a kernel re-reading from DRAM moves more; one hitting in cache can beat it).
Ops on lists of tensors (``_foreach_*``, fused optimizers) have bytes only, from the recorded
lists' dims (analyses/flops_lists.py).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from whyidle.analyses.flops_lists import is_list_op, list_bytes

__all__ = ["OpWork", "op_work", "needs_output", "itemsize", "precision_of", "FAMILIES"]

FAMILIES = ("gemm", "conv", "attention", "elementwise", "norm", "softmax", "reduction", "embedding", "copy", "foreach", "profiler")

_SIZES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2, "bool": 1,
    "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip
_PRECISION = {
    "double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "signed char": "int8",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8",
}  # fmt: skip

_ELEMENTWISE = frozenset(
    "add sub mul div add_ sub_ mul_ div_ relu relu_ clamp_min clamp clamp_ gelu silu silu_ sigmoid tanh exp log sqrt rsqrt "
    "pow neg abs where masked_fill masked_fill_ fill_ zero_ threshold_backward gelu_backward silu_backward "
    "sigmoid_backward tanh_backward dropout native_dropout addcmul_ addcdiv_ lerp_ hardtanh leaky_relu".split()
)
_NORM = frozenset(
    "batch_norm native_batch_norm cudnn_batch_norm native_batch_norm_backward cudnn_batch_norm_backward layer_norm "
    "native_layer_norm native_layer_norm_backward group_norm native_group_norm rms_norm _fused_rms_norm".split()
)
_SOFTMAX = frozenset("softmax _softmax log_softmax _log_softmax _softmax_backward_data _log_softmax_backward_data".split())
_REDUCTION = frozenset("sum mean amax amin max min argmax argmin norm var std logsumexp nll_loss_forward nll_loss".split())
_COPY = frozenset(("copy_",))
_CONV = frozenset(("convolution", "_convolution", "convolution_backward", "cudnn_convolution_backward"))
_BYTES_ONLY = {**dict.fromkeys(_ELEMENTWISE, "elementwise"), **dict.fromkeys(_NORM, "norm"), **dict.fromkeys(_SOFTMAX, "softmax"), **dict.fromkeys(_REDUCTION, "reduction")}

_GEMM = frozenset(("mm", "addmm", "_scaled_mm", "bmm", "baddbmm", "matmul", "linear"))

# Attention ops: (position of q in the inputs, position of the is_causal flag, backward?).
_ATTENTION = {
    "scaled_dot_product_attention": (0, 5, False),
    "_scaled_dot_product_flash_attention": (0, 4, False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, 4, False),
    "_scaled_dot_product_efficient_attention": (0, 6, False),
    "_scaled_dot_product_cudnn_attention": (0, 6, False),
    "_scaled_dot_product_flash_attention_backward": (1, 11, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, 7, True),
    "_scaled_dot_product_efficient_attention_backward": (1, 11, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, 14, True),
}


_KNOWN = _GEMM | _CONV | frozenset(_ATTENTION) | _COPY | frozenset(_BYTES_ONLY) | {"embedding"}


class OpWork(msgspec.Struct, frozen=True):
    """The work of one op: FLOPs (0 for ops that only move data), bytes, the precision of its math
    ("" for bytes-only ops), its family, and the assumption made, if any."""

    flops: int
    nbytes: int
    precision: str
    family: str
    note: str = ""


def itemsize(type_name: str) -> int:
    return _SIZES.get(type_name, 0)


def precision_of(type_name: str) -> str:
    return _PRECISION.get(type_name, "")


class _Inputs:
    """The recorded inputs of one op: tensors are the inputs with dims and a sized dtype."""

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any], strides: list[Any] | None = None) -> None:
        self.dims, self.types, self.concrete, self.strides = dims, types, concrete, strides or []
        self.tensors = [
            i for i, (d, t) in enumerate(zip(dims, types, strict=False)) if type(d) is list and all(type(x) is int for x in d) and itemsize(str(t)) > 0
        ]

    def shape(self, i: int) -> list[int]:
        return list(self.dims[i]) if i in self.tensors else []

    def nbytes(self, i: int) -> int:
        """The bytes input i spans in memory: its elements, or fewer where its strides say it is a
        broadcast view (a stride of 0 from ``expand``: one copy read for every batch)."""
        if i not in self.tensors:
            return 0
        d: list[int] = self.dims[i]
        st = self.strides[i] if i < len(self.strides) else None
        n = math.prod(d)
        if type(st) is list and len(st) == len(d) and all(type(x) is int for x in st) and n > 0:
            n = min(n, 1 + sum((size - 1) * abs(x) for size, x in zip(d, st, strict=True)))
        return n * itemsize(str(self.types[i]))

    def read_bytes(self) -> int:
        return sum(self.nbytes(i) for i in self.tensors)

    def ints(self, i: int) -> list[int] | None:
        """A concrete list of ints ("[2, 2]") or int ("1") at position i, None if absent."""
        text = self.concrete[i] if i < len(self.concrete) else ""
        try:
            v = msgspec.json.decode(str(text)) if text else None
        except msgspec.DecodeError:
            return None
        if type(v) is int:
            return [v]
        return list(v) if type(v) is list and v and all(type(x) is int for x in v) else None

    def flag(self, i: int) -> bool:
        return i < len(self.concrete) and str(self.concrete[i]) == "True"


def _gemm(op: str, x: _Inputs) -> tuple[int, list[int]] | None:
    """(FLOPs, output shape) of a GEMM-family op, None when its shapes do not fit."""
    first = 1 if op in ("addmm", "baddbmm") else 0
    a, b = x.shape(first), x.shape(first + 1)
    if op == "linear":
        if len(a) < 1 or len(b) != 2 or a[-1] != b[1]:
            return None
        rows = math.prod(a[:-1])
        return 2 * rows * b[1] * b[0], [*a[:-1], b[0]]
    if op in ("mm", "addmm", "_scaled_mm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2 * a[0] * a[1] * b[1], [a[0], b[1]]
    if op in ("bmm", "baddbmm") and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return 2 * a[0] * a[1] * a[2] * b[2], [a[0], a[1], b[2]]
    if op == "matmul" and a and b:
        a2, b2 = (a if len(a) > 1 else [1, *a]), (b if len(b) > 1 else [*b, 1])
        if a2[-1] != b2[-2]:
            return None
        batch = _broadcast(a2[:-2], b2[:-2])
        return (2 * math.prod(batch) * a2[-2] * a2[-1] * b2[-1], [*batch, a2[-2], b2[-1]]) if batch is not None else None
    return None


def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    out = []
    for x, y in zip([1] * (len(b) - len(a)) + a, [1] * (len(a) - len(b)) + b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return out


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


_MISSING = "stride, padding and dilation not recorded"


def _conv(op: str, x: _Inputs, out_spatial: list[int] | None) -> tuple[int, int, str] | None:
    """(FLOPs, output bytes, note) of a convolution or its backward, None when shapes do not fit.
    ``out_spatial``: the output's spatial size where the caller read it from the next op."""
    if op in ("convolution_backward", "cudnn_convolution_backward"):
        # (grad_output, input, weight, ...) or cudnn's (input, grad_output, weight, ...); mask at 10
        g, w = x.shape(0 if op == "convolution_backward" else 1), x.shape(2)
        if len(g) < 3 or len(w) != len(g):
            return None
        fwd = 2 * g[0] * math.prod(w) * math.prod(g[2:])
        mask = str(x.concrete[10]) if len(x.concrete) > 10 else ""
        if not mask:
            return 2 * fwd, x.nbytes(0) + x.nbytes(1) + x.nbytes(2), "output mask not recorded: both the input and weight gradients counted"
        wanted = [s.strip() == "True" for s in mask.strip("[]").split(",")]
        return fwd * (int(wanted[0]) + int(len(wanted) > 1 and wanted[1])), x.nbytes(0) + x.nbytes(1) + x.nbytes(2), ""
    i, w = x.shape(0), x.shape(1)
    if len(i) < 3 or len(w) != len(i):
        return None
    nd = len(i) - 2
    stride, pad, dil = x.ints(3), x.ints(4), x.ints(5)
    note = ""
    if stride is None or pad is None or dil is None:
        if out_spatial is not None and len(out_spatial) == nd:
            return 2 * i[0] * math.prod(w) * math.prod(out_spatial), 0, f"{_MISSING}: the output size read from the next op's input"
        note = f"{_MISSING}: stride 1, no padding assumed"
    stride, pad, dil = ((v * nd if v is not None and len(v) == 1 else v) for v in (stride, pad, dil))
    s = stride if stride is not None and len(stride) == nd else [1] * nd
    p = pad if pad is not None and len(pad) == nd else [0] * nd
    d = dil if dil is not None and len(dil) == nd else [1] * nd
    if x.flag(6):  # transposed: the spatial work is over the input
        out_spatial = i[2:]
    else:
        out_spatial = [_conv_out(i[2 + j], w[2 + j], s[j], p[j], d[j]) for j in range(nd)]
    if min(out_spatial, default=0) <= 0:
        return None
    out_bytes = i[0] * w[0] * math.prod(out_spatial) * itemsize(str(x.types[0]))
    return 2 * i[0] * math.prod(w) * math.prod(out_spatial), out_bytes, note


def _causal_kept(sq: int, sk: int) -> int:
    """Scores a top-left causal mask keeps: row i sees min(i + 1, sk) keys."""
    if sq <= sk:
        return sq * (sq + 1) // 2
    return sk * (sk + 1) // 2 + (sq - sk) * sk


def _attention(op: str, x: _Inputs) -> tuple[int, int] | None:
    """(FLOPs, output bytes) of an attention op, None when the shapes do not fit."""
    qpos, causal_pos, backward = _ATTENTION[op]
    q, k, v = x.shape(qpos), x.shape(qpos + 1), x.shape(qpos + 2)
    if len(q) != 4 or len(k) != 4 or len(v) != 4 or q[0] != k[0] or k[2] != v[2] or q[3] != k[3] or k[1] == 0 or q[1] % k[1]:
        return None
    b, hq, sq, dqk, sk, dv = q[0], q[1], q[2], q[3], k[2], v[3]
    scores = _causal_kept(sq, sk) if x.flag(causal_pos) else sq * sk
    per_score = 3 * dqk + 2 * dv if backward else dqk + dv
    size = itemsize(str(x.types[qpos]))
    out = (x.nbytes(qpos) + x.nbytes(qpos + 1) + x.nbytes(qpos + 2)) if backward else b * hq * sq * dv * size
    return 2 * b * hq * scores * per_score, out


def needs_output(work: OpWork) -> bool:
    """Whether ``work`` is a convolution whose stride was assumed: its output size, read from the
    op that consumes it, gives the count (``op_work(..., out_spatial=)``)."""
    return work.family == "conv" and work.note.startswith(_MISSING)


def op_work(name: str, inputs_text: str, out_spatial: list[int] | None = None) -> OpWork | None:
    """The work of an op named ``name`` (``aten::addmm``) with recorded inputs ``inputs_text``
    (the JSON of ``Timeline.inputs``), None when it is not modelled. ``out_spatial``: a
    convolution's output size when its stride was not recorded."""
    if not inputs_text:
        return None
    op = name[6:] if name.startswith("aten::") else name
    try:
        dims, types, concrete, flops, *rest = msgspec.json.decode(inputs_text)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    counted = type(flops) in (int, float) and flops > 0
    if is_list_op(op) and type(dims) is list and type(types) is list:
        return _list_op(op, dims, types)
    if type(dims) is not list or not (counted or op in _KNOWN):
        return None
    strides = rest[0] if rest and type(rest[0]) is list else []
    x = _Inputs(dims, types if type(types) is list else [], concrete if type(concrete) is list else [], strides)
    if not x.tensors:
        return None
    dtype = str(x.types[x.tensors[0]])
    work = _modelled(op, x, dtype, out_spatial)
    if work is None and counted:  # the profiler's own count
        return OpWork(int(flops), x.read_bytes(), precision_of(dtype), "profiler", "FLOPs from the profiler's count (with_flops)")
    return work


def _list_op(op: str, dims: list[Any], types: list[Any]) -> OpWork | None:
    """A list-of-tensors op (``_foreach_*``, fused optimizers): bytes only (analyses/flops_lists.py)."""
    other = next((itemsize(str(t)) for t in types if t != "TensorList" and itemsize(str(t)) > 0), 0)
    b = list_bytes(op, dims, types, other)
    return OpWork(0, b[0], "", "foreach", b[1]) if b is not None else None


def _modelled(op: str, x: _Inputs, dtype: str, out_spatial: list[int] | None) -> OpWork | None:
    if op in _GEMM:
        g = _gemm(op, x)
        if g is None:
            return None
        out_type = dtype if op != "_scaled_mm" else "c10::BFloat16"  # its out_dtype is not recorded: BF16 assumed
        return OpWork(g[0], x.read_bytes() + math.prod(g[1]) * itemsize(out_type), precision_of(dtype), "gemm")
    if op in _CONV:
        c = _conv(op, x, out_spatial)
        # FP32 convolutions run on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32)
        precision = "tf32" if dtype == "float" else precision_of(dtype)
        return OpWork(c[0], x.read_bytes() + c[1], precision, "conv", c[2]) if c is not None else None
    if op in _ATTENTION:
        a = _attention(op, x)
        return OpWork(a[0], x.read_bytes() + a[1], precision_of(str(x.types[_ATTENTION[op][0]])), "attention") if a is not None else None
    if op == "embedding" and len(x.tensors) >= 2:
        w, idx = x.shape(0), x.shape(1)
        gathered = math.prod(idx) * (w[-1] if w else 0) * itemsize(str(x.types[0]))
        return OpWork(0, x.nbytes(1) + 2 * gathered, "", "embedding")
    if op in _COPY and len(x.tensors) >= 2:
        return OpWork(0, x.nbytes(x.tensors[0]) + x.nbytes(x.tensors[1]), "", "copy")
    family = _BYTES_ONLY.get(op)
    if family is None:
        return None
    written = 0 if family == "reduction" else max(x.nbytes(i) for i in x.tensors)
    return OpWork(0, x.read_bytes() + written, "", family)
