"""The resize kernel's launches over one call's decoded images: each image's geometry
(:mod:`tritonprep.geometry`) turned into the kernel's plain arguments (:mod:`tritonprep.kernels`), and the
pinned host memory those arguments reach the GPU through.

The arguments (a pointer and a metadata row per image) are copied to the GPU before each launch. From
pageable memory CuPy stages them itself, which costs the host more than the launch; from pinned memory
the copy is enqueued and the host goes on, while the decoder's work ahead of it on the stream still
runs. That pinned memory is the executor's (:class:`ArgumentStaging`): written once per call, after
the previous call's work was waited for, each launch of the call in its own part of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..cuda import import_cupy
from ..geometry import plan_resize
from ..kernels.layout import ImageMeta, pack
from ..spec import OutputSpec

#: the least pinned memory kept for the arguments (grown to the next power of two above a call's need)
MIN_STAGING_BYTES = 1 << 16


def staging_bytes(nbytes: int, floor: int) -> int:
    """The size of a kept pinned buffer for ``nbytes``: the next power of two, at least ``floor``."""
    return max(floor, 1 << (nbytes - 1).bit_length())


def resize_into(
    spec: OutputSpec,
    sources: Mapping[int, tuple[int, int, int, int]],
    out: Any,
    stream: Any,
    staging: np.ndarray | None = None,
) -> None:
    """Run the kernel for ``spec`` over decoded images: ``sources[slot] = (device pointer, width, height,
    row pitch)`` of an upright RGB uint8 image whose output goes to ``out[slot]``; one launch on ``stream``,
    its arguments through ``staging`` where given (see :func:`tritonprep.kernels.launch.resize_normalize`)."""
    from ..kernels import launch

    metas = []
    for slot in sorted(sources):
        ptr, w, h, pitch = sources[slot]
        plan = plan_resize(spec, w, h)
        metas.append(ImageMeta(ptr, w, h, pitch, plan.resized_w, plan.resized_h, plan.offset_x, plan.offset_y, slot))
    ptrs, meta = pack(metas)
    launch.resize_normalize(
        ptrs,
        meta,
        out,
        nhwc=spec.layout == "NHWC",
        bgr=spec.channel_order == "BGR",
        interpolation=spec.interpolation,
        scale=spec.scale,
        bias=spec.bias,
        pad=float(spec.pad_value),
        stream=stream,
        staging=staging,
    )


class ArgumentStaging:
    """Pinned host memory for the kernel arguments of one call's launches.

    :meth:`parts` hands out one part per launch of a call. Its caller must have waited for the last call's work on
    the stream first (the copies out of the old parts are asynchronous); the buffer grows then, and only then.
    The GPU executor does: a call waits for its stream before it returns, or the next call waits first
    (``run(synchronize=False)``), a retry after running out of memory waits, and any other failure of a call runs
    the fault guard's probe, which waits for the stream.
    """

    def __init__(self) -> None:
        self._buffer: np.ndarray | None = None

    def parts(self, sizes: list[int]) -> list[np.ndarray]:
        """Disjoint pinned parts of ``sizes`` bytes, in order."""
        total = sum(sizes)
        if self._buffer is None or self._buffer.nbytes < total:
            import_cupy()  # the install hint where CuPy is missing
            import cupyx

            self._buffer = cupyx.empty_pinned((staging_bytes(total, MIN_STAGING_BYTES),), np.uint8)
        parts, start = [], 0
        for size in sizes:
            parts.append(self._buffer[start : start + size])
            start += size
        return parts

    def release(self) -> None:
        """Forget the buffer (the executor's close hands the pinned pool's blocks back)."""
        self._buffer = None
