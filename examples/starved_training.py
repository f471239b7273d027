"""A small training job starved by its DataLoader: ``whyidle run -- python examples/starved_training.py``.

Plain PyTorch, no whyidle import: each sample's ``__getitem__`` sleeps (standing in for reading
and decoding a file), and the DataLoader loads in the training process (``num_workers=0``), so
the model waits for every batch. ``--workers 4`` is the fix: the same samples, loaded by four
worker processes while the model trains. The model is built from code (no download); the data is
drawn from generators seeded by the sample's index, so every run computes the same losses.

    whyidle run -- python examples/starved_training.py               # names the starvation
    whyidle run -- python examples/starved_training.py --workers 4   # the fix: the wait is gone
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class SlowSamples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Sample ``i``: a feature vector and a label from a generator seeded by ``i``, after a sleep."""

    def __init__(self, n: int, dim: int, classes: int, latency_s: float) -> None:
        self.n, self.dim, self.classes, self.latency_s = n, dim, classes, latency_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.latency_s)  # the slow part: reading and decoding a sample
        g = torch.Generator().manual_seed(1_000_003 + i)
        return torch.randn(self.dim, generator=g), torch.randint(0, self.classes, (), generator=g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (0: load in the training process)")
    ap.add_argument("--steps", type=int, default=30, help="training steps")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--latency-ms", type=float, default=1.0, help="sleep per sample in __getitem__")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = SlowSamples(args.steps * args.batch, 64, 10, args.latency_ms / 1000)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=False, num_workers=args.workers)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")
    print(f"done: {step + 1} steps")


if __name__ == "__main__":
    main()
