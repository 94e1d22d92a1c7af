"""A network's input rows, wherever a batch's parts live: the host, this GPU, or another GPU of the host.

Both GPU runtimes (:mod:`.ort_cuda`, :mod:`.tensorrt`) copy each request's rows into their own input buffer
with :func:`copy_rows`, ordered on their stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def device_of(array: Any) -> int | None:
    """The CUDA device an array lives on (CuPy's ``.device.id``), or None for a host array."""
    if isinstance(array, np.ndarray):
        return None
    return int(array.device.id)


def copy_rows(cp: Any, dst: Any, src: Any, stream: Any) -> bool:
    """Copy ``src`` (numpy, or a CuPy array on any GPU) into the contiguous rows ``dst``, as ``dst``'s type (the
    network's input type: FP32, or FP16 for an ONNX Runtime network that takes it; TensorRT's buffers are FP32),
    ordered on ``stream``.

    Returns True when ``src`` lived on another GPU than ``dst``: Triton may hand a classifier instance on
    one GPU a tensor the preprocess model made on another; it is then copied peer to peer (CUDA's
    unified addressing) instead of through the host, and the caller counts it.
    """
    where = device_of(src)
    if where is None:
        dst.set(np.ascontiguousarray(src, dtype=dst.dtype), stream=stream)
        return False
    if where == dst.device.id:
        dst[...] = cp.asarray(src, dtype=dst.dtype)
        return False
    with cp.cuda.Device(where):
        src = cp.ascontiguousarray(src, dtype=dst.dtype)
        cp.cuda.get_current_stream().synchronize()  # src is complete before another device's stream reads it
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cp.cuda.runtime.memcpyDefault, stream.ptr)
    return True
