"""Frame analysis: the nearest named colour of a frame's centre and of its border ring.

Why colours: test sources are synthetic solid colours (optionally framed by a border of another
colour), so "what the model sees" can be checked exactly -- a caption that says RED for the red
stream and BLUE for the blue one proves that each stream's own frames were decoded and used,
which a canned caption never could.

Frames arrive as packed RGB24 at ``FRAME_WIDTH`` x ``FRAME_HEIGHT`` (ffmpeg scales them). The
centre region is the middle quarter of each axis; the border ring is the outer ``RING`` pixels.
A mean is taken over each region and mapped to the nearest palette entry (squared RGB distance;
ties go to the earlier entry). A ring whose colour differs from the centre's is a border.
"""

from __future__ import annotations

from collections.abc import Sequence

FRAME_WIDTH = 32
FRAME_HEIGHT = 24
FRAME_BYTES = FRAME_WIDTH * FRAME_HEIGHT * 3
RING = 2  # pixels of the outer ring; the test sources' borders are wider than 1/16 of the frame

RGB = tuple[int, int, int]

PALETTE: tuple[tuple[str, RGB], ...] = (
    ("BLACK", (0, 0, 0)),
    ("WHITE", (255, 255, 255)),
    ("RED", (255, 0, 0)),
    ("GREEN", (0, 255, 0)),
    ("BLUE", (0, 0, 255)),
    ("YELLOW", (255, 255, 0)),
    ("CYAN", (0, 255, 255)),
    ("MAGENTA", (255, 0, 255)),
    ("ORANGE", (255, 128, 0)),
    ("PURPLE", (128, 0, 128)),
    ("GRAY", (128, 128, 128)),
)


def nearest(rgb: RGB) -> str:
    """The palette name closest to ``rgb``."""
    best_name, best_distance = PALETTE[0][0], -1
    for name, (r, g, b) in PALETTE:
        distance = (rgb[0] - r) ** 2 + (rgb[1] - g) ** 2 + (rgb[2] - b) ** 2
        if best_distance < 0 or distance < best_distance:
            best_name, best_distance = name, distance
    return best_name


def _mean(frame: bytes, pixels: Sequence[tuple[int, int]]) -> RGB:
    totals = [0, 0, 0]
    for x, y in pixels:
        offset = (y * FRAME_WIDTH + x) * 3
        totals[0] += frame[offset]
        totals[1] += frame[offset + 1]
        totals[2] += frame[offset + 2]
    count = max(len(pixels), 1)
    return (totals[0] // count, totals[1] // count, totals[2] // count)


def _centre_pixels() -> list[tuple[int, int]]:
    x0, x1 = FRAME_WIDTH * 3 // 8, FRAME_WIDTH * 5 // 8
    y0, y1 = FRAME_HEIGHT * 3 // 8, FRAME_HEIGHT * 5 // 8
    return [(x, y) for y in range(y0, y1) for x in range(x0, x1)]


def _ring_pixels() -> list[tuple[int, int]]:
    return [
        (x, y)
        for y in range(FRAME_HEIGHT)
        for x in range(FRAME_WIDTH)
        if x < RING or y < RING or x >= FRAME_WIDTH - RING or y >= FRAME_HEIGHT - RING
    ]


CENTRE_PIXELS = _centre_pixels()
RING_PIXELS = _ring_pixels()


def analyse(frame: bytes) -> tuple[str, str]:
    """(centre colour, border colour) of one RGB24 frame of the fixed size."""
    if len(frame) != FRAME_BYTES:
        raise ValueError(f"expected {FRAME_BYTES} bytes, got {len(frame)}")
    return nearest(_mean(frame, CENTRE_PIXELS)), nearest(_mean(frame, RING_PIXELS))


def describe(frame: bytes) -> str:
    """``"solid RED"`` or ``"RED with a BLUE border"``."""
    centre, border = analyse(frame)
    return f"solid {centre}" if centre == border else f"{centre} with a {border} border"
