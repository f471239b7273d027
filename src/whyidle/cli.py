"""The command line: parse arguments, call the API, render, map errors to exit codes.

Exit status: 0 done, 1 a CI gate failed, 2 bad input or usage, 130 interrupted, 141 the reader of
the output went away (``| head``). Each subcommand lives in
``whyidle.commands.<name>`` with ``add_parser(subparsers)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from whyidle import __version__
from whyidle.errors import MissingExtraError, OutputError, UsageError, WhyidleError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["main", "run", "COMMANDS"]

# Subcommand modules, in the order `whyidle --help` lists them.
COMMANDS = ("run", "diagnose", "compare", "demo", "lab", "sweep", "watch", "convert", "scaling", "serving", "batching", "explain", "schema")

EXAMPLES = """\
  whyidle demo                                   # try it: a starved loop, diagnosed and fixed
  whyidle run -- python train.py                 # your program, unchanged, diagnosed when it ends
  whyidle diagnose trace.pt.trace.json.gz        # why was the GPU idle in this profile?
  whyidle diagnose trace.pt.trace.json.gz -o report.html
  whyidle compare before.json after.json --max-regression 5%
  python -m whyidle ...                          # the same command line
"""

EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2
EXIT_PIPE = 141  # the reader of stdout went away (| head): 128 + SIGPIPE, as a shell reports it


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, as for bad input
        self.exit(EXIT_INPUT, f"whyidle: error: {message} (see whyidle {self.prog.split()[-1]} --help)\n")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """As argparse's, without ignoring a failed write: --help to a full disk is an error."""
        if message:
            (file or sys.stderr).write(message)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand, or only ``only`` (one of COMMANDS).

    ``whyidle diagnose ...`` needs only the diagnose command's parser: importing the other ten
    command modules and building their parsers took 6 ms of its start-up (see
    docs/performance.md). Help, errors and an unknown command get the full parser."""
    parser = _Parser(
        prog="whyidle",
        description="Why is my GPU idle, and what do I change?",
        epilog="examples:\n" + EXAMPLES + "\nwhyidle COMMAND --help shows each command's options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"whyidle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS if only is None else (only,):
        mod = importlib.import_module(f"whyidle.commands.{name}")
        mod.add_parser(sub)
        if getattr(mod, "EXAMPLES", ""):  # each command's examples (tests/test_first_hour.py asks for them)
            p = sub.choices[name]
            p.formatter_class = argparse.RawDescriptionHelpFormatter
            p.epilog = "examples:\n" + mod.EXAMPLES
    return parser


def _say(message: str) -> None:
    """One line on stderr, terminal-safe; nothing (never stdout) when stderr is closed."""
    from whyidle.output import one_line

    err = sys.stderr
    if err is None:
        return
    try:
        err.write(f"whyidle: {one_line(message)}\n")
        err.flush()
    except (OSError, ValueError):
        pass


def _reopen_closed_fds() -> None:
    """Point closed standard descriptors at /dev/null, so that no file whyidle opens (an output's
    temporary file) becomes fd 1 or 2 and receives text meant for the terminal. ``sys.stdout``
    stays None when stdout was closed, which :func:`whyidle.output.write_stdout` reports."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            except OSError:  # pragma: no cover - no /dev/null
                pass


class _ClosedStdout:
    """Stands in for ``sys.stdout`` when it was closed at start (``>&-``): a command that writes
    only to ``-o FILE`` works; one that prints gets one clear error."""

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        raise OutputError("<stdout>", "is closed; redirect it to a file, or pass -o FILE")

    def flush(self) -> None:
        pass


# Library names of options -> the command line's flags, for the messages of UsageErrors.
FLAG_OF_FIELD = {
    "skip_first_steps": "--skip-first",
    "steps": "--steps",
    "step_range": "--step-range",
    "max_regression": "--max-regression",
    "device": "--device",
}


def as_flags(exc: UsageError) -> str:
    """A UsageError's message with the option it is about named as the command line names it."""
    text = str(exc)
    flag = FLAG_OF_FIELD.get(exc.field or "")
    if flag is None:
        return text
    return re.sub(rf"\b{re.escape(exc.field or '')}\b", flag, text, count=1)


def main(argv: Sequence[str] | None = None) -> int:
    _reopen_closed_fds()
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    if sys.stderr is None:  # closed (2>&-): print(file=sys.stderr) would otherwise go to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise  # argparse's one-line error, exit 2
        return _written(EXIT_OK)  # --help, --version: checked like any output (> /dev/full)
    except OSError as exc:  # --help or --version could not be written
        return _written(EXIT_OK, exc)
    if not getattr(args, "command", None):
        if sys.stderr is not None:
            parser.print_help(sys.stderr)
        return EXIT_INPUT
    try:
        rc: int = args.run(args)
        return rc
    except OutputError as exc:
        _say(f"error: cannot write the output {exc}")
        return EXIT_INPUT
    except UsageError as exc:
        _say(f"error: {as_flags(exc)}")
        return EXIT_INPUT
    except (MissingExtraError, WhyidleError) as exc:
        _say(f"error: {exc}")
        return EXIT_INPUT
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_PIPE
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except MemoryError:
        where = f" on {args.trace}" if getattr(args, "trace", None) else ""
        _say(
            f"error: out of memory{where}; the input needs more memory than is available (see the memory "
            "bounds in docs/inputs.md), or run it on a machine with more"
        )
        return EXIT_INPUT
    except Exception as exc:  # never a traceback for the user; WHYIDLE_DEBUG=1 shows it
        if os.environ.get("WHYIDLE_DEBUG"):
            raise
        where = f"{getattr(args, 'trace', '')}: " if getattr(args, "trace", None) else ""
        _say(f"error: {where}could not be analysed ({type(exc).__name__}: {exc}); rerun with WHYIDLE_DEBUG=1 and report the traceback")
        return EXIT_INPUT


def _written(rc: int, failed: OSError | None = None) -> int:
    """``rc`` once stdout is flushed; exit 2 with one line when it cannot be (a full disk), or
    when writing already ``failed``."""
    try:
        if failed is not None:
            raise failed
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_PIPE
    except (OSError, ValueError) as exc:
        _drop_stdout()
        _say(f"error: cannot write the output <stdout> ({getattr(exc, 'strerror', None) or exc}); the output is incomplete")
        return EXIT_INPUT
    return rc


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that nothing tries to write the rest to a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout without a file descriptor
        pass


def run() -> NoReturn:
    """The console entry point: :func:`main`, then a fast exit.

    Every output is written and closed by then (files atomically, stdout flushed here), so the
    interpreter's teardown (freeing every object of the analysis, one by one) is skipped, as
    mypy does: it took 20-30 ms of a half-second diagnosis (benchmarks/bench_diagnose.py).
    """
    rc = main()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head) before the last of the output
        rc = EXIT_PIPE
    except (OSError, ValueError) as exc:  # e.g. a full disk behind a redirect: the output is incomplete
        _say(f"error: cannot write the output <stdout> ({getattr(exc, 'strerror', None) or exc}); the output is incomplete")
        rc = rc or EXIT_INPUT
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    run()
