"""nvImageCodec decoding on the GPU: batched calls for all images of an ``execute()``.

Decoding runs in stages, each a single batched call over what the previous stage left:

1. the hardware JPEG decoder (A100, H100 and later): bit-for-bit within 1 level of
   libjpeg-turbo (Pillow) on real photos;
2. nvJPEG's CUDA / hybrid decoders, for JPEGs the hardware decoder does not take
   (progressive, unusual subsampling) or on GPUs without one (within ~3 levels of Pillow);
3. ``None`` is returned for what neither takes; the GPU executor decodes those with Pillow.

The stages are kept apart on purpose: letting nvImageCodec split one batch across the
hardware and CUDA decoders by load makes the decoder of an image, and so its pixels,
depend on what else was in the batch (measured on an H100: up to 3 levels); staged
decoding is deterministic and tells which path decoded each image (for metrics).

To use both decoders at once (the hardware engines saturate first), ``hw_share`` below 1
sends each JPEG to the hardware or the CUDA decoder by a hash of its bytes, so the choice
(and the pixels) still depend on the image alone, and runs the two batches concurrently.

Ordering: every call is issued on the caller's CUDA stream, on which nvImageCodec makes the
results visible; the caller enqueues its kernels on the same stream and synchronizes it
before letting the images go, so no buffer is freed or reused while still being read.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
    path: str  # "gpu_hw" or "gpu_cuda"


def import_nvimgcodec() -> Any:
    """Import nvImageCodec or raise :class:`RuntimeUnavailable` with the install hint."""
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise RuntimeUnavailable(
            f"nvImageCodec is not installed ({e}); pip install 'tritonprep[gpu-cu13]' (or gpu-cu12)"
        ) from None
    return nvimgcodec


#: nvImageCodec decoders and the CUDA streams they decoded on are never destroyed before the
#: process ends: destroying a decoder after its executor (and stream) went away crashed test
#: processes on an H100. Each GpuDecoder still gets decoders of its own (concurrent decode
#: calls on one decoder from two threads hung), so this only keeps them alive.
_KEEP_ALIVE: list[Any] = []
_KEEP_LOCK = threading.Lock()
#: output images kept for reuse per decoder stage, and the largest buffer worth keeping
_POOL_MAX_IMAGES = 256
_POOL_MAX_BYTES = 16 << 20


def _make_decoder(nv: Any, device_id: int, kinds: tuple[Any, ...], options: str, cpu_threads: int) -> Any:
    dec = nv.Decoder(
        device_id=device_id, max_num_cpu_threads=cpu_threads, backends=[nv.Backend(k) for k in kinds], options=options
    )
    with _KEEP_LOCK:
        _KEEP_ALIVE.append(dec)
    return dec


class GpuDecoder:
    """Staged batched nvImageCodec decoding (hardware, then CUDA/hybrid) on one GPU."""

    def __init__(
        self,
        device_id: int,
        stream: Any,
        *,
        hw_decoder: bool = True,
        fancy_upsampling: bool = True,
        cpu_threads: int = 0,
        hw_share: float = 1.0,
    ) -> None:
        nv = import_nvimgcodec()
        self.nv = nv
        self.stream = stream
        self._pools: dict[int, list[Any]] = {}
        with _KEEP_LOCK:
            _KEEP_ALIVE.append(stream)
        options = ":fancy_upsampling=1" if fancy_upsampling else ""
        self.stages: list[tuple[str, Any]] = []
        wanted = ([("gpu_hw", [nv.BackendKind.HW_GPU_ONLY])] if hw_decoder else []) + [
            ("gpu_cuda", [nv.BackendKind.GPU_ONLY, nv.BackendKind.HYBRID_CPU_GPU])
        ]
        for path, kinds in wanted:
            try:
                dec = _make_decoder(nv, device_id, tuple(kinds), options, cpu_threads)
            except RuntimeError as e:  # e.g. no hardware decoder on this GPU
                log.info("nvImageCodec %s decoder unavailable on GPU %d: %s", path, device_id, e)
                continue
            self.stages.append((path, dec))
        if not self.stages:
            raise RuntimeUnavailable(f"nvImageCodec could not create any GPU decoder on GPU {device_id}")
        self.params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
        self.description = "nvImageCodec " + " -> ".join(p for p, _ in self.stages)
        split = 0.0 < hw_share < 1.0 and len(self.stages) == 2
        self._hw_cut = int(hw_share * 1000) if split else None
        self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tritonprep-nvjpeg") if split else None
        if split:
            self.description += f" (hardware share {hw_share:.2f}, concurrent)"

    def close(self) -> None:
        """Stop the helper thread; the decoders themselves stay alive until the process ends."""
        if self._side is not None:
            self._side.shutdown(wait=True)
        self._pools.clear()
        self.stages.clear()

    def _wrap(self, img: Any, path: str) -> DecodedImage | None:
        if img is None or img.buffer_kind != self.nv.ImageBufferKind.STRIDED_DEVICE:
            return None
        cai = img.__cuda_array_interface__
        shape, strides = cai["shape"], cai.get("strides")
        if len(shape) != 3 or shape[2] != 3 or cai["typestr"] != "|u1":
            return None  # not 8-bit RGB: let Pillow handle it
        if strides and tuple(strides[1:]) != (3, 1):
            return None
        pitch = strides[0] if strides else shape[1] * 3
        return DecodedImage(int(cai["data"][0]), int(shape[1]), int(shape[0]), int(pitch), img, path)

    def _run_stage(
        self, stage: int, data: Sequence[bytes], todo: list[int], results: list[DecodedImage | None]
    ) -> list[int]:
        """Decode ``todo`` with one stage; fill ``results``; return what it could not decode.

        The output images of earlier calls are handed back to nvImageCodec for reuse (their
        device buffers are resized only when too small), so steady traffic stops allocating
        and freeing device memory per image. Safe because the executor synchronizes its
        stream before the next call. Buffers grown past ``_POOL_MAX_BYTES`` are not kept.
        """
        path, dec = self.stages[stage]
        pool = self._pools.setdefault(stage, [])
        streams = [self.nv.CodeStream(data[i]) for i in todo]
        if len(pool) >= len(todo):
            images = dec.decode(streams, images=pool[: len(todo)], params=self.params, cuda_stream=self.stream.ptr)
        else:
            images = dec.decode(streams, params=self.params, cuda_stream=self.stream.ptr)
            pool.extend(img for img in images if img is not None)
            del pool[_POOL_MAX_IMAGES:]
        if any(img is not None and img.capacity > _POOL_MAX_BYTES for img in images):
            pool[:] = [img for img in pool if img.capacity <= _POOL_MAX_BYTES]
        left = []
        for i, img in zip(todo, images):
            results[i] = self._wrap(img, path)
            if results[i] is None:
                left.append(i)
        return left

    def decode(self, data: Sequence[bytes]) -> list[DecodedImage | None]:
        """Decode ``data`` on the decoder's stream; ``None`` where no GPU stage produced 8-bit RGB."""
        results: list[DecodedImage | None] = [None] * len(data)
        todo = list(range(len(data)))
        if self._hw_cut is not None and self._side is not None and len(todo) > 1:
            to_hw = {i: zlib.crc32(data[i][-256:]) % 1000 < self._hw_cut for i in todo}
            hw = [i for i in todo if to_hw[i]]
            cuda = [i for i in todo if not to_hw[i]]
            side = self._side.submit(self._run_stage, 1, data, cuda, results) if cuda else None
            rest = self._run_stage(0, data, hw, results) if hw else []
            if side is not None:
                side.result()  # what the CUDA stage could not decode stays None: Pillow takes it
            if rest:  # the hardware decoder's leftovers (progressive, odd subsampling) go to CUDA
                self._run_stage(1, data, rest, results)
            return results
        for stage in range(len(self.stages)):
            if not todo:
                break
            todo = self._run_stage(stage, data, todo, results)
        return results
