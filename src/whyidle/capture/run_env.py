"""The environment ``whyidle run`` hands its command's processes, and their notes to it.

``WHYIDLE_RUN_DIR`` names the run folder every instrumented process writes into,
``WHYIDLE_RUN_OPTIONS`` the hook's options (JSON, :class:`whyidle.capture.run_hook.HookOptions`).
Standard library only: the start-up hook (:mod:`whyidle.capture.run_boot`) runs in every Python
process of the command.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

__all__ = ["ENV_DIR", "ENV_OPTIONS", "STEPS_SUFFIX", "HookOptions", "note", "worker_name"]

ENV_DIR = "WHYIDLE_RUN_DIR"  # the run folder every instrumented process writes into
ENV_OPTIONS = "WHYIDLE_RUN_OPTIONS"  # the hook's options as JSON (HookOptions)
STEPS_SUFFIX = ".steps.json"  # each instrumented process's record: <worker>.steps.json


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


@dataclass(frozen=True)
class HookOptions:
    """What ``whyidle run`` switches on in its children (``WHYIDLE_RUN_OPTIONS``, JSON)."""

    tracker: bool = True
    profiler: bool = True
    schedule: tuple[int, int, int] = (5, 2, 3)  # wait, warm-up, active steps (capture.profiler.DEFAULT_SCHEDULE)
    steps: int = 0  # interrupt the program (SIGINT) after this many steps; 0: never
    window: tuple[float, float] | None = None  # profile from START s after `import torch`, for LENGTH s

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> HookOptions:
        d = json.loads(text) if text else {}
        window = d.get("window")
        return cls(
            tracker=bool(d.get("tracker", True)),
            profiler=bool(d.get("profiler", True)),
            schedule=tuple(int(v) for v in d.get("schedule", (5, 2, 3)))[:3],  # type: ignore[arg-type]
            steps=int(d.get("steps", 0)),
            window=(float(window[0]), float(window[1])) if window else None,
        )


def worker_name(rank: int | None, pid: int) -> str:
    """The name of a process's files in the run folder: ``rank<R>`` under torch.distributed
    (``ranks.run.rank_from_name`` reads it back), else ``pid<pid>``."""
    return f"rank{rank}" if rank is not None else f"pid{pid}"
