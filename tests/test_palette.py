"""The colours of the causes: each one apart from every other, for colour-blind readers too.

Distances are CIEDE2000 (the CIE's colour difference, computed by colour-science) between the
colours as seen with normal vision and as simulated for deuteranopia and protanopia, the two most
common colour-vision deficiencies (Machado, Oliveira and Fernandes 2009, severity 1.0: complete
loss of the M or L cones, applied to linear sRGB).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from whyidle.catalogue import BUSY, CATALOGUE, GROUP_COLOURS, GROUPS

colour = pytest.importorskip("colour", reason="colour-science is in the test extra: pip install -e '.[test]'")

# The smallest CIEDE2000 difference allowed between two colours of the report. A difference of
# 1 is about what an observer can just tell apart on large patches side by side; the strip's
# slivers and the legend's swatches are small and seen apart, so categories need far more.
# The reference is Okabe and Ito's palette, made for colour-blind readers: its closest pair
# (orange and yellow) is 11.6 apart under simulated deuteranopia, as computed here
# (test_the_minimum_is_what_the_reference_palette_achieves). whyidle draws 17 colours on a white
# page, not 8, so it asks for 10: nearly the reference's own closest pair.
MIN_DELTA_E00 = 10.0

VISION = {"normal": None, "deuteranopia": "Deuteranomaly", "protanopia": "Protanomaly"}
OKABE_ITO = ("#000000", "#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7")
PAGE = "#ffffff"  # the report's background: an idle stretch must not vanish into it


def _lab(hexes: list[str], cvd: str | None) -> np.ndarray:
    rgb = np.array([[int(h[i : i + 2], 16) / 255 for i in (1, 3, 5)] for h in hexes])
    linear = colour.models.eotf_sRGB(rgb)
    if cvd is not None:
        linear = np.clip(linear @ colour.blindness.matrix_cvd_Machado2009(cvd, 1.0).T, 0, 1)
    xyz = colour.RGB_to_XYZ(linear, colour.RGB_COLOURSPACES["sRGB"], apply_cctf_decoding=False)
    return np.asarray(colour.XYZ_to_Lab(xyz))


def _closest(named: dict[str, str], cvd: str | None) -> tuple[float, str, str]:
    names = list(named)
    lab = _lab([named[n] for n in names], cvd)
    pairs = list(itertools.combinations(range(len(names)), 2))
    i, j = np.array(pairs).T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = np.asarray(colour.delta_E(lab[i], lab[j], method="CIE 2000"))
    k = int(np.argmin(d))
    return float(d[k]), names[pairs[k][0]], names[pairs[k][1]]


def _report_colours() -> dict[str, str]:
    return {e.key: e.colour for e in CATALOGUE} | {k: c for k, (_, c) in BUSY.items()} | {"page": PAGE}


def test_every_cause_has_its_own_colour() -> None:
    colours = [e.colour for e in CATALOGUE] + [c for _, c in BUSY.values()]
    assert len(set(colours)) == len(colours)
    assert all(GROUP_COLOURS[g] in {e.colour for e in CATALOGUE if e.group == g} for g in GROUPS)


@pytest.mark.parametrize("vision", VISION)
def test_every_pair_of_colours_is_separable(vision: str) -> None:
    d, a, b = _closest(_report_colours(), VISION[vision])
    assert d >= MIN_DELTA_E00, f"{a} and {b} are {d:.1f} apart (CIEDE2000, {vision}); the minimum is {MIN_DELTA_E00}"


def test_the_minimum_is_what_the_reference_palette_achieves() -> None:
    worst = min(_closest(dict(enumerate(OKABE_ITO)), VISION[v])[0] for v in VISION)  # type: ignore[arg-type]
    assert MIN_DELTA_E00 <= worst < MIN_DELTA_E00 + 2.5, worst
    assert _closest({"orange": "#e69f00", "yellow": "#f0e442"}, "Deuteranomaly")[0] == pytest.approx(11.6, abs=0.05)


def _lch(g: str) -> np.ndarray:
    return np.asarray(colour.Lab_to_LCHab(_lab([e.colour for e in CATALOGUE if e.group == g], None)))


def _arc(hues: list[float]) -> tuple[float, float]:
    """The shortest arc of the hue circle holding every hue: (start, length) in degrees."""
    h = sorted(x % 360 for x in hues)
    gaps = [(h[(i + 1) % len(h)] - h[i]) % 360 for i in range(len(h))]
    widest = int(np.argmax(gaps)) if len(h) > 1 else 0
    start = h[(widest + 1) % len(h)]
    return start, 360 - gaps[widest] if len(h) > 1 else 0.0


def _on(arc: tuple[float, float], hue: float) -> bool:
    return (hue - arc[0]) % 360 <= arc[1]


def test_a_groups_causes_share_a_hue_family() -> None:
    """The colours of a group lie within 40 degrees of hue (CIELab), the families of different
    groups do not overlap on the hue circle, and the unattributed causes are greys (chroma at
    most 8, where hue means little)."""
    arcs = {}
    for g in GROUPS:
        lch = _lch(g)
        if g == "unattributed":
            assert (lch[:, 1] <= 8).all(), lch
            continue
        assert (lch[:, 1] >= 30).all(), (g, lch)  # coloured enough for the hue to show
        arcs[g] = _arc(list(lch[:, 2]))
        assert arcs[g][1] <= 40, (g, lch[:, 2])
    for (g1, a1), (g2, a2) in itertools.combinations(arcs.items(), 2):
        ends = (a1[0], a1[0] + a1[1], a2[0], a2[0] + a2[1])
        overlap = _on(a2, ends[0]) or _on(a2, ends[1]) or _on(a1, ends[2]) or _on(a1, ends[3])
        assert not overlap, f"the hue families of {g1} {a1} and {g2} {a2} overlap"
