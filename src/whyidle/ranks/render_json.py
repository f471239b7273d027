"""A multi-rank run's JSON report as a file's text (its fields: :mod:`whyidle.ranks.model`)."""

from __future__ import annotations

from typing import Any

from whyidle.ranks.model import encode
from whyidle.render.json import dumps

__all__ = ["render_multi_rank_json"]


def render_multi_rank_json(r: Any, columns: bool = False) -> str:
    """The JSON report of a multi-rank run (``whyidle diagnose RUN_DIR --json``)."""
    return dumps(encode(r, columns))
