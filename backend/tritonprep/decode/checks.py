"""Checks that need no decoding: signature, allowed format, encoded size and the picture size
announced by the header, against the model's :class:`~tritonprep.spec.Limits`.

Both executors call :func:`validate` before a decoder sees the bytes, and use the
:class:`ImageHeader` it returns (a JPEG's components and EXIF orientation decide whether
the GPU decoder may take it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DecodeError, LimitExceeded, UnsupportedFormat
from ..spec import Limits
from .headers import J2K_MAGIC, JP2_MAGIC, header_info
from .jpeg import JpegHeader, parse_jpeg

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (J2K_MAGIC, "JPEG2000"),
    (JP2_MAGIC, "JPEG2000"),
)


@dataclass(frozen=True)
class ImageHeader:
    """What the checks read from an image without decoding it."""

    format: str
    width: int
    height: int
    #: the marker walk's findings, for a JPEG
    jpeg: JpegHeader | None = None
    #: for TIFF and JPEG 2000: whether the GPU decoders give Pillow's pixels for it (see :mod:`.headers`)
    gpu_decodable: bool = False


def sniff_format(data: bytes) -> str | None:
    """Return the container format named by the first bytes of ``data``, or None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def check_encoded(data: bytes, limits: Limits) -> str:
    """Apply the checks that need no parsing; return the sniffed format name."""
    if not data:
        raise DecodeError("empty input: the image has 0 bytes")
    if len(data) > limits.max_encoded_bytes:
        raise LimitExceeded(
            f"encoded image is {len(data)} bytes, over the limit max_encoded_bytes={limits.max_encoded_bytes}"
        )
    fmt = sniff_format(data)
    if fmt is None:
        head = data[:8].hex(" ")
        raise DecodeError(
            f"not a supported image: unknown file signature ({head}); send JPEG, PNG, WebP, BMP, GIF, TIFF or JPEG 2000"
        )
    if fmt not in limits.allowed_formats:
        raise UnsupportedFormat(
            f"image format {fmt} is not allowed here (allowed_formats: {','.join(limits.allowed_formats)})"
        )
    return fmt


def validate(data: bytes, limits: Limits) -> ImageHeader:
    """Check everything that can be checked without decoding; return what the header says.

    Size, signature and allowed format; for JPEG the marker structure (end marker, scan
    count); for every format the picture size announced by the header against
    ``max_pixels``, and the end of the file where the format marks it.
    """
    fmt = check_encoded(data, limits)
    if fmt == "JPEG":
        jpeg = parse_jpeg(data, limits.max_progressive_scans)
        header = ImageHeader(fmt, jpeg.width, jpeg.height, jpeg)
    else:
        info = header_info(data, fmt)
        header = ImageHeader(fmt, info.width, info.height, gpu_decodable=info.gpu)
    check_dimensions(header.width, header.height, limits)
    return header


def check_dimensions(width: int, height: int, limits: Limits) -> None:
    """Reject images whose header announces an empty or oversized picture."""
    if width < 1 or height < 1:
        raise DecodeError(f"image header announces an empty picture ({width}x{height})")
    if width * height > limits.max_pixels:
        raise LimitExceeded(
            f"image is {width}x{height} = {width * height} pixels, over the limit max_pixels={limits.max_pixels}"
        )
