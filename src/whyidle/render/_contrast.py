"""Text on coloured chips: the ink (white or the page's) with the higher WCAG 2 contrast."""

from __future__ import annotations

__all__ = ["ink", "chip_style", "INK_DARK"]

INK_DARK = "#1d2330"  # the HTML page's text colour (--ink)


def _luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance of an sRGB colour (``#rrggbb`` or ``#rgb``)."""
    if len(hex_colour) == 4:
        hex_colour = "#" + "".join(c * 2 for c in hex_colour[1:])
    lin = [(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4) for c in (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def ink(background: str) -> str:
    """The text colour (white or the page's ink) with the higher WCAG contrast on a chip of
    ``background``: light causes (yellows, light greys) take dark text."""
    y = _luminance(background)
    return "#fff" if 1.05 / (y + 0.05) >= (y + 0.05) / (_luminance(INK_DARK) + 0.05) else INK_DARK


def chip_style(colour: str) -> str:
    return f"--c:{colour};--ci:{ink(colour)}"
