"""The Timeline's row order: by start, longest first on ties, as ``np.lexsort`` orders them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from whyidle.timeline.build import start_order


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=80))
def test_start_order_is_lexsort(rows: list[tuple[int, int]]) -> None:
    start = np.array([s for s, _ in rows], dtype=np.int64)
    end = start + np.array([d for _, d in rows], dtype=np.int64)
    assert start_order(start, end).tolist() == np.lexsort((start - end, start)).tolist()
