"""The GPU executor: nvImageCodec batch decode + one fused CUDA kernel launch per image output.

Per call: the host checks every image's header against the limits (no decoding); the JPEGs are decoded on the GPU in
one batched nvImageCodec call (``cpu_decoder_share`` gives Pillow's threads a share of a large call's JPEGs
meanwhile); Pillow decodes what the GPU decoder cannot take (other formats, CMYK, images it rejects) on a thread
pool, uploaded in one copy; then, for each image output, one kernel launch resizes, crops or letterboxes, normalizes
and lays out the images that output is wanted for into its batch, which stays on the GPU and leaves the model
through DLPack. Each image is decoded once, however many outputs read it. All GPU work is ordered on this instance's
own CUDA stream (the decoder objects decode on streams of their own, joined to it by events), synchronized once at
the end, because Triton reads the outputs right after ``execute`` (``run(synchronize=False)`` leaves the wait to a
caller that goes on on the same stream, ``classify_fused``'s network; the next call waits first). A sticky CUDA
error on the way raises :class:`~tritonprep.errors.InstanceFailed` (:func:`tritonprep.cuda.cuda_fault_guard`).

JPEG 2000 and TIFF files whose header says the GPU decodes them as Pillow does go to nvImageCodec too (its
nvJPEG2000 and nvTIFF decoders). Decode failures are logged counted, at most once a minute per kind
(:mod:`tritonprep.decode.failures`).

With a ``gpu_memory_mb`` budget (:mod:`tritonprep.memory`) the executor caps CuPy's memory pool to it, less the CUDA
context and the hardware decoders' preallocated buffers, and the decoded images its decoders keep to a quarter of
that; a batch that does not fit is tried once more with the pool's cached blocks freed, then again each time the
pool shrinks within ``OUTPUT_WAIT_S``, then raises :class:`~tritonprep.errors.ResourceExhausted` (the model retries
it request by request). :attr:`GpuExecutor.timings` holds the start-up phases' seconds and :meth:`GpuExecutor.close`
releases the GPU in order (decoders, then pools, then the stream).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import cache
from ..cuda import (
    context_poisoned,
    context_sm_count,
    cuda_fault_guard,
    import_cupy,
    note_if_sticky,
    process_ending,
    set_mps_client,
)
from ..decode import ImageHeader, validate
from ..decode.failures import FailureLog
from ..decode.nvimgcodec import DecodedImage, GpuDecoder, prealloc_mb
from ..decode.pillow import decode_rgb
from ..decode.split import cpu_share
from ..errors import ImageError, ResourceExhausted, RuntimeUnavailable
from ..geometry import check_resizable
from ..memory import CUDA_CONTEXT_MB, instance_budget_mb, working_mb
from ..spec import OutputSpec, PreprocessConfig
from .base import DECODE_PATHS, BatchResult, ImageInfo, Wanted, as_config, resolve_wanted
from .resize import ArgumentStaging, resize_into, staging_bytes

log = logging.getLogger(__name__)

#: the largest pinned staging buffer kept between calls (bigger uploads get a temporary one)
STAGING_KEEP_BYTES = 64 << 20
#: the least pinned staging kept (grown to the next power of two above a call's need)
STAGING_FLOOR_BYTES = 1 << 20
#: the longest a batch waits, out of GPU memory, for memory held elsewhere in the process to come back (on the
#: H100 it did within the second under load: earlier batches' outputs on their way to Triton, for one), seconds
OUTPUT_WAIT_S = 1.0


def pool_limit_mb(config: PreprocessConfig) -> int | None:
    """The CuPy pool cap of an instance of ``config`` (None: no ``gpu_memory_mb``): its budget less the CUDA
    context and the hardware decoders' preallocated buffers."""
    budget = instance_budget_mb(config.gpu_memory_mb)
    if budget is None:
        return None
    return working_mb(budget, CUDA_CONTEXT_MB + prealloc_mb(config.decoding), "preprocessing batches")


