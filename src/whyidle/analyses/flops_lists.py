"""Bytes moved by the ops that take lists of tensors: ``aten::_foreach_*`` and the fused optimizers
(``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``, ``_fused_adagrad_``). Memory-only: no FLOPs
(as in MFU, an optimizer's arithmetic is not model FLOPs).

What Kineto records for a tensor-list input (PyTorch 2.x, ``record_shapes=True``): its type is
``TensorList``, its dims the list of each tensor's dims (``[[4, 3], [5, 3]]``), its strides likewise;
the tensors' element type is *not* recorded. The element size is therefore taken from the op's
other tensor inputs when one has a sized type (``_foreach_add_(list, float tensor, alpha)``), else
4 bytes (FP32: parameters' gradients and optimizer states in mixed-precision training) with a note
saying so. Older traces record a tensor list as ``[]``: no sizes, so the op is not modelled.

Bytes: every tensor of every list read once, and the lists the op writes written once:

    _foreach_<op>_ (in place)   reads all lists, writes the first (``self``)
    _foreach_<op> (out of place) reads all lists, writes one list shaped as the first
    _fused_adam(w)_             reads params, grads, exp_avgs, exp_avg_sqs (max_exp_avg_sqs with
                                amsgrad), state_steps; writes params, exp_avgs, exp_avg_sqs (and max_exp_avg_sqs)
    _fused_sgd_                 reads params, grads, momentum buffers; writes params and momentum buffers
    _fused_adagrad_             reads params, grads, state_sums, state_steps; writes params and state_sums

A list position the op writes that was recorded empty (no momentum buffers) writes nothing.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["list_bytes", "is_list_op", "ASSUMED_ITEMSIZE_NOTE"]

# The tensor lists each fused optimizer writes (positions among its inputs).
_FUSED_WRITES = {
    "_fused_adam_": (0, 2, 3, 4),
    "_fused_adamw_": (0, 2, 3, 4),
    "_fused_adam": (0, 2, 3, 4),
    "_fused_adamw": (0, 2, 3, 4),
    "_fused_sgd_": (0, 2),
    "_fused_sgd": (0, 2),
    "_fused_adagrad_": (0, 2),
    "_fused_adagrad": (0, 2),
}

ASSUMED_ITEMSIZE_NOTE = "element type of the tensor lists not recorded: 4 bytes (FP32) assumed"


def is_list_op(op: str) -> bool:
    """Whether ``op`` (without ``aten::``) takes lists of tensors."""
    return op.startswith("_foreach_") or op in _FUSED_WRITES


def _list_elements(d: Any) -> list[int] | None:
    """Each tensor's element count in a recorded tensor list (``[[4, 3], [5, 3]]``; ``[]`` for a
    0-dim tensor is 1 element), None when ``d`` is not a list of dims."""
    if type(d) is not list or not all(type(t) is list and all(type(x) is int and 0 <= x < _MAX for x in t) for t in d):
        return None
    sizes = [math.prod(t) for t in d]
    return sizes if sum(sizes) < _MAX else None  # a corrupt record, not a real list


_MAX = 2**48


def list_bytes(op: str, dims: list[Any], types: list[Any], other_itemsize: int) -> tuple[int, str] | None:
    """(bytes, note) of a list-of-tensors op, None when no tensor list with sizes was recorded.
    ``other_itemsize``: the element size of the op's first other tensor input with a sized type,
    0 if none (flops.py knows the types' sizes)."""
    lists: dict[int, int] = {}  # input position -> elements over the list's tensors
    for i, (d, t) in enumerate(zip(dims, types, strict=False)):
        if t == "TensorList":
            n = _list_elements(d)
            if n is not None:
                lists[i] = sum(n)
    if not lists or not any(lists.values()):
        return None
    size = other_itemsize or 4
    note = "" if other_itemsize else ASSUMED_ITEMSIZE_NOTE
    read = sum(lists.values())
    if op in _FUSED_WRITES:
        written = sum(lists.get(i, 0) for i in _FUSED_WRITES[op])
    else:
        written = lists[min(lists)]  # in place: self; out of place: a list shaped as the first
    return (read + written) * size, note
