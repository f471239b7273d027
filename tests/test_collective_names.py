"""A kernel is a collective by its ASCII name only: the readers' collective patterns ignore the case
of ASCII letters, never unicode's folding (under ``re.IGNORECASE`` alone a long s, U+017F, matches
``s`` and the Kelvin sign ``k``), so a foreign name is not taken for an NCCL collective, and every
reader says the same of a name (Kineto's hint test saw no hint in ``reduce_\\u017fcatter`` and
skipped its pattern; Nsight, rocprofv3 and XPlane ran theirs and called it a collective)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import whyidle
from whyidle.sources import kineto_columns, ranges, xplane
from whyidle.timeline.model import Kind

PATTERNS = {
    "kineto_columns._COLLECTIVE_RE": kineto_columns._COLLECTIVE_RE,
    "ranges.COLLECTIVE_KERNEL": ranges.COLLECTIVE_KERNEL,
    "xplane._COLLECTIVE": xplane._COLLECTIVE,
}
COLLECTIVES = ["ncclDevKernel_AllReduce_Sum_f32", "ncclKernel_SendRecv", "RCCL_reduce_scatter", "all_gather_kernel", "SENDRECV"]
# Each matches its pattern under unicode case folding: a long s for "s", the Kelvin sign for "k".
FOREIGN = ["reduce_\u017fcatter", "\u017fendrecv", "\u017fendrecv_all", "reduce_\u017fcatter_all_k", "\u017fENDRECV"]


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_the_patterns_fold_ascii_case_only(name: str) -> None:
    rx = PATTERNS[name]
    assert all(rx.search(n) for n in COLLECTIVES), name
    assert not [n for n in FOREIGN if rx.search(n)], f"{name} takes a foreign name for a collective"


@given(st.text(st.characters(min_codepoint=128, max_codepoint=0x2FFF), min_size=1, max_size=3), st.sampled_from(COLLECTIVES))
@example("\u017f", "SENDRECV")  # the long s in place of S: no hint in the name
def test_the_kineto_hints_agree_with_the_pattern_for_any_name(foreign: str, name: str) -> None:
    """The hint test is exact for non-ASCII names too: a name with no hint never matches."""
    for n in (foreign + name, name.replace("s", foreign, 1), name.replace("S", foreign, 1), foreign):
        hinted = any(h in n.lower() for h in kineto_columns._COLLECTIVE_HINTS)
        assert hinted or not kineto_columns._COLLECTIVE_RE.search(n), n


def test_a_foreign_kernel_name_is_not_a_collective_in_a_kineto_trace(tmp_path: Path) -> None:
    names = [*COLLECTIVES, *FOREIGN]
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5, "args": {"device": 0, "stream": 7}} for i, n in enumerate(names)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    tl = whyidle.load(p)
    kind = {tl.name_of(i): Kind(int(tl.kind[i])) for i in range(len(tl))}
    assert {n for n in names if kind[n] is Kind.COLLECTIVE} == set(COLLECTIVES), kind
    assert all(kind[n] is Kind.KERNEL for n in FOREIGN)
    assert re.search("s", "\u017f", re.IGNORECASE)  # the folding the patterns must not use
