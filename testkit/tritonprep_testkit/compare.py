"""References and tolerances for comparing the executors' outputs with each other and with Pillow."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """(fraction of values within 1 of each other, max |a - b|) of two arrays on the uint8 scale."""
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float((d <= 1.0 + 1e-3).mean()), int(np.ceil(d.max() - 1e-3))


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Mean |a - b| of two arrays."""
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).mean())


def reference_pixels(data: bytes) -> np.ndarray:
    """Independent reference for the shipped preprocess config: written from torchvision's documented
    semantics (Resize(256) on the shorter side, CenterCrop(224)) with Pillow + NumPy only, normalized
    as (pixel - 127) / 128, CHW."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = im.size
    if w <= h:
        size = (256, int(256 * h / w))
    else:
        size = (int(256 * w / h), 256)
    im = im.resize(size, Image.Resampling.BILINEAR)
    top = int(round((size[1] - 224) / 2.0))
    left = int(round((size[0] - 224) / 2.0))
    crop = np.asarray(im, dtype=np.float32)[top : top + 224, left : left + 224]
    return ((crop - 127.0) / 128.0).transpose(2, 0, 1)
