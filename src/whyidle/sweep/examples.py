"""Example model factories for ``whyidle batching --measure MODULE:FUNCTION`` (torch needed).

Each returns ``(model, example_input)``: one request's input, with a leading batch dimension of 1.

* ``encoder``: the model of tests/data/h200/measured.json's latency curve: a 6-layer
  ``TransformerEncoder`` (d_model 1024, 16 heads, ffn 4096), sequences of 128, run in bfloat16
  autocast, so that ``--measure whyidle.sweep.examples:encoder --device cuda`` repeats that
  measurement on any GPU.
* ``cpu_encoder``: 2 layers of d_model 256, sequences of 32: about a millisecond per pass on one
  CPU core, for validating the simulator against the real batcher (benchmarks/bench_batcher.py).
* ``tiny_encoder``: 2 layers of d_model 64, sequences of 16: a CPU-sized model for tests.
"""

from __future__ import annotations

from typing import Any

from whyidle.errors import MissingExtraError

__all__ = ["encoder", "cpu_encoder", "tiny_encoder"]


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError("Example models", "torch", "torch") from exc
    return torch


def _build(d_model: int, heads: int, ffn: int, layers: int, seq: int, bf16: bool) -> tuple[Any, Any]:
    torch = _torch()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=d_model, nhead=heads, dim_feedforward=ffn, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).eval()

    class Autocast(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
                return self.inner(x)

    return Autocast(enc), torch.randn(1, seq, d_model)


def encoder() -> tuple[Any, Any]:
    return _build(1024, 16, 4096, 6, 128, bf16=True)


def tiny_encoder() -> tuple[Any, Any]:
    return _build(64, 4, 128, 2, 16, bf16=False)


def cpu_encoder() -> tuple[Any, Any]:
    return _build(256, 4, 512, 2, 32, bf16=False)
