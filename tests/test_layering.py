"""The layers of src/whyidle, checked on the source: every import, at module level or inside a
function, follows the flow, and no two packages import each other.

The flow (docs/architecture.md), as what each part may import::

    shared leaves   errors, config, units, catalogue, pages, output   (and whyidle.__version__)
    timeline        the data model: leaves only
    sources         one module per input format -> Timeline: timeline
    analyses        pure functions of a Timeline: timeline
    findings        rules and the diagnosis data: analyses, timeline, sources (a saved report is an input)
    render          renderers of the diagnosis: findings, analyses, sources (annotate reads the original trace), timeline
    library top     pipeline, diagnosis (the public Diagnosis), ranks: all of the above
    on top          capture, tune, lab, distributed, commands, cli, whyidle/__init__, __main__

An import is an ``import``/``from`` statement anywhere in a module, except under
``if TYPE_CHECKING:`` (annotations only, nothing runs). The parts on top may import each other
where :data:`ALLOWED` says so, but the graph of parts must stay free of cycles.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import whyidle

SRC = Path(whyidle.__file__).parent

LEAVES = {"errors", "config", "units", "catalogue", "pages", "output", "__version__"}
_LIB = {"timeline", "sources", "analyses", "findings", "render"}
_TOP_LIB = {"pipeline", "diagnosis", "ranks"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": set(),
    "output": {"errors"},
    "config": {"errors", "units"},
    "catalogue": {"errors", "units"},
    "pages": {"errors", "units", "catalogue"},  # the cause pages shipped with the package
    "timeline": LEAVES,
    "sources": LEAVES | {"timeline"},
    "analyses": LEAVES | {"timeline"},
    "findings": LEAVES | {"timeline", "analyses", "sources"},
    "render": LEAVES | {"timeline", "analyses", "sources", "findings"},
    "diagnosis": LEAVES | {"findings", "render"},
    "pipeline": LEAVES | _LIB | {"diagnosis"},
    "distributed": LEAVES,  # runs a job it is given (ranks passes rank_job): no import of the layer above
    "ranks": LEAVES | _LIB | {"pipeline", "diagnosis", "distributed"},
    "capture": LEAVES | _LIB | _TOP_LIB,
    "tune": LEAVES | _LIB | _TOP_LIB | {"capture"},
    "lab": LEAVES | _LIB | _TOP_LIB | {"capture", "tune"},
    "commands": LEAVES | _LIB | _TOP_LIB | {"capture", "tune", "lab", "distributed"},
    "cli": LEAVES | {"commands"},
    "whyidle": LEAVES | _LIB | _TOP_LIB | {"capture", "tune"},  # the public names, resolved lazily
    "__main__": {"cli"},
}

# Imports that run against the flow, each with the reason it is kept. Empty: there are none.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _part_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else ("whyidle" if rel.stem == "__init__" else rel.stem)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _targets(node: ast.AST) -> list[tuple[str, str]]:
    """(part imported, module) for an import statement; whyidle.__version__ is a leaf."""
    mods: list[str] = []
    if isinstance(node, ast.Import):
        mods = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "whyidle":
            return [("__version__" if a.name == "__version__" else f"whyidle.{a.name}", f"whyidle.{a.name}") for a in node.names]
        mods = [node.module]
    out = []
    for m in mods:
        parts = m.split(".")
        if parts[0] == "whyidle":
            out.append((parts[1] if len(parts) > 1 else "whyidle", m))
    return out


def _imports() -> list[tuple[str, str, str, str]]:
    """(part, part imported, module imported, where) for every import across parts."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        part = _part_of(path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
                continue
            for target, module in _targets(node):
                if target != part:
                    found.append((part, target, module, f"{path.relative_to(SRC)}:{node.lineno}"))
    return found


def test_every_part_is_placed() -> None:
    parts = {_part_of(p) for p in SRC.rglob("*.py")}
    assert parts <= set(ALLOWED), f"place these in ALLOWED (and in docs/architecture.md): {sorted(parts - set(ALLOWED))}"


def test_imports_follow_the_flow() -> None:
    bad = [
        f"{where}: {part} imports {module}"
        for part, target, module, where in _imports()
        if target not in ALLOWED.get(part, set()) and (part, target) not in EXCEPTIONS
    ]
    assert not bad, "imports against the flow:\n" + "\n".join(bad)


def test_no_cycles_between_parts() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for part, target, _module, _where in _imports():
        graph[part].add(target)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_nothing_private_of_another_part() -> None:
    """A part uses another's public modules and names only (``whyidle.sources._io`` is sources' own)."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        part = _part_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            for target, module in _targets(node):
                names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
                if target != part and (any(_private(s) for s in module.split(".")[1:]) or any(_private(n) for n in names)):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {part} imports {module} {' '.join(names)}")
    assert not bad, "\n".join(bad)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The walker sees imports inside functions and skips TYPE_CHECKING blocks."""
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from whyidle.render import x\ndef f():\n    from whyidle.commands import y\n"
    tree = ast.parse(code)
    skip = _type_checking_lines(tree)
    seen = [t for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno not in skip for t in _targets(n)]
    assert seen == [("commands", "whyidle.commands")]
