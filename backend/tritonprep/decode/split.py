"""Which decoder takes an image, by a hash of its bytes: the deterministic splits of a call's JPEGs between
decoders (the GPU executor's ``cpu_decoder_share`` for Pillow, ``hw_decoder_share`` inside the GPU decoders).

Each split reads its own digits of one CRC-32 of the image's last 256 bytes, so the two shares do not skew each
other: the hardware decoder's share of what the GPU decodes stays ``hw_decoder_share`` whatever Pillow takes.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from .checks import ImageHeader

#: the fewest JPEGs a call's GPU decoders would take for ``cpu_decoder_share`` to apply: a smaller call waits on
#: the GPU decoders alone
CPU_SHARE_MIN_IMAGES = 8


def hardware_bucket(data: bytes) -> int:
    """The image's place in 0..999 for ``hw_decoder_share`` (the hardware decoder takes those below its cut)."""
    return zlib.crc32(data[-256:]) % 1000


def cpu_bucket(data: bytes) -> int:
    """The image's place in 0..999 for ``cpu_decoder_share`` (Pillow takes those below its cut)."""
    return zlib.crc32(data[-256:]) // 1000 % 1000


def cpu_share(
    images: Sequence[bytes], headers: Mapping[int, ImageHeader], candidates: Sequence[int], share: float
) -> list[int]:
    """The JPEGs among ``candidates`` (the indices the GPU decoders would take) that ``share`` gives Pillow: none in
    a call of fewer than ``CPU_SHARE_MIN_IMAGES`` such JPEGs; else each whose :func:`cpu_bucket` is below the cut."""
    cut = round(share * 1000)
    if not cut:  # share 0, the default: no list of JPEGs built on every call
        return []
    jpegs = [i for i in candidates if headers[i].format == "JPEG"]
    if len(jpegs) < CPU_SHARE_MIN_IMAGES:
        return []
    return [i for i in jpegs if cpu_bucket(images[i]) < cut]
