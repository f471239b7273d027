"""The exceptions whyidle raises.

Every message is a sentence that names the file, what was expected and what was found::

    WhyidleError                 base class; never raised itself
    ├── InputError               the input cannot be read as a profile (CLI exit status 2)
    │   ├── TraceFormatError     readable bytes, but not the format they claim to be
    │   └── UnsupportedInputError a kind of file whyidle does not read (yet)
    ├── UsageError               options that contradict each other or select nothing (exit 2)
    │   ├── ArgumentError        an argument a function cannot take (also a ValueError)
    │   └── OutputError          an output cannot be written, or would overwrite an input
    ├── CaptureError             a live capture produced nothing to diagnose (also a RuntimeError)
    └── MissingExtraError        an optional dependency is not installed; says what to install

The public API raises only these for bad input or usage; anything else is a bug. A message names
an option as the library does (``skip_first_steps``, a :class:`~whyidle.config.Config` field or
keyword argument; ``UsageError.field``); the command line writes its own flag in its place.
ArgumentError and CaptureError are also the built-in exceptions the capture and lab APIs raised
before they had their own (ValueError, RuntimeError), so ``except ValueError`` keeps working.

Analyses never raise for odd data: they record a quality note instead.
"""

from __future__ import annotations

__all__ = [
    "WhyidleError",
    "InputError",
    "TraceFormatError",
    "UnsupportedInputError",
    "UsageError",
    "OutputError",
    "ArgumentError",
    "CaptureError",
    "MissingExtraError",
]


class WhyidleError(Exception):
    """Base class of every error whyidle raises on purpose."""


class InputError(WhyidleError):
    """The input file cannot be read as a profile."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TraceFormatError(InputError):
    """The bytes were readable but are not a valid trace of the expected format."""


class UnsupportedInputError(InputError):
    """A kind of input whyidle does not read."""


class UsageError(WhyidleError):
    """Options that contradict each other or select nothing.

    ``field`` is the option the message is about, named as the library names it (a
    :class:`~whyidle.config.Config` field or a keyword argument, e.g. ``skip_first_steps``); the
    message names it the same way, and the command line writes its own flag in its place
    (``--skip-first``).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class ArgumentError(UsageError, ValueError):
    """A function was given an argument value it cannot take (a schedule with no active step, an
    unknown flaw or lever)."""


class CaptureError(WhyidleError, RuntimeError):
    """A live capture ran but produced nothing to diagnose (no trace, no tracked step)."""


class OutputError(UsageError):
    """An output (a file given with ``-o``, or stdout) cannot be written, or would overwrite an input."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class MissingExtraError(WhyidleError):
    """An optional dependency is missing; the message carries the install command."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        super().__init__(
            f"{feature} needs the optional dependency '{module}', which is not installed; "
            f"install it with: pip install 'whyidle[{extra}]'"
        )


def require_path(value: object, name: str, also: tuple[type, ...] = ()) -> None:
    """Refuse an argument that is not a path (str or os.PathLike) nor one of ``also``: an
    ArgumentError naming the parameter, not a TypeError from deep inside a reader."""
    import os

    if isinstance(value, (str, os.PathLike, *also)) and not isinstance(value, bytes):
        return
    kinds = " or ".join(["a path (str or os.PathLike)", *(t.__name__ for t in also)])
    raise ArgumentError(f"{name} must be {kinds}, not {type(value).__name__}", field=name)
