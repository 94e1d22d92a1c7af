"""ONNX Runtime's CUDA execution provider, shape-stable: one session per batch bucket.

ORT's CUDA EP plans (and with ``EXHAUSTIVE`` search, benchmarks) every convolution for the input
shape it sees, and plans again whenever the shape changes; Triton's dynamic batcher changes the
batch size on almost every call, which made the classifier slower on the GPU than on the CPU
(9 img/s under load, measured). So each batch *bucket* (1, 2, 4, ... up to ``max_batch_size``)
gets a session of its own that only ever sees that one shape:

* the session's free batch dimension is fixed to the bucket (``add_free_dimension_override_by_name``),
  so ORT constant-folds the shape arithmetic and every node runs on the GPU;
* its input and output are bound once to buffers on the instance's device (IO binding), and a
  batch is copied into the input buffer (padded up to the bucket: rows are independent) straight
  from where it lives, a GPU tensor from the preprocess model included: no trip through the host;
* with ``cuda_graphs`` each bucket's network is captured once as a CUDA graph and replayed, which
  removes the per-kernel launch cost that dominates small batches;
* every bucket runs (and is captured) while the model loads, so no request pays a tuning or a capture; *late*
  buckets (:mod:`.late_buckets`) are made on a thread while the model serves instead, which keeps their seconds out
  of the start, and one call captures and times them once they are made;
* a batch runs on the buckets that cover it in the least time (:mod:`.bucket_plan`: each bucket's replay
  is timed once it is captured), so a few buckets serve every batch size.

All work is ordered on one CUDA stream of the instance (``user_compute_stream``), which CuPy's copies
use too. ORT is told not to synchronize it at the end of a run (run option
``disable_synchronize_execution_providers``): :meth:`OrtCudaRuntime.infer_many` waits once, after the bucket
runs, the copy out (none where ``then`` reads one bucket run in place) and whatever the caller enqueues after
them (``then``: the top-k kernel and its copy to the host), instead of once per step.

How sessions are made is :mod:`.ort_sessions`; the CUDA EP options behind memory and start time, arena caps from the
instance's ``gpu_memory_mb``, the built-in CUDA EP's lookup and the optimized models kept between starts are
:mod:`.ort_options`.
:attr:`OrtCudaRuntime.timings` holds the seconds of each start-up phase (for the instance report), and
:meth:`OrtCudaRuntime.close` releases everything on the GPU in an order that cannot fail at exit.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import use_for_cupy
from ..cuda import cuda_fault_guard, import_cupy, note_if_sticky
from ..errors import ConfigError, RuntimeUnavailable
from .bucket_plan import BucketPlan, increasing_sizes, measure
from .late_buckets import ANNOUNCED, LateBuckets
from .ort_options import (  # the lookup and error helpers stay importable from here
    GPU_INSTALL_HINT,
    CudaEpOptions,
    OptimizedModels,
    cuda_provider_available,
    import_onnxruntime,
    preload,
    run_options,
    session_caps_mb,
)
from .ort_sessions import BucketSessions
from .rows import copy_rows

log = logging.getLogger(__name__)

#: the network input types bound on the GPU (ONNX Runtime's names): FP32, or FP16 for a network that takes it
INPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _numel(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


class _Bucket:
    """One batch size: its session, its bound input and output buffers."""

    def __init__(self, size: int, session: Any, x: Any, y: Any, binding: Any) -> None:
        self.size, self.session, self.x, self.y, self.binding = size, session, x, y, binding


def _release(bucket: _Bucket) -> None:
    """Let a bucket that will not be used go: its binding cleared, then its session and buffers dropped."""
    for clear in ("clear_binding_inputs", "clear_binding_outputs"):
        with contextlib.suppress(Exception):  # ORT raises its own types; the rest goes regardless
            getattr(bucket.binding, clear)()
    bucket.binding = bucket.session = bucket.x = bucket.y = None


class OrtCudaRuntime:
    """EfficientNet-style classifier on ONNX Runtime's CUDA EP: a session per batch bucket, IO on the GPU."""

    on_gpu = True

    def __init__(
        self,
        onnx_path: Path,
        input_dims: tuple[int, ...],
        *,
        device_id: int = 0,
        buckets: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
        nhwc: bool = False,
        cuda_graphs: bool = True,
        ep_options: CudaEpOptions | None = None,
        gpu_memory_mb: int | None = None,
        gpu_mem_limit_mb: int = 0,
        shared_mb: int = 0,
        cache: bool = True,
        stream: Any = None,
        meanwhile: Callable[[], object] | None = None,
        late_buckets: Sequence[int] = (),
        late_start: Callable[[], bool] | None = None,
    ) -> None:
        """``meanwhile``: the caller's other start-up work (``classify_fused``'s preprocessing warm-up), run on
        this thread while the buckets' first runs go on a thread of their own; the captures wait for both.
        ``late_buckets``: sizes made after this returns, on a thread, and used from the call after they are made
        (:mod:`.late_buckets`, which waits for ``late_start`` first); their arena caps come out of the same
        ``gpu_memory_mb``."""
        t0 = time.perf_counter()
        #: seconds of each start-up phase: imports, cuda_context, session_b<N>, first_run_b<N> and capture_b<N> per
        #: bucket, measure (the buckets' replay times)
        self.timings: dict[str, float] = {}
        self._closed = False
        self._buckets: list[_Bucket] = []
        self._meanwhile = meanwhile
        self._late: LateBuckets | None = None
        if not buckets or not increasing_sizes(buckets):
            raise ConfigError(f"batch_buckets must be increasing positive sizes, got {list(buckets)}")
        if not increasing_sizes(late_buckets) or any(s in buckets for s in late_buckets):
            raise ConfigError(
                f"late_batch_buckets must be increasing positive sizes that batch_buckets "
                f"({','.join(map(str, buckets))}) does not have, got {list(late_buckets)}"
            )
        ort = import_onnxruntime()
        if not cuda_provider_available(ort):
            raise RuntimeUnavailable(f"this onnxruntime build has no CUDA execution provider; {GPU_INSTALL_HINT}")
        cupy = import_cupy()
        #: how a batch is spread over the buckets (their replay times measured in the warm-up)
        self.plan = BucketPlan(buckets)
        preload_report = preload(ort)
        if cache:
            use_for_cupy()  # CuPy's kernels (copies, casts, the top-k) compiled once, kept for later starts
        self.timings["imports"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._cp = cupy
        self._own_stream = stream is None
        #: what a sticky fault in a run is said to come from: on a shared stream, work enqueued before the run
        self.fault_source = (
            "the network (ONNX Runtime CUDA)"
            if stream is None
            else "the network (ONNX Runtime CUDA) or the work before it on its shared stream (the preprocessing)"
        )
        try:
            self.device = cupy.cuda.Device(device_id)
            self.device.use()
            self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
            props = cupy.cuda.runtime.getDeviceProperties(device_id)
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise RuntimeUnavailable(f"GPU {device_id} is not usable: {e}") from None
        self.timings["cuda_context"] = time.perf_counter() - t0
        self.input_dims = tuple(input_dims)
        self.max_batch = buckets[-1]
        self.ep_options = ep_options or CudaEpOptions()
        every = sorted({*buckets, *late_buckets})
        io_mb = sum(b * (_numel(self.input_dims) + 1000) * 4 for b in every) / 2**20  # bound input and output rows
        caps = session_caps_mb(
            every, budget_mb=gpu_memory_mb, explicit_mb=gpu_mem_limit_mb, io_mb=io_mb, shared_mb=shared_mb
        )
        #: the arena cap of each bucket session (late ones included), MiB (0: none)
        self.caps_mb = dict(zip(every, caps))
        self.session_caps_mb = [self.caps_mb[size] for size in buckets]
        gpu = props.get("name", b"")
        gpu = gpu.decode(errors="replace") if isinstance(gpu, bytes) else str(gpu)
        models = (
            OptimizedModels.open(onnx_path, ort.__version__, gpu, props.get("major"), props.get("minor"), nhwc)
            if cache
            else None
        )
        provider = {"device_id": str(device_id), "user_compute_stream": str(self.stream.ptr)}
        provider["prefer_nhwc"] = "1" if nhwc else "0"
        #: how each bucket's session is made (its options, the optimized models kept, what ONNX Runtime refused)
        self._sessions = BucketSessions(
            ort, onnx_path, models, provider, self.ep_options, self.caps_mb, every, cuda_graphs, preload_report
        )
        self.cuda_graphs = cuda_graphs
        try:
            for size in buckets:
                t0 = time.perf_counter()
                self._buckets.append(self._make_bucket(size))
                self.timings[f"session_b{size}"] = time.perf_counter() - t0
            self.cuda_graphs = self._sessions.cuda_graphs  # off if ONNX Runtime refused a capture
            self.name = "onnxruntime-cuda" + ("+graphs" if self.cuda_graphs else "") + ("+nhwc" if nhwc else "")
            self.name += "" if self._sessions.strict else "+cpu-nodes"
            self.input_name = self._buckets[0].session.get_inputs()[0].name
            #: input parts that arrived on another GPU: the Python backend of Triton 2.51 hands a GPU input over
            #: on the GPU it was made on (it asks for ``TRITONSERVER_MEMORY_GPU`` with the source's device id), so
            #: a classifier instance on GPU 1 can receive preprocess output from GPU 0; copied peer to peer here
            self.cross_device_copies = 0
            self._warm_thread = threading.get_ident()
            self._warned_thread = False
            #: a bucket's run under :meth:`infer_many`: ORT leaves the stream to it (one wait per call, not per run)
            self.run_options = run_options(ort)
            self._warm_up()
            if late_buckets:
                what = f"classifier on GPU {device_id}"
                self._late = LateBuckets(
                    late_buckets, self._make_bucket, self._first_run, _release, self._once(), what, late_start
                )
        except BaseException:  # the caller never gets this runtime: release what it made here
            self.close()
            raise
        log.info(
            "classifier on GPU %d: %s, batch buckets %s (one session each, captured while loading; one run %s)%s, "
            "cuDNN %s%s; started in %s",
            device_id,
            self.name,
            ",".join(map(str, buckets)),
            self.plan.describe(),
            f", late buckets {','.join(map(str, late_buckets))} {ANNOUNCED}" if late_buckets else "",
            self.ep_options.describe(),
            f", arenas capped at {', '.join(f'{b}: {c}' for b, c in zip(every, caps))} MiB" if any(caps) else "",
            ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()),
        )

    def _make_bucket(self, size: int) -> _Bucket:
        """The session of bucket ``size`` with its bound buffers (not yet run)."""
        with self.device:
            return self._bind(self._sessions.session(size), size, self.device.id)

    def _bind(self, session: Any, size: int, device_id: int) -> _Bucket:
        cp = self._cp
        inp, out = session.get_inputs()[0], session.get_outputs()[0]
        if tuple(inp.shape[1:]) != self.input_dims:
            raise ConfigError(
                f"the ONNX input {inp.name!r} is {inp.shape[1:]} per image, the model config says "
                f"{list(self.input_dims)} (a channel-last input of an NCHW network runs its FP16 variant taking FP16 "
                "NHWC, model.fp16.nhwc.onnx, which `make model` writes for the classifier)"
            )
        out_shape = (size, *(int(d) for d in out.shape[1:]))
        dtype = INPUT_TYPES.get(inp.type)
        if dtype is None:
            raise ConfigError(f"the ONNX input {inp.name!r} is {inp.type}; expected one of {', '.join(INPUT_TYPES)}")
        with self.stream:
            x = cp.zeros((size, *self.input_dims), dtype=dtype)  # padded rows stay finite
            y = cp.zeros(out_shape, dtype=np.float32)
        self.stream.synchronize()
        binding = session.io_binding()
        binding.bind_input(inp.name, "cuda", device_id, dtype, x.shape, x.data.ptr)
        binding.bind_output(out.name, "cuda", device_id, np.float32, y.shape, y.data.ptr)
        return _Bucket(size, session, x, y, binding)

    def _warm_up(self) -> None:
        """Each bucket's first run (cuDNN's heuristics pick each convolution's algorithm: seconds per bucket), neither
        capturing nor replaying (run option ``gpu_graph_id`` -1), on a thread while ``meanwhile`` runs here (ONNX
        Runtime lets go of the GIL, the decoders' first call may not); then the captures (hundredths of a second:
        the algorithms are known) and the replay times on this thread, the one :meth:`infer` runs on (ONNX Runtime
        keeps its graphs per thread; a capture needs the process to itself)."""
        pairs = list(zip(self._buckets, self.session_caps_mb))
        first = self._once() if self.cuda_graphs else None
        if self._meanwhile is None:
            self._first_runs(pairs, first)
        else:  # an error of meanwhile goes up once the first runs are over (the pool waits for them)
            entered = threading.Event()
            with ThreadPoolExecutor(1, thread_name_prefix="tritonprep-ort-first-runs") as pool:
                runs = pool.submit(self._first_runs, pairs, first, entered)
                entered.wait()  # meanwhile may hold the GIL for seconds: the first run is inside ONNX Runtime first
                self._meanwhile()
                runs.result()
        if self.cuda_graphs:
            for bucket, cap in pairs:
                t0 = time.perf_counter()
                self._run_bucket(bucket, cap)
                self.timings[f"capture_b{bucket.size}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._measure_plan()
        self.timings["measure"] = time.perf_counter() - t0

    def _measure_plan(self) -> None:
        """The plan from every bucket's replay, timed now, the buckets taking turns (:func:`measure`)."""
        sizes = [bucket.size for bucket in self._buckets]
        self.plan = BucketPlan(sizes, measure(sizes, self._replay))

    def _once(self) -> Any:
        """Run options of a bucket's first run: it neither captures nor replays (``gpu_graph_id`` -1) where graphs
        are on."""
        options = import_onnxruntime().RunOptions()
        if self.cuda_graphs:
            options.add_run_config_entry("gpu_graph_id", "-1")
        return options

    def _replay(self, size: int) -> None:
        """One run of bucket ``size`` (its graph, once captured), waited for: what :func:`measure` times."""
        bucket = self._bucket(size)
        bucket.session.run_with_iobinding(bucket.binding)
        self.stream.synchronize()

    def _first_run(self, bucket: _Bucket, options: Any) -> None:
        """A late bucket's first run (on the late buckets' thread)."""
        self._run_bucket(bucket, self.caps_mb[bucket.size], options)

    def _adopt_late(self) -> None:
        """The late buckets, once their thread has made them all (:mod:`.late_buckets`): captured on this thread (the
        serving one: graphs are per thread), timed and added to the plan. One that cannot be captured is left out."""
        late = self._late
        if late is None:
            return
        if self.cuda_graphs and threading.get_ident() != self._warm_thread:  # ORT captures again on this thread:
            self._late = None  # nothing else may run meanwhile, and these would be captured on the wrong thread
            for bucket in late.stop():
                _release(bucket)
            log.warning("late buckets left out: the network runs on another thread than it was warmed up on")
            return
        if not late.ready():
            return
        self._late = None
        t0 = time.perf_counter()
        added = []
        for bucket in late.take():
            self._buckets = sorted([*self._buckets, bucket], key=lambda b: b.size)
            try:
                if self.cuda_graphs:
                    self._run_bucket(bucket, self.caps_mb[bucket.size])  # the capture
                self._replay(bucket.size)
            except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own types; a sticky fault shows below
                log.warning("late bucket %d left out: its capture failed (%s)", bucket.size, e)
                self._buckets = [b for b in self._buckets if b is not bucket]
                _release(bucket)
                continue
            added.append(bucket.size)
        self.stream.synchronize()  # a sticky fault of a capture is the instance's (the caller's fault guard)
        if added:  # every bucket timed again, taking turns: the start's times were taken idle, these under load
            self._measure_plan()
        self.timings.update(late.timings, late_adopt=time.perf_counter() - t0)
        if added:
            log.info(
                "classifier on GPU %d: late bucket(s) %s added while serving (made in %.2f s, captured and timed in "
                "%.3f s); one run %s",
                self.device.id,
                ",".join(map(str, added)),
                late.timings.get("late_buckets", 0.0),
                self.timings["late_adopt"],
                self.plan.describe(),
            )

    def _first_runs(self, pairs: list[tuple[_Bucket, int]], options: Any, entered: Any = None) -> None:
        """``entered`` (a ``threading.Event``) is set a few bytecodes before the first run calls into ONNX Runtime,
        which lets go of the GIL: well within the interpreter's switch interval."""
        if entered is not None:
            entered.set()
        for bucket, cap in pairs:
            t0 = time.perf_counter()
            self._run_bucket(bucket, cap, options)
            self.timings[f"first_run_b{bucket.size}"] = time.perf_counter() - t0

    @staticmethod
    def _run_bucket(bucket: _Bucket, cap: int, options: Any = None) -> None:
        """One run of ``bucket``'s session on its bound buffers; an arena over its cap says why."""
        try:
            bucket.session.run_with_iobinding(bucket.binding, options)
        except Exception as e:  # noqa: BLE001 - ORT raises its own types; an arena over its cap says why
            if cap and "allocat" in str(e).lower():
                raise ConfigError(
                    f"bucket {bucket.size} needs more GPU memory than its {cap} MiB arena cap ({e}); raise "
                    "gpu_memory_mb (or set gpu_mem_limit_mb), or use smaller batch_buckets"
                ) from None
            raise

    def close(self) -> None:
        """Release the GPU: the IO bindings, then the sessions (their CUDA graphs and arenas), the bound buffers
        and the stream, after the work on it is done; idempotent. Call it from the model's ``finalize``: left to
        the garbage collector at interpreter exit, an ORT session can be destroyed after its stream or the CUDA
        runtime, and its destructor's CUDA error ends the stub with ``terminate called``. Late buckets still being made
        are stopped first (:meth:`LateBuckets.stop`)."""
        if self._closed:
            return
        self._closed = True
        t0 = time.perf_counter()
        late, self._late = getattr(self, "_late", None), None
        unused_late = late.stop() if late is not None else []  # the thread first: nothing of it runs below
        #: a late buckets' thread still inside ONNX Runtime after the stop's wait: its stream and memory are kept
        lingering = late is not None and late.running()
        cp = self._cp if hasattr(self, "_cp") else None
        if cp is not None and hasattr(self, "stream"):
            try:
                self.stream.synchronize()
            except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
                note_if_sticky(e, self.device.id)  # the executor sharing this stream then leaves its decoders be
                log.info("closing the network after a CUDA error (%s): releasing what can be released", e)
        buckets, self._buckets = self._buckets + unused_late, []
        for bucket in buckets:
            _release(bucket)
        del buckets
        gc.collect()  # the sessions go now, while their stream and the CUDA runtime are alive
        if cp is not None and hasattr(self, "stream") and not lingering:
            with contextlib.suppress(cp.cuda.runtime.CUDARuntimeError):
                with self.device:
                    cp.get_default_memory_pool().free_all_blocks()
            if self._own_stream:
                self.stream = None
            log.info("network on GPU %d: released in %.2f s", self.device.id, time.perf_counter() - t0)
        elif lingering:
            log.info(
                "network on GPU %d: released but for its stream, kept for the late buckets' thread", self.device.id
            )

    def chunks_for(self, n: int) -> list[int]:
        """The buckets ``n`` images run on, largest first: the cover of least measured time (:mod:`.bucket_plan`)."""
        return self.plan.chunks(n)

    def _bucket(self, n: int) -> _Bucket:
        """The smallest bucket that holds ``n`` images (the largest if none does)."""
        return next((bucket for bucket in self._buckets if bucket.size >= n), self._buckets[-1])

    def infer(self, batch: Any) -> Any:
        """Logits of one batch (numpy or CuPy, N x input_dims); a CuPy array on this instance's GPU."""
        return self.infer_many([batch])

    def infer_many(self, parts: Sequence[Any], then: Callable[[Any], Any] | None = None) -> Any:
        """Logits of the concatenation of ``parts`` (each numpy or CuPy), without concatenating them first.

        Each part is copied into the bucket's bound input buffer where it lives (device to device for
        GPU tensors, host to device for numpy arrays), the bucket's session (or graph) runs, and the
        rows that hold images are copied out (not for ``then`` after one bucket run: it reads that bucket's output
        buffer in place, and must be done with it when the call ends).

        ``then`` (optional) is applied to the logits on this runtime's device and stream, before the one
        synchronize that ends the call, and its result is returned instead: the top-k kernel and its copy
        to the host wait for the network in the same wait. Parts that are CuPy arrays must be complete, or
        be enqueued on this runtime's stream (``classify_fused``'s pixels).
        """
        cp = self._cp
        n = sum(len(p) for p in parts)
        if threading.get_ident() != self._warm_thread and self.cuda_graphs and not self._warned_thread:
            self._warned_thread = True  # graphs are per thread: ORT captures again on this one, once
            log.warning("classifier runs on another thread than it was warmed up on; CUDA graphs are captured again")
        chunks = []
        with cuda_fault_guard(self.device.id, self.fault_source, probe=self.stream.synchronize):
            with self.device, self.stream:
                self._adopt_late()  # before the plan is read: this call may run on them
                sizes = list(self.plan.chunks(n)) if n else []
                in_place = then is not None and len(sizes) == 1  # no copy of the logits that then reads in the call
                start = 0
                for size in sizes:
                    take = min(size, n - start)
                    chunks.append(self._run_chunk(parts, start, take, size, copy=not in_place))
                    start += take
                if not chunks:
                    out = cp.empty((0, *self._buckets[0].y.shape[1:]), dtype=np.float32)
                else:
                    out = chunks[0] if len(chunks) == 1 else cp.concatenate(chunks)
                if then is not None:
                    out = then(out)
            self.stream.synchronize()
        return out

    def _run_chunk(self, parts: Sequence[Any], start: int, n: int, size: int, copy: bool = True) -> Any:
        """Rows ``[start, start + n)`` of the concatenated parts through the bucket of ``size``: their logits, a copy
        or (``copy`` False) a view of the bucket's output buffer, which its next run overwrites."""
        cp = self._cp
        bucket = self._bucket(size)
        row = 0
        offset = 0
        for part in parts:
            lo, hi = max(start, offset), min(start + n, offset + len(part))
            if lo < hi:
                if copy_rows(cp, bucket.x[row : row + hi - lo], part[lo - offset : hi - offset], self.stream):
                    self.cross_device_copies += 1
                    if self.cross_device_copies in (1, 100, 10_000, 1_000_000):
                        log.info(
                            "classifier on GPU %d: %d input(s) so far arrived from another GPU and were copied peer to "
                            "peer (Triton schedules each ensemble step on any free instance)",
                            self.device.id,
                            self.cross_device_copies,
                        )
                row += hi - lo
            offset += len(part)
        bucket.session.run_with_iobinding(bucket.binding, self.run_options)
        return bucket.y[:n].copy() if copy else bucket.y[:n]
