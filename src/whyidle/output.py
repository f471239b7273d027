"""Writing outputs: files atomically, stdout checked, never over an input, text made terminal-safe.

The library's one place that writes a user's output, used by the commands and by live capture
(``whyidle.handler`` writing reports beside its traces). The promises (docs/inputs.md, "What
whyidle promises"):

* **An input is never overwritten**: an output that is the same file as an input (same inode,
  or the same resolved path) is refused before anything is written.
* **Atomic**: a regular file is written to a temporary file beside it and renamed over it, so a
  failure (full disk, Ctrl-C) leaves the old file, never a half-written one.
* **Symlinks, FIFOs and devices are written through, never replaced**: a symlink's target file
  is replaced atomically (the link stays); a FIFO or character device (``/dev/stdout``, a named
  pipe) is opened and written in place; any other kind of file is refused.
* **Every write is checked**: a failed write or flush (full disk, ``/dev/full``) raises
  :class:`~whyidle.errors.OutputError` naming the output and the problem; a reader that went
  away (``| head``) raises :class:`BrokenPipeError` for the CLI to turn into status 141.

:func:`clean` neutralises control characters in text bound for a terminal or a one-line error.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from whyidle.errors import OutputError

__all__ = ["write_atomic", "write_stdout", "same_file", "check_not_input", "clean", "one_line"]

# C0 controls except tab and newline, DEL, C1 controls, and the Unicode format characters that
# reorder or hide text on a terminal (bidi overrides and isolates, zero-width marks).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# A one-line error quotes at most this many characters of a string taken from an input.
ONE_LINE_MAX_CHARS = 400


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: str, newlines: bool = True) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), so that strings
    read from a trace (kernel, op, thread and file names) cannot move the cursor, clear the
    screen, set the title or plant hyperlinks. Tabs are kept, and newlines when ``newlines``."""
    return (_CONTROL if newlines else _CONTROL_NL).sub(_escape, text)


def one_line(text: str, max_chars: int = ONE_LINE_MAX_CHARS) -> str:
    """``text`` as one terminal-safe line: newlines escaped, cut to ``max_chars`` with a count."""
    s = clean(text, newlines=False)
    if len(s) > max_chars:
        s = f"{s[:max_chars]}... ({len(s) - max_chars} more characters)"
    return s


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file: the same inode, or the same resolved path."""
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def check_not_input(output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None]) -> None:
    """Refuse an output that is one of the inputs (or, for a folder input, a file inside it that
    is read as a trace): writing it would destroy the data being analysed."""
    for i in inputs:
        if i is None:
            continue
        if same_file(output, i):
            raise OutputError(output, f"is the input {i}; writing the output there would destroy it. Choose another output file")
        ip = Path(i)
        if ip.is_dir():
            try:
                inside = [p for p in ip.iterdir() if p.is_file()]
            except OSError:
                continue
            for p in inside:
                if same_file(output, p):
                    raise OutputError(output, f"is a file inside the input folder {i}; writing the output there would destroy it. Choose another output file")


def _problem(exc: OSError) -> str:
    return f"cannot be written ({exc.strerror or exc})"


def write_atomic(path: str | os.PathLike[str], data: str | bytes, inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Write ``data`` to ``path`` (see the module docstring for what is promised)."""
    p = Path(path)
    check_not_input(p, inputs)
    blob = data.encode() if isinstance(data, str) else data
    try:
        st = os.stat(p)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(p, _problem(exc)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(p, "is a folder; expected a file name to write")
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        _write_through(p, blob)
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(p, "is not a regular file, a FIFO or a terminal; refusing to replace it")
    target = p.resolve() if p.is_symlink() else p  # replace the link's target, keep the link
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(p, f"cannot be written: the folder {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(p, _problem(exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; a report is meant to be shared, so honour the umask like open().
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(p, _problem(exc)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_through(p: Path, blob: bytes) -> None:
    """Write into an existing FIFO or character device in place (never renamed over)."""
    try:
        fd = os.open(p, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise OutputError(p, _problem(exc)) from None
    try:
        view = memoryview(blob)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(p, _problem(exc)) from None
    finally:
        os.close(fd)


def write_stdout(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` to stdout (or ``stream``) and flush, so that a failure is seen here.

    Raises :class:`OutputError` when the stream is closed or the write fails (a full disk behind
    a redirect), and :class:`BrokenPipeError` when the reader went away.
    """
    out = stream if stream is not None else sys.stdout
    if out is None:
        raise OutputError("<stdout>", "is closed; redirect it to a file, or pass -o FILE")
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's StringIO)
        fd = -1
    try:
        if fd < 0:
            out.write(text)
            out.flush()
        else:  # every byte through os.write, each result checked: a short write is never the end
            out.flush()
            data = memoryview(text.encode(getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"))
            while data:
                data = data[os.write(fd, data) :]
    except BrokenPipeError:
        raise
    except ValueError:  # "I/O operation on closed file"
        raise OutputError("<stdout>", "is closed; redirect it to a file, or pass -o FILE") from None
    except OSError as exc:
        raise OutputError("<stdout>", f"cannot be written ({exc.strerror or exc}); the output is incomplete") from None
