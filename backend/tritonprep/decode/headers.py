"""Picture sizes read straight from the headers of PNG, GIF, BMP, WebP, TIFF and JPEG 2000 files.

Both executors check these sizes against ``max_pixels`` before any decoder allocates a
pixel, and name the limit in their message (Pillow's own bomb check fires only at 179 MP
and words it its own way). JPEG has its own marker walker (:mod:`.jpeg`). Each parser
reads a few dozen bytes and also rejects files cut off before their end marker where the
format has one (PNG's IEND, WebP's RIFF length, JPEG 2000's EOC: a cut-off JPEG 2000
codestream would otherwise decode, silently, to a blurrier picture).

For TIFF and JPEG 2000, :func:`header_info` also says whether the GPU's decoders (nvTIFF,
nvJPEG2000 through nvImageCodec) may take the file: only the plain cases where they give
Pillow's pixels (8-bit gray or RGB, no EXIF orientation to apply, compressions they decode
exactly); everything else is decoded by Pillow.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import DecodeError


class HeaderInfo(NamedTuple):
    """What a header says: the picture size and whether the GPU decoders may take the file."""

    width: int
    height: int
    gpu: bool = False


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
#: the first IFD's tags read: ImageWidth, ImageLength, BitsPerSample, Compression, Photometric,
#: Orientation, SamplesPerPixel, PlanarConfiguration, Predictor
_TIFF_TAGS = {256: "width", 257: "height", 258: "bits", 259: "compression", 262: "photometric",
              274: "orientation", 277: "samples", 284: "planar", 317: "predictor"}  # fmt: skip
#: compressions nvTIFF decodes itself, losslessly (none, LZW): the same pixels as Pillow. Deflate needs nvCOMP
#: beside it and JPEG-in-TIFF decodes through nvJPEG (not libjpeg's pixels): Pillow takes those
_TIFF_GPU_COMPRESSIONS = {1, 5}


def tiff_info(data: bytes) -> HeaderInfo:
    """ImageWidth and ImageLength from the first IFD (classic and BigTIFF), and whether nvTIFF may decode it."""
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
    found: dict[str, int] = {}
    # real files have a few dozen tags; a hostile count must not make this loop long
    for i in range(min(count, _TIFF_MAX_ENTRIES, (len(data) - ifd - count_size) // entry_size)):
        entry = ifd + count_size + i * entry_size
        tag, typ, values = struct.unpack_from(order + "HH" + ("Q" if big else "I"), data, entry)
        if tag not in _TIFF_TAGS or typ not in _TIFF_TYPES:
            continue
        if tag == 258 and values > 1:  # BitsPerSample of each sample: 8 only if every one is 8
            found["bits"] = 8 if set(_tiff_shorts(data, order, big, entry + value_at, values)) == {8} else 0
        else:
            found[_TIFF_TAGS[tag]] = struct.unpack_from(order + _TIFF_TYPES[typ], data, entry + value_at)[0]
    if "width" not in found or "height" not in found:
        raise DecodeError("corrupt TIFF: the first IFD has no ImageWidth/ImageLength")
    gpu = (
        found.get("compression", 1) in _TIFF_GPU_COMPRESSIONS
        and found.get("bits", 1) == 8
        and (found.get("samples", 1), found.get("photometric")) in ((3, 2), (1, 1))
        and found.get("planar", 1) == 1
        and found.get("orientation", 1) == 1
        and found.get("predictor", 1) == 1
    )
    return HeaderInfo(found["width"], found["height"], gpu)


def _tiff_shorts(data: bytes, order: str, big: bool, at: int, count: int) -> tuple[int, ...]:
    """``count`` SHORT values of an IFD entry whose value field is at ``at``: inline if they fit, else at its offset."""
    count = min(count, 16)
    if count * 2 > (8 if big else 4):
        at = struct.unpack_from(order + ("Q" if big else "I"), data, at)[0]
    return struct.unpack_from(order + "H" * count, data, at)


def tiff_size(data: bytes) -> tuple[int, int]:
    """ImageWidth and ImageLength from the first IFD (classic and BigTIFF)."""
    info = tiff_info(data)
    return info.width, info.height


#: a JPEG 2000 codestream starts with SOC and SIZ; a JP2 file with its signature box
J2K_MAGIC = b"\xff\x4f\xff\x51"
JP2_MAGIC = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
_J2K_EOC = b"\xff\xd9"
_JP2_MAX_BOXES = 64


def _j2k_codestream(data: bytes, start: int) -> HeaderInfo:
    """The SIZ marker segment of the codestream at ``start``: the image area and its components."""
    _need(data, start + 42, "JPEG 2000")
    if data[start : start + 4] != J2K_MAGIC:
        raise DecodeError("corrupt JPEG 2000: the codestream does not start with SOC and SIZ")
    xsiz, ysiz, xosiz, yosiz = struct.unpack_from(">IIII", data, start + 8)
    (components,) = struct.unpack_from(">H", data, start + 40)
    if not 1 <= components <= 16384 or xosiz > xsiz or yosiz > ysiz:
        raise DecodeError(f"corrupt JPEG 2000: SIZ announces {components} components, origin past the image")
    _need(data, start + 42 + 3 * components, "JPEG 2000")
    comps = [struct.unpack_from(">BBB", data, start + 42 + 3 * c) for c in range(components)]
    plain = components in (1, 3) and all(ssiz == 7 and dx == 1 and dy == 1 for ssiz, dx, dy in comps)
    return HeaderInfo(xsiz - xosiz, ysiz - yosiz, plain)  # 8-bit unsigned (Ssiz 7), no subsampled components


def jpeg2000_info(data: bytes) -> HeaderInfo:
    """The picture size from a J2K codestream's SIZ marker, or from a JP2 file's codestream (its ``jp2c`` box,
    after the ``ihdr`` box of its header has been found); the data must end with the codestream's EOC."""
    if not data.rstrip(b"\x00").endswith(_J2K_EOC):
        raise DecodeError("truncated JPEG 2000: the codestream does not end with its EOC marker")
    if data.startswith(J2K_MAGIC):
        return _j2k_codestream(data, 0)
    pos, header = 0, None
    for _ in range(_JP2_MAX_BOXES):  # boxes: length, type, [extended length], body
        _need(data, pos + 8, "JPEG 2000")
        length, kind = struct.unpack_from(">I4s", data, pos)
        body = pos + 8
        if length == 1:
            _need(data, pos + 16, "JPEG 2000")
            length, body = struct.unpack_from(">Q", data, pos + 8)[0], pos + 16
        end = len(data) if length == 0 else pos + length
        if end > len(data) or end < body:
            raise DecodeError(f"truncated JPEG 2000: box {kind!r} runs past the end of the data")
        if kind == b"jp2h":
            _need(data, body + 22, "JPEG 2000")
            if data[body + 4 : body + 8] != b"ihdr":
                raise DecodeError("corrupt JPEG 2000: the JP2 header does not start with its ihdr box")
            height, width = struct.unpack_from(">II", data, body + 8)
            header = (width, height)
        elif kind == b"jp2c":
            if header is None:
                raise DecodeError("corrupt JPEG 2000: the codestream comes before the JP2 header")
            info = _j2k_codestream(data, body)
            if (info.width, info.height) != header:
                raise DecodeError(
                    f"corrupt JPEG 2000: ihdr says {header[0]}x{header[1]}, the codestream {info.width}x{info.height}"
                )
            return info
        if end >= len(data):
            break
        pos = end
    raise DecodeError("corrupt JPEG 2000: no codestream (jp2c box) in the JP2 file")


def jpeg2000_size(data: bytes) -> tuple[int, int]:
    """Width and height of a JPEG 2000 image (J2K codestream or JP2 file)."""
    info = jpeg2000_info(data)
    return info.width, info.height


SIZE_READERS = {
    "PNG": png_size,
    "GIF": gif_size,
    "BMP": bmp_size,
    "WEBP": webp_size,
    "TIFF": tiff_size,
    "JPEG2000": jpeg2000_size,
}
#: the readers that also judge whether the GPU decoders may take the file
INFO_READERS = {"TIFF": tiff_info, "JPEG2000": jpeg2000_info}


def header_info(data: bytes, fmt: str) -> HeaderInfo:
    """What the header of a non-JPEG image of format ``fmt`` announces (see :class:`HeaderInfo`)."""
    try:
        if fmt in INFO_READERS:
            return INFO_READERS[fmt](data)
        return HeaderInfo(*SIZE_READERS[fmt](data))
    except struct.error:
        raise DecodeError(f"truncated or corrupt {fmt} header") from None


def header_size(data: bytes, fmt: str) -> tuple[int, int]:
    """``(width, height)`` announced by the header of a non-JPEG image of format ``fmt``."""
    info = header_info(data, fmt)
    return info.width, info.height
