"""Shared test helpers: the real traces in ../shared/traces, and a timeline builder DSL."""

from __future__ import annotations

from pathlib import Path

from typing import Any

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def shared_trace(rel: str) -> Path:
    """Path of a real trace under ../shared/traces, or skip the test with the reason."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"real trace {rel} not available: ../shared/traces is absent on this machine")
    return p


@pytest.fixture
def resnet0() -> Path:
    return shared_trace("kineto/resnet50_num_workers_0.pt.trace.json.gz")


@pytest.fixture
def resnet4() -> Path:
    return shared_trace("kineto/resnet50_num_workers_4.pt.trace.json.gz")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False, help="rewrite tests/golden/ from the current reports (review the diff)")


def pytest_configure(config: pytest.Config) -> None:
    """Every diagnosis the suite makes is checked for contradictions between its parts
    (whyidle.findings.consistency): a breach fails the test that made the report."""
    import functools

    import whyidle.pipeline as pipeline
    from whyidle.findings.consistency import contradictions
    from whyidle.findings.model import DiagnosisData

    def checked(fn: Any) -> Any:
        if getattr(fn, "_consistency_checked", False):
            return fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            bad = contradictions(out) if isinstance(out, DiagnosisData) else ()
            if bad:
                raise AssertionError("the report contradicts itself: " + "; ".join(bad))
            return out

        wrapper._consistency_checked = True  # type: ignore[attr-defined]
        return wrapper

    pipeline.diagnose = checked(pipeline.diagnose)  # type: ignore[method-assign]
    pipeline.report_from = checked(pipeline.report_from)  # type: ignore[method-assign]
    import whyidle.capture.tracker_report as tracker_report

    tracker_report.report_from_tracker = checked(tracker_report.report_from_tracker)  # type: ignore[method-assign]
