"""The colour palette shared by the publisher app (inside its container) and the frame probe.

Why one module: a published source is asked for by name ("RED") and verified by decoding a frame
and naming the nearest palette entry; if the two sides disagreed on what "ORANGE" is, a correct
stream would read back wrong. This module is stdlib-only because it is copied into the publisher
image, whose Python has nothing else.
"""

from __future__ import annotations

import math
import re

RGB = tuple[int, int, int]

PALETTE: dict[str, RGB] = {
    "BLACK": (0, 0, 0),
    "WHITE": (255, 255, 255),
    "RED": (255, 0, 0),
    "GREEN": (0, 255, 0),
    "BLUE": (0, 0, 255),
    "YELLOW": (255, 255, 0),
    "CYAN": (0, 255, 255),
    "MAGENTA": (255, 0, 255),
    "ORANGE": (255, 128, 0),
    "PURPLE": (128, 0, 128),
    "GRAY": (128, 128, 128),
}
_HEX = re.compile(r"^#([0-9A-Fa-f]{6})$")


class UnknownColour(ValueError):
    """Neither a palette name nor ``#RRGGBB``."""


def parse_colour(text: str) -> RGB:
    """A palette name (any case) or ``#RRGGBB`` as an RGB triple."""
    name = text.strip().upper()
    if name in PALETTE:
        return PALETTE[name]
    match = _HEX.match(text.strip())
    if match is None:
        raise UnknownColour(
            f"unknown colour {text!r}: use #RRGGBB or one of {', '.join(PALETTE)}"
        )
    value = int(match.group(1), 16)
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


def argb_hex(rgb: RGB) -> str:
    """GStreamer's ``foreground-color`` form: opaque ``0xFFRRGGBB``."""
    red, green, blue = rgb
    return f"0xFF{red:02X}{green:02X}{blue:02X}"


def nearest(rgb: tuple[float, float, float]) -> tuple[str, float]:
    """The palette name closest to ``rgb`` (Euclidean in RGB) and its distance."""
    best = min(PALETTE, key=lambda name: math.dist(PALETTE[name], rgb))
    return best, math.dist(PALETTE[best], rgb)
