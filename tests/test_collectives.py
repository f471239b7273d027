"""Collectives' bytes and bus bandwidth (analyses/collectives.py): exact against nccl-tests' formulas
on timelines built in code (hypothesis over sizes, dtypes, ranks and times), the Kineto reader
keeping record_param_comms' fields, and the shared multi-rank traces against the sizes their own
NCCL kernels record."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_trace
from tlbuild import US
from whyidle import sources
from whyidle.analyses.collectives import CommWork, bus_factor, collective_kind, measure_collectives
from whyidle.analyses.links import link_launches
from whyidle.analyses.peaks import LINKS, PEAKS, link_peak
from whyidle.analyses.window import select_window
from whyidle.config import Config
from whyidle.timeline import Kind, TimelineBuilder, TimelineMeta
from whyidle.timeline.model import LaneKind, Timeline

KINDS = {"allreduce": "all_reduce", "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
         "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
         "all_to_all": "all_to_all", "alltoall_base": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
         "send": "send_recv", "recv": "send_recv", "nccl:all_reduce": "all_reduce", "nccl:_all_gather_base": "all_gather",
         "symm_mem::multimem_all_reduce_": "all_reduce_in_network", "barrier": "barrier"}  # fmt: skip
SIZES = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8, "Byte": 1, "Double": 8}


@pytest.mark.parametrize(("recorded", "kind"), sorted(KINDS.items()))
def test_recorded_names_map_to_nccls(recorded: str, kind: str) -> None:
    assert collective_kind(recorded) == kind


@given(n=st.integers(1, 1024))
def test_bus_factors_are_nccl_tests(n: int) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    assert bus_factor("all_reduce_in_network", n) == pytest.approx((n - 1) / (n + 1))
    for k in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(k, n) == pytest.approx((n - 1) / n)
    for k in ("broadcast", "reduce", "send_recv"):
        assert bus_factor(k, n) == 1.0
    assert bus_factor("barrier", n) is None and bus_factor("all_reduce", 0) is None


class Ranks:
    """One rank's thread: collective ranges around launches of NCCL kernels of known length (us)."""

    def __init__(self, device: str = "NVIDIA H100 80GB HBM3", world: int | None = None) -> None:
        self.b = TimelineBuilder(TimelineMeta(source_format="test", devices=[{"name": device}], world_size=world))
        self.main = self.b.lane_id(LaneKind.CPU_THREAD, -1, "1", "1", "main")
        self.stream = self.b.lane_id(LaneKind.GPU_STREAM, 0, "0", "9")
        self.corr = 0

    def comm(self, start: float, name: str, n_in: int, n_out: int, group: int, dtype: str, dur: float) -> None:
        """c10d op > record_param_comms (PyTorch 2.1+ fields) > launch; its kernel lasts dur."""
        rec = json.dumps([None, None, None, None, None, [name, n_in, n_out, group, dtype]])
        self.b.add(int(start * US), int((start + 10) * US), self.main, Kind.CPU_OP, f"c10d::{name}_")
        self.b.add(int((start + 1) * US), int((start + 9) * US), self.main, Kind.CPU_OP, "record_param_comms", inputs=rec)
        self.launch(start + 2, start + 20, dur)

    def launch(self, at: float, start: float, dur: float) -> None:
        self.corr += 1
        self.b.add(int(at * US), int((at + 1) * US), self.main, Kind.RUNTIME, "cudaLaunchKernel", corr=self.corr)
        self.b.add(int(start * US), int((start + dur) * US), self.stream, Kind.COLLECTIVE, "ncclDevKernel_AllReduce_RING_LL", corr=self.corr)

    def measure(self) -> CommWork | None:
        return _measure(self.b.build())


def _measure(tl: Timeline) -> CommWork | None:
    cfg = Config()
    links = link_launches(tl)
    return measure_collectives(tl, links, select_window(tl, links, cfg.window), cfg.render.work_top_ops)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["allreduce", "_allgather_base", "_reduce_scatter_base", "all_to_all", "broadcast"]),
    per_rank=st.integers(1, 10**8),
    n=st.integers(2, 64),
    dtype=st.sampled_from(sorted(SIZES)),
    dur=st.integers(1, 10**5),
)
def test_size_algbw_busbw_and_link_fraction_are_exact(name: str, per_rank: int, n: int, dtype: str, dur: int) -> None:
    """nccl-tests' S: all_gather's whole output, reduce_scatter's whole input, else the buffer."""
    n_in, n_out = {"_allgather_base": (per_rank, per_rank * n), "_reduce_scatter_base": (per_rank * n, per_rank)}.get(name, (per_rank, per_rank))
    r = Ranks()
    r.comm(0, name, n_in, n_out, n, dtype, dur)
    c = r.measure()
    assert c is not None and c.unsized_ns == 0 and c.kernel_ns == dur * US and c.link == LINKS["H100 SXM"]
    (rate,) = c.rates
    kind = collective_kind(name)
    size = max(n_in, n_out) * SIZES[dtype]
    algbw = size / (dur * US)  # bytes per ns = GB/s
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(kind, (n - 1) / n)
    assert (rate.name, rate.dtype, rate.group_size, rate.nbytes, rate.count) == (kind, dtype, n, size, 1)
    assert rate.algbw_gbps == pytest.approx(algbw) and rate.busbw_gbps == pytest.approx(algbw * factor)
    assert rate.fraction == pytest.approx(algbw * factor / 450.0)  # H100 SXM: NVLink 900 GB/s, 450 per direction


