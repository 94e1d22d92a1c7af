"""The resize kernel's launches over one call's decoded images: each image's geometry
(:mod:`tritonprep.geometry`) turned into the kernel's plain arguments (:mod:`tritonprep.kernels`), and the
pinned host memory those arguments reach the GPU through.

The arguments (a pointer and a metadata row per image) are copied to the GPU before each launch. From
pageable memory CuPy stages them itself, which costs the host more than the launch; from pinned memory
the copy is enqueued and the host goes on, while the decoder's work ahead of it on the stream still
runs. That pinned memory, and the device memory the copy lands in, are the executor's
(:class:`ArgumentStaging`): the pinned part written once per call, after the previous call's work was waited
for, each launch of the call in its own part of both. The device buffer is kept too: the copy into it is ordered
on the stream after the last call's kernels that read it, and the launch then needs no allocation of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    staging: ArgumentPart | None = None,
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
        staging=None if staging is None else staging.host,
        device_arguments=None if staging is None else staging.device_ptr,
    )


@dataclass(frozen=True)
class ArgumentPart:
    """One launch's share of :class:`ArgumentStaging`: pinned host bytes and the device address they are copied to."""

    host: np.ndarray
    device_ptr: int


class ArgumentStaging:
    """Pinned host memory for the kernel arguments of one call's launches, and the device memory they land in.

    :meth:`parts` hands out one part per launch of a call. Its caller must have waited for the last call's work on
    the stream first (the copies out of the old parts are asynchronous); the buffers grow then, and only then. It
    runs on the device and the stream of the launches (the device buffer is allocated there, from CuPy's pool:
    a replaced one goes back to the pool in the stream's order, after the kernels that read it).
    The GPU executor does: a call waits for its stream before it returns, or the next call waits first
    (``run(synchronize=False)``), a retry after running out of memory waits, and any other failure of a call runs
    the fault guard's probe, which waits for the stream.
    """

    def __init__(self) -> None:
        self._buffer: np.ndarray | None = None
        self._device: Any = None

    def parts(self, sizes: list[int]) -> list[ArgumentPart]:
        """Disjoint parts of ``sizes`` bytes, in order, each pinned on the host and on the device."""
        total = sum(sizes)
        if self._buffer is None or self._buffer.nbytes < total:
            cp = import_cupy()  # the install hint where CuPy is missing
            import cupyx

            size = staging_bytes(total, MIN_STAGING_BYTES)
            self._buffer = cupyx.empty_pinned((size,), np.uint8)
            self._device = cp.empty((size,), np.uint8)
        parts, start, base = [], 0, int(self._device.data.ptr)
        for size in sizes:
            parts.append(ArgumentPart(self._buffer[start : start + size], base + start))
            start += size
        return parts

    def release(self) -> None:
        """Forget the buffers (the executor's close hands the pools' blocks back)."""
        self._buffer = self._device = None
