"""The public surface and the architecture's rules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import whyidle

SRC = Path(whyidle.__file__).parent


def test_public_api_is_pinned() -> None:
    assert sorted(whyidle.__all__) == sorted([
        "__version__", "ArgumentError", "CaptureError", "Comparison", "Config", "Diagnosis", "Evidence", "Finding", "Fix", "GapRecord", "HFCallback",
        "InputError", "Kind", "Lane", "LightningCallback", "MissingExtraError", "OutputError", "Report", "Skipped",
        "Timeline", "TraceFormatError", "Trial", "TrialResult", "UnsupportedInputError", "UsageError", "WhyidleError",
        "Workload", "annotate", "compare", "diagnose", "handler", "load", "load_report", "load_requests",
        "profile_latency", "profile_steps", "schedule", "sync_finder", "track", "tune_batching",
        "AdviceContext", "LatencyProfile", "MultiRankReport", "Prediction", "Traffic", "diagnose_ranks",
        "BatchingResult", "DeviceTimer", "DiagnosisData", "RequestLog", "StepTracker", "SyncFinder", "TraceHandler",
        "BatchingReport", "ServingDiagnosis", "Sweep",
        "AttributionSettings", "FindingSettings", "PredictionSettings", "ReadSettings", "RenderSettings", "ServingSettings", "WindowSettings",
    ])  # fmt: skip
    assert whyidle.Report is whyidle.Diagnosis
    for name in whyidle.__all__:
        assert hasattr(whyidle, name), name  # never raises, even for an extra that is not installed
    assert not hasattr(whyidle, "no_such_name")


def test_reading_and_diagnosing_take_plain_arguments() -> None:
    """``load`` and ``diagnose`` are pinned with their signatures: the speed machinery (a forked
    helper, a read-ahead, chunk processes: whyidle.parallel) is asked for with ``jobs`` alone,
    never with a hook, a callable or an internal object (the command line uses
    ``sources.read(path, step_pattern, helpers, read_ahead=)``)."""
    import inspect

    assert str(inspect.signature(whyidle.load)) == (
        "(path: 'str | os.PathLike[str]', step_pattern: 'str | None' = None, jobs: 'int' = 1, *, "
        "counters_utc_offset_min: 'int | None' = None, counters_interval_ms: 'float | None' = None, "
        "settings: 'ReadSettings | None' = None) -> 'Timeline'"
    )
    assert str(inspect.signature(whyidle.diagnose)) == (
        "(source: 'str | os.PathLike[str] | Timeline', config: 'Config | None' = None, "
        "counters: 'str | os.PathLike[str] | None' = None, *, jobs: 'int' = 1, **overrides: 'object') -> 'Diagnosis'"
    )
    from whyidle.pipeline import analyse

    assert list(inspect.signature(analyse).parameters) == ["tl", "cfg", "links", "window"]


def test_every_type_in_a_public_signature_is_exported() -> None:
    """The classes a public function takes or returns are whyidle's own public names (annotations
    are strings here: each capitalised name in them that is a whyidle class must be exported)."""
    import inspect
    import re

    exported = {n for n in whyidle.__all__ if inspect.isclass(getattr(whyidle, n))}
    classes = {
        n: v
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("whyidle.")
        for n, v in vars(m).items()
        if inspect.isclass(v) and v.__module__.startswith("whyidle") and not n.startswith("_")
    }
    missing = set()
    for name in whyidle.__all__:
        obj = getattr(whyidle, name)
        if not inspect.isfunction(obj):
            continue
        for p in [*inspect.signature(obj).parameters.values(), None]:
            text = str(p.annotation if p is not None else inspect.signature(obj).return_annotation)
            for word in re.findall(r"\b[A-Z][A-Za-z]+\b", text):
                if word in classes and word not in exported and not issubclass(classes[word], Exception):
                    missing.add(f"{name}: {word}")
    assert not missing, sorted(missing)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_analyses_are_pure() -> None:
    """Nothing under analyses/ imports a renderer, rich, or writes files."""
    for path in (SRC / "analyses").rglob("*.py"):
        mods = _imports(path)
        assert not any(m.startswith(("rich", "whyidle.render", "whyidle.commands", "matplotlib")) for m in mods), path
        text = path.read_text()
        assert "print(" not in text and "open(" not in text and ".write_" not in text, path


def test_only_the_terminal_renderer_imports_rich() -> None:
    users = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if any(m.startswith("rich") for m in _imports(p))}
    assert users <= {"render/terminal.py", "ranks/render_terminal.py", "commands/_output.py"}, users


def test_importing_whyidle_does_not_import_torch_or_heavy_extras() -> None:
    code = "import sys, whyidle; whyidle.diagnose; print(sorted(m for m in ('torch', 'pandas', 'pyarrow', 'matplotlib', 'dask', 'pynvml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_import_whyidle_is_light_and_its_names_resolve_on_use() -> None:
    # The command line starts reading the input while numpy and the analyses import, so the
    # package itself must not import them; the public names still work, also after the module
    # that defines diagnose() was imported (an import binds a submodule on its package).
    code = (
        "import sys, whyidle; light = 'numpy' not in sys.modules; "
        "import whyidle.pipeline, whyidle.sources; "
        "print(light, callable(whyidle.diagnose), whyidle.diagnose is whyidle.pipeline.diagnose, "
        "whyidle.load is whyidle.sources.load, whyidle.Report.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True True True True Diagnosis"


def test_an_unknown_keyword_to_diagnose_is_a_usage_error_naming_the_field() -> None:
    from pathlib import Path

    import pytest

    with pytest.raises(whyidle.UsageError, match="did you mean skip_first_steps"):
        whyidle.diagnose(Path(__file__).parent / "data" / "h200" / "serving_queue_wait.pt.trace.json.gz", skip_frist_steps=1)


def test_no_package_shadows_a_public_name() -> None:
    """Importing ``whyidle.x.y`` binds ``x`` on the package, which would replace a public name
    ``whyidle.x`` (so the before/after package is ``comparison/``: ``whyidle.compare`` is the function)."""
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")} | {p.stem for p in SRC.glob("*.py")}
    assert not packages & set(whyidle.__all__)
    code = "import whyidle, whyidle.comparison.analysis, whyidle.ranks.run; print(callable(whyidle.compare))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"
