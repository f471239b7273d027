"""The speed rules that the code cannot state itself, as checks whose failure says what to edit.

* A hinted pattern: a module-level ``X_HINTS`` (lower-case substrings) beside its ``X_RE`` lets a
  cheap substring test rule a name out before the regex runs (a pattern with no literal prefix is
  tried at every position of the name). So every match of ``X_RE`` must contain one of
  ``X_HINTS``; a pattern edited without its hints silently stops matching some names.
* Calls banned from the diagnose path (the core's modules): numpy 2.4's ``np.unique(a)`` without a
  ``return_*`` output hashes integer arrays (3.5 s where sorting took 0.05 s on 3 M timestamps)
  and, like ``np.quantile``/``np.percentile`` with an interpolating method and the set functions
  (``np.setdiff1d`` ...), imports numpy.ma (6 ms, in the what-if helper's critical path). The
  sort-based helpers of ``whyidle.timeline.arrays`` and ``analyses.profcost.linear_quantile`` do
  the same work. ``np.median`` of floats imports numpy.ma too (the Kineto SM count from grids over
  blocks per SM did, on 8 of the shared HTA traces); the dtype is not in the source, so every
  ``np.median`` is banned there: ``whyidle.timeline.arrays.median`` partitions instead
  (tests/test_startup.py checks the imports at run time, on real traces).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import whyidle

SRC = Path(whyidle.__file__).parent

# --- hinted patterns -------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    return ".".join(("whyidle", *(rel.parts[:-1] if rel.name == "__init__" else rel.parts)))


def _hinted() -> list[tuple[str, str, str]]:
    """(module, X_HINTS, X_RE) for every module-level ``X_HINTS = (...)`` under src/whyidle."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
            if isinstance(target, ast.Name) and target.id.endswith("_HINTS"):
                out.append((_module_name(path), target.id, target.id.removesuffix("_HINTS") + "_RE"))
    return out


HINTED = _hinted()


def test_the_hinted_patterns_are_found() -> None:
    """The search below sees the pairs it must check (a renamed table would leave them unchecked)."""
    names = {(m, h) for m, h, _ in HINTED}
    assert {("whyidle.analyses.hostwork", "_COLD_HINTS"), ("whyidle.analyses.hostwork", "_DATA_WORD_HINTS"), ("whyidle.sources.kineto_columns", "_COLLECTIVE_HINTS")} <= names


def test_every_hint_table_has_its_pattern_beside_it() -> None:
    for module, hints, pattern in HINTED:
        mod = importlib.import_module(module)
        assert isinstance(getattr(mod, pattern, None), re.Pattern), (
            f"{module}.{hints} has no pattern {pattern} beside it: name the regular expression the hints stand for "
            f"{pattern} (a compiled re.Pattern), so that tests/test_speed_rules.py checks that every match contains a hint"
        )
        table = getattr(mod, hints)
        assert table and all(isinstance(h, str) and h == h.lower() and h for h in table), f"{module}.{hints} must be a tuple of non-empty lower-case strings"


# ASCII names: for them ``re.I`` folds only ASCII letters, which a lower-case substring test assumes.
_ASCII = st.characters(min_codepoint=32, max_codepoint=126)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_match_of_a_hinted_pattern_contains_a_hint(data: st.DataObject) -> None:
    for module, hints, pattern in HINTED:
        mod = importlib.import_module(module)
        rx, table = getattr(mod, pattern), getattr(mod, hints)
        name = data.draw(st.from_regex(rx, alphabet=_ASCII), label=f"{module}.{pattern}")
        assert rx.search(name)
        low = name.lower()
        assert any(h in low for h in table), (
            f"{module}.{pattern} matches {name!r}, which contains none of {hints} {table}: the hints must mirror the pattern "
            f"(names without a hint never reach it). Edit {hints} in src/{module.replace('.', '/')}.py: add a lower-case "
            f"substring that every match of the alternative you added contains"
        )


# --- calls banned from the diagnose path --------------------------------------------------------