@contextmanager
def _cancelled_on_error(jobs: Mapping[int, Future]) -> Iterator[None]:
    """Pillow's decodes that have not started yet are cancelled where the call fails (a retry starts its own)."""
    try:
        yield
    except BaseException:
        for job in jobs.values():
            job.cancel()
        raise


@dataclass
class _Decoded:
    """What the decoding of one call produced: where each decoded image lies on the GPU, and how it got there."""

    #: ``{image index: (device pointer, width, height, row pitch)}`` of an upright RGB uint8 image
    sources: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    infos: dict[int, ImageInfo] = field(default_factory=dict)
    #: decoded images and upload buffers: released only after the kernels have read them
    keep_alive: list[Any] = field(default_factory=list)
    decoded_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DECODE_PATHS, 0))


class GpuExecutor:
    """Decode (nvImageCodec, Pillow fallback) and preprocess (fused CuPy kernel) on one GPU."""

    name = "gpu"

    def __init__(self, spec: OutputSpec | PreprocessConfig, device_id: int = 0, *, warm_up: bool = True) -> None:
        """``warm_up``: run :meth:`warm_up` now (False: the caller does, before the first request)."""
        t0 = time.perf_counter()
        #: seconds of each start-up phase (imports, cuda_context, decoders, warm_up), for the instance report
        self.timings: dict[str, float] = {}
        cache.use_for_cupy()  # before the first kernel is compiled: a later start loads it from the cache
        cp = import_cupy()
        self.cp = cp
        self.config = config = as_config(spec)
        #: the CuPy pool's cap, MiB (None: no gpu_memory_mb)
        self.pool_limit_mb = pool_limit_mb(config)
        self.failures = FailureLog(log, f"GPU executor on device {device_id}")
        self.timings["imports"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        set_mps_client(config.mps_active_thread_percentage, config.mps_client_priority)  # before the CUDA context
        try:
            self.device = cp.cuda.Device(device_id)
            self.device.use()
            self.stream = cp.cuda.Stream(non_blocking=True)
        except cp.cuda.runtime.CUDARuntimeError as e:
            raise RuntimeUnavailable(f"GPU {device_id} is not usable: {e}") from None
        #: the SMs this process's context may use (None: the driver does not say)
        self.sm_count = context_sm_count()
        if self.pool_limit_mb is not None:
            with self.device:
                cp.get_default_memory_pool().set_limit(size=self.pool_limit_mb << 20)
        from ..kernels import launch  # imports CuPy-dependent code only now

        self._kernels = launch
        self.timings["cuda_context"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.decoder: GpuDecoder | None = None
        if config.decoding.gpu_decoder == "nvimgcodec":
            try:
                keep = None if self.pool_limit_mb is None else (self.pool_limit_mb << 20) // 4
                self.decoder = GpuDecoder(device_id, self.stream, config.decoding, keep_bytes=keep)
            except RuntimeUnavailable as e:
                log.warning("GPU %d: %s; decoding with Pillow, preprocessing on the GPU", device_id, str(e))
        self.timings["decoders"] = time.perf_counter() - t0
        threads = config.resolved_cpu_threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tritonprep-gpu-cpu")
        self._pinned: Any = None
        self._in_flight_staging: Any = None
        #: the kernels' arguments on their way to the GPU (written after the last call's work was waited for)
        self._arguments = ArgumentStaging()
        #: what the last unsynchronized call's GPU work still reads (its decoded images, its upload), kept until
        #: the stream is synchronized; None when nothing is pending
        self._pending: list[Any] | None = None
        self._closed = False
        try:
            if warm_up:
                self.warm_up()
        except BaseException:  # the caller never gets this executor: stop its threads and decoders here
            self.close()
            raise

    def describe(self) -> str:
        """One line for the log: the device, the decoder stages and the kernel's options."""
        decoder = self.decoder.description if self.decoder else "Pillow (CPU) + upload"
        kernels = ", ".join(
            f"{name} {s.interpolation}/{s.layout}/{s.channel_order}/{s.dtype}" for name, s in self.config.outputs
        )
        pool = f"; CuPy pool capped at {self.pool_limit_mb} MiB" if self.pool_limit_mb is not None else ""
        share = self.config.mps_active_thread_percentage
        if share:
            pool += f"; MPS share {share} %: {self.sm_count if self.sm_count is not None else 'unknown'} SMs"
        pool += "; MPS priority below normal" if self.config.mps_client_priority else ""
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items())
        return (
            f"GPU executor on device {self.device.id}: decoder {decoder}; kernel {kernels}{pool}; started in {phases}"
        )

    # ------------------------------------------------------------------ helpers
    def warm_up(self) -> None:
        """Load the kernel and initialise the decoders now rather than on the first request (one small JPEG);
        any thread may run it, once, before the first request."""
        import io

        from PIL import Image

        ramp = np.linspace(0, 255, 64 * 48 * 3).astype(np.uint8).reshape(48, 64, 3)
        buf = io.BytesIO()
        Image.fromarray(ramp).save(buf, format="JPEG", quality=90)
        t0 = time.perf_counter()
        result = self.run([buf.getvalue()])
        if result.errors:
            raise RuntimeUnavailable(f"GPU executor warm-up failed: {result.errors[0]}")
        self.timings["warm_up"] = time.perf_counter() - t0
        self.timings["warm_up_decode"] = result.timings["decode_s"]  # the decoders' first call, of warm_up

    def _staging(self, nbytes: int) -> np.ndarray:
        """A pinned host buffer of at least ``nbytes``: up to ``STAGING_KEEP_BYTES`` one kept and reused across calls
        (grown to the next power of two); a larger upload's own, released after the call (:meth:`_release_pinned`),
        so that a rare huge batch does not pin that much host memory for the life of the process."""
        import cupyx

        if nbytes > STAGING_KEEP_BYTES:
            return cupyx.empty_pinned((nbytes,), np.uint8)
        if self._pinned is None or self._pinned.nbytes < nbytes:
            self._pinned = None
            self._release_pinned()
            self._pinned = cupyx.empty_pinned((staging_bytes(nbytes, STAGING_FLOOR_BYTES),), np.uint8)
        return self._pinned

    def _release_pinned(self) -> None:
        """Hand pinned blocks that nothing uses any more back to the driver (CuPy caches them)."""
        self.cp.get_default_pinned_memory_pool().free_all_blocks()

    def _gpu_decodable(self, header: ImageHeader) -> bool:
        """Whether the GPU decoder should take the image (its format one of ``gpu_formats``): JPEGs except CMYK/YCCK
        (Pillow converts Adobe CMYK correctly) and malformed EXIF (Pillow's reading of it is the reference,
        nvImageCodec's may differ); JPEG 2000 and TIFF files whose header says the GPU decodes them as Pillow does."""
        if header.format not in self.config.decoding.gpu_formats:
            return False
        jpeg = header.jpeg
        if jpeg is None:
            return header.gpu_decodable
        return jpeg.components in (1, 3) and jpeg.orientation is not None

    def _gpu_decode(self, data: list[bytes], hardware: list[bool]) -> list[DecodedImage | None]:
        """Batch decode (``hardware``: the JPEGs, which may go to the hardware decoder); if the decoder fails the
        whole batch, bisect to isolate the culprits."""
        assert self.decoder is not None
        try:
            return self.decoder.decode(data, hardware)
        except (RuntimeError, ValueError) as e:
            self.check_context()  # a poisoned context is not the images' fault: fail the instance
            if len(data) == 1:
                self.failures.count("gpu_error", example=f"nvImageCodec: {e}; Pillow decodes it", level=logging.WARNING)
                return [None]
            mid = len(data) // 2
            return self._gpu_decode(data[:mid], hardware[:mid]) + self._gpu_decode(data[mid:], hardware[mid:])

    def _cpu_decode(self, data: bytes, header: ImageHeader) -> np.ndarray | ImageError:
        try:
            return decode_rgb(data, self.config.limits, header)
        except ImageError as e:
            return e

    def _upload(self, arrays: Sequence[np.ndarray]) -> tuple[Any, list[int]]:
        """Copy decoded host images to the GPU with one transfer; return the buffer and offsets."""
        offsets, total = [], 0
        for a in arrays:
            offsets.append(total)
            total += (a.nbytes + 255) // 256 * 256
        staging = self._staging(total)
        for a, off in zip(arrays, offsets):
            staging[off : off + a.nbytes] = a.reshape(-1)
        device_buf = self.cp.empty((total,), dtype=np.uint8)
        device_buf.set(staging[:total], stream=self.stream)
        self._in_flight_staging = staging  # the copy is asynchronous: hold the source until the stream syncs
        return device_buf, offsets

    # ------------------------------------------------------------------ API
    def run(self, images: Sequence[bytes], wanted: Wanted | None = None, *, synchronize: bool = True) -> BatchResult:
        """Preprocess ``images`` into one GPU batch per wanted output; bad images are reported, never raised.

        ``synchronize`` False: the outputs are complete once :attr:`stream` is synchronized, not yet when
        this returns; the caller reads them on that stream (or waits for it). The next call waits first.

        Raises :class:`~tritonprep.errors.InstanceFailed` after a sticky CUDA error (the
        context is poisoned: every later call would fail too), so that the instance is taken
        out of service and restarted instead of failing every request silently.
        """
        rows = resolve_wanted(self.config, len(images), wanted)
        oom = self.cp.cuda.memory.OutOfMemoryError
        with cuda_fault_guard(self.device.id, "the GPU executor", probe=self.check_context):
            error = ""
            deadline = None
            while True:  # once more at once with the pool's cached blocks freed, then each time the pool shrinks
                try:
                    return self._run(images, rows, synchronize)
                except oom as e:
                    error = str(e)  # the message only: the exception's traceback holds the attempt's arrays
                self._free_failed_attempt()  # out of the except block, so that the attempt's arrays can go
                if deadline is None:
                    deadline = time.monotonic() + OUTPUT_WAIT_S
                elif not self._memory_came_back(deadline):
                    break
            raise ResourceExhausted(
                f"{len(images)} image(s) do not fit in this instance's GPU memory"
                + (f" (gpu_memory_mb caps its CuPy pool at {self.pool_limit_mb} MiB)" if self.pool_limit_mb else "")
                + f": {error}; send fewer or smaller images per request, or raise gpu_memory_mb"
            )

    def _free_failed_attempt(self) -> None:
        """After a run out of GPU memory: its arrays back to the pool (the collector breaks their frames' cycles with
        the exception), then the cached blocks to the driver, so that a retry (here, or per request) starts clean.
        The stream is waited for first: the attempt's uploads may still read the staging buffers the retry writes."""
        self.stream.synchronize()
        gc.collect()
        self._release_pools()

    def _memory_came_back(self, deadline: float) -> bool:
        """Wait until the pool holds less than now (memory released elsewhere in the process) or ``deadline``
        passes; whether it did."""
        pool = self.cp.get_default_memory_pool()
        held = pool.used_bytes()
        while time.monotonic() < deadline:
            time.sleep(0.002)
            if pool.used_bytes() < held:
                return True
        return False

    def check_context(self) -> None:
        """Raise CuPy's CUDA error if this process's context holds a sticky error."""
        self.stream.synchronize()

    def inject_illegal_address(self) -> None:
        """Fault injection only: poison the CUDA context (see tritonprep.triton.faults)."""
        self._kernels.illegal_write(self.stream)

    def _run(self, images: Sequence[bytes], wanted: dict[str, list[int]], synchronize: bool = True) -> BatchResult:
        t0 = time.perf_counter()
        if self._pending is not None:  # the last call left its work to its caller: it is done before the staging
            self.stream.synchronize()  # buffer is written again
            self._settled()
        if self.decoder is not None:  # the last call's images: read by work that precedes ours on this stream
            self.decoder.release()
        errors, headers, gpu_idx, cpu_idx = self._check(images)
        shared = cpu_share(images, headers, gpu_idx, self.config.decoding.cpu_decoder_share)
        jobs = self._start_cpu(images, headers, shared)  # Pillow's share decodes while the GPU decoders run
        decoded = _Decoded()
        with self.device, self.stream, _cancelled_on_error(jobs):
            left = self._decode_on_gpu(images, [i for i in gpu_idx if i not in jobs], decoded, headers)
            t_decode_gpu = time.perf_counter()
            jobs.update(self._start_cpu(images, headers, cpu_idx + left))
            errors.update(self._decode_on_cpu(jobs, set(shared), decoded))
            for e in errors.values():
                self.failures.count(e.reason, example=str(e))
            t_decode = time.perf_counter()
            outputs = self._launch(wanted, decoded.sources)
            t_launch = time.perf_counter()
            self._pending = decoded.keep_alive  # decoded images are released only after the kernel has read them
            if synchronize:
                self.stream.synchronize()
                self._settled()
        t1 = time.perf_counter()
        return BatchResult(
            outputs,
            errors,
            {k: v for k, v in decoded.decoded_by.items() if v},
            timings={
                "decode_gpu_s": t_decode_gpu - t0,
                "decode_s": t_decode - t0,
                "launch_s": t_launch - t0,
                "total_s": t1 - t0,
            },
            images=decoded.infos,
        )

    def _check(
        self, images: Sequence[bytes]
    ) -> tuple[dict[int, ImageError], dict[int, ImageHeader], list[int], list[int]]:
        """Every image's header against the limits, before anything is decoded: ``(errors, headers, indices for the
        GPU decoder, indices for Pillow)``."""
        errors: dict[int, ImageError] = {}
        headers: dict[int, ImageHeader] = {}
        gpu_idx: list[int] = []
        cpu_idx: list[int] = []
        for i, data in enumerate(images):
            try:
                headers[i] = validate(data, self.config.limits)
                for _, out_spec in self.config.outputs:  # before anything is decoded: see check_resizable
                    check_resizable(out_spec, headers[i].width, headers[i].height)
            except ImageError as e:
                errors[i] = e
                continue
            (gpu_idx if self.decoder is not None and self._gpu_decodable(headers[i]) else cpu_idx).append(i)
        return errors, headers, gpu_idx, cpu_idx

    def _decode_on_gpu(
        self, images: Sequence[bytes], gpu_idx: list[int], decoded: _Decoded, headers: Mapping[int, ImageHeader]
    ) -> list[int]:
        """Decode ``gpu_idx`` with nvImageCodec into ``decoded``; return the indices it left to Pillow."""
        left: list[int] = []
        if not gpu_idx:
            return left
        hardware = [headers[i].format == "JPEG" for i in gpu_idx]
        for i, img in zip(gpu_idx, self._gpu_decode([images[i] for i in gpu_idx], hardware)):
            if img is None:
                self.failures.count("gpu_fallback", example=f"a {headers[i].format} the GPU declined")
                left.append(i)
                continue
            decoded.sources[i] = (img.ptr, img.width, img.height, img.pitch)
            decoded.infos[i] = ImageInfo(img.width, img.height, img.path)
            decoded.keep_alive.append(img.owner)
            decoded.decoded_by[img.path] += 1
        return left

    def _start_cpu(
        self, data: Sequence[bytes], headers: Mapping[int, ImageHeader], idx: list[int]
    ) -> dict[int, Future]:
        """Pillow's decodes of ``idx``, started on the thread pool."""
        return {i: self._pool.submit(self._cpu_decode, data[i], headers[i]) for i in idx}

    def _decode_on_cpu(self, jobs: Mapping[int, Future], shared: set[int], decoded: _Decoded) -> dict[int, ImageError]:
        """Wait for Pillow's decodes (``jobs``; ``shared``: those ``cpu_decoder_share`` chose, the rest fell back) and
        upload them in one copy; return their errors."""
        arrays = {i: job.result() for i, job in jobs.items()}
        host = [(i, a) for i, a in arrays.items() if isinstance(a, np.ndarray)]
        if host:
            buf, offsets = self._upload([a for _, a in host])
            decoded.keep_alive.append(buf)
            for (i, a), off in zip(host, offsets):
                path = "cpu" if i in shared else "cpu_fallback"
                decoded.sources[i] = (buf.data.ptr + off, a.shape[1], a.shape[0], a.shape[1] * 3)
                decoded.infos[i] = ImageInfo(a.shape[1], a.shape[0], path)
                decoded.decoded_by[path] += 1
        return {i: a for i, a in arrays.items() if isinstance(a, ImageError)}

    def _launch(self, wanted: Mapping[str, list[int]], sources: Mapping[int, tuple[int, int, int, int]]) -> dict:
        """One kernel launch per wanted output, over the images it is wanted for (a failed image's row stays
        unwritten), its arguments through this executor's pinned staging; returns the output batches."""
        outputs = {}
        specs = self.config.specs
        rows_in = {n: {row: sources[i] for row, i in enumerate(rows) if i in sources} for n, rows in wanted.items()}
        parts = self._arguments.parts([self._kernels.argument_bytes(len(r)) for r in rows_in.values()])
        for (name, rows), staging in zip(wanted.items(), parts):
            out_spec, n = specs[name], len(rows)
            # allocate in steps of 16 images: a handful of sizes recur, so CuPy's pool reuses them
            # instead of caching a block of every batch size ever seen
            shape = (-(-max(n, 1) // 16) * 16,) + out_spec.output_shape
            outputs[name] = self.cp.empty(shape, dtype=out_spec.numpy_dtype)[:n]
            resize_into(out_spec, rows_in[name], outputs[name], self.stream, staging)
        return outputs

    def _settled(self) -> None:
        """After the stream synchronized: let the last call's decoded images and upload go."""
        self._pending = None
        self._drop_staging()

    def _drop_staging(self) -> None:
        """After the stream synchronized: forget the upload's source, and hand an oversized one's memory back."""
        temporary = self._in_flight_staging is not None and self._in_flight_staging is not self._pinned
        self._in_flight_staging = None
        if temporary:  # an oversized upload's own buffer: hand it back now
            self._release_pinned()

    def _release_pools(self) -> None:
        """Hand the cached blocks of CuPy's device and pinned pools back to the driver."""
        with self.device:
            self.cp.get_default_memory_pool().free_all_blocks()
        self._release_pinned()

    def close(self) -> None:
        """Release the GPU in the order that cannot fail at interpreter exit (idempotent): the stream's work awaited,
        the decoders closed (threads, images, decoder objects, streams, events), the CPU threads joined, the staging
        buffer and the pools' cached blocks handed back, the stream dropped last."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if context_poisoned(self.device.id):  # nothing may wait on the GPU now (see tritonprep.cuda)
            if self.decoder is not None:
                self.decoder.close()
            log.info("GPU executor on device %d: not released, its CUDA context is poisoned", self.device.id)
            return
        t0 = time.perf_counter()
        cuda_errors = (self.cp.cuda.runtime.CUDARuntimeError, self.cp.cuda.driver.CUDADriverError)
        try:
            self.stream.synchronize()
        except cuda_errors as e:
            note_if_sticky(e, self.device.id)  # then nothing below waits on the GPU
            log.info("closing the GPU executor after a CUDA error (%s): releasing what can be released", e)
        finally:  # a poisoned context raises above: the threads are stopped all the same
            poisoned = context_poisoned(self.device.id)
            if not poisoned:
                self._pending = None  # an unsynchronized call's decoded images go before their decoders
            if self.decoder is not None:
                self.decoder.close()
                self.decoder = None
            self._pool.shutdown(wait=True)
            self.failures.flush()
            if poisoned or process_ending():  # idle now; the process's end frees the rest (see tritonprep.cuda)
                log.info("GPU executor on device %d: idle in %.2f s", self.device.id, time.perf_counter() - t0)
            else:
                self._pinned = self._in_flight_staging = None
                self._arguments.release()
                try:
                    self._release_pools()
                except cuda_errors as e:
                    log.info("releasing the CuPy pools: %s", e)
                log.info("GPU executor on device %d: released in %.2f s", self.device.id, time.perf_counter() - t0)
            self.stream = None

    def __enter__(self) -> GpuExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
