"""Timeline.name_mask and kind_name_mask against their definition, row by row."""

from __future__ import annotations

import json

import numpy as np

from whyidle.lab.synthetic import training_trace
from whyidle.sources.kineto import parse_kineto
from whyidle.timeline.model import Kind, Timeline


def _timeline() -> Timeline:
    return parse_kineto(json.dumps(training_trace("sync", steps=3)).encode(), path="t.json")


def test_name_masks_match_the_predicate_row_by_row() -> None:
    tl = _timeline()
    seen: list[str] = []

    def pred(s: str) -> bool:
        seen.append(s)
        return "a" in s

    names = [tl.strings[int(i)] for i in tl.name]
    assert tl.name_mask(pred).tolist() == ["a" in n for n in names]
    assert sorted(seen) == sorted(set(names)), "each distinct name of the rows tested once, nothing else"
    rows = np.flatnonzero(tl.kind == int(Kind.KERNEL))[::2]
    assert tl.name_mask(lambda s: "a" in s, rows).tolist() == ["a" in names[r] for r in rows.tolist()]
    for kinds in ((Kind.RUNTIME,), (Kind.CPU_OP, Kind.ANNOTATION), (Kind.KERNEL, Kind.MEMCPY, Kind.STEP)):
        seen.clear()
        want = [int(k) in {int(x) for x in kinds} and "a" in n for k, n in zip(tl.kind.tolist(), names, strict=True)]
        assert tl.kind_name_mask(pred, *kinds).tolist() == want
        assert set(seen) == {n for k, n in zip(tl.kind.tolist(), names, strict=True) if k in {int(x) for x in kinds}}, "only the names of rows of those kinds"