# The core: what `whyidle diagnose` runs (the feature packages and the command line are not on it).
DIAGNOSE_PATH = ("timeline", "sources", "analyses", "findings", "render", "pipeline.py", "diagnosis.py")
# Methods of np.quantile/np.percentile that pick an element (no interpolation: numpy.ma not imported).
_DISCRETE = {"nearest", "inverted_cdf", "lower", "higher", "closest_observation", "averaged_inverted_cdf"}
_SET_FUNCTIONS = {"setdiff1d", "intersect1d", "union1d", "setxor1d"}
# path (from src/whyidle) -> why a banned call may stay there.
EXEMPT: dict[str, str] = {
    "analyses/counters.py": "a GPU counter log's utilisation percentiles (floats, linear interpolation as documented); "
    "counter logs are read on their own or joined after the report, never in the what-if helper's path",
}
_FIX = {
    "unique": "use whyidle.timeline.arrays.unique_sorted (or unique_inverse), or ask np.unique for return_counts/return_index/return_inverse",
    "quantile": "use whyidle.analyses.profcost.linear_quantile for integers, or pass a discrete method= (nearest, inverted_cdf, lower, higher)",
    "set": "use whyidle.timeline.arrays.setdiff_sorted, or a sorted merge",
    "median": "use whyidle.timeline.arrays.median (np.median of floats imports numpy.ma; the dtype is not in the source)",
    "isin": "use Timeline.mask(*kinds) or whyidle.timeline.arrays.one_of (np.isin of a few kinds sorts: 16 ms on 3M rows, comparisons 1 ms)",
}


def _banned(node: ast.Call) -> str | None:
    """The fix for a banned numpy call, else None."""
    f = node.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "numpy")):
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    if f.attr == "unique" and not {"return_index", "return_inverse", "return_counts"} & set(keywords):
        return _FIX["unique"]
    if f.attr in ("quantile", "percentile", "nanquantile", "nanpercentile"):
        method = keywords.get("method")
        if not (isinstance(method, ast.Constant) and method.value in _DISCRETE):
            return _FIX["quantile"]
    if f.attr in _SET_FUNCTIONS:
        return _FIX["set"]
    if f.attr in ("median", "nanmedian"):
        return _FIX["median"]
    if f.attr == "isin" and node.args and "kind" in ast.unparse(node.args[0]):
        return _FIX["isin"]
    return None


def banned_calls(root: Path = SRC) -> list[str]:
    found = []
    for part in DIAGNOSE_PATH:
        for path in [root / part] if part.endswith(".py") else sorted((root / part).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in EXEMPT:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and (fix := _banned(node)) is not None:
                    found.append(f"src/whyidle/{rel}:{node.lineno}: {ast.unparse(node)[:60]}: {fix}")
    return found


def test_no_banned_numpy_call_on_the_diagnose_path() -> None:
    found = banned_calls()
    assert not found, (
        "numpy calls that hash, or import numpy.ma, on the diagnose path (see this module's docstring; "
        "exempt a module only in EXEMPT, with its reason):\n" + "\n".join(found)
    )


def test_the_scan_finds_each_banned_form(tmp_path: Path) -> None:
    (tmp_path / "analyses").mkdir()
    (tmp_path / "analyses" / "x.py").write_text(
        "import numpy as np\n"
        "a = np.unique(x)\n"  # banned
        "b = np.unique(x, return_counts=True)\n"
        "c = np.percentile(x, 50)\n"  # banned
        "d = np.percentile(x, 50, method='nearest')\n"
        "e = np.quantile(x, 0.5, method='linear')\n"  # banned
        "f = np.setdiff1d(x, y)\n"  # banned
        "g = np.median(x)\n"  # banned
        "h = np.isin(tl.kind[rows], KINDS)\n"  # banned
        "i = np.isin(rows, others)\n"
    )
    for part in DIAGNOSE_PATH:
        if part.endswith(".py"):
            (tmp_path / part).write_text("")
        else:
            (tmp_path / part).mkdir(exist_ok=True)
    lines = [int(s.split(":")[1]) for s in banned_calls(tmp_path)]
    assert lines == [2, 4, 6, 7, 8, 9]
