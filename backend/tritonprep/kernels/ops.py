"""CuPy launchers of the CUDA kernels in this folder (compiled once per device and option set, cached).

The CUDA sources are package data (``*.cu`` beside this file); CuPy compiles them with
NVRTC on first use in a process and keeps the binaries in its on-disk kernel cache, so a
model instance pays the compile once, in its warm-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

import cupy
import numpy as np

from ..geometry import ResizePlan
from ..spec import PreprocessSpec

BLOCK = 256


def _source(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@cupy.memoize(for_each_device=True)
def _resize_normalize_kernel(half: bool, nhwc: bool, bgr: bool, bicubic: bool) -> cupy.RawKernel:
    defines = [flag for flag, on in (("OUT_HALF", half), ("OUT_NHWC", nhwc), ("OUT_BGR", bgr),
                                     ("FILTER_BICUBIC", bicubic)) if on]
    module = cupy.RawModule(
        code=_source("resize_normalize.cu"),
        options=("--std=c++14", *(f"-D{d}" for d in defines)),
    )
    return module.get_function("tritonprep_resize_normalize")


def resize_normalize_kernel(spec: PreprocessSpec) -> cupy.RawKernel:
    """The compiled kernel for ``spec``'s dtype, layout, channel order and filter."""
    return _resize_normalize_kernel(spec.dtype == "FP16", spec.layout == "NHWC", spec.channel_order == "BGR",
                                    spec.interpolation == "bicubic")


def pack_meta(sources: Sequence[tuple[int, int, int, int]], plans: Sequence[ResizePlan], slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Host arrays of the kernel's per-image arguments.

    ``sources`` holds ``(device pointer, width, height, row pitch in bytes)`` of each decoded
    RGB uint8 image; ``slots`` the output index of each.
    """
    n = len(sources)
    ptrs = np.fromiter((s[0] for s in sources), dtype=np.uint64, count=n)
    meta = np.empty((n, 8), dtype=np.int32)
    for i, ((_, w, h, pitch), plan, slot) in enumerate(zip(sources, plans, slots)):
        meta[i] = (w, h, pitch, plan.resized_w, plan.resized_h, plan.offset_x, plan.offset_y, slot)
    return ptrs, meta


def launch_resize_normalize(spec: PreprocessSpec, ptrs: np.ndarray, meta: np.ndarray, out: cupy.ndarray,
                            stream: cupy.cuda.Stream) -> None:
    """Preprocess every image described by ``ptrs``/``meta`` into ``out`` with one launch on ``stream``."""
    n = len(ptrs)
    if n == 0:
        return
    expected = (3, spec.output_height, spec.output_width) if spec.layout == "NCHW" else (spec.output_height, spec.output_width, 3)
    if tuple(out.shape[1:]) != expected or out.dtype != (np.float16 if spec.dtype == "FP16" else np.float32):
        raise ValueError(f"output buffer {out.shape} {out.dtype} does not match the spec {expected} {spec.dtype}")
    if not out.flags.c_contiguous:
        raise ValueError("output buffer must be C-contiguous")
    with stream:
        d_ptrs = cupy.asarray(ptrs)
        d_meta = cupy.asarray(meta)
        pixels = spec.output_height * spec.output_width
        (s0, s1, s2), (b0, b1, b2) = spec.scale, spec.bias
        f32 = np.float32
        resize_normalize_kernel(spec)(
            ((pixels + BLOCK - 1) // BLOCK, n), (BLOCK,),
            (d_ptrs, d_meta, out, np.int32(spec.output_height), np.int32(spec.output_width),
             f32(s0), f32(s1), f32(s2), f32(b0), f32(b1), f32(b2), f32(spec.pad_value)),
        )


def launch_illegal_write(stream: cupy.cuda.Stream) -> None:
    """Fault injection only: poison this process's CUDA context with an illegal-address error."""
    kernel = cupy.RawModule(code=_source("fault.cu")).get_function("tritonprep_illegal_write")
    with stream:
        kernel((1,), (1,), (np.uint64(0x10),))
