"""Live capture from a PyTorch training loop (the ``torch`` extra; torch is imported lazily).

* :mod:`whyidle.capture.profiler`: ``schedule()``, ``handler(dir)`` for torch.profiler's
  ``on_trace_ready``, and ``profile_steps(step_fn, n)``;
* :mod:`whyidle.capture.tracker`: ``track(loader)``, per-step data wait, marked copy time, device
  time from CUDA events read lazily, samples/s;
* :mod:`whyidle.capture.tracker_report`: the tracker's summary as a :class:`~whyidle.Report`;
* :mod:`whyidle.capture.sync`: ``sync_finder()``, implicit host synchronisations by Python line;
* :mod:`whyidle.capture.watch`: the sampler behind ``whyidle watch -- cmd`` (NVML, psutil).

Importing this package imports nothing heavy; each function imports torch when it is called.
"""

from whyidle.capture._torch import require_torch, torch_available

__all__ = ["require_torch", "torch_available"]
