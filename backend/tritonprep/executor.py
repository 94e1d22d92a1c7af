"""Executors turn a batch of encoded images into the network's input tensor.

Both executors take the images of a whole ``execute()`` call (all requests together) and
fill one output batch with a slot per image, in input order. An image that fails leaves
its slot unspecified and is reported in :attr:`BatchResult.errors`; the Triton glue then
fails the request that carried it and slices the others out of the batch.

:class:`CpuExecutor` (here) decodes with Pillow and resizes with Pillow's antialiased
filters in a thread pool; :class:`tritonprep.gpu.GpuExecutor` does the same on the GPU and
must agree with it (see tests/gpu).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from PIL import Image

from .decode.cpu import decode_pil
from .errors import ImageError
from .geometry import plan_resize
from .spec import PreprocessSpec

log = logging.getLogger(__name__)

PIL_FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
NP_DTYPES = {"FP32": np.float32, "FP16": np.float16}


@dataclass
class BatchResult:
    """One slot per input image; ``errors`` maps the index of each failed image to its error."""

    output: Any  # numpy.ndarray or cupy.ndarray of shape (n,) + spec.output_shape
    errors: dict[int, ImageError] = field(default_factory=dict)
    #: how each image was decoded, for metrics: {"cpu": n, "gpu_hw": n, "gpu_cuda": n, "cpu_fallback": n}
    decoded_by: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of the phases of this call: "decode_s" (all decoding), "total_s"
    timings: dict[str, float] = field(default_factory=dict)


class Executor(Protocol):
    """What the preprocess model needs from an executor."""

    name: str

    def run(self, images: Sequence[bytes]) -> BatchResult:
        """Preprocess ``images`` into one batch."""
        ...

    def close(self) -> None:
        """Release threads and device memory."""
        ...


def normalize_window(spec: PreprocessSpec, resized: np.ndarray, offset_x: int, offset_y: int) -> np.ndarray:
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
    return scaled.astype(NP_DTYPES[spec.dtype], copy=False)


def resize_pil(spec: PreprocessSpec, im: Image.Image) -> tuple[np.ndarray, int, int]:
    """Resize an RGB Pillow image per ``spec``; return the pixels and the window offsets."""
    plan = plan_resize(spec, im.width, im.height)
    out_w, out_h = spec.output_width, spec.output_height
    if (plan.resized_w, plan.resized_h) == (im.width, im.height):
        return np.asarray(im), plan.offset_x, plan.offset_y
    inside = (
        plan.offset_x >= 0 and plan.offset_y >= 0
        and plan.offset_x + out_w <= plan.resized_w and plan.offset_y + out_h <= plan.resized_h
    )
    if inside and plan.resized_w * plan.resized_h > spec.limits.max_pixels:
        # A pathological aspect ratio (say 1x20000) would make the full resize gigapixels.
        # Resize only the output window instead: Pillow's `box` uses the same centres and
        # filter support, though float rounding moves some values by a few levels, which
        # is why ordinary images take the exact resize-then-crop path below.
        sx, sy = im.width / plan.resized_w, im.height / plan.resized_h
        box = (plan.offset_x * sx, plan.offset_y * sy, (plan.offset_x + out_w) * sx, (plan.offset_y + out_h) * sy)
        return np.asarray(im.resize((out_w, out_h), PIL_FILTERS[spec.interpolation], box=box)), 0, 0
    im = im.resize((plan.resized_w, plan.resized_h), PIL_FILTERS[spec.interpolation])
    return np.asarray(im), plan.offset_x, plan.offset_y


class CpuExecutor:
    """Pillow decode + Pillow antialiased resize + NumPy normalize, one thread per core."""

    name = "cpu"

    def __init__(self, spec: PreprocessSpec) -> None:
        self.spec = spec
        self._pool = ThreadPoolExecutor(max_workers=spec.resolved_cpu_threads, thread_name_prefix="tritonprep-cpu")
        log.info("CPU executor: Pillow decode and resize, %d threads", spec.resolved_cpu_threads)

    def _one(self, data: bytes, slot: np.ndarray) -> tuple[ImageError | None, float]:
        t0 = time.perf_counter()
        try:
            im = decode_pil(data, self.spec.limits)
        except ImageError as e:
            return e, time.perf_counter() - t0
        decode_s = time.perf_counter() - t0
        pixels, ox, oy = resize_pil(self.spec, im)
        slot[...] = normalize_window(self.spec, pixels, ox, oy)
        return None, decode_s

    def run(self, images: Sequence[bytes]) -> BatchResult:
        """Preprocess ``images``; never raises for a bad image (see :attr:`BatchResult.errors`)."""
        t0 = time.perf_counter()
        out = np.empty((len(images),) + self.spec.output_shape, NP_DTYPES[self.spec.dtype])
        results = list(self._pool.map(self._one, images, out))
        errors = {i: e for i, (e, _) in enumerate(results) if e is not None}
        # decode time summed over worker threads (CPU seconds spent decoding)
        timings = {"decode_s": sum(d for _, d in results), "total_s": time.perf_counter() - t0}
        return BatchResult(out, errors, {"cpu": len(images) - len(errors)}, timings)

    def close(self) -> None:
        """Stop the worker threads."""
        self._pool.shutdown(wait=True)


def create_executor(spec: PreprocessSpec, instance_kind: str = "CPU", device_id: int = 0) -> Executor:
    """Pick the executor for a model instance.

    ``executor=auto`` uses the GPU executor on a GPU instance (Triton's ``KIND_GPU``, or
    ``KIND_AUTO`` on a machine with a GPU) and the CPU executor otherwise; ``gpu`` insists
    on the GPU (loading fails with the reason if it is unusable); ``cpu`` forces the CPU.
    """
    if spec.executor == "cpu" or (spec.executor == "auto" and instance_kind.upper() != "GPU"):
        return CpuExecutor(spec)
    from .errors import RuntimeUnavailable

    try:
        from .gpu import GpuExecutor

        return GpuExecutor(spec, device_id)
    except RuntimeUnavailable as e:
        if spec.executor == "gpu":
            raise
        log.warning("GPU executor unavailable on device %d (%s); using the CPU executor", device_id, e)
        return CpuExecutor(spec)
