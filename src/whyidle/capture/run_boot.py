"""What ``whyidle run`` injects into every Python process of the command, at interpreter start-up.

``whyidle run`` writes a ``sitecustomize.py`` of three lines (:func:`sitecustomize_source`) into
a private folder and prepends that folder to ``PYTHONPATH``; Python imports ``sitecustomize`` at
start-up (the ``site`` module), so every Python process the command starts runs :func:`boot`:

1. the private folder is taken off ``sys.path`` again (the program's imports resolve as before);
2. a ``sitecustomize`` the user already has (further along ``sys.path``) is imported and
   executed, as it would have been without ``whyidle run``;
3. an import hook waits for ``torch``: nothing else happens in a process that never imports it
   (a shell script, a compiler, a CUDA C++ program). Once ``torch`` has been imported, the hook
   removes itself and :func:`whyidle.capture.run_hook.activate` instruments the process.

Only the standard library is imported here: this runs in every Python process of the command.
Whatever fails is written to the run folder (``boot-<pid>.txt``), never to the program's output.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from whyidle.capture.run_env import ENV_DIR, note

__all__ = ["boot", "sitecustomize_source"]


def sitecustomize_source(whyidle_parent: str) -> str:
    """The ``sitecustomize.py`` ``whyidle run`` writes: finds whyidle (appended to ``sys.path``
    only when the child's interpreter cannot import it, so no package of the program is shadowed)
    and calls :func:`boot`; any failure is swallowed (the program must run unchanged)."""
    return (
        "# written by `whyidle run`: instruments this process when it imports torch; removed after the run\n"
        "import os as _os, sys as _sys\n"
        "try:\n"
        "    import importlib.util as _u\n"
        f"    if _u.find_spec('whyidle') is None: _sys.path.append({whyidle_parent!r})\n"
        "    from whyidle.capture.run_boot import boot as _boot\n"
        "    _boot(_os.path.dirname(_os.path.abspath(__file__)))\n"
        "except Exception:\n"
        "    pass\n"
    )


def boot(site_dir: str) -> None:
    """Run at start-up by the injected ``sitecustomize``: see the module docstring."""
    site_dir = os.path.abspath(site_dir)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != site_dir]
    try:
        _chain_user_sitecustomize(site_dir)
    except Exception as exc:  # the user's own sitecustomize failed: Python would print it and go on
        note(f"the program's own sitecustomize raised {type(exc).__name__}: {exc}")
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)
    if os.environ.get(ENV_DIR) and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchFinder())


def _chain_user_sitecustomize(site_dir: str) -> None:
    """Import the ``sitecustomize`` that Python would have found without ours, if there is one."""
    ours = sys.modules.get("sitecustomize")
    path = [p for p in sys.path if os.path.abspath(p or ".") != site_dir]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        raise


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when ``torch`` is being imported, it wraps the real loader so that
    :func:`run_hook.activate` runs once torch has been executed, then leaves ``sys.meta_path``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:  # pragma: no cover - removed already
            return None
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                real(module)
            finally:
                try:
                    del loader.exec_module
                except AttributeError:  # pragma: no cover
                    pass
            _activate(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _activate(torch: ModuleType) -> None:
    try:
        from whyidle.capture.run_hook import activate

        activate(torch)
    except Exception as exc:  # never into the program
        note(f"whyidle could not instrument this process ({type(exc).__name__}: {exc})")
