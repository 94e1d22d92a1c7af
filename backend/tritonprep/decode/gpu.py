"""nvImageCodec decoding on the GPU: one batched call for all images of an ``execute()``.

The hardware JPEG decoder (A100/H100 and later) comes first, the CUDA nvJPEG decoder
next; what neither can decode comes back as ``None`` and the GPU executor decodes it with
Pillow instead, for that image only. Decoded images stay in device memory.

Ordering: the decode is issued with the caller's CUDA stream, on which nvImageCodec makes
the results visible; the caller enqueues its kernels on the same stream and synchronizes it
before letting the images go, so no buffer is freed or reused while still being read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RuntimeUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodedImage:
    """A decoded upright RGB uint8 image in device memory (kept alive through ``owner``)."""

    ptr: int
    width: int
    height: int
    pitch: int
    owner: Any


def import_nvimgcodec() -> Any:
    """Import nvImageCodec or raise :class:`RuntimeUnavailable` with the install hint."""
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise RuntimeUnavailable(
            f"nvImageCodec is not installed ({e}); pip install 'tritonprep[gpu-cu13]' (or gpu-cu12)"
        ) from None
    return nvimgcodec


class GpuDecoder:
    """A batched nvImageCodec decoder bound to one GPU."""

    def __init__(self, device_id: int, *, hw_load: float = 1.0, fancy_upsampling: bool = True,
                 cpu_threads: int = 0) -> None:
        nv = import_nvimgcodec()
        self.nv = nv
        backends = []
        if hw_load > 0:
            backends.append(nv.Backend(nv.BackendKind.HW_GPU_ONLY, load_hint=hw_load))
        backends += [nv.Backend(nv.BackendKind.GPU_ONLY), nv.Backend(nv.BackendKind.HYBRID_CPU_GPU)]
        options = ":fancy_upsampling=1" if fancy_upsampling else ""
        self.decoder = nv.Decoder(device_id=device_id, max_num_cpu_threads=cpu_threads, backends=backends, options=options)
        self.params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
        self.description = f"nvImageCodec (hw_load={hw_load}, fancy_upsampling={int(fancy_upsampling)})"

    def decode(self, data: Sequence[bytes], stream_ptr: int) -> list[DecodedImage | None]:
        """Decode ``data`` on ``stream_ptr``; ``None`` where an image could not be decoded as RGB."""
        if not data:
            return []
        streams = [self.nv.CodeStream(d) for d in data]
        images = self.decoder.decode(streams, params=self.params, cuda_stream=stream_ptr)
        out: list[DecodedImage | None] = []
        for img in images:
            if img is None:
                out.append(None)
                continue
            cai = img.__cuda_array_interface__
            shape, strides = cai["shape"], cai.get("strides")
            if len(shape) != 3 or shape[2] != 3 or cai["typestr"] != "|u1":
                out.append(None)  # not 8-bit RGB: let Pillow handle it
                continue
            pitch = strides[0] if strides else shape[1] * 3
            if strides and strides[1:] != (3, 1):
                out.append(None)
                continue
            out.append(DecodedImage(int(cai["data"][0]), int(shape[1]), int(shape[0]), int(pitch), img))
        return out
