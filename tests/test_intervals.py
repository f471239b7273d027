"""The interval algebra against a brute-force model (a boolean array over a small integer range)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from whyidle.timeline.intervals import Intervals

N = 60
raw_intervals = st.lists(st.tuples(st.integers(0, N), st.integers(0, N)), max_size=12)


def build(pairs: list[tuple[int, int]]) -> Intervals:
    return Intervals.union_of([a for a, _ in pairs], [b for _, b in pairs])


def mask(pairs: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(N, dtype=bool)
    for a, b in pairs:
        if b > a:
            m[a:b] = True
    return m


def to_mask(iv: Intervals) -> np.ndarray:
    m = np.zeros(N, dtype=bool)
    for a, b in zip(iv.start, iv.end):
        m[a:b] = True
    return m


def is_normalised(iv: Intervals) -> bool:
    return bool((iv.end > iv.start).all() and (iv.start[1:] > iv.end[:-1]).all())


@given(raw_intervals)
def test_union_matches_model_and_is_normalised(pairs: list[tuple[int, int]]) -> None:
    iv = build(pairs)
    assert is_normalised(iv)
    assert np.array_equal(to_mask(iv), mask(pairs))
    assert iv.total() == int(mask(pairs).sum())


@settings(max_examples=200)
@given(raw_intervals, raw_intervals)
def test_set_operations_match_model(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    A, B = build(a), build(b)
    ma, mb = mask(a), mask(b)
    for got, want in ((A & B, ma & mb), (A | B, ma | mb), (A - B, ma & ~mb)):
        assert is_normalised(got)
        assert np.array_equal(to_mask(got), want)


@settings(max_examples=200)
@given(st.integers(0, N), st.integers(0, N), raw_intervals)
def test_one_interval_minus_a_set_matches_model(lo: int, hi: int, b: list[tuple[int, int]]) -> None:
    # One interval minus a set takes its own path (the set's gaps inside it).
    A, B = Intervals.single(lo, hi), build(b)
    want = mask([(lo, hi)]) & ~mask(b)
    got = A - B
    assert is_normalised(got)
    assert np.array_equal(to_mask(got), want)


@given(raw_intervals, st.integers(0, N), st.integers(0, N))
def test_complement_and_clip(pairs: list[tuple[int, int]], lo: int, hi: int) -> None:
    iv = build(pairs)
    window = np.zeros(N, dtype=bool)
    window[lo:hi] = True
    assert np.array_equal(to_mask(iv.complement(lo, hi)), window & ~mask(pairs))
    assert np.array_equal(to_mask(iv.clip(lo, hi)), window & mask(pairs))


@given(raw_intervals, st.lists(st.tuples(st.integers(-5, N + 5), st.integers(-5, N + 5)), min_size=1, max_size=8))
def test_overlap_and_contains(pairs: list[tuple[int, int]], queries: list[tuple[int, int]]) -> None:
    iv = build(pairs)
    m = mask(pairs)
    lo = np.array([q[0] for q in queries])
    hi = np.array([q[1] for q in queries])
    got = iv.overlap(lo, hi)
    for k, (a, b) in enumerate(queries):
        a_, b_ = max(a, 0), min(b, N)
        want = int(m[a_:b_].sum()) if b_ > a_ else 0
        assert got[k] == want
    pts = np.arange(-3, N + 3)
    inside = iv.contains(pts)
    for x, flag in zip(pts, inside):
        assert flag == (0 <= x < N and bool(m[x]))


def test_touching_intervals_merge_and_empty_ones_vanish() -> None:
    iv = Intervals.union_of([0, 5, 9], [5, 7, 9])
    assert iv.start.tolist() == [0] and iv.end.tolist() == [7]
    assert len(Intervals.union_of([], [])) == 0


_WIDE = st.integers(-(2**62), 2**62)
_NARROW = st.integers(-(2**62), 2**62).flatmap(lambda base: st.integers(base - 300, base + 300))  # counted in a table


@given(st.one_of(st.lists(_WIDE, max_size=40), st.lists(_NARROW, max_size=40)), st.lists(_WIDE, max_size=40), st.sampled_from([np.int64, np.int32, np.int8]))
def test_sort_based_set_helpers_match_numpy(a: list[int], b: list[int], dtype: type) -> None:
    from whyidle.timeline.arrays import setdiff_sorted, unique_inverse, unique_sorted

    info = np.iinfo(dtype)
    x = np.array([v % (int(info.max) - int(info.min) + 1) + int(info.min) for v in a] if dtype is not np.int64 else a, dtype=dtype)
    y = np.array(b, dtype=np.int64).astype(dtype)
    assert np.array_equal(unique_sorted(x), np.unique(x)) and unique_sorted(x).dtype == x.dtype
    u, inv = unique_inverse(x)
    nu, ninv = np.unique(x, return_inverse=True)
    assert np.array_equal(u, nu) and np.array_equal(inv, ninv.ravel()) and u.dtype == x.dtype
    assert np.array_equal(setdiff_sorted(x, y), np.setdiff1d(x, y))



@given(st.one_of(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=40), st.lists(st.floats(-1e12, 1e12), min_size=1, max_size=40)))
def test_the_partition_median_is_numpys(a: list[float]) -> None:
    from whyidle.timeline.arrays import median

    x = np.array(a)
    assert median(x) == float(np.median(x)) and median(a) == median(x)


def test_the_partition_median_imports_no_numpy_ma() -> None:
    """np.median of floats imports numpy.ma (6-15 ms) to ask whether the array is masked."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import whyidle

    code = "import sys, numpy as np; from whyidle.timeline.arrays import median; x = np.arange(5.0); m = median(x); print('numpy.ma' in sys.modules, m)"
    env = {**os.environ, "PYTHONPATH": str(Path(whyidle.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60)
    assert out.stdout.split() == ["False", "2.0"]
