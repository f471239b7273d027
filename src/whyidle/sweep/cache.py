"""The trial cache: a JSON-lines file of finished trials keyed by configuration, so that an
interrupted sweep resumes where it stopped (``whyidle sweep ... --cache sweep.cache``).

A key is the trial's fields plus a ``context`` (the target or command and the measurement
settings), so a changed step count or script never reuses old numbers. Successful and
out-of-memory trials are kept; crashes, kills and timeouts are run again (they may be transient).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from whyidle.errors import InputError
from whyidle.sweep.runner import TrialRunner
from whyidle.sweep.trial import Trial, TrialResult

__all__ = ["CachedRunner"]

_KEEP = ("ok", "oom")


class _Line(msgspec.Struct):
    key: str
    result: TrialResult


class CachedRunner:
    def __init__(self, inner: TrialRunner, path: str | Path, context: str) -> None:
        self.inner, self.path, self.context = inner, Path(path), context
        self.known: dict[str, TrialResult] = {}
        if self.path.is_file():
            for n, line in enumerate(self.path.read_bytes().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rec = msgspec.json.decode(line, type=_Line)
                except msgspec.DecodeError as exc:
                    raise InputError(self.path, f"line {n} is not a sweep cache record ({exc}); expected a file written by whyidle sweep --cache") from exc
                self.known[rec.key] = rec.result

    def _key(self, trial: Trial) -> str:
        return f"{self.context}|{trial.key()}"

    def run(self, trial: Trial) -> TrialResult:
        k = self._key(trial)
        hit = self.known.get(k)
        if hit is not None:
            return msgspec.structs.replace(hit, cached=True)
        res = self.inner.run(trial)
        if res.status in _KEEP:
            self.known[k] = res
            with open(self.path, "ab") as f:
                f.write(msgspec.json.encode(_Line(k, res)) + b"\n")
        return res
