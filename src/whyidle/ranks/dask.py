"""Per-rank work on a Dask cluster: parse and analyse where the data is, send back summaries.

``map_dask(job, paths, cfg, scheduler="tcp://host:8786")`` connects to an existing cluster;
``workers=N`` starts a local one with N worker processes for the duration of the call. Each task
is ``job`` (:func:`whyidle.ranks.run.rank_job`, passed in: this module knows no diagnosis, only
how to run a job on Dask) on one trace path, which must be readable from the workers
(a shared filesystem or object store path); only its :class:`~whyidle.ranks.run.RankResult` (the
rank's Report and a few hundred numbers of collectives and steps) travels back to the client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from whyidle.config import Config
from whyidle.errors import MissingExtraError, UsageError

__all__ = ["map_dask"]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise MissingExtraError("running ranks on Dask (--workers, --scheduler)", "dask", "distributed") from exc
    return distributed


def map_dask(
    job: Callable[..., Any],
    paths: Sequence[str],
    cfg: Config,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    connect_timeout_s: float = 30.0,
    said: list[str] | None = None,
) -> list[Any]:
    """Run ``job(path, cfg=cfg)`` for every path on Dask and return the results in ``paths`` order.

    ``said``, when given, receives one sentence saying which cluster did the work.
    """
    dd = _distributed()
    if scheduler and workers:
        raise UsageError("pass either a scheduler address or a number of local workers, not both")
    cluster = None
    try:
        if scheduler:
            try:
                client = dd.Client(scheduler, timeout=connect_timeout_s)
            except OSError as exc:
                raise UsageError(f"cannot reach the Dask scheduler at {scheduler} ({exc}); is it running?") from None
        else:
            cluster = dd.LocalCluster(n_workers=workers or 1, threads_per_worker=1, processes=True, dashboard_address=None)
            client = dd.Client(cluster)
        try:
            if said is not None:
                n = len(client.scheduler_info().get("workers", {}))
                where = f"the Dask scheduler at {scheduler}" if scheduler else "a local Dask cluster"
                said.append(f"the {len(paths)} ranks were read on {where} ({n} worker{'s' if n != 1 else ''})")
            futures = client.map(job, list(paths), cfg=cfg, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            out: list[Any] = [None] * len(futures)
            for done, fut in enumerate(dd.as_completed(futures), 1):
                out[index[fut.key]] = fut.result()
                if progress:
                    progress(done, len(futures))
            return out
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
