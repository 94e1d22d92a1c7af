"""The per-image metadata of the resize kernel: the one definition of its layout.

Each decoded image is described by an :class:`ImageMeta`: the device address of its upright
RGB uint8 pixels, then the int32 fields of :data:`META_FIELDS`, packed one row per image. The
launcher passes the field indices to NVRTC as ``-DMETA_<FIELD>=<index>`` and the row length as
``-DMETA_STRIDE``, and the CUDA source reads ``m[META_SRC_W]`` etc., so the two languages
cannot drift apart. NumPy only: importable without CuPy or a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class ImageMeta(NamedTuple):
    """How the kernel reads one image and where it writes it."""

    ptr: int  # device address of the image's first pixel (RGB, uint8)
    src_w: int  # image width in pixels
    src_h: int  # image height in pixels
    src_pitch: int  # bytes from one row to the next
    resized_w: int  # width of the whole image after the resize
    resized_h: int  # height of the whole image after the resize
    offset_x: int  # output window's left edge in the resized image (negative: pad on the left)
    offset_y: int  # output window's top edge in the resized image (negative: pad on top)
    slot: int  # index of the image in the output batch


#: the int32 fields of a metadata row, in order (everything but the pointer)
META_FIELDS: tuple[str, ...] = ImageMeta._fields[1:]


def cuda_defines() -> tuple[str, ...]:
    """NVRTC options that give the CUDA source the index of each field and the row length."""
    return (*(f"-DMETA_{name.upper()}={i}" for i, name in enumerate(META_FIELDS)), f"-DMETA_STRIDE={len(META_FIELDS)}")


def pack(images: Sequence[ImageMeta]) -> tuple[np.ndarray, np.ndarray]:
    """Host arrays of the kernel's arguments: the pointers (uint64) and the metadata rows (int32)."""
    n = len(images)
    ptrs = np.fromiter((m.ptr for m in images), dtype=np.uint64, count=n)
    meta = np.array([m[1:] for m in images], dtype=np.int32).reshape(n, len(META_FIELDS))
    return ptrs, meta
