"""Shared test helpers: the real traces in ../shared/traces, and a timeline builder DSL."""

from __future__ import annotations

from pathlib import Path

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
