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

Ordering: each decoder object (every hardware decoder, the CUDA/hybrid stage) decodes on a
CUDA stream of its own, so that several decoder objects can decode at once. On one shared
stream, each call is ordered after whatever the other decoder objects' calls had already
enqueued on it (nvImageCodec joins a call to the stream it is given, at its start and its end);
measured on an H100, 2-3 hardware decoders on the caller's stream were slower than one, while
raw decoders with a stream each scaled. Each stage's stream is joined to the caller's with CUDA
events, both ways:

* before a stage decodes, its stream waits for an event recorded on the caller's stream when
  the call began, so the decode (and nvImageCodec's reallocation of a reused output buffer)
  comes after everything the caller enqueued before, e.g. a kernel still reading that buffer;
* after it decodes (or fails), the caller's stream waits for an event recorded on the stage's
  stream, so the caller's kernel, enqueued on its own stream, sees the pixels, and
  synchronizing the caller's stream also waits for every decode.

The caller enqueues its kernels on its stream and synchronizes it before letting the images
go, so no buffer is freed or reused while still being read.

The decoder's settings are the model's :class:`~tritonprep.spec.DecoderOptions`, taken whole.

Formats: JPEGs go to the hardware stage first; JPEG 2000 and TIFF files (the plain ones the GPU
decodes exactly, :mod:`.headers`) go straight to the second stage, whose GPU backends hold
nvImageCodec's nvJPEG2000 and nvTIFF decoders (their libraries come as the ``nvidia-nvjpeg2k-*``
and ``nvidia-nvtiff-*`` wheels; without them those images fall back to Pillow).

Teardown: :meth:`GpuDecoder.close` (the executor's ``close``, from the model's ``finalize``)
releases everything in the one order that cannot fail: the helper threads are joined, the streams
synchronized, the output images freed while their streams live, then the decoder objects (their
own threads join), then the events and streams. Left to the garbage collector at interpreter exit,
a decoder could be destroyed after the nvImageCodec instance or the stream it used, and abort the
process (``terminate called after throwing an instance of 'std::system_error'``); an ``atexit`` hook
closes any decoder still open before the interpreter starts tearing modules down.

Logging: nvImageCodec prints an ``[ERROR]`` line of its own for every image it cannot decode;
:func:`import_nvimgcodec` sets ``PYNVIMGCODEC_VERBOSITY=0`` (unless the environment sets it)
before nvImageCodec is first imported, and the executor logs decode failures counted instead.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from ..cuda import GPU_EXTRA_HINT, context_poisoned, import_cupy, process_ending
from ..errors import RuntimeUnavailable
from ..spec import DecoderOptions
from .split import hardware_bucket

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


#: nvImageCodec's own log level, read once when it is first imported: 0 silences its per-image
#: ``[ERROR]`` lines (the executor logs failures counted); 1 (errors) to 4 (debug) for debugging
VERBOSITY_ENV = "PYNVIMGCODEC_VERBOSITY"


def import_nvimgcodec() -> Any:
    """Import nvImageCodec (quiet unless ``PYNVIMGCODEC_VERBOSITY`` says otherwise) or raise
    :class:`RuntimeUnavailable` with the install hint."""
    os.environ.setdefault(VERBOSITY_ENV, "0")
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise RuntimeUnavailable(f"nvImageCodec is not installed ({e}); {GPU_EXTRA_HINT}") from None
    return nvimgcodec


#: decoders not closed yet: an atexit hook closes them before the interpreter tears modules down
#: (each GpuDecoder has decoder objects of its own: concurrent decode calls on one decoder object
#: from two threads hung)
_OPEN: weakref.WeakSet[GpuDecoder] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()
#: what nvJPEG's hardware decoder holds per preallocated pixel (its RGB output buffers), bytes
HW_PREALLOC_BYTES_PER_PIXEL = 3


