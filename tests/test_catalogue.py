"""The cause catalogue is complete: every cause has every attribute, a doc page and a lever, and
every table that names causes is derived from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from whyidle.analyses import causes as C
from whyidle.catalogue import BUSY, CATALOGUE, GROUP_COLOURS, GROUP_LABELS, GROUPS, CauseEntry
from whyidle.findings.labels import CAUSE_LABELS
from whyidle.findings.levers import LEVERS
from whyidle.render.html import CAUSE_COLORS

ROOT = Path(__file__).resolve().parents[1]
HEX = re.compile(r"^#[0-9a-f]{6}$")


@pytest.mark.parametrize("e", CATALOGUE, ids=lambda e: e.key)
def test_every_cause_has_every_attribute(e: CauseEntry) -> None:
    assert e.group in GROUPS and re.fullmatch(r"[a-z0-9_]+", e.cause)
    assert e.label and e.label == e.label.lower()
    assert HEX.match(e.colour)
    assert "" in e.levers, "a default lever"
    for variant, lever in e.levers.items():
        assert lever.title and lever.summary and lever.steps and lever.code and lever.verify, (e.key, variant)
        assert (ROOT / lever.docs).is_file(), lever.docs
    page = ROOT / e.docs
    assert page.is_file() and e.docs.startswith("docs/causes/")
    assert f"`{e.key}`" in page.read_text(), f"{e.docs} does not describe {e.key}"


def test_every_table_is_derived_from_the_catalogue() -> None:
    keys = [e.key for e in CATALOGUE]
    assert len(set(keys)) == len(keys)
    assert [c.key for c in C.CAUSES] == keys
    assert set(CAUSE_LABELS) == set(CAUSE_COLORS) == set(keys)
    assert {(e.cause, v) for e in CATALOGUE for v in e.levers} <= set(LEVERS)
    assert set(GROUP_LABELS) == set(GROUP_COLOURS) == set(GROUPS)
    assert {e.group for e in CATALOGUE} == set(GROUPS)
    assert [c.key for c in C.ARTIFACTS] == [e.key for e in CATALOGUE if e.artifact]


def _srgb_to_linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _simulate(hex_colour: str, m: tuple[tuple[float, ...], ...]) -> tuple[float, ...]:
    rgb = [_srgb_to_linear(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5)]
    return tuple(sum(m[r][k] * rgb[k] for k in range(3)) for r in range(3))


# Machado, Oliveira and Fernandes (2009), severity 1.0, applied to linear RGB.
_DEUTERANOPIA = ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881))
_PROTANOPIA = ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998))


@pytest.mark.parametrize("matrix", [None, _DEUTERANOPIA, _PROTANOPIA], ids=["normal", "deuteranopia", "protanopia"])
def test_group_and_busy_colours_stay_apart_under_colour_blindness(matrix: tuple[tuple[float, ...], ...] | None) -> None:
    ident = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    colours = list(GROUP_COLOURS.values()) + [c for _, c in BUSY.values()]
    sim = [_simulate(c, matrix or ident) for c in colours]
    for i in range(len(sim)):
        for j in range(i + 1, len(sim)):
            d = sum((a - b) ** 2 for a, b in zip(sim[i], sim[j])) ** 0.5
            assert d > 0.05, (colours[i], colours[j])
