"""whyidle: why is my GPU idle, and what do I change?

Public API (everything else is internal)::

    d = whyidle.diagnose("trace.json.gz")          # -> Diagnosis (Report is the same class)
    timeline = whyidle.load("trace.json.gz")       # -> Timeline
    d = whyidle.diagnose(timeline, skip_first_steps=1)
    print(d); d.save("report.html")                # any format: .txt .json .html .json.gz .png .svg
    d = whyidle.load_report("report.json")         # a saved JSON report: the same Diagnosis
    c = whyidle.load_report("diff.json")           # any saved result: a comparison, a sweep, ...
    c = whyidle.compare("before.json", "after.pt.trace.json.gz")   # traces, reports or diagnoses
    trace = whyidle.annotate("trace.json.gz", d)   # the original trace plus the whyidle track (bytes)

Live capture (needs torch; imported only when one of these is first used)::

    for batch in whyidle.track(loader): ...                  # step tracker -> tracker.report()
    torch.profiler.profile(schedule=whyidle.schedule(), on_trace_ready=whyidle.handler("runs/"))
    report = whyidle.profile_steps(step_fn, n=3)
    with whyidle.sync_finder() as syncs: ...
    pl.Trainer(callbacks=[whyidle.LightningCallback()])      # PyTorch Lightning (the lightning extra)
    hf_trainer.add_callback(whyidle.HFCallback(hf_trainer))  # Hugging Face Trainer (the hf extra)

Serving (docs/batching.md)::

    curve = whyidle.profile_latency(model, example_input, batch_sizes=(1, 8, 32))
    log = whyidle.load_requests("requests.jsonl")
    result = whyidle.tune_batching(curve, traffic, slo_ns=50_000_000)

Sweeps (``whyidle sweep sweep.py:make``): ``make(cfg: whyidle.Trial) -> whyidle.Workload``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from whyidle.errors import (
    ArgumentError,
    CaptureError,
    InputError,
    MissingExtraError,
    OutputError,
    TraceFormatError,
    UnsupportedInputError,
    UsageError,
    WhyidleError,
)

if TYPE_CHECKING:
    import os

    from whyidle.capture.hf import HFCallback
    from whyidle.capture.lightning import LightningCallback
    from whyidle.capture.profiler import handler, profile_steps, schedule
    from whyidle.capture.sync import sync_finder
    from whyidle.capture.tracker import track
    from whyidle.serving.requestlog import load_requests
    from whyidle.serving.batching import tune_batching
    from whyidle.serving.latency import profile_latency
    from whyidle.config import (
        AttributionSettings,
        Config,
        FindingSettings,
        PredictionSettings,
        ReadSettings,
        RenderSettings,
        ServingSettings,
        WindowSettings,
    )
    from whyidle.pipeline import diagnose
    from whyidle.diagnosis import Diagnosis, Report
    from whyidle.render.perfetto import annotate
    from whyidle.comparison.analysis import Comparison, compare
    from whyidle.findings.model import (
        Evidence,
        Finding,
        Fix,
        GapRecord,
        Skipped,
    )
    from whyidle.sources import load
    from whyidle.timeline import Kind, Lane, Timeline
    from whyidle.sweep.trial import Trial, TrialResult, Workload
    from whyidle.analyses.advice_context import AdviceContext
    from whyidle.findings.model import Prediction
    from whyidle.ranks.model import MultiRankReport
    from whyidle.ranks.run import diagnose_ranks
    from whyidle.serving.batching import Traffic
    from whyidle.serving.latency import LatencyProfile
    from whyidle.findings.model import DiagnosisData
    from whyidle.capture.profiler import TraceHandler
    from whyidle.capture.sync import SyncFinder
    from whyidle.capture.tracker import StepTracker
    from whyidle.capture.device_timer import DeviceTimer
    from whyidle.serving.requestlog import RequestLog
    from whyidle.serving.batching import BatchingResult
    from whyidle.serving.requests import ServingDiagnosis
    from whyidle.serving.saved import BatchingReport
    from whyidle.sweep.search import Sweep

__all__ = [
    "__version__",
    "AdviceContext",
    "BatchingResult",
    "BatchingReport",
    "ServingDiagnosis",
    "Sweep",
    "DeviceTimer",
    "DiagnosisData",
    "LatencyProfile",
    "RequestLog",
    "StepTracker",
    "SyncFinder",
    "TraceHandler",
    "MultiRankReport",
    "Prediction",
    "Traffic",
    "diagnose_ranks",
    "ArgumentError",
    "CaptureError",
    "annotate",
    "compare",
    "Comparison",
    "Config",
    "AttributionSettings",
    "FindingSettings",
    "PredictionSettings",
    "ReadSettings",
    "RenderSettings",
    "ServingSettings",
    "WindowSettings",
    "Diagnosis",
    "Evidence",
    "Finding",
    "Fix",
    "GapRecord",
    "HFCallback",
    "InputError",
    "Kind",
    "Lane",
    "LightningCallback",
    "MissingExtraError",
    "OutputError",
    "Report",
    "Skipped",
    "Timeline",
    "TraceFormatError",
    "Trial",
    "TrialResult",
    "UnsupportedInputError",
    "UsageError",
    "WhyidleError",
    "Workload",
    "diagnose",
    "handler",
    "load",
    "load_report",
    "profile_steps",
    "profile_latency",
    "load_requests",
    "tune_batching",
    "schedule",
    "sync_finder",
    "track",
]

# Names resolved on first use: `import whyidle` stays light (the command line reads its input
# while numpy and the analyses import) and never imports torch.
_LAZY = {
    "Config": "whyidle.config",
    "AttributionSettings": "whyidle.config",
    "FindingSettings": "whyidle.config",
    "PredictionSettings": "whyidle.config",
    "ReadSettings": "whyidle.config",
    "RenderSettings": "whyidle.config",
    "ServingSettings": "whyidle.config",
    "WindowSettings": "whyidle.config",
    "diagnose": "whyidle.pipeline",
    "Evidence": "whyidle.findings.model",
    "Finding": "whyidle.findings.model",
    "Fix": "whyidle.findings.model",
    "GapRecord": "whyidle.findings.model",
    "Report": "whyidle.diagnosis",
    "Diagnosis": "whyidle.diagnosis",
    "annotate": "whyidle.render.perfetto",
    "compare": "whyidle.comparison.analysis",
    "Comparison": "whyidle.comparison.analysis",
    "Skipped": "whyidle.findings.model",
    "load": "whyidle.sources",
    "Kind": "whyidle.timeline",
    "Lane": "whyidle.timeline",
    "Timeline": "whyidle.timeline",
    "track": "whyidle.capture.tracker",
    "schedule": "whyidle.capture.profiler",
    "handler": "whyidle.capture.profiler",
    "profile_steps": "whyidle.capture.profiler",
    "sync_finder": "whyidle.capture.sync",
    "profile_latency": "whyidle.serving.latency",
    "load_requests": "whyidle.serving.requestlog",
    "tune_batching": "whyidle.serving.batching",
    "Trial": "whyidle.sweep.trial",
    "TrialResult": "whyidle.sweep.trial",
    "Workload": "whyidle.sweep.trial",
    "LightningCallback": "whyidle.capture.lightning",
    "HFCallback": "whyidle.capture.hf",
    # the types in the public functions' signatures
    "AdviceContext": "whyidle.analyses.advice_context",
    "Prediction": "whyidle.findings.model",
    "MultiRankReport": "whyidle.ranks.model",
    "diagnose_ranks": "whyidle.ranks.run",
    "Traffic": "whyidle.serving.batching",
    "LatencyProfile": "whyidle.serving.latency",
    "DiagnosisData": "whyidle.findings.model",
    "TraceHandler": "whyidle.capture.profiler",
    "SyncFinder": "whyidle.capture.sync",
    "StepTracker": "whyidle.capture.tracker",
    "DeviceTimer": "whyidle.capture.device_timer",
    "RequestLog": "whyidle.serving.requestlog",
    "BatchingResult": "whyidle.serving.batching",
    "BatchingReport": "whyidle.serving.saved",
    "ServingDiagnosis": "whyidle.serving.requests",
    "Sweep": "whyidle.sweep.search",
}

# The feature packages whose saved results load_report reads: each registers its reader with the
# core when imported (the core imports no feature package).
_READERS = ("whyidle.ranks.register", "whyidle.comparison.register", "whyidle.sweep.register", "whyidle.serving.register")


def load_report(
    path: str | os.PathLike[str],
) -> Diagnosis | MultiRankReport | Comparison | Sweep | BatchingReport | ServingDiagnosis:
    """A JSON result saved by whyidle (plain or gzipped), by its ``"kind"``: a trace's report as the
    :class:`Diagnosis` it was made from, a run folder's as the :class:`MultiRankReport`, ``whyidle
    compare``'s as the :class:`Comparison`, ``whyidle sweep``'s as the :class:`Sweep`, ``whyidle
    batching``'s as the :class:`BatchingReport`, ``whyidle serving``'s as the :class:`ServingDiagnosis`.
    Each saves again to the same JSON. TraceFormatError naming the file and the field when it is not one."""
    import importlib

    for module in _READERS:
        importlib.import_module(module)
    from whyidle.comparison.model import Comparison
    from whyidle.diagnosis import Diagnosis, load_report as load
    from whyidle.ranks.model import MultiRankReport
    from whyidle.serving.requests import ServingDiagnosis
    from whyidle.serving.saved import BatchingReport
    from whyidle.sweep.search import Sweep

    out = load(path)
    assert isinstance(out, (Diagnosis, MultiRankReport, Comparison, Sweep, BatchingReport, ServingDiagnosis))
    return out


def __getattr__(name: str) -> object:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'whyidle' has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(mod), name)
    except MissingExtraError as exc:
        # A trainer callback whose library is not installed: the name still resolves (hasattr never
        # raises), to a stand-in that says which extra to install when it is used.
        value = _needs_extra(exc)
    globals()[name] = value
    return value


def _needs_extra(exc: MissingExtraError) -> object:
    def stand_in(*args: object, **kwargs: object) -> object:
        raise exc

    return stand_in


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
