"""Kernels too small to fill the device: the SM share each launch configuration can occupy, swept
over busy time with concurrent streams adding up; the small-grid finding and its threshold; the
real traces (the A100 MPI saxpy export, the H200 lab at batch 4, healthy ResNet50); the grid and
block columns through every reader; the tensor-core share in the terminal and HTML reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_trace
from whyidle.analyses.kernel_fill import kernel_fill
from whyidle.analyses.links import link_launches
from whyidle.analyses.window import select_window
from whyidle.config import Config
from whyidle.pipeline import diagnose
from whyidle.render.html import render_html
from whyidle.render.terminal import render_terminal
from whyidle.sources import load
from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

US = 1000
LAB = Path(__file__).parent / "data" / "lab"


def _timeline(kernels: list[tuple[float, float, int, float, int, int, float]], devices: list[dict[str, object]] | None = None) -> Timeline:
    """kernels: (start us, end us, stream, blocks per SM (nan: unknown), grid, block, est. occupancy %)."""
    b = TimelineBuilder(TimelineMeta(source_format="test", devices=[{"id": 0, "name": "GPU", "numSms": 100}] if devices is None else devices))
    for i, (s, e, stream, bps, grid, block, occ) in enumerate(kernels):
        lane = b.lane_id(LaneKind.GPU_STREAM, 0, "0", str(stream))
        b.add(int(s * US), int(e * US), lane, Kind.KERNEL, f"k{i}", blocks_per_sm=bps, grid=grid, block=block, occupancy=occ)
    return b.build()


def _fill(tl: Timeline, cfg: Config | None = None):  # type: ignore[no-untyped-def]
    cfg = cfg or Config()
    links = link_launches(tl)
    return kernel_fill(tl, links, select_window(tl, links, cfg.window), cfg.attribution)


NAN = float("nan")
# stream 7: k0 [0,100) fill .25, k1 [100,200) full, k2 [200,300) fill .25; stream 8: k3 [250,350) fill .5
FOUR = [(0, 100, 7, 0.25, 25, 256, NAN), (100, 200, 7, 2.0, 200, 256, NAN), (200, 300, 7, 0.25, 25, 128, NAN), (250, 350, 8, 0.5, 50, 64, NAN)]


def test_sweep_adds_concurrent_kernels_exactly() -> None:
    f = _fill(_timeline(FOUR))
    assert f is not None
    assert f.kernel_busy_ns == 350 * US and f.kernel_ns == 400 * US and f.known_ns == 400 * US
    # [0,100) .25, [100,200) 1, [200,250) .25, [250,300) .75, [300,350) .5
    assert f.underfilled_ns == 250 * US
    assert f.unused_ns == (75 + 37.5 + 12.5 + 25) * US
    assert f.sm_counts == ((0, 100),) and f.sm_count_origin == "Kineto deviceProperties numSms"
    assert [(c.name, c.grid, c.block, c.unused_ns) for c in f.top] == [("k0", 25, 256, 75 * US), ("k2", 25, 128, 75 * US), ("k3", 50, 64, 50 * US)]


def test_finding_states_the_share_the_recoverable_time_and_the_kernels() -> None:
    r = diagnose(_timeline(FOUR))
    f = {x.id: x for x in r.findings}["small_grids"]
    assert f.key == "underfilled/small_grids" and f.idle_ns == 0
    assert f.affected_busy_ns == 250 * US
    assert f.share_of_window == pytest.approx(150 / 350)
    facts = dict(f.evidence.facts)
    assert facts["sm_count"] == "100" and facts["unused_sm_share_of_kernel_busy"] == pytest.approx(150 / 350, abs=1e-4)
    assert facts["threshold_share_of_kernel_busy"] == Config().findings.small_grid_min_unused_share
    assert facts["top_kernels"][0]["grid"] == 25 and facts["top_kernels"][0]["block"] == 256
    assert f.evidence.top_ops[0] == ("grid 25 x 256 threads, 0.25 blocks/SM: k0", 100 * US, 0)
    assert "up to 150.0 us of device time (43% of the window)" in f.fix.expected
    assert any("fewer blocks than the device's 100 SMs (Kineto deviceProperties numSms)" in s for s in f.fix.steps)
    text = " ".join(render_terminal(r).split())
    assert "underfilled / small_grids" in text and "up to 150.0 us of device time" in text


def test_threshold_is_the_config_share() -> None:
    tl = _timeline(FOUR)
    assert "small_grids" not in {x.id for x in diagnose(tl, small_grid_min_unused_share=0.44).findings}
    assert "small_grids" in {x.id for x in diagnose(tl, small_grid_min_unused_share=0.42).findings}
    full = _timeline([(0, 100, 7, 1.0, 100, 256, NAN), (100, 200, 7, 0.9, 90, 256, NAN)])
    f = _fill(full)
    assert f is not None and f.unused_ns == 10 * US and f.underfilled_ns == 100 * US  # 90 of 100 SMs: 5% unused
    assert "small_grids" not in {x.id for x in diagnose(full).findings}


def test_fill_from_grid_and_sm_count_and_sm_count_from_grid_and_blocks_per_sm() -> None:
    # nsys-like: no blocks per SM, a grid and the SM count
    f = _fill(_timeline([(0, 100, 7, NAN, 10, 128, NAN)], devices=[{"nsys_id": 0, "smCount": 40}]))
    assert f is not None and f.unused_ns == 75 * US and f.sm_count_origin == "nsys TARGET_INFO_GPU smCount"
    # HTA traces without deviceProperties: the SM count is the grid over blocks per SM
    f = _fill(_timeline([(0, 100, 7, 0.5, 54, 128, NAN), (100, 200, 7, NAN, 27, 128, NAN)], devices=[]))
    assert f is not None and f.sm_counts == ((0, 108),) and f.sm_count_origin == "the grid over Kineto's blocks per SM"
    assert f.unused_ns == 125 * US  # 0.5 and 27/108 = 0.25


def test_no_launch_configuration_is_a_skip_with_the_reason() -> None:
    r = diagnose(_timeline([(0, 100, 7, NAN, -1, -1, NAN)]))
    assert "small_grids" not in {x.id for x in r.findings}
    assert any(s.rule == "underfilled/small_grids" and "no kernel launch configuration" in s.reason for s in r.skipped)


def test_low_occupancy_counts_and_zero_occupancy_is_unknown() -> None:
    low = _timeline([(0, 100, 7, 2.0, 200, 64, 5.0), (100, 200, 7, 2.0, 200, 256, 60.0)])
    f = _fill(low)
    assert f is not None and f.low_occupancy_ns == 100 * US and f.unused_ns == 0
    found = {x.id: x for x in diagnose(low).findings}["small_grids"]
    assert "ran with few warps per SM" in found.fix.expected and found.affected_busy_ns == 100 * US
    zero = _timeline([(0, 100, 7, 2.0, 200, 64, 0.0), (100, 200, 7, 2.0, 200, 256, 60.0)])
    assert _fill(zero).low_occupancy_ns == 0  # type: ignore[union-attr]
    assert "small_grids" not in {x.id for x in diagnose(zero).findings}


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(1, 20), st.integers(0, 2), st.sampled_from([0.1, 0.25, 0.5, 1.0, 3.0])),
        min_size=1,
        max_size=12,
    )
)
def test_sweep_matches_counting_each_microsecond(ks: list[tuple[int, int, int, float]]) -> None:
    tl = _timeline([(s, s + d, 7 + st_, bps, 1, 1, NAN) for s, d, st_, bps in ks])
    f = _fill(tl)
    assert f is not None
    busy = under = 0
    unused = 0.0
    for t in range(0, 61):
        running = [min(b, 1.0) for s, d, _, b in ks if s <= t < s + d]
        if running:
            busy += 1
            share = min(sum(running), 1.0)
            under += share < 1.0 - 1e-9
            unused += 1.0 - share
    assert f.kernel_busy_ns == busy * US and f.underfilled_ns == under * US
    assert f.unused_ns == pytest.approx(unused * US, abs=2)
    assert 0 <= f.unused_ns <= f.underfilled_ns <= f.kernel_busy_ns


# -- real traces -------------------------------------------------------------------------------------


def test_mpi_saxpy_nsys_export_gets_the_finding() -> None:
    """The A100 MPI saxpy (pipit, nsys 2022.2): 2 blocks of 512 threads on 108 SMs, 'est. SM efficiency 2%'."""
    r = diagnose(shared_trace("nsys/pipit__a100_saxpy-mpi-cuda_perlmutter_nsys2022.2.1.sqlite"))
    f = {x.id: x for x in r.findings}["small_grids"]
    fill = r.kernels.fill
    assert fill is not None and fill.sm_counts == ((0, 108),) and fill.sm_count_origin == "nsys TARGET_INFO_GPU smCount"
    assert fill.underfilled_ns == fill.kernel_busy_ns  # every kernel: grid 2 < 108 SMs
    assert fill.unused_share == pytest.approx(1 - 2 / 108, rel=1e-6)
    top = fill.top[0]
    assert (top.grid, top.block, top.count) == (2, 512, 5) and top.name.startswith("saxpy")
    assert f.share_of_window == pytest.approx(fill.unused_ns / r.utilization.capacity_ns)


def test_h200_lab_small_batch_gets_it_and_healthy_traces_do_not() -> None:
    small = diagnose(LAB / "lab_smallbatch.pt.trace.json.gz")
    f = {x.id: x for x in small.findings}.get("small_grids")
    assert f is not None and dict(f.evidence.facts)["sm_count"] == "132"  # H200, from deviceProperties numSms
    assert small.findings[0].idle_ns > 0  # a busy-time finding ranks after the idle time the host overhead explains
    for path in (LAB / "lab_none.pt.trace.json.gz", LAB / "lab_sync.pt.trace.json.gz"):
        assert "small_grids" not in {x.id for x in diagnose(path).findings}, path.name


@pytest.mark.parametrize("name", ["resnet50_num_workers_0", "resnet50_num_workers_4"])
def test_resnet_big_kernels_do_not_get_it(name: str) -> None:
    r = diagnose(shared_trace(f"kineto/{name}.pt.trace.json.gz"))
    assert "small_grids" not in {x.id for x in r.findings}
    assert r.kernels.fill is not None and r.kernels.fill.unused_share < 0.05


def test_grid_and_block_are_read_from_kineto_and_nsys() -> None:
    tl = load(LAB / "lab_smallbatch.pt.trace.json.gz")
    k = np.flatnonzero(tl.kind == int(Kind.KERNEL))
    assert (tl.grid[k] > 0).all() and (tl.block[k] > 0).all()
    assert tl.grid[k[0]] == 1 and tl.block[k[0]] == 128  # the first kernel's args: grid [1, 1, 1], block [128, 1, 1]
    tl = load(shared_trace("nsys/pipit__a100_saxpy-mpi-cuda_perlmutter_nsys2022.2.1.sqlite"))
    k = np.flatnonzero(tl.kind == int(Kind.KERNEL))
    assert set(tl.grid[k].tolist()) == {2} and set(tl.block[k].tolist()) == {512}


def test_parquet_without_grid_columns_reads_them_as_unknown(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from whyidle.sources.parquet import load_parquet, write_parquet

    tl = _timeline(FOUR)
    p = tmp_path / "t.parquet"
    write_parquet(tl, p)
    back = load_parquet(p)
    assert back.grid.tolist() == tl.grid.tolist() and back.block.dtype == np.int32
    old = pq.read_table(p)
    old = old.drop_columns(["grid", "block"])
    q = tmp_path / "old.parquet"
    pq.write_table(pa.table(old.columns, names=old.column_names).replace_schema_metadata(old.schema.metadata), q)
    back = load_parquet(q)
    assert back.grid.tolist() == [-1] * len(tl) and back.block.tolist() == [-1] * len(tl)
    assert back.blocks_per_sm.tolist() == tl.blocks_per_sm.tolist()


# -- tensor-core share in the reports ----------------------------------------------------------------


def test_tensor_core_share_in_terminal_and_html() -> None:
    tl = _timeline([(0, 60, 7, 2.0, 200, 256, NAN), (60, 100, 7, 2.0, 200, 256, NAN)], devices=[{"id": 0, "name": "GPU", "numSms": 100, "computeMajor": 8}])
    tl.strings[tl.name[0]] = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
    r = diagnose(tl)
    assert r.kernels.tensor_core_share == pytest.approx(0.6)
    text = " ".join(render_terminal(r).split())
    assert "Tensor cores 60% of kernel time in tensor-core (MMA) kernels, by kernel name" in text
    html = render_html(r)
    assert "Tensor cores" in html and "60%" in html and "of kernel time in tensor-core (MMA) kernels" in html
