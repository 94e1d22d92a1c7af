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


def reference_pixels(
    data: bytes, shorter: int = 256, crop: int = 224, mean: float = 127.0, std: float = 128.0
) -> np.ndarray:
    """Independent reference for a shorter-side-crop output (the shipped config's: shorter side 256, crop 224):
    written from torchvision's documented semantics (Resize(shorter) on the shorter side, CenterCrop(crop)) with
    Pillow + NumPy only, bilinear, normalized as (pixel - mean) / std, CHW."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = im.size
    if w <= h:
        size = (shorter, int(shorter * h / w))
    else:
        size = (int(shorter * w / h), shorter)
    im = im.resize(size, Image.Resampling.BILINEAR)
    top = int(round((size[1] - crop) / 2.0))
    left = int(round((size[0] - crop) / 2.0))
    pixels = np.asarray(im, dtype=np.float32)[top : top + crop, left : left + crop]
    return ((pixels - mean) / std).transpose(2, 0, 1)


def ultralytics_letterbox(img: np.ndarray, new_shape: tuple[int, int] = (640, 640)) -> tuple[np.ndarray, float, tuple]:
    """Ultralytics' LetterBox (auto=False, scaleup=True, center=True, INTER_LINEAR, border 114), written from
    its documented arithmetic with OpenCV: the reference of the ``ultralytics`` preset. Returns the
    letterboxed ``(h, w, 3)`` uint8 image, the ratio ``r`` and the ``(left, top)`` border."""
    import cv2

    shape = img.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    new_unpad = round(shape[1] * r), round(shape[0] * r)
    dw, dh = (new_shape[1] - new_unpad[0]) / 2, (new_shape[0] - new_unpad[1]) / 2
    if shape[::-1] != new_unpad:
        img = cv2.resize(img, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return img, r, (left, top)


def letterbox_sizes(photos: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Real photos at sizes that exercise letterbox rounding: odd borders, exact 2x, upscaling, extreme aspect."""
    src = Image.fromarray(photos["astronaut"])
    shapes = [(1280, 720), (500, 375), (375, 500), (1280, 1280), (641, 479), (33, 2000), (320, 240), (1000, 999)]
    return [*photos.values(), *(np.asarray(src.resize(s, Image.Resampling.LANCZOS)) for s in shapes)]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of embeddings (rows), in float32, whatever their dtype or norm."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
