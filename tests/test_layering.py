"""The layers of src/whyidle, checked on the source: every import, at module level or inside a
function, at any depth (``whyidle.ranks.render_html`` importing ``whyidle.render.html``), follows
the flow; the core imports no feature package and no feature package imports another; and no two
modules import each other, inside a package or across packages.

The flow (docs/architecture.md), as what each part may import::

    shared leaves     errors, fieldcheck, config, units, catalogue, pages, output   (and whyidle.__version__)
    core              timeline -> sources, analyses -> findings -> render -> diagnosis, pipeline
    feature packages  ranks, comparison, sweep, serving, capture, lab: the core and the leaves,
                      never each other (except the pairs in EXCEPTIONS, each with its reason)
    on top            commands, cli, whyidle/__init__, __main__: anything below

An import is an ``import``/``from`` statement anywhere in a module, except under
``if TYPE_CHECKING:`` (annotations only, nothing runs). A module's imports are edges to the
modules they name (``from whyidle.sources import load`` -> ``whyidle.sources``, ``from
whyidle.analyses import causes`` -> ``whyidle.analyses.causes``); the graph of modules has no
cycle, lazy imports included, so a module's place in the flow never depends on import order.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import whyidle

SRC = Path(whyidle.__file__).parent

LEAVES = {"errors", "fieldcheck", "config", "units", "catalogue", "pages", "output", "__version__"}
CORE = {"timeline", "sources", "analyses", "findings", "render", "pipeline", "diagnosis"}
FEATURES = {"ranks", "comparison", "sweep", "serving", "capture", "lab"}
TOP = {"commands", "cli", "whyidle", "__main__"}

# What each part may import, besides itself. A feature package: the core and the leaves.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": set(),
    "output": {"errors"},
    "fieldcheck": {"errors"},
    "config": {"errors", "units", "fieldcheck"},
    "catalogue": {"errors", "units"},
    "pages": {"errors", "units", "catalogue"},  # the cause pages shipped with the package
    "timeline": LEAVES,
    "sources": LEAVES | {"timeline"},
    "analyses": LEAVES | {"timeline"},
    "findings": LEAVES | {"timeline", "analyses", "sources"},  # a saved report is an input
    "render": LEAVES | {"timeline", "analyses", "sources", "findings"},  # annotate reads the original trace
    "diagnosis": LEAVES | {"findings", "render"},
    "pipeline": LEAVES | CORE - {"pipeline"},
    **{f: LEAVES | CORE for f in FEATURES},
    "commands": LEAVES | CORE | FEATURES,
    "cli": LEAVES | {"commands"},
    "whyidle": LEAVES | CORE | FEATURES,  # the public names, resolved lazily
    "__main__": {"cli"},
}

# Imports between feature packages, each with the reason it is kept. Nothing else crosses.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("sweep", "capture"): "a trial measures its steps with capture's step tracker and needs torch through capture.require_torch",
    ("lab", "capture"): "the flaw lab runs its job under the live capture (require_torch, the profiler handler, the step tracker) to check that whyidle finds each flaw",
    ("lab", "sweep"): "the lab's job builds its DataLoader from a sweep Trial's settings (sweep.trial.dataloader_kwargs)",
}


def _part_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else ("whyidle" if rel.stem == "__init__" else rel.stem)


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(("whyidle", *parts))


MODULES = {_module_of(p) for p in SRC.rglob("*.py")}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _named(node: ast.AST, modules: set[str] | None = None) -> list[str]:
    """The whyidle modules an import statement names (``from pkg import sub`` names the submodule)."""
    known = MODULES if modules is None else modules
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "whyidle"]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "whyidle":
        names = [a.name for a in node.names if not (node.module == "whyidle" and a.name == "__version__")]  # a leaf
        subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in known]
        return subs + ([node.module] if len(subs) < len(names) else [])
    return []


def _targets(node: ast.AST) -> list[tuple[str, str]]:
    """(part imported, module) for an import statement; whyidle.__version__ is a leaf."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "whyidle":
        return [("__version__" if a.name == "__version__" else a.name, f"whyidle.{a.name}") for a in node.names]
    out = []
    for m in _named(node, set()) if isinstance(node, ast.Import) else ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []):
        parts = m.split(".")
        if parts[0] == "whyidle":
            out.append((parts[1] if len(parts) > 1 else "whyidle", m))
    return out


