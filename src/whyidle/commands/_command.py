"""What the commands that run another command share (``whyidle watch``, ``whyidle run``): the
words after ``--``, and the exit status and message when it cannot be started."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from whyidle.errors import UsageError

__all__ = ["command_words", "cannot_start"]


def command_words(words: Sequence[str], usage: str) -> list[str]:
    """The command line given after ``--`` (argparse.REMAINDER keeps the ``--``); UsageError with
    ``usage`` when there is none."""
    cmd = list(words)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError(usage)
    return cmd


def cannot_start(prog: str, cmd: Sequence[str], exc: OSError) -> int:
    """Say why ``cmd`` could not be started and return the shell's status for it (126 / 127)."""
    denied = isinstance(exc, PermissionError)
    print(f"{prog}: {cmd[0]}: {'permission denied' if denied else 'command not found'}", file=sys.stderr)
    return 126 if denied else 127