def test_calls_of_one_shape_add_up_and_shapes_sort_by_time() -> None:
    r = Ranks()
    for i in range(3):
        r.comm(100 * i, "allreduce", 2**20, 2**20, 8, "BFloat16", 30 + 10 * i)
    r.comm(500, "broadcast", 1000, 1000, 8, "Long", 200)
    c = r.measure()
    assert c is not None and [x.name for x in c.rates] == ["broadcast", "all_reduce"]
    ar = c.rates[1]
    assert ar.count == 3 and ar.kernel_ns == 120 * US and ar.algbw_gbps == pytest.approx(3 * 2**21 / (120 * US))


def test_older_traces_size_from_the_nccl_range_and_the_world_size() -> None:
    """No record_param_comms fields: the nccl: range's tensor, the world size, and all_gather's
    group from its output/input ratio, each with its note."""
    r = Ranks(device="Tesla V100-SXM2-32GB", world=8)
    b = r.b
    b.add(0, 10 * US, r.main, Kind.ANNOTATION, "nccl:all_reduce", inputs=json.dumps([[[394241]], ["float"], [""], None]))
    r.launch(1, 20, 50)
    b.add(100 * US, 110 * US, r.main, Kind.CPU_OP, "c10d::_allgather_base_", inputs=json.dumps([[[4096], [1024], []], ["c10::BFloat16"] * 2 + [""], ["", "", ""], None]))
    b.add(101 * US, 109 * US, r.main, Kind.ANNOTATION, "nccl:_all_gather_base", inputs=json.dumps([[[1024]], ["c10::BFloat16"], [""], None]))
    r.launch(102, 120, 10)
    c = r.measure()
    assert c is not None and c.unsized_ns == 0 and c.link == LINKS["V100 SXM2"]
    ar, ag = c.rates
    assert (ar.name, ar.nbytes, ar.group_size, ar.dtype) == ("all_reduce", 394241 * 4, 8, "float") and "world size" in ar.note
    assert ar.busbw_gbps == pytest.approx(394241 * 4 / (50 * US) * 2 * 7 / 8) and ar.fraction == pytest.approx(ar.busbw_gbps / 150)  # type: ignore[operator]
    assert (ag.name, ag.nbytes, ag.group_size, ag.dtype) == ("all_gather", 4096 * 2, 4, "BFloat16") and "ratio" in ag.note


def test_a_kernel_without_a_record_is_unsized_and_an_unknown_device_has_no_fraction() -> None:
    r = Ranks(device="Mystery Accelerator 9000")
    r.comm(0, "allreduce", 1000, 1000, 4, "Float", 40)
    r.launch(100, 120, 60)  # launched in no collective range
    c = r.measure()
    assert c is not None and c.kernel_ns == 100 * US and c.unsized_ns == 60 * US and c.link is None
    (rate,) = c.rates
    assert rate.busbw_gbps is not None and rate.fraction is None
    assert any("no recorded size" in n for n in c.notes) and any("no link bandwidth" in n for n in c.notes)


def test_no_collectives_no_comms() -> None:
    assert Ranks().measure() is None


