"""More instances, MPS or MIG: what the measured numbers support, with the trade-offs stated.

Inputs are numbers whyidle measured or was given: one instance's capacity within the SLO and its
figures at the observed rate (the batching tuner), the latency curve (its peak samples/s, taken as
what the device can do at all), the memory one instance holds, and the GPU model.

* **Demand first.** When one instance with the recommended batching carries more than the
  observed rate, extra instances, MPS or MIG add no throughput for this service; they only help to
  put *other* work on the idle GPU (consolidation), which is a sharing decision, not a fix.
* **More instances / MPS** overlap one instance's fixed costs (host work, launches) with another's
  device work. They can raise capacity at most to the curve's peak throughput (the largest batch
  measured, where the device is busiest), and only as many as fit in memory. With one process
  per instance (TorchServe workers, several servers), MPS lets their kernels run concurrently
  instead of time-slicing; clients share one fault domain: a fatal fault in one client ends the
  work of every client of that MPS server; memory can be capped per client
  (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) and SMs per client (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``).
* **MIG** partitions A100/H100/H200 into isolated instances with their own SMs, memory, L2 and
  bandwidth (hardware isolation and predictable latency), at a fixed fraction of the GPU each: a
  1g slice has 1/7 of the SMs, so the latency curve measured on the whole GPU does not hold there
  and must be measured on the slice. Profiles from NVIDIA's MIG user guide ("Supported MIG
  Profiles", https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html).
"""

from __future__ import annotations

import math

import msgspec

from whyidle.config import Config
from whyidle.serving.batching import BatchingResult
from whyidle.serving.latency import LatencyProfile

__all__ = ["MigProfile", "MIG_PROFILES", "InstanceAdvice", "advise_instances", "mig_table_for"]

GIB = 1024**3


class MigProfile(msgspec.Struct, frozen=True):
    name: str
    sm_sevenths: int  # compute slices of 7
    memory_gb: int
    max_count: int  # instances of this profile on one GPU


def _t(*rows: tuple[str, int, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, int(n.split("g.")[0]), int(n.split("g.")[1].removesuffix("gb")), c) for n, _, c in rows)


# name, SM sevenths (from the name), instances per GPU; memory from the name.
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "A100-40GB": _t(("1g.5gb", 1, 7), ("1g.10gb", 1, 4), ("2g.10gb", 2, 3), ("3g.20gb", 3, 2), ("4g.20gb", 4, 1), ("7g.40gb", 7, 1)),
    "A100-80GB": _t(("1g.10gb", 1, 7), ("1g.20gb", 1, 4), ("2g.20gb", 2, 3), ("3g.40gb", 3, 2), ("4g.40gb", 4, 1), ("7g.80gb", 7, 1)),
    "H100-80GB": _t(("1g.10gb", 1, 7), ("1g.20gb", 1, 4), ("2g.20gb", 2, 3), ("3g.40gb", 3, 2), ("4g.40gb", 4, 1), ("7g.80gb", 7, 1)),
    "H100-94GB": _t(("1g.12gb", 1, 7), ("1g.24gb", 1, 4), ("2g.24gb", 2, 3), ("3g.47gb", 3, 2), ("4g.47gb", 4, 1), ("7g.94gb", 7, 1)),
    "H200-141GB": _t(("1g.18gb", 1, 7), ("1g.35gb", 1, 4), ("2g.35gb", 2, 3), ("3g.71gb", 3, 2), ("4g.71gb", 4, 1), ("7g.141gb", 7, 1)),
}


def mig_table_for(gpu: str) -> tuple[str, tuple[MigProfile, ...]] | None:
    """The MIG table for a device name as CUDA/NVML reports it ("NVIDIA H200", "A100-SXM4-80GB")."""
    g = gpu.upper().replace(" ", "")
    if "H200" in g:
        return "H200-141GB", MIG_PROFILES["H200-141GB"]
    if "H100" in g:
        key = "H100-94GB" if ("NVL" in g or "94" in g) else "H100-80GB"
        return key, MIG_PROFILES[key]
    if "A100" in g:
        key = "A100-80GB" if "80" in g else "A100-40GB"
        return key, MIG_PROFILES[key]
    return None


class InstanceAdvice(msgspec.Struct, frozen=True):
    verdict: str  # "demand", "instances_may_help", "device_bound", "unknown"
    lines: tuple[str, ...]
    single_capacity_per_s: float
    peak_curve_per_s: float
    instances_that_fit: int | None
    mig_gpu: str | None
    mig_fits: tuple[MigProfile, ...]
    on_cpu: bool = False  # the curve was measured on a CPU: no GPU-sharing advice


