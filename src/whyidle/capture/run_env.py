"""The environment ``whyidle run`` hands its command's processes, and their notes to it.

``WHYIDLE_RUN_DIR`` names the run folder every instrumented process writes into,
``WHYIDLE_RUN_OPTIONS`` the hook's options (JSON, :class:`whyidle.capture.run_hook.HookOptions`).
Standard library only: the start-up hook (:mod:`whyidle.capture.run_boot`) runs in every Python
process of the command.
"""

from __future__ import annotations

import os

__all__ = ["ENV_DIR", "ENV_OPTIONS", "note"]

ENV_DIR = "WHYIDLE_RUN_DIR"  # the run folder every instrumented process writes into
ENV_OPTIONS = "WHYIDLE_RUN_OPTIONS"  # the hook's options as JSON (run_hook.HookOptions)


def note(text: str) -> None:
    """Append a line to this process's notes in the run folder (``boot-<pid>.txt``), which
    ``whyidle run`` prints after the command; never to the program's stdout or stderr."""
    run_dir = os.environ.get(ENV_DIR)
    if not run_dir:
        return
    try:
        with open(os.path.join(run_dir, f"boot-{os.getpid()}.txt"), "a", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n")
    except OSError:
        pass