def test_link_table_rows_name_their_document_and_a_device() -> None:
    for row, link in LINKS.items():
        assert row in PEAKS and link.total_gbps > 0 and "datasheet" in link.source
    assert link_peak({"name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 40e9}) == LINKS["A100 80GB SXM"]
    assert link_peak({"name": "NVIDIA A100-PCIE-40GB", "totalGlobalMem": 40e9}) is None  # a bridge may or may not be fitted
    assert link_peak({"name": "NVIDIA H100 PCIe"}) is None and link_peak({"name": "Mystery"}) is None


def test_the_reader_keeps_record_param_comms_fields(tmp_path: Path) -> None:
    """A Kineto trace whose record_param_comms records no dims still gives its collective's size."""
    args = {"Collective name": "allreduce", "In msg nelems": 2049000, "Out msg nelems": 2049000, "Group size": 2, "dtype": "Float"}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0, "dur": 50, "args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 9, "ts": 30, "dur": 100, "args": {"correlation": 7, "device": 0, "stream": 9}},
    ]
    path = tmp_path / "comms.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    c = _measure(sources.load(path))
    assert c is not None and c.unsized_ns == 0
    (rate,) = c.rates
    assert (rate.name, rate.nbytes, rate.group_size) == ("all_reduce", 2049000 * 4, 2)
    assert rate.algbw_gbps == pytest.approx(2049000 * 4 / 100e3) and rate.busbw_gbps == pytest.approx(rate.algbw_gbps)


# --- the shared traces ---------------------------------------------------------------------------


def _kernel_sizes(path: Path) -> tuple[int, int]:
    """(bytes moved, ns) over the NCCL kernels, from the sizes the kernels themselves record
    (PyTorch 2.1+ copies record_param_comms' fields onto them): an independent count."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    total = ns = 0
    for e in events:
        a = e.get("args", {})
        if e.get("cat") == "kernel" and "Collective name" in a:
            total += max(a["In msg nelems"], a["Out msg nelems"]) * SIZES[a["dtype"]]
            ns += round(e["dur"] * 1000)
    return total, ns


@pytest.mark.parametrize("rel", ["hta/nccl_parser_config__nccl_data.json.gz", "inference/tracelens__b200_eager_llm_prefill_rank0.json.gz"])
def test_shared_traces_match_the_sizes_their_kernels_record(rel: str) -> None:
    path = shared_trace(rel)
    c = _measure(sources.load(path))
    assert c is not None
    total, ns = _kernel_sizes(path)
    sized = [r for r in c.rates if r.name in ("all_reduce", "all_gather", "broadcast")]
    assert sum(r.nbytes * r.count for r in sized) == total
    assert abs(sum(r.kernel_ns for r in sized) - ns) <= 1000 * len(sized)  # microsecond rounding


def test_shared_8_rank_dlrm_trace_sizes_every_collective() -> None:
    """The param DLRM job (8 x V100, 2022 schema): record_param_comms has no sizes; the nccl: ranges
    do, the world size is 8, and every NCCL kernel is sized."""
    folder = shared_trace("multirank/param__v100x8_dlrm_step12")
    for path in sorted(folder.glob("worker*.json.gz"))[:2]:
        c = _measure(sources.load(path))
        assert c is not None and c.unsized_ns == 0 and c.link == LINKS["V100 SXM2"]
        assert {r.name for r in c.rates} == {"all_reduce", "all_to_all"} and all(r.group_size == 8 for r in c.rates)
        assert all(r.fraction is not None and 0 < r.fraction < 1 for r in c.rates)


def test_the_reports_show_the_collectives_and_a_saved_report_keeps_them(tmp_path: Path) -> None:
    """Terminal, HTML and JSON of a diagnosis with collectives; the JSON loads back with them."""
    import whyidle
    from whyidle.findings.saved import load_report
    from whyidle.render import render
    from whyidle.render.html import render_html

    path = shared_trace("hta/nccl_parser_config__nccl_data.json.gz")
    r = whyidle.diagnose(path)
    assert r.work is not None and r.work.comms is not None
    c = r.work.comms
    text = render(r, "terminal", width=100)
    assert isinstance(text, str) and "Collectives by kernel time" in text and "NVLink 3's 300 GB/s per direction" in text
    page = render_html(r)
    assert page.count("<tr>", page.index('class="wi-comms"')) >= len(c.rates) and "all_reduce" in page
    saved = tmp_path / "report.json"
    text_json = render(r, "json", width=100)
    assert isinstance(text_json, str)
    saved.write_text(text_json)
    again = load_report(saved)
    assert again.work is not None and again.work.comms == c


@pytest.mark.parametrize(
    "comm",
    [["allreduce", -5, "x", 8, "Float"], ["allreduce", 2**70, 2**70, 8, "Float"], [5, 10, 10, True, None], ["allreduce", 10, 10, -3, "Float"]],
)
def test_corrupt_records_are_not_sized_and_do_not_crash(comm: list[object]) -> None:
    r = Ranks()
    r.b.add(0, 10 * US, r.main, Kind.CPU_OP, "record_param_comms", inputs=json.dumps([None, None, None, None, None, comm]))
    r.launch(1, 20, 30)
    c = r.measure()
    assert c is not None and c.kernel_ns == 30 * US
    for rate in c.rates:  # sized at most to 0 bytes: no rate beyond what the record holds
        assert rate.nbytes == 0 and rate.algbw_gbps == 0.0
