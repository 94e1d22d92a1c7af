"""A JPEG marker walker: reads what the limits need without decoding a pixel.

It walks the header segments to the frame header (size, components, progressive or not)
and the first scan, then counts the scans and insists on the end-of-image marker, so that
both executors reject the same inputs before any decoder sees them: oversized frames,
progressive files with too many scans (a known CPU-exhaustion vector), and truncated files
that decoders would otherwise fill with gray.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DecodeError, LimitExceeded

_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
_SOS, _EOI, _APP1 = 0xDA, 0xD9, 0xE1
#: markers without a length field: end of image, restart markers, TEM
_NO_LENGTH = frozenset((_EOI, 0x01, *range(0xD0, 0xD8)))
#: the segments the walk reads; every other one is skipped by its length
_INSPECT = _SOF | {_SOS, _APP1}
_ORIENTATION_TAG = 0x0112


@dataclass(frozen=True)
class JpegHeader:
    """What the marker walk found."""

    width: int
    height: int
    components: int
    progressive: bool
    scans: int
    #: EXIF orientation 1..8 when the file has a well-formed one, 1 when it has no EXIF
    #: orientation, None when its EXIF block is malformed or its orientation entry is not a
    #: SHORT in 1..8: decoders disagree on such files (Pillow ignores the entry, nvImageCodec
    #: may apply it), so the GPU executor hands them to Pillow, like the CPU executor
    orientation: int | None = 1


def parse_jpeg(data: bytes, max_scans: int) -> JpegHeader:
    """Walk the markers of ``data`` (which starts with SOI) and validate its structure."""
    # Runs for every image before any decoding, so the loop is kept lean: bytes are read by
    # index (no slices), and one set lookup sends the common segments (tables, APPn other than
    # a first Exif, comments) straight to the next marker.
    n = len(data)
    pos = 2
    frame: tuple[int, int, int, bool] | None = None
    scans = 0
    orientation: int | None = 1
    seen_exif = False
    while True:
        marker, pos = _next_marker(data, pos, n)
        if marker in _NO_LENGTH:
            if marker == _EOI:
                break
            continue
        length = _segment_length(data, pos, n, marker)
        if marker not in _INSPECT:
            pos += length
            continue
        if marker == _SOS:
            if frame is None:
                raise DecodeError("corrupt JPEG: scan before any frame header")
            scans = _count_scans(data, pos + length, frame[3], max_scans)
            break
        if marker != _APP1:
            frame = _frame_header(data, pos, length, marker, frame)
        elif not seen_exif and data.startswith(b"Exif\x00\x00", pos + 2):
            seen_exif = True  # decoders read the first Exif APP1 only
            orientation = exif_orientation(data[pos + 8 : pos + length])
        pos += length
    if frame is None or scans == 0:
        raise DecodeError("corrupt JPEG: no frame or no scan before the end-of-image marker")
    width, height, components, progressive = frame
    return JpegHeader(width, height, components, progressive, scans, orientation)


def _next_marker(data: bytes, pos: int, n: int) -> tuple[int, int]:
    """``(marker code, position after it)`` of the marker at ``pos`` (fill bytes skipped)."""
    if pos >= n:
        raise DecodeError("truncated JPEG: no end-of-image marker")
    if data[pos] != 0xFF:
        raise DecodeError(f"corrupt JPEG: expected a marker at byte {pos}, found 0x{data[pos]:02x}")
    pos += 1
    while pos < n and data[pos] == 0xFF:  # fill bytes before the marker code
        pos += 1
    if pos >= n:
        raise DecodeError("truncated JPEG: no end-of-image marker")
    return data[pos], pos + 1


def _segment_length(data: bytes, pos: int, n: int, marker: int) -> int:
    """The length of the segment whose length field starts at ``pos`` (it must lie inside the data)."""
    if pos + 2 > n:
        raise DecodeError(f"truncated JPEG: segment 0xFF{marker:02X} at byte {pos - 2} is cut off")
    length = data[pos] << 8 | data[pos + 1]
    if length < 2 or pos + length > n:
        raise DecodeError(f"truncated or corrupt JPEG: segment 0xFF{marker:02X} at byte {pos - 2} has length {length}")
    return length


def _frame_header(
    data: bytes, pos: int, length: int, marker: int, seen: tuple[int, int, int, bool] | None
) -> tuple[int, int, int, bool]:
    """``(width, height, components, progressive)`` of the frame header at ``pos``; only one may exist."""
    if seen is not None:
        raise DecodeError(f"corrupt JPEG: a second frame header (0xFF{marker:02X}) at byte {pos - 2}")
    if length < 8:
        raise DecodeError("corrupt JPEG: frame header too short")
    height = data[pos + 3] << 8 | data[pos + 4]
    width = data[pos + 5] << 8 | data[pos + 6]
    return width, height, data[pos + 7], marker in _PROGRESSIVE


def _count_scans(data: bytes, pos: int, progressive: bool, max_scans: int) -> int:
    """The scans of the image whose first scan's data starts at ``pos``; checks the limit and the end marker.

    Past the first scan header, search instead of walking the entropy-coded data: there a 0xFF byte is
    always followed by 0x00 (stuffing), a restart marker or a real marker, so every 0xFFDA is a scan
    header and 0xFFD9 only appears as the end of the image. Scans are counted for progressive files only
    (each scan makes the decoder revisit every coefficient: the known CPU-exhaustion vector); a sequential
    file's extra scans cost nothing extra. (A Huffman table between progressive scans could hold the byte
    pair 0xFFDA; that only over-counts, conservatively.)
    """
    scans = 1 + data.count(b"\xff\xda", pos) if progressive else 1
    if scans > max_scans:
        raise LimitExceeded(f"progressive JPEG has {scans} scans, over the limit max_progressive_scans={max_scans}")
    if data.rfind(b"\xff\xd9", pos) < 0:
        raise DecodeError("truncated JPEG: the data ends before the end-of-image marker")
    return scans


def exif_orientation(tiff: bytes) -> int | None:
    """The orientation of a TIFF-structured EXIF block: 1..8, 1 without the entry, None if malformed.

    Strict on purpose: only a clean IFD0 whose orientation entry (0x0112) is one SHORT in
    1..8 counts; anything else (bad byte order or magic, IFD0 outside the block, entries cut
    off, another type or count, an out-of-range value) is None.
    """
    if len(tiff) < 8 or tiff[:4] not in (b"II*\x00", b"MM\x00*"):
        return None
    order = "little" if tiff[0] == 0x49 else "big"
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd < 8 or ifd + 2 > len(tiff):
        return None
    count = int.from_bytes(tiff[ifd : ifd + 2], order)
    if ifd + 2 + 12 * count > len(tiff):
        return None
    for k in range(count):
        e = ifd + 2 + 12 * k
        if int.from_bytes(tiff[e : e + 2], order) != _ORIENTATION_TAG:
            continue
        kind = int.from_bytes(tiff[e + 2 : e + 4], order)
        n = int.from_bytes(tiff[e + 4 : e + 8], order)
        value = int.from_bytes(tiff[e + 8 : e + 10], order)
        return value if kind == 3 and n == 1 and 1 <= value <= 8 else None
    return 1
