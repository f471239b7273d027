"""No module over 500 lines and no function over 80 lines, unless it says why.

A long module or function is allowed when it carries a reason: for a function, the line just
before its ``def`` (or before its first decorator) is a ``# long: <reason>`` comment; for a module,
its docstring holds a line ``# long: <reason>``. The reason must say something (a few words).

``_BEING_SPLIT`` lists what other branches are splitting while this test lands; an entry that is
no longer over the limit fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "whyidle"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# "path" or "path:function" -> the branch splitting it. Remove an entry when its branch lands.
_BEING_SPLIT: dict[str, str] = {}


def _has_reason(line: str) -> bool:
    text = line.strip()
    return text.startswith("# long:") and len(text[len("# long:") :].split()) >= 3


def oversized(src: str, max_module: int = MAX_MODULE_LINES, max_function: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of what is over the limits without a ``# long:`` reason: ``""`` for the
    module, the function's qualified name (``Class.method``, ``outer.inner``) otherwise."""
    lines = src.splitlines()
    tree = ast.parse(src)
    out: list[tuple[str, int]] = []
    if len(lines) > max_module:
        doc = ast.get_docstring(tree, clean=False) or ""
        if not any(_has_reason(ln) for ln in doc.splitlines()):
            out.append(("", len(lines)))

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                n = (child.end_lineno or child.lineno) - first + 1
                before = lines[first - 2] if first >= 2 else ""
                if n > max_function and not _has_reason(before):
                    out.append((name, n))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _findings() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for name, n in oversized(path.read_text(encoding="utf-8")):
            found[f"{rel}:{name}" if name else rel] = n
    return found


def test_no_module_or_function_over_the_limits_without_a_reason() -> None:
    over = {k: n for k, n in _findings().items() if k not in _BEING_SPLIT}
    assert not over, (
        f"over {MAX_MODULE_LINES} lines per module / {MAX_FUNCTION_LINES} per function, with no '# long: <reason>' "
        f"comment: {over}; split it by meaning, or say why it must stay whole"
    )


def test_the_being_split_list_only_names_what_is_still_over() -> None:
    stale = sorted(set(_BEING_SPLIT) - set(_findings()))
    assert not stale, f"no longer over the limits, remove from _BEING_SPLIT: {stale}"


def _body(n: int) -> str:
    return "".join(f"    x{i} = {i}\n" for i in range(n))


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("def f():\n" + _body(79), []),  # 80 lines: at the limit
        ("def f():\n" + _body(80), [("f", 81)]),
        ("# long: one table the reader needs in one place\ndef f():\n" + _body(80), []),
        ("# long: x\ndef f():\n" + _body(80), [("f", 81)]),  # a reason says something
        ("class A:\n    @staticmethod\n    def g():\n" + _body(80).replace("    ", "        "), [("A.g", 82)]),
        ("def outer():\n    def inner():\n" + _body(80).replace("    ", "        ") + "    return inner\n", [("outer", 83), ("outer.inner", 81)]),
    ],
)
def test_the_scan_measures_functions_with_their_decorators_and_nesting(src: str, expected: list[tuple[str, int]]) -> None:
    assert oversized(src) == expected


def test_the_scan_measures_modules_and_reads_the_reason_from_the_docstring() -> None:
    body = "x = 1\n" * 600
    assert oversized('"""A module."""\n' + body) == [("", 601)]
    assert oversized('"""A module.\n\n# long: the whole schema table, generated, in one place\n"""\n' + body) == []
