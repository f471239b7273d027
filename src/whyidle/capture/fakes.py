"""Fakes for live capture, shipped so that code using the step tracker or ``watch`` is tested
without torch, a GPU or NVML (as httpx ships ``MockTransport``)::

    from whyidle.capture.fakes import FakeClock, FakeDevice, FakeLoader
    clock = FakeClock()
    tracker = whyidle.track(FakeLoader(clock, waits=[5_000_000] * 4), clock=clock, device_timer=FakeDevice(8_000_000))

* :class:`FakeClock` — a nanosecond clock that moves only when told (``advance``).
* :class:`FakeLoader` — yields batches; fetching batch i advances the clock by ``waits[i]``.
* :class:`FakeDevice` — a :class:`~whyidle.capture.tracker.DeviceTimer` whose device "reaches"
  a mark only once ``reached`` is raised past it, so tests see the tracker never wait in the loop.
* :class:`FakeGpuProbe`, :class:`FakeHostProbe`, :class:`FakeProc` — ``watch``'s GPU and host
  probes and the watched process (see :func:`whyidle.capture.watch.watch`'s ``probes=`` and
  ``popen=``).
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["FakeClock", "FakeLoader", "FakeDevice", "FakeGpuProbe", "FakeHostProbe", "FakeProc"]


class FakeClock:
    """``clock()`` -> ns; starts at 1 s and moves only by ``advance``."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.t = start_ns

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns


class FakeLoader:
    """Yields ``len(waits)`` batches of ``batch`` samples; fetching batch i takes ``waits[i]`` ns.

    ``num_workers`` (and ``pin_memory=False``) are set like a DataLoader's unless None."""

    def __init__(self, clock: FakeClock, waits: list[int], batch: int = 32, num_workers: int | None = 0) -> None:
        self.clock, self.waits, self.batch = clock, waits, batch
        if num_workers is not None:
            self.num_workers = num_workers
            self.pin_memory = False

    def __iter__(self) -> Iterator[list[int]]:
        for w in self.waits:
            self.clock.advance(w)
            yield list(range(self.batch))


class FakeDevice:
    """Marks are numbers; each step takes ``per_step_ns`` of device time. ``elapsed_ns`` answers
    None (not reached yet) for a mark past ``reached`` unless asked to wait; ``calls`` records
    every ``wait`` flag, so a test can assert the loop never waited."""

    label = "fake:0"

    def __init__(self, per_step_ns: int) -> None:
        self.n = 0
        self.reached = 0
        self.per_step_ns = per_step_ns
        self.calls: list[bool] = []

    def mark(self) -> int:
        self.n += 1
        return self.n

    def elapsed_ns(self, a: int, b: int, wait: bool) -> int | None:
        self.calls.append(wait)
        if b > self.reached and not wait:
            return None
        return self.per_step_ns


class FakeProc:
    """A watched process that is running for ``polls`` polls, then exits with ``rc``."""

    def __init__(self, polls: int, rc: int, pid: int = 4242) -> None:
        self.pid, self._polls, self._rc = pid, polls, rc

    def poll(self) -> int | None:
        self._polls -= 1
        return None if self._polls >= 0 else self._rc

    def wait(self) -> int:
        return self._rc


class FakeGpuProbe:
    """One GPU whose utilisation readings are ``utils``, in order (one per sample)."""

    name = "nvml"

    def __init__(self, utils: list[float], power_w: float = 300.0, mem_used_mib: float = 1000.0) -> None:
        self.utils = list(utils)
        self.power_w, self.mem_used_mib = power_w, mem_used_mib

    def sample(self) -> list[tuple[str, dict[str, float]]]:
        return [("0", {"gpu_util_pct": self.utils.pop(0), "power_w": self.power_w, "mem_used_mib": self.mem_used_mib})]


class FakeHostProbe:
    """The process tree's CPU and memory, constant."""

    name = "process tree"
    cpu_count = 2

    def __init__(self, cpu_pct: float = 190.0, rss_mib: float = 512.0, procs: int = 5) -> None:
        self.cpu_pct, self.rss_mib, self.procs = cpu_pct, rss_mib, procs

    def sample(self) -> list[tuple[str, dict[str, float]]]:
        return [("host", {"host_cpu_pct": self.cpu_pct, "host_rss_mib": self.rss_mib, "proc_count": float(self.procs)})]
