"""What the core asks of the serving package, registered with it: the readers of a saved batching
result (``"kind": "batching"``) and request-log diagnosis (``"kind": "serving"``) with
:mod:`whyidle.findings.saved`. The core imports no feature package; ``whyidle.load_report``
imports this module before it reads.
"""

from __future__ import annotations

from typing import Any

from whyidle.findings.saved import register_reader

__all__: list[str] = []


def _batching(d: dict[str, Any], where: str) -> object:
    from whyidle.serving.saved import decode_batching

    return decode_batching(d, where)


def _serving(d: dict[str, Any], where: str) -> object:
    from whyidle.serving.saved import decode_serving

    return decode_serving(d, where)


register_reader("batching", _batching)
register_reader("serving", _serving)
