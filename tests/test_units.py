"""One duration formatter: every style writes what the formatter it replaced wrote."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from whyidle.units import CARD, CHANGE, COARSE, DEFAULT, MS, MS2, MS_CELL, format_ms, format_ns


# The formatters the styles replaced, as they were written (terminal, html cards, compare,
# counter rules, nsys rules and findings, serving/scaling/batching, the sweep table).
def _terminal(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _card(ns: float) -> str:
    return f"{ns / 1e6:.0f} ms" if 1e7 <= abs(ns) < 1e9 else _terminal(ns)


def _change(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.0f} ms" if a >= 1e7 else f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} us"


def _coarse(ns: float) -> str:
    return f"{ns / 1e9:.1f} s" if ns >= 1e9 else f"{ns / 1e6:.0f} ms"


durations = st.one_of(st.integers(-(10**13), 10**13), st.floats(-1e13, 1e13, allow_nan=False))


@given(durations)
def test_each_style_writes_what_its_old_formatter_wrote(ns: float) -> None:
    assert format_ns(ns) == format_ns(ns, DEFAULT) == _terminal(ns)
    assert format_ns(ns, CARD) == _card(ns)
    assert format_ns(ns, CHANGE) == _change(ns)
    assert format_ns(ns, MS) == format_ms(ns) == f"{ns / 1e6:.1f} ms"
    assert format_ns(ns, MS2) == f"{ns / 1e6:.2f} ms"
    assert format_ns(ns, MS_CELL) == f"{ns / 1e6:.1f}"


@given(st.integers(0, 10**13))
def test_coarse_style_for_counter_spans(ns: int) -> None:
    assert format_ns(ns, COARSE) == _coarse(ns)


def test_missing_durations_and_unit_boundaries() -> None:
    assert format_ns(None) == "n/a" and format_ns(None, MS_CELL) == "-"
    assert [format_ns(v) for v in (999, 1_000, 999_999, 1_000_000, 999_999_999, 1_000_000_000)] == [
        "999 ns", "1.0 us", "1000.0 us", "1.0 ms", "1000.0 ms", "1.00 s",
    ]  # fmt: skip
    assert [format_ns(v, CHANGE) for v in (9_999_999, 10_000_000, 400)] == ["10.0 ms", "10 ms", "0 us"]
