"""The CPU executor: Pillow decode, Pillow's antialiased resize (or OpenCV's INTER_LINEAR) and NumPy
normalize, on a thread pool; each image is decoded once for all the model's image outputs.

This is also the definition of the output that the GPU executor must reproduce
(:func:`normalize_window`, :func:`resize_pil` and :func:`tritonprep.executors.opencv.resize_cv2`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from PIL import Image

from ..decode.pillow import decode_pil
from ..errors import ImageError
from ..geometry import check_resizable, plan_resize, window_only
from ..spec import Limits, OutputSpec, PreprocessConfig
from .base import BatchResult, ImageInfo, Wanted, as_config, resolve_wanted
from .opencv import import_cv2, resize_cv2

log = logging.getLogger(__name__)

PIL_FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


def normalize_window(spec: OutputSpec, resized: np.ndarray, offset_x: int, offset_y: int) -> np.ndarray:
    """Cut the output window out of a resized ``(h, w, 3)`` uint8 image, pad, normalize, lay out.

    This is the CPU definition of the output; the GPU kernel computes the same thing.
    """
    out_h, out_w = spec.output_height, spec.output_width
    h, w = resized.shape[:2]
    window = np.full((out_h, out_w, 3), spec.pad_value, np.uint8)
    y0, x0 = max(0, offset_y), max(0, offset_x)
    y1, x1 = min(h, offset_y + out_h), min(w, offset_x + out_w)
    if y1 > y0 and x1 > x0:
        window[y0 - offset_y : y1 - offset_y, x0 - offset_x : x1 - offset_x] = resized[y0:y1, x0:x1]
    scaled = window.astype(np.float32) * np.asarray(spec.scale, np.float32) + np.asarray(spec.bias, np.float32)
    if spec.channel_order == "BGR":
        scaled = scaled[..., ::-1]
    if spec.layout == "NCHW":
        scaled = scaled.transpose(2, 0, 1)
    return scaled.astype(spec.numpy_dtype, copy=False)


def resize_pil(spec: OutputSpec, im: Image.Image, max_pixels: int = Limits.max_pixels) -> tuple[np.ndarray, int, int]:
    """Resize an RGB Pillow image per ``spec``; return the pixels and the window offsets (``max_pixels``: the
    model's limit, above which a full resize is avoided: see :func:`~tritonprep.geometry.window_only`)."""
    plan = plan_resize(spec, im.width, im.height)
    out_w, out_h = spec.output_width, spec.output_height
    if (plan.resized_w, plan.resized_h) == (im.width, im.height):
        return np.asarray(im), plan.offset_x, plan.offset_y
    if window_only(spec, plan, max_pixels):
        # Resize only the output window: Pillow's `box` uses the same centres and
        # filter support, though float rounding moves some values by a few levels, which
        # is why ordinary images take the exact resize-then-crop path below.
        sx, sy = im.width / plan.resized_w, im.height / plan.resized_h
        box = (plan.offset_x * sx, plan.offset_y * sy, (plan.offset_x + out_w) * sx, (plan.offset_y + out_h) * sy)
        return np.asarray(im.resize((out_w, out_h), PIL_FILTERS[spec.interpolation], box=box)), 0, 0
    im = im.resize((plan.resized_w, plan.resized_h), PIL_FILTERS[spec.interpolation])
    return np.asarray(im), plan.offset_x, plan.offset_y


class CpuExecutor:
    """Pillow decode + Pillow antialiased (or OpenCV linear) resize + NumPy normalize, one thread per core."""

    name = "cpu"

    def __init__(self, spec: OutputSpec | PreprocessConfig) -> None:
        self.config = as_config(spec)
        self._cv2 = import_cv2() if any(s.interpolation == "cv2_linear" for _, s in self.config.outputs) else None
        threads = self.config.resolved_cpu_threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tritonprep-cpu")

    def describe(self) -> str:
        """One line for the log."""
        outputs = ", ".join(f"{name} ({s.interpolation})" for name, s in self.config.outputs)
        return f"CPU executor: Pillow decode, resize to {outputs}; {self.config.resolved_cpu_threads} threads"

    def _one(self, data: bytes, targets: list[tuple[OutputSpec, np.ndarray]]) -> tuple[Any, float]:
        """Decode one image once and write each wanted output's slot; ``(ImageInfo or ImageError, decode seconds)``."""
        t0 = time.perf_counter()
        try:
            im = decode_pil(data, self.config.limits)
            for _, spec in self.config.outputs:  # the same check as the GPU executor's, on every output
                check_resizable(spec, im.width, im.height)
        except ImageError as e:
            return e, time.perf_counter() - t0
        decode_s = time.perf_counter() - t0
        array = None
        max_pixels = self.config.limits.max_pixels
        for spec, slot in targets:
            if spec.interpolation == "cv2_linear":
                array = np.asarray(im) if array is None else array
                pixels, ox, oy = resize_cv2(spec, array, self._cv2, max_pixels)
            else:
                pixels, ox, oy = resize_pil(spec, im, max_pixels)
            slot[...] = normalize_window(spec, pixels, ox, oy)
        return ImageInfo(im.width, im.height, "cpu"), decode_s

    def run(self, images: Sequence[bytes], wanted: Wanted | None = None, *, synchronize: bool = True) -> BatchResult:
        """Preprocess ``images``; never raises for a bad image (see :attr:`BatchResult.errors`). The outputs are
        host arrays, complete when it returns, whatever ``synchronize`` says."""
        t0 = time.perf_counter()
        rows = resolve_wanted(self.config, len(images), wanted)
        specs = self.config.specs
        outputs = {
            name: np.empty((len(idx),) + specs[name].output_shape, specs[name].numpy_dtype)
            for name, idx in rows.items()
        }
        targets: list[list[tuple[OutputSpec, np.ndarray]]] = [[] for _ in images]
        for name, idx in rows.items():
            for row, i in enumerate(idx):
                targets[i].append((specs[name], outputs[name][row]))
        results = list(self._pool.map(self._one, images, targets))
        errors = {i: r for i, (r, _) in enumerate(results) if isinstance(r, ImageError)}
        infos = {i: r for i, (r, _) in enumerate(results) if isinstance(r, ImageInfo)}
        # decode time summed over worker threads (CPU seconds spent decoding)
        timings = {"decode_s": sum(d for _, d in results), "total_s": time.perf_counter() - t0}
        return BatchResult(outputs, errors, {"cpu": len(infos)}, timings, infos)

    def close(self) -> None:
        """Stop the worker threads."""
        self._pool.shutdown(wait=True)
