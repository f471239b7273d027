"""The Dask path on a real dask.distributed LocalCluster: same result as one process, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whyidle.ranks.render_json import render_multi_rank_json

pytest.importorskip("distributed", reason="the 'dask' extra (dask[distributed]) is not installed")

HTA = Path(__file__).parents[1].parent / "shared" / "traces" / "hta"
RANKS = [HTA / f"trace_filter__sampled_rank-{r}.json.gz" for r in (0, 1)]
CPU_ONLY = HTA / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.mark.skipif(not RANKS[1].exists(), reason=f"real traces not found in {HTA}")
def test_local_cluster_equals_single_process(tmp_path: Path) -> None:
    from whyidle.ranks.run import diagnose_ranks

    run = tmp_path / "job"
    run.mkdir()
    for p in (*RANKS, CPU_ONLY):
        (run / p.name).symlink_to(p)
    (run / "broken_rank-7.json").write_text("[")
    single = render_multi_rank_json(diagnose_ranks(run, jobs=1))
    on_dask = render_multi_rank_json(diagnose_ranks(run, workers=2))
    doc, single_doc = json.loads(on_dask), json.loads(single)
    # the same result, and the report says the work ran on Dask (a user should not have to guess)
    assert doc["notes"][0] == "the 4 ranks were read on a local Dask cluster (2 workers)"
    assert doc["notes"][1:] == single_doc["notes"]
    assert {**doc, "notes": []} == {**single_doc, "notes": []}
    assert len(doc["ranks"]) == 4
    assert sum(1 for e in doc["ranks"] if e["error"]) == 1


def test_unreachable_scheduler_is_a_usage_error() -> None:
    from whyidle.ranks.dask import map_dask
    from whyidle.config import Config
    from whyidle.errors import UsageError

    with pytest.raises(UsageError, match="cannot reach the Dask scheduler"):
        map_dask(len, ["x.json"], Config(), scheduler="tcp://127.0.0.1:1", connect_timeout_s=1.0)
