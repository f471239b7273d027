"""One classifier of runtime calls, and one device-of-lane / union helper on the Timeline."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from tlbuild import TL, US
from whyidle.analyses.calls import CallKind, call_kind, is_kernel_launch, is_launch_call, queues_device_work
from whyidle.timeline.model import Kind

SRC = Path(__file__).resolve().parents[1] / "src" / "whyidle"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudaLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("cudaLaunchKernelExC", CallKind.KERNEL_LAUNCH),
        ("cuLaunchKernelEx", CallKind.KERNEL_LAUNCH),
        ("hipLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("hipExtLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("cudaGraphLaunch", CallKind.OTHER_LAUNCH),
        ("cuGraphLaunch", CallKind.OTHER_LAUNCH),
        ("cudaLaunchCooperativeKernel", CallKind.OTHER_LAUNCH),
        ("hipExtLaunchMultiKernelMultiDevice", CallKind.OTHER_LAUNCH),
        ("cudaMemcpyAsync", CallKind.COPY),
        ("cuMemcpyHtoDAsync_v2", CallKind.COPY),
        ("hipMemcpyWithStream", CallKind.COPY),
        ("cudaMemsetAsync", CallKind.MEMSET),
        ("cuMemsetD32Async", CallKind.MEMSET),
        ("cudaStreamSynchronize", CallKind.OTHER),
        ("cudaMalloc", CallKind.OTHER),
        ("aten::copy_", CallKind.OTHER),
    ],
)
def test_call_kind(name: str, kind: CallKind) -> None:
    assert call_kind(name) is kind
    assert is_kernel_launch(name) == (kind is CallKind.KERNEL_LAUNCH)
    assert is_launch_call(name) == (kind in (CallKind.KERNEL_LAUNCH, CallKind.OTHER_LAUNCH))
    assert queues_device_work(name) == (kind is not CallKind.OTHER)


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the string literals in a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)
    }
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_module_tells_launch_calls_by_name_on_its_own() -> None:
    """A launch API's name (or a pattern for one) in the code is analyses/calls.py's alone; the
    synthetic trace writer names the calls it writes."""
    api = re.compile(r"(^|[(^|\\b])(cuda|cu|hip)(Ext)?(Graph)?Launch|\|(cu|hip)\)\(Launch")
    # and advice text names the calls it tells a user to make (the levers in each idiom)
    allowed = {"analyses/calls.py", "lab/synthetic.py", "catalogue.py", "findings/advice.py", "findings/levers.py"}
    hits = [
        f"{p.relative_to(SRC).as_posix()}:{line}: {text!r}"
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC).as_posix() not in allowed
        for line, text in _strings(p)
        if api.search(text)
    ]
    assert hits == [], "use whyidle.analyses.calls"


def test_device_of_and_union() -> None:
    t = TL()
    t.work("k1", 0, 10, launch_at=-5, device=0)
    t.work("k2", 5, 20, device=1)
    t.work("k3", 30, 40, device=1)
    tl = t.build()
    assert tl.device_of().tolist() == [-1 if tl.kind[i] == int(Kind.RUNTIME) else (0 if tl.name_of(i) == "k1" else 1) for i in range(len(tl))]
    k = np.flatnonzero(tl.kind == int(Kind.KERNEL))
    assert tl.device_of(k).tolist() == [0, 1, 1]
    assert tl.device_of(np.empty(0, dtype=np.int64)).tolist() == []
    u = tl.union(k)
    assert list(zip(u.start.tolist(), u.end.tolist())) == [(0, 20 * US), (30 * US, 40 * US)]
    assert tl.union(tl.kind == int(Kind.KERNEL)).total() == u.total() == 30 * US


def test_no_module_builds_its_own_device_of_lane_table() -> None:
    hits = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "[ln.device for ln in" in p.read_text() and p.name != "model.py"]
    assert hits == [], "use Timeline.device_of"
