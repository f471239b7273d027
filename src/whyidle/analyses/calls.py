"""What a CUDA/HIP runtime or driver call does to the device, from its name.

One classifier, :func:`call_kind`, for every question the analyses ask of a call's name::

    KERNEL_LAUNCH  cudaLaunchKernel, cuLaunchKernel(Ex), hipLaunchKernel, hipExtLaunchKernel
    OTHER_LAUNCH   any other launch: cudaGraphLaunch, cudaLaunchCooperativeKernel,
                   cuLaunchHostFunc, hipExtLaunchMultiKernel...
    COPY           cudaMemcpy*, cuMemcpy*, hipMemcpy*
    MEMSET         cudaMemset*, cuMemset*, hipMemset*
    OTHER          everything else (syncs, allocations, queries)

and the predicates built on it: :func:`is_kernel_launch` (the mean launch cost, kernel launches
per optimizer step), :func:`is_launch_call` (a slow launch is a first-use cost) and
:func:`queues_device_work` (a call whose device work should appear in the trace).
"""

from __future__ import annotations

import enum
import re

__all__ = ["CallKind", "call_kind", "is_kernel_launch", "is_launch_call", "is_graph_launch", "queues_device_work"]


class CallKind(enum.IntEnum):
    OTHER = 0
    KERNEL_LAUNCH = 1
    OTHER_LAUNCH = 2
    COPY = 3
    MEMSET = 4


_KERNEL_LAUNCH = re.compile(r"^(cuda|cu|hip|hipExt)LaunchKernel")
_LAUNCH = re.compile(r"^(cuda|cu|hip)(Launch|ExtLaunch|GraphLaunch)")
_GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch")
_COPY = ("cudaMemcpy", "cuMemcpy", "hipMemcpy")
_MEMSET = ("cudaMemset", "cuMemset", "hipMemset")


def call_kind(name: str) -> CallKind:
    """What the call named ``name`` does to the device (see the module docstring)."""
    if _KERNEL_LAUNCH.match(name):
        return CallKind.KERNEL_LAUNCH
    if _LAUNCH.match(name):
        return CallKind.OTHER_LAUNCH
    if name.startswith(_COPY):
        return CallKind.COPY
    if name.startswith(_MEMSET):
        return CallKind.MEMSET
    return CallKind.OTHER


def is_kernel_launch(name: str) -> bool:
    return call_kind(name) is CallKind.KERNEL_LAUNCH


def is_launch_call(name: str) -> bool:
    """A kernel or graph launch (not a copy or memset)."""
    return call_kind(name) in (CallKind.KERNEL_LAUNCH, CallKind.OTHER_LAUNCH)


def is_graph_launch(name: str) -> bool:
    """A CUDA/HIP graph launch: the job runs captured graphs."""
    return bool(_GRAPH_LAUNCH.match(name))


def queues_device_work(name: str) -> bool:
    """A launch, copy or memset: a call whose work should appear on the device."""
    return call_kind(name) is not CallKind.OTHER
