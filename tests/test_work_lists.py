"""Ops on lists of tensors (analyses/flops_lists.py): ``_foreach_*`` and fused optimizers, bytes
only. Exact against analytic counts over list shapes (hypothesis), on a timeline built in code, and
against what torch.profiler records for a real optimizer step on CPU (where torch is installed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from test_work import Job
from tlbuild import US
from whyidle.analyses.flops import op_work
from whyidle.analyses.flops_lists import ASSUMED_ITEMSIZE_NOTE

shapes = st.lists(st.lists(st.integers(1, 9), min_size=0, max_size=3), min_size=1, max_size=6)


def _elements(lst: list[list[int]]) -> int:
    return sum(math.prod(s) for s in lst)


def _lists(n: int, shape: list[list[int]]) -> str:
    """A ``_foreach`` op's recorded inputs: n tensor lists of the same shapes, then a Scalar."""
    return json.dumps([[shape] * n + [[]], ["TensorList"] * n + ["Scalar"], [""] * (n + 1), None])


@given(shape=shapes, n=st.integers(1, 3))
def test_foreach_reads_every_list_and_writes_the_first(shape: list[list[int]], n: int) -> None:
    e = _elements(shape)
    for name in ("aten::_foreach_add_", "aten::_foreach_sqrt"):  # in place, and out of place
        w = op_work(name, _lists(n, shape))
        assert w is not None and w.flops == 0 and w.precision == "" and w.family == "foreach"
        assert w.nbytes == (n * e + e) * 4 and w.note == ASSUMED_ITEMSIZE_NOTE


@given(shape=shapes, dtype=st.sampled_from([("c10::BFloat16", 2), ("float", 4), ("double", 8)]))
def test_a_sized_tensor_input_gives_the_lists_element_size(shape: list[list[int]], dtype: tuple[str, int]) -> None:
    """``_foreach_add_(list, tensor, alpha)``: the tensor's element size, no assumption."""
    w = op_work("aten::_foreach_add_", json.dumps([[shape, [], []], ["TensorList", dtype[0], "Scalar"], ["", "", "1"], None]))
    assert w is not None and w.nbytes == 2 * _elements(shape) * dtype[1] and w.note == ""


@given(shape=shapes, amsgrad=st.booleans())
def test_fused_adam_reads_its_state_and_writes_params_and_moments(shape: list[list[int]], amsgrad: bool) -> None:
    e, steps = _elements(shape), len(shape)
    lists = [shape, shape, shape, shape, shape if amsgrad else [], [[]] * steps]  # state_steps: 0-dim tensors
    inputs = json.dumps([[*lists, [], []], ["TensorList"] * 6 + ["Scalar", "Scalar"], [""] * 8, None])
    read = (5 if amsgrad else 4) * e + steps
    written = (4 if amsgrad else 3) * e
    for name in ("aten::_fused_adam_", "aten::_fused_adamw_"):
        w = op_work(name, inputs)
        assert w is not None and w.flops == 0 and w.nbytes == (read + written) * 4


@given(shape=shapes, momentum=st.booleans())
def test_fused_sgd_writes_momentum_buffers_only_when_it_has_them(shape: list[list[int]], momentum: bool) -> None:
    e = _elements(shape)
    inputs = json.dumps([[shape, shape, shape if momentum else [], []], ["TensorList"] * 3 + ["Scalar"], [""] * 4, None])
    w = op_work("aten::_fused_sgd_", inputs)
    assert w is not None and w.nbytes == ((3 if momentum else 2) * e + (2 if momentum else 1) * e) * 4


def test_a_list_recorded_without_sizes_is_not_modelled() -> None:
    """Older traces record a tensor list as [] (the shared multi-rank traces' _foreach_mul_)."""
    assert op_work("aten::_foreach_mul_", json.dumps([[[], []], ["TensorList", "Scalar"], ["", ""], None])) is None