def prealloc_mb(options: DecoderOptions) -> int:
    """The MiB that ``options``' hardware decoders preallocate (0 where no hardware decoder is asked for)."""
    decoders = options.hw_decoders if options.gpu_decoder == "nvimgcodec" and options.hw_decoder else 0
    width, height, batch = options.hw_decoder_prealloc
    return -(-decoders * width * height * batch * HW_PREALLOC_BYTES_PER_PIXEL // 2**20)


#: output images kept for reuse per decoder stage, and the largest buffer worth keeping
_POOL_MAX_IMAGES = 256
_POOL_MAX_BYTES = 16 << 20


def make_decoder(nv: Any, device_id: int, kinds: tuple[Any, ...], options: str, cpu_threads: int) -> Any:
    """An nvImageCodec decoder object of the backend ``kinds`` on ``device_id``, with its option string and host
    threads (:func:`decoder_options`)."""
    return nv.Decoder(
        device_id=device_id, max_num_cpu_threads=cpu_threads, backends=[nv.Backend(k) for k in kinds], options=options
    )


@atexit.register
def _close_open_decoders() -> None:
    """Close the decoders a model left open, while the interpreter and nvImageCodec are whole."""
    with _OPEN_LOCK:
        left = list(_OPEN)
    for decoder in left:
        decoder.close()


class _Stage:
    """One nvImageCodec decoder object, the path it stands for, its CUDA stream and the output images it reuses.

    ``free`` holds output images nothing reads any more; ``lent`` those handed out since the last
    :meth:`release`, whose pixels the executor's kernel may still read. A call takes from ``free``
    only, so two calls before a release (the bisection of a failing batch, the CUDA stage running
    beside the hardware and again for its leftovers) never decode into the same buffers.

    ``stream`` is the CuPy stream the stage decodes on (its own) and ``done`` the event recorded on
    it after each decode. A stage's images are always decoded on the same stream, so nvImageCodec
    never has to synchronize a reused buffer's old stream with a new one.
    """

    def __init__(self, path: str, decoder: Any, stream: Any, done: Any) -> None:
        self.path, self.decoder = path, decoder
        self.stream, self.done = stream, done
        self.free: list[Any] = []
        self.lent: list[Any] = []

    def release(self, max_bytes: int | None = None) -> None:
        """Make every lent image reusable; buffers grown past ``_POOL_MAX_BYTES`` are dropped, and so are
        those that would take the kept images past ``max_bytes`` (the instance's share of its GPU budget)."""
        keep = [img for img in self.lent if img.capacity <= _POOL_MAX_BYTES]
        room = max(0, _POOL_MAX_IMAGES - len(self.free))
        if max_bytes is not None:
            held = sum(img.capacity for img in self.free)
            fits = []
            for img in keep[:room]:
                if held + img.capacity > max_bytes:
                    break
                held += img.capacity
                fits.append(img)
            keep = fits
        self.free.extend(keep[:room])
        self.lent.clear()


def decoder_options(options: DecoderOptions) -> tuple[str, str]:
    """nvImageCodec's option strings of the CUDA stage and of the hardware stage (which adds preallocation)."""
    common = ":fancy_upsampling=1" if options.fancy_upsampling else ":fancy_upsampling=0"
    width, height, batch = options.hw_decoder_prealloc
    hw = (
        f"{common} nvjpeg_hw_decoder:preallocate_width_hint={width} "
        f"nvjpeg_hw_decoder:preallocate_height_hint={height} nvjpeg_hw_decoder:preallocate_batch_size={batch}"
    )
    return common, hw


class GpuDecoder:
    """Staged batched nvImageCodec decoding (hardware, then CUDA/hybrid) on one GPU, set up by ``options``.

    Throughput comes from keeping the hardware engines fed (an H100 has 7 NVJPG engines):

    * ``hw_decoders`` hardware decoder objects decode the JPEGs of a call in that many contiguous
      chunks at once, each on its own thread (one decoder object cannot overlap its own calls, and
      one call at a time leaves the engines idle while the host prepares the next);
    * each decoder gets few host threads (``hw_decoder_threads``, ``cuda_decoder_threads``): nvImageCodec's
      default, cores - 1 threads per decoder woken and joined on every call, costs more than it does
      with several decoders and instances per GPU;
    * the hardware decoders preallocate nvJPEG's buffers for ``hw_decoder_prealloc`` = (width, height,
      batch) instead of growing them under load.

    Every decoder object decodes on a non-blocking CUDA stream of its own, joined to the caller's
    ``stream`` by events before and after (see the module's "Ordering"), so the chunks of a call really
    decode at once and the executor's kernel, launched on the caller's stream, sees every image.
    """

    def __init__(
        self,
        device_id: int,
        stream: Any,
        options: DecoderOptions | None = None,
        *,
        min_chunk: int = 8,
        keep_bytes: int | None = None,
    ) -> None:
        options = options or DecoderOptions()
        nv = import_nvimgcodec()
        self.nv = nv
        self.stream = stream
        self.device_id = device_id
        self.min_chunk = max(1, min_chunk)
        #: the most bytes of decoded images kept for reuse per stage (None: only the count limits it)
        self.keep_bytes = keep_bytes
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self.hw: list[_Stage] = []
        self.cuda: _Stage | None = None
        with _OPEN_LOCK:
            _OPEN.add(self)
        #: recorded on the caller's stream when a call begins; every stage's stream waits for it
        self._ready = self._new_event()
        self.hw = self._hardware_stages(options)
        self.cuda = self._cuda_stage(options)
        if not self.hw and self.cuda is None:
            self.close()
            raise RuntimeUnavailable(f"nvImageCodec could not create any GPU decoder on GPU {device_id}")
        self.params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
        parts = ([f"gpu_hw x{len(self.hw)}"] if self.hw else []) + (["gpu_cuda"] if self.cuda else [])
        self.description = "nvImageCodec " + " -> ".join(parts) + " (own streams)"
        share = options.hw_decoder_share
        split = 0.0 < share < 1.0 and self.hw and self.cuda is not None
        self._hw_cut = int(share * 1000) if split else None
        if split:
            self.description += f" (hardware share {share:.2f}, concurrent)"
        workers = max(0, len(self.hw) - 1) + (1 if split else 0)
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tritonprep-nvjpeg") if workers else None
        )

    def _hardware_stages(self, options: DecoderOptions) -> list[_Stage]:
        """``hw_decoders`` hardware decoder objects (none without ``hw_decoder``, or on a GPU that has none)."""
        nv = self.nv
        stages: list[_Stage] = []
        for _ in range(options.hw_decoders if options.hw_decoder else 0):
            try:
                kinds = (nv.BackendKind.HW_GPU_ONLY,)
                dec = make_decoder(nv, self.device_id, kinds, decoder_options(options)[1], options.hw_decoder_threads)
            except RuntimeError as e:  # e.g. no hardware decoder on this GPU
                log.info("nvImageCodec hardware decoder unavailable on GPU %d: %s", self.device_id, e)
                break
            stages.append(_Stage("gpu_hw", dec, *self._new_stream()))
        return stages

    def _cuda_stage(self, options: DecoderOptions) -> _Stage | None:
        """The nvJPEG CUDA / hybrid decoder object, or None where it cannot be created."""
        nv = self.nv
        try:
            kinds = tuple(getattr(nv.BackendKind, name.upper()) for name in options.cuda_decoder_backends)
            dec = make_decoder(nv, self.device_id, kinds, decoder_options(options)[0], options.cuda_decoder_threads)
        except RuntimeError as e:
            log.info("nvImageCodec CUDA decoder unavailable on GPU %d: %s", self.device_id, e)
            return None
        return _Stage("gpu_cuda", dec, *self._new_stream())

    def _new_event(self) -> Any:
        """A CUDA event for ordering only (no timing) on this decoder's GPU."""
        cp = import_cupy()
        with cp.cuda.Device(self.device_id):
            return cp.cuda.Event(disable_timing=True)

    def _new_stream(self) -> tuple[Any, Any]:
        """``(stream, done event)`` for a new stage: its own non-blocking stream."""
        cp = import_cupy()
        with cp.cuda.Device(self.device_id):
            stream = cp.cuda.Stream(non_blocking=True)
        return stream, self._new_event()

    def close(self) -> None:
        """Release everything, in the order that cannot fail (see the module's "Teardown"); idempotent.

        The caller's stream is the caller's: it stays, and the caller releases it after this.
        """
        if self._closed:
            return
        self._closed = True
        with _OPEN_LOCK:
            _OPEN.discard(self)
        if context_poisoned(self.device_id):  # nothing may wait on the GPU now: kept until the process ends
            self._keep_until_exit()
            log.info("GPU decoders on device %d not released: this process's CUDA context is poisoned", self.device_id)
            return
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        stages = self._stages()
        cp = import_cupy()
        try:  # nothing of ours may still run when its buffers and decoders go
            with cp.cuda.Device(self.device_id):
                for stream in [self.stream, *(stage.stream for stage in stages)]:
                    if stream is not None:
                        stream.synchronize()
        except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
            log.info("closing the GPU decoders after a CUDA error (%s): releasing what can be released", e)
        if process_ending():  # idle now; the process's end frees them (see tritonprep.cuda)
            self._keep_until_exit()
            return
        for stage in stages:  # the output images, while the streams they were decoded on live
            stage.free.clear()
            stage.lent.clear()
        gc.collect()
        for stage in stages:  # the decoder objects (each joins its own threads)
            stage.decoder = None
        gc.collect()
        for stage in stages:  # then their streams and events
            stage.stream = stage.done = None
        self._ready = None
        self.hw = []
        self.cuda = None

    def _keep_until_exit(self) -> None:
        """Never destroy these decoders, not even at interpreter exit: the process's end frees them."""
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self))

    def _stages(self) -> list[_Stage]:
        return [*self.hw, *([self.cuda] if self.cuda else [])]

    def release(self) -> None:
        """Let the next calls reuse the output images decoded so far.

        Call it when nothing reads them any more: after the stream that read them was synchronized,
        or before new work on the caller's stream, where the old reads were enqueued (the new decodes
        are ordered after the old reads: a stage's stream first waits for the caller's stream as it
        stands when :meth:`decode` begins).
        """
        for stage in self._stages():
            stage.release(self.keep_bytes)

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
        self, stage: _Stage, data: Sequence[bytes], todo: list[int], results: list[DecodedImage | None]
    ) -> list[int]:
        """Decode ``todo`` with one decoder object; fill ``results``; return what it could not decode.

        Output images released earlier (:meth:`release`) are handed back to nvImageCodec for reuse
        (their device buffers are resized only when too small), so steady traffic stops allocating
        and freeing device memory per image; the images of this call stay lent until the next release.

        The stage's stream first waits for ``self._ready`` (recorded on the caller's stream by
        :meth:`decode`), and afterwards, even when the decode raised, the caller's stream waits for the
        stage's ``done`` event: nothing the stage enqueued is left outside the caller's stream's order
        (a later synchronize of it covers the decode, whatever happened).
        """
        if not todo:
            return []
        codes = [self.nv.CodeStream(data[i]) for i in todo]
        stage.stream.wait_event(self._ready)
        cuda_stream = stage.stream.ptr
        try:
            if len(stage.free) >= len(todo):
                reuse = stage.free[: len(todo)]
                del stage.free[: len(todo)]
                stage.lent.extend(reuse)  # lent before decoding: a failed decode may still write into them
                images = stage.decoder.decode(codes, images=reuse, params=self.params, cuda_stream=cuda_stream)
            else:
                images = stage.decoder.decode(codes, params=self.params, cuda_stream=cuda_stream)
                stage.lent.extend(img for img in images if img is not None)
        finally:
            stage.done.record(stage.stream)
            self.stream.wait_event(stage.done)
        left = []
        for i, img in zip(todo, images):
            results[i] = self._wrap(img, stage.path)
            if results[i] is None:
                left.append(i)
        return left

    def _run_hardware(self, data: Sequence[bytes], todo: list[int], results: list[DecodedImage | None]) -> list[int]:
        """The hardware stage: ``todo`` in up to ``len(self.hw)`` contiguous chunks decoded at once."""
        k = min(len(self.hw), max(1, len(todo) // self.min_chunk))
        if k <= 1 or self._pool is None:
            return self._run_stage(self.hw[0], data, todo, results)
        size = -(-len(todo) // k)
        chunks = [todo[j * size : (j + 1) * size] for j in range(k)]
        futures = [
            self._pool.submit(self._run_stage, stage, data, chunk, results)
            for stage, chunk in zip(self.hw[1:], chunks[1:])
        ]
        try:
            left = self._run_stage(self.hw[0], data, chunks[0], results)
        finally:  # never leave a decoder busy on another thread: the caller may call it again at once
            wait(futures)
        for f in futures:
            left += f.result()
        return sorted(left)

    def decode(self, data: Sequence[bytes], hardware: Sequence[bool] | None = None) -> list[DecodedImage | None]:
        """Decode ``data``; ``None`` where no GPU stage produced 8-bit RGB.

        ``hardware[i]`` says whether image ``i`` may go to the hardware stage (JPEGs); the others (JPEG
        2000, TIFF) go straight to the second stage. The images are ready for work enqueued on the caller's
        stream after this returns (the caller's stream has been made to wait for every stage that ran).
        """
        if self._closed:
            raise RuntimeUnavailable("the GPU decoders are closed (the model is being unloaded)")
        results: list[DecodedImage | None] = [None] * len(data)
        self._ready.record(self.stream)  # before any stage starts: they all wait for what precedes this call
        todo = [i for i in range(len(data)) if hardware is None or hardware[i]]
        direct = [i for i in range(len(data)) if hardware is not None and not hardware[i]]
        side = None
        if self._hw_cut is not None and self._pool is not None and len(todo) > 1:
            to_hw = {i: hardware_bucket(data[i]) < self._hw_cut for i in todo}
            cuda = [i for i in todo if not to_hw[i]]
            todo = [i for i in todo if to_hw[i]]
            side = self._pool.submit(self._run_stage, self.cuda, data, cuda, results) if cuda else None
        try:
            if self.hw:
                todo = self._run_hardware(data, todo, results)
        finally:
            if side is not None:
                wait([side])
        if side is not None:
            side.result()  # what the CUDA stage could not decode stays None: Pillow takes it
        todo = sorted(todo + direct)  # the hardware decoders' leftovers (progressive, odd subsampling), other formats
        if todo and self.cuda is not None:
            self._run_stage(self.cuda, data, todo, results)
        return results
