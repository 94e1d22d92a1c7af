"""Pillow decoding on the CPU: the reference decoder and the GPU path's fallback.

Pillow (libjpeg-turbo for JPEG) is what most training pipelines decode with, so this is
also the definition of "correct pixels" that the GPU decoder is measured against.
Multi-frame files (animated GIF, WebP and PNG, multi-page TIFF) give their first frame.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from ..errors import DecodeError, ImageError, LimitExceeded
from ..spec import Limits
from .checks import ImageHeader, check_dimensions, validate

__all__ = ["decode_pil", "decode_rgb"]

# Pillow's own bomb check (89 MP) is looser than ours and only warns; our limit applies first.
warnings.simplefilter("ignore", Image.DecompressionBombWarning)
# Pillow warns (UserWarning) about every oddity of a hostile TIFF or EXIF block; the result
# is either an image or an ImageError, so the warnings are noise in Triton's log.
warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
# A truncated file must fail, never decode to a half-gray picture.
ImageFile.LOAD_TRUNCATED_IMAGES = False

#: what Pillow raises on malformed data (besides UnidentifiedImageError and DecompressionBombError)
_PIL_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError, TypeError, struct.error, zlib.error)


def _to_rgb(im: Image.Image) -> Image.Image:
    """Convert any Pillow mode to 8-bit RGB (alpha dropped, 16-bit scaled, CMYK converted)."""
    if im.mode == "RGB":
        return im
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        arr = np.asarray(im)
        if im.mode.startswith("I;16"):
            arr8 = (arr.astype(np.uint32) >> 8).astype(np.uint8)
        else:  # 32-bit int or float: scale the observed range
            arr = arr.astype(np.float64)
            lo, hi = (float(arr.min()), float(arr.max())) if arr.size and np.isfinite(arr).all() else (0.0, 0.0)
            if hi <= lo:
                arr8 = np.zeros(arr.shape, np.uint8)
            else:
                arr8 = ((arr - lo) * (255.0 / (hi - lo)) + 0.5).astype(np.uint8)
        return Image.fromarray(np.repeat(arr8[..., None], 3, axis=2), "RGB")
    return im.convert("RGB")


def _upright(im: Image.Image) -> Image.Image:
    """Apply the EXIF orientation; an unreadable EXIF block leaves the stored orientation."""
    try:
        upright = ImageOps.exif_transpose(im)
    except (*_PIL_ERRORS, ZeroDivisionError, UnicodeDecodeError, OverflowError, RecursionError):
        return im
    return upright if upright is not None else im


def decode_pil(data: bytes, limits: Limits, header: ImageHeader | None = None) -> Image.Image:
    """Decode ``data`` into an upright 8-bit RGB Pillow image, enforcing ``limits``.

    ``header`` is what :func:`~tritonprep.decode.checks.validate` returned for ``data``, where the
    caller has already validated it; otherwise it is validated here.
    """
    fmt = (header or validate(data, limits)).format
    try:
        with Image.open(io.BytesIO(data), formats=[fmt]) as im:
            check_dimensions(im.width, im.height, limits)  # a GIF frame may be larger than its screen
            im.load()
            return _to_rgb(_upright(im))
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise LimitExceeded(f"image is too large to decode (limit max_pixels={limits.max_pixels}): {e}") from None
    except UnidentifiedImageError:
        raise DecodeError(f"cannot decode: the bytes are not a valid {fmt} image") from None
    except _PIL_ERRORS as e:
        raise DecodeError(f"cannot decode {fmt} image: {e}") from None


def decode_rgb(data: bytes, limits: Limits, header: ImageHeader | None = None) -> np.ndarray:
    """Decode ``data`` into a C-contiguous ``(H, W, 3)`` uint8 array (upright RGB)."""
    return np.ascontiguousarray(np.asarray(decode_pil(data, limits, header)))