def _sharing_line(busy: float, on_cpu: bool, cfg: Config) -> str:
    """Share the device only when the idle time is large enough to matter, and say how much it is."""
    idle = max(1.0 - busy, 0.0)
    head = f"At the observed rate one instance is busy {busy:.0%} of the time, idle {idle:.0%}"
    if on_cpu:
        return f"{head}; the curve was measured on a CPU: there is no GPU to share, and other processes can use the idle cores."
    if idle < cfg.serving.batching_share_min_idle_share:
        return (
            f"{head}: too little idle time to share the GPU (sharing pays from {cfg.serving.batching_share_min_idle_share:.0%} idle, "
            "the smallest MIG slice); keep the GPU for this service."
        )
    return (
        f"{head}: that idle time can hold other work: share the GPU (MPS for cooperative processes, MIG for isolated "
        "tenants) or give this service a smaller GPU or a MIG slice."
    )


def advise_instances(
    result: BatchingResult,
    profile: LatencyProfile,
    *,
    gpu: str = "",
    memory_bytes: int | None = None,
    gpu_memory_bytes: int | None = None,
    cfg: Config | None = None,
) -> InstanceAdvice:
    """What more instances, MPS or MIG can do for this service, from the measured numbers; on a
    CPU (a curve measured there, no ``gpu`` given) no GPU-sharing advice."""
    best = result.best
    peak = max(b / (m / 1e9) for b, m in zip(profile.batch_sizes, profile.median_ns))
    cap = best.capacity_per_s if best else 0.0
    rate = result.rate_per_s
    lines: list[str] = []
    cfg = cfg or Config()
    on_cpu = not gpu and profile.device.strip().lower().startswith("cpu")
    mem = memory_bytes if memory_bytes is not None else profile.memory_bytes
    table = mig_table_for(gpu or profile.device)
    total = gpu_memory_bytes if gpu_memory_bytes else (table[1][-1].memory_gb * 10**9 if table else None)
    fit = int(total * 0.9 // mem) if (mem and total) else None  # 10% left for the CUDA context and allocator slack
    if best is None:
        verdict = "unknown"
        lines.append("No setting meets the latency objective even at a trickle: the model's own latency is too close to the SLO; instances cannot fix that (a faster model or a looser SLO can).")
    elif rate is not None and rate <= cap:
        verdict = "demand"
        lines.append(
            f"One instance with max batch {best.settings.max_batch} carries {cap:,.0f} requests/s within the SLO, "
            f"{cap / rate:.1f}x the observed {rate:,.1f}/s: more instances{'' if on_cpu else ', MPS or MIG'} add no throughput for this service."
        )
        if best.at_rate is not None:
            lines.append(_sharing_line(best.at_rate.busy_share, on_cpu, cfg))
    else:
        headroom = peak / cap if cap else math.inf
        if headroom > 1.1:
            verdict = "instances_may_help"
            lines.append(
                f"One instance carries {cap:,.0f}/s within the SLO, but the device reached {peak:,.0f} samples/s at batch "
                f"{profile.max_batch}: up to {headroom:.1f}x more could come from overlapping instances (more model instances"
                f"{'' if on_cpu else ', or several processes with MPS'}), if the SLO holds with the added contention; measure it with the instances running."
            )
        else:
            verdict = "device_bound"
            lines.append(
                f"One instance already carries {cap:,.0f}/s, {cap / peak:.0%} of the most the device did at any batch "
                f"({peak:,.0f}/s): more instances compete for the same device and add little; more GPUs or a faster model are the lever."
            )
    if fit is not None and mem and total:
        lines.append(f"Memory: one instance holds {mem / GIB:.1f} GiB; {fit} fit in {total / 1e9:.0f} GB (10% kept free).")
    fits: tuple[MigProfile, ...] = ()
    if on_cpu:
        pass  # no MPS or MIG on a CPU
    elif table is not None:
        name, profs = table
        if mem:
            fits = tuple(p for p in profs if p.memory_gb * 10**9 >= mem * 1.1)
            if fits:
                small = fits[0]
                lines.append(
                    f"MIG on {name}: the smallest profile that holds one instance is {small.name} ({small.max_count} per GPU, "
                    f"{small.sm_sevenths}/7 of the SMs): isolated memory, cache and bandwidth per tenant, but each slice is slower; "
                    "measure the latency curve on the slice before choosing (whyidle batching --measure on the MIG device)."
                )
            else:
                lines.append(f"MIG on {name}: no profile holds {mem / GIB:.1f} GiB with 10% to spare.")
        else:
            lines.append(f"MIG on {name}: profiles {', '.join(p.name for p in profs)}; give the instance's memory (--memory-gb) to see which fit.")
    elif gpu or profile.device:
        lines.append(f"MIG: {gpu or profile.device} has no MIG table here (A100, H100 and H200 do).")
    return InstanceAdvice(verdict, tuple(lines), cap, peak, fit, None if on_cpu or not table else table[0], fits, on_cpu)
