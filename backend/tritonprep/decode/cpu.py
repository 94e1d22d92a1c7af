"""Pillow decoding on the CPU: the reference decoder and the GPU path's fallback.

Pillow (libjpeg-turbo for JPEG) is what most training pipelines decode with, so this is
also the definition of "correct pixels" that the GPU decoder is measured against.
"""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import DecodeError, ImageError, LimitExceeded
from ..spec import Limits
from . import check_dimensions, check_encoded
from .jpeg import parse_jpeg

# Pillow's own bomb check (89 MP) is looser than ours and only warns; our limit applies first.
warnings.simplefilter("ignore", Image.DecompressionBombWarning)


def validate(data: bytes, limits: Limits) -> str:
    """Check everything that can be checked without decoding; return the format name."""
    fmt = check_encoded(data, limits)
    if fmt == "JPEG":
        header = parse_jpeg(data, limits.max_progressive_scans)
        check_dimensions(header.width, header.height, limits)
    return fmt


def _to_rgb(im: Image.Image) -> Image.Image:
    """Convert any Pillow mode to 8-bit RGB (alpha dropped, 16-bit scaled, CMYK converted)."""
    if im.mode == "RGB":
        return im
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        arr = np.asarray(im)
        if im.mode.startswith("I;16"):
            arr8 = (arr.astype(np.uint32) >> 8).astype(np.uint8)
        else:  # 32-bit int or float: scale the observed range
            lo, hi = float(arr.min()), float(arr.max())
            arr8 = np.zeros(arr.shape, np.uint8) if hi <= lo else ((arr - lo) * (255.0 / (hi - lo)) + 0.5).astype(np.uint8)
        return Image.fromarray(np.repeat(arr8[..., None], 3, axis=2), "RGB")
    return im.convert("RGB")


def decode_pil(data: bytes, limits: Limits) -> Image.Image:
    """Decode ``data`` into an upright 8-bit RGB Pillow image, enforcing ``limits``."""
    fmt = validate(data, limits)
    try:
        with Image.open(io.BytesIO(data), formats=[fmt]) as im:
            check_dimensions(im.width, im.height, limits)
            im.load()
            try:
                upright = ImageOps.exif_transpose(im)
            except (ValueError, TypeError, KeyError, SyntaxError, OSError):
                upright = im  # unreadable EXIF: keep the stored orientation
            return _to_rgb(upright if upright is not None else im)
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise LimitExceeded(f"image is too large to decode ({e})") from None
    except UnidentifiedImageError:
        raise DecodeError(f"cannot decode: the bytes are not a valid {fmt} image") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as e:
        raise DecodeError(f"cannot decode {fmt} image: {e}") from None


def decode_rgb(data: bytes, limits: Limits) -> np.ndarray:
    """Decode ``data`` into a ``(H, W, 3)`` uint8 array (upright RGB)."""
    return np.asarray(decode_pil(data, limits))