def test_a_foreach_op_is_memory_bound_over_its_kernels_time() -> None:
    j = Job()  # H100 SXM: 3.35 TB/s
    shape = [[4096, 4096]] * 8  # 8 tensors of 16 Mi elements
    j.op("aten::_foreach_mul_", 0, 10, json.dumps([[shape, []], ["TensorList", "Scalar"], ["", "0.9"], None]))
    j.kernel("multi_tensor_apply_kernel", 1, 10, 110)
    w, _ = j.work()
    (op,) = w.ops
    expected = 2 * 8 * 4096 * 4096 * 4
    assert op.family == "foreach" and op.nbytes == expected and op.bound == "memory"
    assert op.tbps == pytest.approx(expected / 100e-6 / 1e12) and op.fraction == pytest.approx(op.tbps / 3.35)
    assert w.unmodelled_ns == 0 and w.memory_bound_ns + w.near_roofline_ns == 100 * US and w.flops == 0


def test_the_profiler_records_what_the_formula_reads(tmp_path: Path) -> None:
    """A real AdamW step (foreach and fused) on CPU, recorded with record_shapes and exported as a
    Kineto trace: each list op's bytes from the trace match the tensors the optimizer holds."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the recorded-trace check needs it")
    from torch.profiler import ProfilerActivity, profile

    params = [torch.nn.Parameter(torch.randn(n, 3)) for n in (4, 5, 7)]
    for p in params:
        p.grad = torch.randn_like(p)
    foreach = torch.optim.AdamW(params, foreach=True)
    fused = torch.optim.AdamW(params, fused=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        foreach.step()
        fused.step()
    prof.export_chrome_trace(str(tmp_path / "adamw.json"))
    events = json.loads((tmp_path / "adamw.json").read_text())["traceEvents"]
    recorded = {e["name"]: e["args"] for e in events if e.get("name") in ("aten::_foreach_lerp_", "aten::_fused_adamw_")}
    assert set(recorded) == {"aten::_foreach_lerp_", "aten::_fused_adamw_"}, sorted(recorded)
    work = {k: op_work(k, json.dumps([a["Input Dims"], a["Input type"], a.get("Concrete Inputs"), None])) for k, a in recorded.items()}
    elements = sum(p.numel() for p in params)
    lerp = work["aten::_foreach_lerp_"]  # exp_avg.lerp_(grad, 1 - beta1): reads 2 lists, writes 1
    assert lerp is not None and lerp.nbytes == 3 * elements * 4
    adamw = work["aten::_fused_adamw_"]  # params, grads, exp_avgs, exp_avg_sqs and 3 step counters read; 3 lists written
    assert adamw is not None and adamw.nbytes == (4 * elements + len(params) + 3 * elements) * 4


def test_a_corrupt_list_is_not_modelled() -> None:
    for dims in ([[[2**40, 2**40]], []], [[[-3, 4]], []], [[["a"]], []]):
        assert op_work("aten::_foreach_add_", json.dumps([dims, ["TensorList", "Scalar"], ["", ""], None])) is None


def test_the_h200_lab_traces_fused_adamw_end_to_end() -> None:
    """The lab's H200 training trace (tests/data): each _fused_adamw_ step moves its 8 parameters'
    FP32 state as the formula says, rated against the H200's 4.8 TB/s below the roof."""
    import gzip

    from whyidle import sources
    from whyidle.analyses.links import link_launches
    from whyidle.analyses.window import select_window
    from whyidle.analyses.work import measure_work
    from whyidle.config import Config

    path = Path(__file__).parent / "data" / "h200" / "lab_h2d_cuda.pt.trace.json.gz"
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = [e for e in events if e.get("name") == "aten::_fused_adamw_"]
    params = steps[0]["args"]["Input Dims"][0]
    e = sum(math.prod(p) for p in params)
    tl = sources.load(path)
    cfg = Config()
    links = link_launches(tl)
    w = measure_work(tl, links, select_window(tl, links, cfg.window), cfg)
    (op,) = [o for o in w.ops if o.name == "aten::_fused_adamw_"]
    assert op.family == "foreach" and op.note == ASSUMED_ITEMSIZE_NOTE and op.flops == 0
    assert op.nbytes == op.count * (4 * e + len(params) + 3 * e) * 4 and op.count <= len(steps)
    assert op.bound == "memory" and op.fraction is not None and 0.3 < op.fraction <= 1.0
