"""Importing torch lazily, with the install command when it is missing."""

from __future__ import annotations

from typing import Any

from whyidle.errors import MissingExtraError

__all__ = ["require_torch", "torch_available", "cuda_available"]


def require_torch(feature: str) -> Any:
    """The torch module, or MissingExtraError naming ``feature`` and the pip command."""
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError(feature, "torch", "torch") from exc
    return torch


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def cuda_available() -> bool:
    if not torch_available():
        return False
    import torch

    return bool(torch.cuda.is_available())
