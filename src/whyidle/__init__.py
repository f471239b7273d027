"""whyidle: why is my GPU idle, and what do I change?

Public API (everything else is internal)::

    report = whyidle.diagnose("trace.json.gz")     # -> Report
    timeline = whyidle.load("trace.json.gz")       # -> Timeline
    report = whyidle.diagnose(timeline, skip_first_steps=1)
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
    "load",
]
