"""What the core asks of the sweep package, registered with it: the reader of a saved sweep
(``"schema": "whyidle.sweep/1.0"``, ``whyidle sweep -o sweep.json``) with
:mod:`whyidle.findings.saved`. The core imports no feature package; ``whyidle.load_report``
imports this module before it reads.
"""

from __future__ import annotations

from typing import Any

from whyidle.findings.saved import register_reader

__all__: list[str] = []


def _read(d: dict[str, Any], where: str) -> object:
    from whyidle.sweep.codec import decode

    return decode(d, where)


register_reader("sweep", _read)
