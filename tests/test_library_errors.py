"""The library's errors: WhyidleError subclasses only, in the library's own vocabulary.

A library call names an option as the library does (``skip_first_steps``); the command line
writes its flag in its place (``--skip-first``). The capture and lab APIs raise ArgumentError /
CaptureError, which are still the ValueError / RuntimeError they raised before.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import whyidle
from whyidle import errors
from whyidle.cli import main
from whyidle.config import Config
from whyidle.lab.synthetic import training_trace, write_trace


@pytest.fixture
def starved(tmp_path: Path) -> Path:
    return write_trace(training_trace("starvation"), tmp_path / "starved.pt.trace.json.gz")


def test_a_library_call_names_the_field_and_the_cli_names_its_flag(starved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(whyidle.UsageError) as e:
        whyidle.diagnose(starved, skip_first_steps=99)
    assert e.value.field == "skip_first_steps"
    assert str(e.value).startswith("skip_first_steps 99 drops every step") and "--" not in str(e.value)
    with pytest.raises(whyidle.UsageError, match="^steps selects none") as e:
        whyidle.diagnose(starved, steps=(900, 901))
    assert e.value.field == "steps"

    assert main(["diagnose", str(starved), "--skip-first", "99"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("whyidle: error: --skip-first 99 drops every step") and "skip_first_steps" not in err
    assert main(["diagnose", str(starved), "--steps", "900-901"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("whyidle: error: --steps selects none of the trace's steps (it has ProfilerStep#")


def test_an_unknown_config_field_is_a_usage_error_that_names_the_fields() -> None:
    with pytest.raises(whyidle.UsageError) as e:
        Config().with_overrides(skip_first=2)
    msg = str(e.value)
    assert "skip_first is not a field of whyidle.Config; did you mean skip_first_steps?" in msg
    assert all(f in msg for f in ("skip_first_steps", "kernel_boundary_max_ns", "report_top_gaps")) and e.value.field == "skip_first"
    assert Config().with_overrides(skip_first_steps=2) == Config(skip_first_steps=2)


def test_the_capture_api_raises_whyidle_errors_that_are_still_the_builtins_it_raised() -> None:
    for call in (lambda: whyidle.schedule(active=0), lambda: whyidle.handler(report="loud")):
        with pytest.raises(errors.ArgumentError) as e:
            call()
        assert isinstance(e.value, whyidle.UsageError) and isinstance(e.value, whyidle.WhyidleError)
        assert isinstance(e.value, ValueError)
    assert issubclass(errors.CaptureError, whyidle.WhyidleError) and issubclass(errors.CaptureError, RuntimeError)


def test_the_error_tree_is_drawn_in_the_errors_docstring() -> None:
    doc = errors.__doc__ or ""
    classes = [getattr(errors, n) for n in errors.__all__]
    for cls in classes:
        assert inspect.isclass(cls) and issubclass(cls, errors.WhyidleError), cls
        line = next((ln for ln in doc.splitlines() if f" {cls.__name__} " in f" {ln.strip(' │├└─')} "), "")
        assert line, f"{cls.__name__} is not in the tree in errors.py's docstring"
    # each class is drawn under its parent: deeper indentation than the parent's line
    depth = {cls.__name__: next(ln for ln in doc.splitlines() if cls.__name__ in ln).index(cls.__name__) for cls in classes}
    for cls in classes:
        parents = [b for b in cls.__bases__ if issubclass(b, errors.WhyidleError)]
        for p in parents:
            assert depth[cls.__name__] > depth[p.__name__], (cls.__name__, p.__name__)
    assert set(errors.__all__) <= set(whyidle.__all__)
