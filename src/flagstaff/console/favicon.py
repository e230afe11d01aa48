"""``/favicon.ico``: a small flag of our own, drawn here as a 32x32 icon (no binary file)."""

from __future__ import annotations

import struct
from functools import cache

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

SIZE = 32
POLE = (0x23, 0x1F, 0x1D, 0xFF)  # BGRA: the console's ink
CLOTH = (0xBF, 0x5F, 0x1F, 0xFF)  # the console's accent blue
CLEAR = (0, 0, 0, 0)


def _pixel(x: int, y: int) -> tuple[int, int, int, int]:
    """The colour at (x, y), y from the top: a pole on the left, a pennant on its upper half."""
    if 6 <= x <= 8 and 3 <= y <= 29:
        return POLE
    if 9 <= x <= 27 and 4 <= y <= 17:
        depth = 9 + (27 - 9) * (1 - abs(y - 10.5) / 7)  # a pennant narrowing to a point
        return CLOTH if x <= depth else CLEAR
    return CLEAR


@cache
def icon() -> bytes:
    """An ICO file holding one 32-bit BMP image (bottom-up rows, then an empty AND mask)."""
    pixels = b"".join(bytes(_pixel(x, y)) for y in reversed(range(SIZE)) for x in range(SIZE))
    mask = bytes(SIZE * SIZE // 8)
    header = struct.pack("<IiiHHIIiiII", 40, SIZE, SIZE * 2, 1, 32, 0, len(pixels), 0, 0, 0, 0)
    image = header + pixels + mask
    directory = struct.pack("<HHH", 0, 1, 1) + struct.pack(
        "<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(image), 6 + 16
    )
    return directory + image


def favicon_routes() -> list[BaseRoute]:
    async def favicon(request: Request) -> Response:
        return Response(
            icon(), media_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"}
        )

    return [Route("/favicon.ico", favicon, methods=["GET"])]
