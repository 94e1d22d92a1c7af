"""OpenCV's ``INTER_LINEAR`` resize (the ``cv2_linear`` interpolation): how YOLO-family detectors are fed.

Ultralytics' LetterBox resizes with ``cv2.resize(..., interpolation=cv2.INTER_LINEAR)``: bilinear
without antialiasing, on a fixed-point grid. The CPU executor calls OpenCV itself
(:func:`resize_cv2`); :func:`linear_window` is the same arithmetic in NumPy for an output window
only (a pathological aspect ratio would make the full resize gigapixels), and the definition the
GPU kernel (``FILTER_CV2_LINEAR`` in ``kernels/resize_normalize.cu``) follows:

* per axis, ``scale = 1 / (dst / src)`` in double, source position ``f = float((d + 0.5) * scale - 0.5)``,
  ``s = floor(f)``, weights ``round((1 - (f - s)) * 2048)`` and ``round((f - s) * 2048)`` (half to even);
  along x a position left of the first or right of the last pixel takes that pixel alone; along y
  the two rows are clamped into the image;
* horizontal pass ``h = w0 * p[s] + w1 * p[s + 1]`` (integers, scale 2048), then vertical pass as
  OpenCV's SIMD code does it: ``(((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16) + 2) >> 2``.
  OpenCV's scalar tail (the last few values of a row) rounds ``(h0 * b0 + h1 * b1 + 2^21) >> 22``
  instead, so a value can differ from OpenCV by 1 level there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import RuntimeUnavailable
from ..geometry import ResizePlan, plan_resize, window_only
from ..spec import Limits, OutputSpec

COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE (11 fractional bits)


def import_cv2() -> Any:
    """OpenCV, single-threaded (the executor's own threads run images in parallel), or the install hint."""
    try:
        import cv2
    except ImportError as e:
        raise RuntimeUnavailable(
            f"interpolation cv2_linear needs OpenCV ({e}); pip install 'tritonprep[server]' (opencv-python-headless)"
        ) from None
    cv2.setNumThreads(1)
    return cv2


def axis_coefficients(dst: np.ndarray, src_size: int, dst_size: int, clamp: bool) -> tuple[np.ndarray, ...]:
    """Source indices ``(i0, i1)`` and weights ``(w0, w1)`` (sum 2048) of destination indices ``dst``.

    ``clamp`` is OpenCV's x-axis rule (a position outside the image takes the edge pixel alone); along
    y OpenCV keeps the weights and clamps the row indices.
    """
    scale = 1.0 / (dst_size / src_size)
    f = ((dst.astype(np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    s = np.floor(f)
    f = (f - s).astype(np.float32)
    s = s.astype(np.int64)
    if clamp:
        edge = (s < 0) | (s >= src_size - 1)
        f[edge] = 0.0
        s = np.where(s < 0, 0, np.where(s >= src_size - 1, src_size - 1, s))
    w0 = np.rint((np.float32(1.0) - f) * np.float32(COEF_SCALE)).astype(np.int64)
    w1 = np.rint(f * np.float32(COEF_SCALE)).astype(np.int64)
    return np.clip(s, 0, src_size - 1), np.clip(s + 1, 0, src_size - 1), w0, w1


def linear_window(src: np.ndarray, plan: ResizePlan, out_w: int, out_h: int) -> np.ndarray:
    """The ``out_w x out_h`` window at the plan's offset of ``src`` resized to the plan's size, uint8 RGB."""
    xs = np.arange(out_w) + plan.offset_x
    ys = np.arange(out_h) + plan.offset_y
    x0, x1, a0, a1 = axis_coefficients(xs, plan.src_w, plan.resized_w, clamp=True)
    y0, y1, b0, b1 = axis_coefficients(ys, plan.src_h, plan.resized_h, clamp=False)

    def horizontal(rows: np.ndarray) -> np.ndarray:
        r = src[rows].astype(np.int64)  # only the rows the window reads: the source may be 16.8 MP
        return r[:, x0] * a0[None, :, None] + r[:, x1] * a1[None, :, None]

    h0, h1 = horizontal(y0), horizontal(y1)
    v = (((h0 >> 4) * b0[:, None, None]) >> 16) + (((h1 >> 4) * b1[:, None, None]) >> 16)
    return np.clip((v + 2) >> 2, 0, 255).astype(np.uint8)


def resize_cv2(
    spec: OutputSpec, src: np.ndarray, cv2: Any, max_pixels: int = Limits.max_pixels
) -> tuple[np.ndarray, int, int]:
    """Resize an upright RGB ``(h, w, 3)`` uint8 array per ``spec`` with OpenCV; return the pixels and the
    window offsets (like :func:`tritonprep.executors.cpu.resize_pil`; ``max_pixels`` is the model's limit)."""
    h, w = src.shape[:2]
    plan = plan_resize(spec, w, h)
    out_w, out_h = spec.output_width, spec.output_height
    if (plan.resized_w, plan.resized_h) == (w, h):
        return src, plan.offset_x, plan.offset_y
    if window_only(spec, plan, max_pixels):
        return linear_window(src, plan, out_w, out_h), 0, 0
    return (
        cv2.resize(src, (plan.resized_w, plan.resized_h), interpolation=cv2.INTER_LINEAR),
        plan.offset_x,
        plan.offset_y,
    )
