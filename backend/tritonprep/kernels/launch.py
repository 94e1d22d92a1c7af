"""CuPy launchers of the CUDA kernels in this folder (compiled once per device and option set, cached).

The CUDA sources are package data (``*.cu`` beside this file); CuPy compiles them with
NVRTC on first use in a process and keeps the binaries in its on-disk kernel cache, so a
model instance pays the compile once, in its warm-up. Launchers take device pointers, plain
numbers and flags; what they mean for a model is the executor's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

import numpy as np

from ..cuda import import_cupy
from .layout import META_FIELDS, cuda_defines

cupy = import_cupy()

BLOCK = 256
#: the resize filters the kernel implements (a -D flag each, or none for the default): Pillow's antialiased
#: bilinear and bicubic, and OpenCV's INTER_LINEAR
FILTERS = {"bilinear": (), "bicubic": ("FILTER_BICUBIC",), "cv2_linear": ("FILTER_CV2_LINEAR",)}


def _source(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _kernel_source(name: str) -> str:
    """A kernel's source after the element types it reads and writes (``half.cuh``: ``in_t``, ``out_t``)."""
    return _source("half.cuh") + "\n" + _source(name)


@cupy.memoize(for_each_device=True)
def _resize_normalize_kernel(half: bool, nhwc: bool, bgr: bool, flags: tuple[str, ...]) -> cupy.RawKernel:
    defines = [flag for flag, on in (("OUT_HALF", half), ("OUT_NHWC", nhwc), ("OUT_BGR", bgr)) if on] + list(flags)
    module = cupy.RawModule(
        code=_kernel_source("resize_normalize.cu"),
        options=("--std=c++14", *cuda_defines(), *(f"-D{d}" for d in defines)),
    )
    return module.get_function("tritonprep_resize_normalize")


