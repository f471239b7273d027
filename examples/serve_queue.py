"""A small inference server fed by a queue: ``whyidle run --window 1s+2s -- python examples/serve_queue.py``.

Plain PyTorch, no whyidle import and no optimizer: a client thread puts a request (a batch of
feature vectors) on a queue every ``--gap-ms``; the server takes one at a time, runs the model
and prints the predicted classes. The model is fast and requests are sparse, so the model mostly
waits for work: whyidle's diagnosis of the window is insufficient demand (batch requests, keep
several in flight). Deterministic: request ``i`` is drawn from a generator seeded by ``i``.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

import torch
from torch import nn


def client(q: queue.Queue[torch.Tensor | None], n: int, gap_s: float) -> None:
    for i in range(n):
        time.sleep(gap_s)
        q.put(torch.randn(4, 64, generator=torch.Generator().manual_seed(i)))
    q.put(None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=150)
    ap.add_argument("--gap-ms", type=float, default=15.0, help="time between two requests")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    q: queue.Queue[torch.Tensor | None] = queue.Queue()
    threading.Thread(target=client, args=(q, args.requests, args.gap_ms / 1000), daemon=True).start()
    served = 0
    while (request := q.get()) is not None:
        with torch.no_grad():
            out = model(request)
        print(f"request {served} -> {out.argmax(1).tolist()}")
        served += 1
    print(f"served {served} requests")


if __name__ == "__main__":
    main()
