"""whyidle: why is my GPU idle, and what do I change?

Public API (everything else is internal)::

    report = whyidle.diagnose("trace.json.gz")     # -> Report
    timeline = whyidle.load("trace.json.gz")       # -> Timeline
    report = whyidle.diagnose(timeline, skip_first_steps=1)

Live capture (needs torch; imported only when one of these is first used)::

    for batch in whyidle.track(loader): ...                  # step tracker -> tracker.report()
    torch.profiler.profile(schedule=whyidle.schedule(), on_trace_ready=whyidle.handler("runs/"))
    report = whyidle.profile_steps(step_fn, n=3)
    with whyidle.sync_finder() as syncs: ...
"""

from __future__ import annotations

__version__ = "0.1.0"

from whyidle.config import Config
from whyidle.diagnose import diagnose
from whyidle.errors import (
    InputError,
    MissingExtraError,
    TraceFormatError,
    UnsupportedInputError,
    UsageError,
    WhyidleError,
)
from whyidle.findings.model import Evidence, Finding, Fix, GapRecord, Report, Skipped
from whyidle.sources import load
from whyidle.timeline import Kind, Lane, Timeline

__all__ = [
    "__version__",
    "Config",
    "Evidence",
    "Finding",
    "Fix",
    "GapRecord",
    "InputError",
    "Kind",
    "Lane",
    "MissingExtraError",
    "Report",
    "Skipped",
    "Timeline",
    "TraceFormatError",
    "UnsupportedInputError",
    "UsageError",
    "WhyidleError",
    "diagnose",
    "handler",
    "load",
    "profile_steps",
    "schedule",
    "sync_finder",
    "track",
]

# Live-capture names, resolved on first use so that `import whyidle` never imports torch.
_LAZY = {
    "track": "whyidle.capture.tracker",
    "schedule": "whyidle.capture.profiler",
    "handler": "whyidle.capture.profiler",
    "profile_steps": "whyidle.capture.profiler",
    "sync_finder": "whyidle.capture.sync",
}


def __getattr__(name: str) -> object:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'whyidle' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
