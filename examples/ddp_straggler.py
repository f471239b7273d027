"""Data-parallel training on CPU (gloo) with one slow rank: ``whyidle run -- torchrun --nproc_per_node 2 examples/ddp_straggler.py``.

Plain PyTorch, no whyidle import. Each rank trains the same small model on its own synthetic
batches (seeded by rank and step) under DistributedDataParallel; ``--slow-rank R`` makes rank R
spend ``--slow-ms`` more per step preparing its batch (a straggler: a slower disk, a busier
host), so every other rank waits for it in the gradient all-reduce.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--slow-rank", type=int, default=1, help="the straggler's rank (-1: none)")
    ap.add_argument("--slow-ms", type=float, default=30.0, help="extra time per step on the straggler")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000)  # the injected straggler
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}")
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps on {os.environ.get('WORLD_SIZE', '1')} ranks")


if __name__ == "__main__":
    main()
