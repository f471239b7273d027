"""Batching settings written as each server's own configuration.

The simulated batcher sends a batch when ``max_batch`` requests wait or the oldest has waited
``max_delay``; the servers below batch that way (the delay counted from the first request of the
batch). Where a server's unit is coarser than the setting, the text says what it was rounded to.
"""

from __future__ import annotations

import math

from whyidle.serving.simulate import Settings

__all__ = ["triton", "torchserve", "ray_serve", "vllm", "all_servers"]


def triton(st: Settings) -> str:
    """config.pbtxt fields (Triton Inference Server dynamic batcher)."""
    us = st.max_delay_ns // 1000
    pref = f"  preferred_batch_size: [ {', '.join(str(p) for p in st.preferred)} ]\n" if st.preferred else ""
    return (
        f"max_batch_size: {st.max_batch}\n"
        "dynamic_batching {\n"
        f"{pref}"
        f"  max_queue_delay_microseconds: {us}\n"
        "}\n"
        "instance_group [ { count: " + str(st.instances) + " kind: KIND_GPU } ]\n"
    )


def torchserve(st: Settings) -> str:
    """model-config.yaml (TorchServe: maxBatchDelay in whole milliseconds)."""
    ms = st.max_delay_ns / 1e6
    whole = math.ceil(ms) if ms > 0 else 0
    note = f"   # {ms:.3g} ms rounded up to whole ms" if whole != ms else ""
    pref = "# preferred batch sizes have no TorchServe equivalent (Triton only)\n" if st.preferred else ""
    return f"batchSize: {st.max_batch}\nmaxBatchDelay: {whole}{note}\nminWorkers: {st.instances}\nmaxWorkers: {st.instances}\n{pref}"


def ray_serve(st: Settings) -> str:
    """Ray Serve: the @serve.batch decorator on the deployment's handler."""
    return (
        f"@serve.deployment(num_replicas={st.instances}, ray_actor_options={{'num_gpus': {1 / st.instances:.3g}}})\n"
        "class Model:\n"
        f"    @serve.batch(max_batch_size={st.max_batch}, batch_wait_timeout_s={st.max_delay_ns / 1e9:.6g})\n"
        "    async def __call__(self, requests): ...\n"
    )


def vllm(st: Settings) -> str:
    """vLLM: continuous batching has no queue delay; max_num_seqs caps the requests in one step."""
    return (
        f"--max-num-seqs {st.max_batch}\n"
        "# vLLM batches token by token (continuous batching): there is no queue delay to set, and the\n"
        "# latency curve here is one forward pass per request, not per generated token; use this cap\n"
        "# only when a request is one pass (embedding, classification, scoring).\n"
    )


def all_servers(st: Settings) -> dict[str, str]:
    return {"triton": triton(st), "torchserve": torchserve(st), "ray_serve": ray_serve(st), "vllm": vllm(st)}
