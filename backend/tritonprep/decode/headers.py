"""Picture sizes read straight from the headers of PNG, GIF, BMP, WebP and TIFF files.

Both executors check these sizes against ``max_pixels`` before any decoder allocates a
pixel, and name the limit in their message (Pillow's own bomb check fires only at 179 MP
and words it its own way). JPEG has its own marker walker (:mod:`.jpeg`). Each parser
reads a few dozen bytes and also rejects files cut off before their end marker where the
format has one (PNG's IEND, WebP's RIFF length).
"""

from __future__ import annotations

import struct

from ..errors import DecodeError

_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def _need(data: bytes, n: int, fmt: str) -> None:
    if len(data) < n:
        raise DecodeError(f"truncated {fmt}: {len(data)} bytes is too short for its header")


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk; the file must end with an IEND chunk."""
    _need(data, 33, "PNG")
    if data[12:16] != b"IHDR":
        raise DecodeError("corrupt PNG: the first chunk is not IHDR")
    width, height = struct.unpack_from(">II", data, 16)
    if data.rfind(_PNG_IEND) < 0:
        raise DecodeError("truncated PNG: no IEND chunk at the end of the data")
    return width, height


def gif_size(data: bytes) -> tuple[int, int]:
    """The logical screen size (frames larger than the screen are caught after Pillow opens the file)."""
    _need(data, 13, "GIF")
    return struct.unpack_from("<HH", data, 6)


def bmp_size(data: bytes) -> tuple[int, int]:
    """Width and height from a BITMAPCOREHEADER or BITMAPINFOHEADER (and its successors)."""
    _need(data, 26, "BMP")
    header = struct.unpack_from("<I", data, 14)[0]
    if header == 12:
        return struct.unpack_from("<HH", data, 18)
    width, height = struct.unpack_from("<ii", data, 18)
    return width, abs(height)  # a negative height means top-down rows


def webp_size(data: bytes) -> tuple[int, int]:
    """The canvas (VP8X) or frame (VP8, VP8L) size; the data must hold the whole RIFF container."""
    _need(data, 30, "WebP")
    riff = struct.unpack_from("<I", data, 4)[0]
    if len(data) < 8 + riff:
        raise DecodeError(f"truncated WebP: the RIFF header announces {8 + riff} bytes, got {len(data)}")
    kind = data[12:16]
    if kind == b"VP8X":
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise DecodeError("corrupt WebP: bad VP8 frame start code")
        w, h = struct.unpack_from("<HH", data, 26)
        return w & 0x3FFF, h & 0x3FFF
    if kind == b"VP8L":
        if data[20] != 0x2F:
            raise DecodeError("corrupt WebP: bad VP8L signature")
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    raise DecodeError(f"corrupt WebP: unknown first chunk {kind!r}")


_TIFF_TYPES = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8
_TIFF_MAX_ENTRIES = 1000


def tiff_size(data: bytes) -> tuple[int, int]:
    """ImageWidth and ImageLength from the first IFD (classic and BigTIFF)."""
    _need(data, 16, "TIFF")
    order = "<" if data[:2] == b"II" else ">"
    big = struct.unpack_from(order + "H", data, 2)[0] == 43
    if big:
        ifd = struct.unpack_from(order + "Q", data, 8)[0]
        count_fmt, entry_size, value_at = "Q", 20, 12
    else:
        ifd = struct.unpack_from(order + "I", data, 4)[0]
        count_fmt, entry_size, value_at = "H", 12, 8
    count_size = struct.calcsize(count_fmt)
    if ifd + count_size > len(data):
        raise DecodeError(f"truncated or corrupt TIFF: the first IFD at byte {ifd} is past the end ({len(data)} bytes)")
    count = struct.unpack_from(order + count_fmt, data, ifd)[0]
    found: dict[int, int] = {}
    # real files have a few dozen tags; a hostile count must not make this loop long
    for i in range(min(count, _TIFF_MAX_ENTRIES, (len(data) - ifd - count_size) // entry_size)):
        entry = ifd + count_size + i * entry_size
        tag, typ = struct.unpack_from(order + "HH", data, entry)
        if tag in (256, 257) and typ in _TIFF_TYPES:
            found[tag] = struct.unpack_from(order + _TIFF_TYPES[typ], data, entry + value_at)[0]
            if len(found) == 2:
                break
    if 256 not in found or 257 not in found:
        raise DecodeError("corrupt TIFF: the first IFD has no ImageWidth/ImageLength")
    return found[256], found[257]


SIZE_READERS = {"PNG": png_size, "GIF": gif_size, "BMP": bmp_size, "WEBP": webp_size, "TIFF": tiff_size}


def header_size(data: bytes, fmt: str) -> tuple[int, int]:
    """``(width, height)`` announced by the header of a non-JPEG image of format ``fmt``."""
    try:
        return SIZE_READERS[fmt](data)
    except struct.error:
        raise DecodeError(f"truncated or corrupt {fmt} header") from None