def _import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno not in skip]


def _imports() -> list[tuple[str, str, str, str]]:
    """(part, part imported, module imported, where) for every import across parts."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        part = _part_of(path)
        for node in _import_nodes(path):
            for target, module in _targets(node):
                if target != part:
                    found.append((part, target, module, f"{path.relative_to(SRC)}:{node.lineno}"))
    return found


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(SRC.rglob("*.py")):
        me = _module_of(path)
        for node in _import_nodes(path):
            graph[me].update(m for m in _named(node) if m != me)
    return graph


def _against_the_flow(imports: list[tuple[str, str, str, str]], allowed: dict[str, set[str]], exceptions: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{where}: {part} imports {module}"
        for part, target, module, where in imports
        if target not in allowed.get(part, set()) and (part, target) not in exceptions
    ]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found:
            return found
    return None


def test_every_part_is_placed() -> None:
    parts = {_part_of(p) for p in SRC.rglob("*.py")}
    assert parts <= set(ALLOWED), f"place these in ALLOWED (and in docs/architecture.md): {sorted(parts - set(ALLOWED))}"
    assert parts >= FEATURES | {"commands", "cli"}, "a part named here no longer exists"
    assert not (SRC / "tune").exists(), "tune/ was split into the feature packages"
    folders = {p.parent for p in SRC.rglob("*.py")}
    assert all((f / "__init__.py").is_file() for f in folders), "a folder of modules without __init__.py is not installed"


def test_imports_follow_the_flow() -> None:
    bad = _against_the_flow(_imports(), ALLOWED, EXCEPTIONS)
    assert not bad, "imports against the flow:\n" + "\n".join(bad)


def test_the_core_imports_no_feature_and_features_not_each_other() -> None:
    """The rule above, said directly: the ALLOWED table cannot grant what it must not."""
    for part in CORE | LEAVES:
        assert not ALLOWED.get(part, set()) & (FEATURES | TOP), part
    for part in FEATURES:
        assert not ALLOWED[part] & ((FEATURES | TOP) - {part}), part
    for (a, b), why in EXCEPTIONS.items():
        assert a in FEATURES and b in FEATURES and why, (a, b)
    used = {(p, t) for p, t, _m, _w in _imports()}
    assert set(EXCEPTIONS) <= used, f"exceptions no longer needed: {sorted(set(EXCEPTIONS) - used)}"


def test_no_cycles_between_parts() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for part, target, _module, _where in _imports():
        graph[part].add(target)
    found = _cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_no_cycles_between_modules() -> None:
    """Inside a package too: no module imports one that imports it back (at any distance)."""
    found = _cycle(_module_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


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


def test_the_new_rules_can_fail() -> None:
    """A core module importing a feature, a feature importing another, a deep submodule import
    and a cycle inside a package are all caught; a written exception is let through."""
    imports = [
        ("render", "ranks", "whyidle.ranks.model", "render/x.py:1"),
        ("serving", "sweep", "whyidle.sweep.trial", "serving/y.py:2"),
        ("sweep", "capture", "whyidle.capture.tracker", "sweep/z.py:3"),
    ]
    bad = _against_the_flow(imports, ALLOWED, EXCEPTIONS)
    assert bad == ["render/x.py:1: render imports whyidle.ranks.model", "serving/y.py:2: serving imports whyidle.sweep.trial"]
    deep = ast.parse("def f():\n    from whyidle.ranks.render_html import g\n").body[0].body[0]  # type: ignore[attr-defined]
    assert _targets(deep) == [("ranks", "whyidle.ranks.render_html")]
    sub = ast.parse("from whyidle.analyses import causes, gaps_not_a_module\n").body[0]
    assert _named(sub, {"whyidle.analyses.causes"}) == ["whyidle.analyses.causes", "whyidle.analyses"]
    assert _named(ast.parse("from whyidle import __version__\n").body[0]) == []
    assert _cycle({"whyidle.ranks.a": {"whyidle.ranks.b"}, "whyidle.ranks.b": {"whyidle.ranks.c"}, "whyidle.ranks.c": {"whyidle.ranks.a"}}) == [
        "whyidle.ranks.a", "whyidle.ranks.b", "whyidle.ranks.c", "whyidle.ranks.a",
    ]  # fmt: skip
    assert _cycle({"whyidle.ranks.a": {"whyidle.ranks.b"}}) is None
