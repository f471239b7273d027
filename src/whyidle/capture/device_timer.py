"""The device timer behind the step tracker: marks on the device's queue, measured later.

On CUDA the device time of a step is read from two CUDA events recorded on the current stream.
Recording an event does not block the host; the tracker reads an event pair only once
``event.query()`` says the device has passed it, so the training loop never synchronises. Any
object with ``label``, ``mark()`` and ``elapsed_ns(a, b, wait)`` can stand in (tests pass a fake).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["DeviceTimer", "CudaEventTimer"]


class DeviceTimer(Protocol):
    """Marks points in the device's queue and measures between two marks later."""

    label: str

    def mark(self) -> Any:
        """Record a mark on the device queue without blocking the host."""

    def elapsed_ns(self, a: Any, b: Any, wait: bool) -> int | None:
        """Device time from mark ``a`` to ``b``; None while ``b`` is not reached and not ``wait``."""


class CudaEventTimer:
    """CUDA events on the current stream (``torch.cuda.Event(enable_timing=True)``)."""

    def __init__(self, torch: Any, device: Any = None) -> None:
        self._torch = torch
        index = torch.cuda.current_device() if device is None else torch.device(device).index or 0
        self.label = f"cuda:{index} {torch.cuda.get_device_name(index)}"

    def mark(self) -> Any:
        e = self._torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def elapsed_ns(self, a: Any, b: Any, wait: bool) -> int | None:
        if not b.query():  # non-blocking: has the device reached b?
            if not wait:
                return None
            b.synchronize()
        return int(round(a.elapsed_time(b) * 1e6))  # elapsed_time is in milliseconds
