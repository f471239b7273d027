"""What the core asks of the comparison package, registered with it: the reader of a saved
comparison (``"kind": "comparison"``, ``whyidle compare -o diff.json``) with
:mod:`whyidle.findings.saved`. The core imports no feature package; ``whyidle.load_report``
imports this module before it reads.
"""

from __future__ import annotations

from typing import Any

from whyidle.findings.saved import register_reader

__all__: list[str] = []


def _read(d: dict[str, Any], where: str) -> object:
    from whyidle.comparison.model import decode

    return decode(d, where)


register_reader("comparison", _read)