def resize_normalize(
    ptrs: np.ndarray,
    meta: np.ndarray,
    out: cupy.ndarray,
    *,
    nhwc: bool,
    bgr: bool,
    interpolation: str,
    scale: Sequence[float],
    bias: Sequence[float],
    pad: float,
    stream: cupy.cuda.Stream,
    staging: np.ndarray | None = None,
) -> None:
    """Resize, crop or pad, normalize and lay out every image described by ``ptrs``/``meta`` into ``out``.

    One launch on ``stream``. ``ptrs`` and ``meta`` are :func:`.layout.pack`'s arrays; ``out`` is
    a C-contiguous float32 or float16 batch of shape ``(n, 3, H, W)`` (or ``(n, H, W, 3)`` with
    ``nhwc``) whose slots the metadata rows name; ``out = pixel * scale + bias`` per channel
    (RGB order), ``pad`` is the pixel value outside the resized image.

    ``staging``: pinned host memory of at least :func:`argument_bytes` bytes that the caller does not write
    again before ``stream`` has passed this launch. The pointers and metadata then reach the GPU by an
    asynchronous copy from it, and the host goes on at once (without it, CuPy stages them itself).
    """
    n = len(ptrs)
    if n == 0:
        return
    if meta.shape != (n, len(META_FIELDS)) or meta.dtype != np.int32:
        raise ValueError(f"metadata must be int32 of shape ({n}, {len(META_FIELDS)}), got {meta.dtype} {meta.shape}")
    if out.ndim != 4 or out.shape[3 if nhwc else 1] != 3:
        raise ValueError(f"output buffer {out.shape} is not a batch of 3-channel {'NHWC' if nhwc else 'NCHW'} images")
    if out.dtype not in (np.float32, np.float16) or not out.flags.c_contiguous:
        raise ValueError(f"output buffer must be C-contiguous float32 or float16, got {out.dtype}")
    if interpolation not in FILTERS:
        raise ValueError(f"interpolation must be one of {sorted(FILTERS)}, got {interpolation!r}")
    out_h, out_w = (out.shape[1], out.shape[2]) if nhwc else (out.shape[2], out.shape[3])
    kernel = _resize_normalize_kernel(out.dtype == np.float16, nhwc, bgr, FILTERS[interpolation])
    f32 = np.float32
    # the pointers and the metadata rows travel in one upload (one copy instead of two per call)
    nbytes = argument_bytes(n)
    if staging is not None and staging.nbytes < nbytes:
        raise ValueError(f"the staging buffer holds {staging.nbytes} bytes; {n} image(s) need {nbytes}")
    host = np.empty(nbytes, np.uint8) if staging is None else staging.reshape(-1).view(np.uint8)[:nbytes]
    host[: 8 * n] = np.ascontiguousarray(ptrs, np.uint64).view(np.uint8)
    host[8 * n :] = np.ascontiguousarray(meta).view(np.uint8).ravel()
    with stream:
        if staging is None:
            args = cupy.asarray(host)
        else:
            args = cupy.empty(nbytes, np.uint8)
            args.set(host, stream=stream)
        d_ptrs = args[: 8 * n].view(np.uint64)
        d_meta = args[8 * n :].view(np.int32)
        pixels = out_h * out_w
        kernel(
            ((pixels + BLOCK - 1) // BLOCK, n),
            (BLOCK,),
            (
                d_ptrs,
                d_meta,
                out,
                np.int32(out_h),
                np.int32(out_w),
                *(f32(s) for s in scale),
                *(f32(b) for b in bias),
                f32(pad),
            ),
        )


def argument_bytes(images: int) -> int:
    """The bytes of :func:`resize_normalize`'s arguments for ``images`` images (a pointer and a metadata row each)."""
    return images * (8 + 4 * len(META_FIELDS))


#: threads per block of the softmax/top-k kernel (one block per row of logits)
TOP_K_THREADS = 128
#: the largest k the kernel selects (its shared list of chosen ids)
TOP_K_MAX = 64


@cupy.memoize(for_each_device=True)
def _softmax_top_k_kernel() -> cupy.RawKernel:
    options = ("--std=c++14", f"-DTOPK_THREADS={TOP_K_THREADS}", f"-DTOPK_MAX_K={TOP_K_MAX}")
    module = cupy.RawModule(code=_source("softmax_top_k.cu"), options=options)
    return module.get_function("tritonprep_softmax_top_k")


def softmax_top_k(logits: cupy.ndarray, k: int, wait: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best probabilities (float32) and class ids (int32) of each row of ``logits``, best first, ties to
    the lower id, as host arrays: one launch and one copy to the host, on the current stream (synchronized; with
    ``wait=False`` the copy into pinned memory is only enqueued: the arrays, strided views of that one pinned
    block, hold the result once the caller has synchronized that stream)."""
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits must be a 2-D batch of rows, got shape {logits.shape}")
    rows, classes = logits.shape
    if not 1 <= k <= min(TOP_K_MAX, classes):
        raise ValueError(f"k must be 1..{min(TOP_K_MAX, classes)} for {classes} classes, got {k}")
    x = cupy.ascontiguousarray(logits, dtype=cupy.float32)
    out = cupy.empty((rows, 2, k), dtype=cupy.float32)
    if rows:
        _softmax_top_k_kernel()((rows,), (TOP_K_THREADS,), (x, out, np.int32(classes), np.int32(k)))
    if not wait:
        import cupyx

        host = cupyx.empty_pinned(out.shape, out.dtype)
        out.get(out=host, blocking=False)
        return host[:, 0], host[:, 1].view(np.int32)
    host = out.get()
    return np.ascontiguousarray(host[:, 0]), np.ascontiguousarray(host[:, 1]).view(np.int32)


#: threads per block of the unit-length kernel (one block per row)
UNIT_THREADS = 256
#: the dtypes it reads and writes
UNIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


@cupy.memoize(for_each_device=True)
def _unit_rows_kernel(in_half: bool, out_half: bool) -> cupy.RawKernel:
    defines = [flag for flag, on in (("IN_HALF", in_half), ("OUT_HALF", out_half)) if on]
    options = ("--std=c++14", f"-DUNIT_THREADS={UNIT_THREADS}", *(f"-D{d}" for d in defines))
    module = cupy.RawModule(code=_kernel_source("unit_rows.cu"), options=options)
    return module.get_function("tritonprep_unit_rows")


def unit_rows_takes(x: cupy.ndarray, dtype: np.dtype) -> bool:
    """Whether :func:`unit_rows` takes ``x`` into ``dtype``: a 2-D float32 or float16 batch into float32 or float16."""
    return x.ndim == 2 and x.dtype in UNIT_DTYPES and np.dtype(dtype) in UNIT_DTYPES


def unit_rows(x: cupy.ndarray, dtype: np.dtype) -> cupy.ndarray:
    """Each row of ``x`` (a 2-D float32 or float16 batch) divided by its length, computed in float32 (an all-zero
    row stays zero, a row holding a NaN is all NaN), as a new C-contiguous array of ``dtype`` (float32 or float16) on
    ``x``'s GPU: one launch on that GPU's current stream, not synchronized."""
    dtype = np.dtype(dtype)
    if not unit_rows_takes(x, dtype):
        raise ValueError(f"unit_rows takes a 2-D float32/float16 batch into float32/float16; got {x.dtype} "
                         f"{x.shape} into {dtype}")  # fmt: skip
    with x.device:
        x = cupy.ascontiguousarray(x)
        out = cupy.empty(x.shape, dtype)
        rows, dim = x.shape
        if rows and dim:
            kernel = _unit_rows_kernel(x.dtype == np.float16, dtype == np.float16)
            kernel((rows,), (UNIT_THREADS,), (x, out, np.int32(dim)))
    return out


def illegal_write(stream: cupy.cuda.Stream) -> None:
    """Fault injection only: poison this process's CUDA context with an illegal-address error."""
    kernel = cupy.RawModule(code=_source("fault.cu")).get_function("tritonprep_illegal_write")
    with stream:
        kernel((1,), (1,), (np.uint64(0x10),))
