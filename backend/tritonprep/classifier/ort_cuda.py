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
* every bucket runs (and is captured) while the model loads, so no request pays a tuning or a capture.

All work is ordered on one CUDA stream of the instance (``user_compute_stream``), which CuPy's copies
use too; ORT synchronizes it at the end of each run.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cuda import cuda_fault_guard, import_cupy
from ..errors import ConfigError, RuntimeUnavailable

log = logging.getLogger(__name__)

#: what to install when ONNX Runtime cannot use the GPU (one log line says so)
GPU_INSTALL_HINT = (
    "pip install 'tritonprep[server,gpu-cu13]' (or gpu-cu12): it brings onnxruntime-gpu with CUDA and cuDNN "
    "instead of the CPU build"
)


def import_onnxruntime() -> Any:
    """``onnxruntime``, or :class:`RuntimeUnavailable` with the install hint."""
    try:
        import onnxruntime
    except ImportError as e:
        raise RuntimeUnavailable(
            f"onnxruntime is not installed ({e}); pip install 'tritonprep[server,cpu]' "
            "(or gpu-cu13 / gpu-cu12 instead of cpu for the GPU build)"
        ) from None
    return onnxruntime


def cuda_provider_available(ort: Any) -> bool:
    """Whether this ONNX Runtime build has the CUDA EP (its libraries may still be missing: see :func:`preload`)."""
    return "CUDAExecutionProvider" in ort.get_available_providers()


def preload(ort: Any) -> str:
    """Load the CUDA and cuDNN libraries of the pip wheels (``nvidia-*``) before the first CUDA session.

    ``onnxruntime-gpu``'s CUDA provider library has no RUNPATH: without this (or ``LD_LIBRARY_PATH``) the
    wheels' libraries are not found. Returns what it reported (it prints failures instead of raising).
    """
    preload_dlls = getattr(ort, "preload_dlls", None)
    if preload_dlls is None:  # ORT < 1.21: the libraries must be on the loader's path
        return ""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        preload_dlls()
    return out.getvalue().strip()


def batch_dim_name(ort: Any, onnx_path: Path) -> str:
    """The name of the ONNX input's batch dimension (its ``dim_param``), read with a CPU session."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    dim = session.get_inputs()[0].shape[0]
    if not isinstance(dim, str):
        raise ConfigError(f"{onnx_path} has a fixed batch size {dim}; export it with a named dynamic batch axis")
    return dim


def device_of(array: Any) -> int | None:
    """The CUDA device an array lives on (CuPy's ``.device.id``), or None for a host array."""
    if isinstance(array, np.ndarray):
        return None
    return int(array.device.id)


def copy_rows(cp: Any, dst: Any, src: Any, stream: Any) -> bool:
    """Copy ``src`` (numpy, or a CuPy array on any GPU) into the contiguous FP32 rows ``dst``, ordered on ``stream``.

    Returns True when ``src`` lived on another GPU than ``dst``: Triton may hand a classifier instance on
    one GPU a tensor the preprocess model made on another; it is then copied peer to peer (CUDA's
    unified addressing) instead of through the host, and the caller counts it.
    """
    where = device_of(src)
    if where is None:
        dst.set(np.ascontiguousarray(src, dtype=np.float32), stream=stream)
        return False
    if where == dst.device.id:
        dst[...] = cp.asarray(src, dtype=cp.float32)
        return False
    with cp.cuda.Device(where):
        src = cp.ascontiguousarray(src, dtype=cp.float32)
        cp.cuda.get_current_stream().synchronize()  # src is complete before another device's stream reads it
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cp.cuda.runtime.memcpyDefault, stream.ptr)
    return True


class _Bucket:
    """One batch size: its session, its bound input and output buffers."""

    def __init__(self, size: int, session: Any, x: Any, y: Any, binding: Any) -> None:
        self.size, self.session, self.x, self.y, self.binding = size, session, x, y, binding


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
        gpu_mem_limit_mb: int = 0,
        conv_max_workspace: bool = True,
        stream: Any = None,
    ) -> None:
        ort = import_onnxruntime()
        if not cuda_provider_available(ort):
            raise RuntimeUnavailable(f"this onnxruntime build has no CUDA execution provider; {GPU_INSTALL_HINT}")
        cupy = import_cupy()
        if not buckets or sorted(set(buckets)) != list(buckets) or buckets[0] < 1:
            raise ConfigError(f"batch_buckets must be increasing positive sizes, got {list(buckets)}")
        report = preload(ort)
        self._cp = cupy
        try:
            self.device = cupy.cuda.Device(device_id)
            self.device.use()
            self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise RuntimeUnavailable(f"GPU {device_id} is not usable: {e}") from None
        self.input_dims = tuple(input_dims)
        self.max_batch = buckets[-1]
        self.cuda_graphs = cuda_graphs
        dim_name = batch_dim_name(ort, onnx_path)
        self.name = "onnxruntime-cuda" + ("+graphs" if cuda_graphs else "") + ("+nhwc" if nhwc else "")
        provider = {
            "device_id": str(device_id),
            "user_compute_stream": str(self.stream.ptr),
            "enable_cuda_graph": "1" if cuda_graphs else "0",
            "prefer_nhwc": "1" if nhwc else "0",
            "cudnn_conv_algo_search": "EXHAUSTIVE",
            "arena_extend_strategy": "kSameAsRequested",
            # cuDNN may pick algorithms that need a large workspace (faster, but each bucket's arena keeps it)
            "cudnn_conv_use_max_workspace": "1" if conv_max_workspace else "0",
        }
        if gpu_mem_limit_mb:
            provider["gpu_mem_limit"] = str(gpu_mem_limit_mb << 20)
        self._buckets: list[_Bucket] = []
        self.strict = True  # every node on the GPU (no CPU fallback anywhere)
        with self.device:
            for size in buckets:
                session = self._session(ort, onnx_path, dim_name, size, provider, report)
                self._buckets.append(self._bind(ort, session, size, device_id))
        if not self.strict:
            self.name += "+cpu-nodes"
        self.input_name = self._buckets[0].session.get_inputs()[0].name
        #: input parts that arrived on another GPU: the Python backend of Triton 2.51 hands a GPU input over
        #: on the GPU it was made on (it asks for ``TRITONSERVER_MEMORY_GPU`` with the source's device id), so
        #: a classifier instance on GPU 1 can receive preprocess output from GPU 0; copied peer to peer here
        self.cross_device_copies = 0
        self._warm_thread = threading.get_ident()
        self._warned_thread = False
        self._warm_up()
        log.info(
            "classifier on GPU %d: %s, batch buckets %s (one session each, captured while loading)",
            device_id,
            self.name,
            ",".join(map(str, buckets)),
        )

    def _session(
        self, ort: Any, onnx_path: Path, dim_name: str, size: int, provider: dict[str, str], report: str
    ) -> Any:
        """The session of one bucket: every node on the GPU if ORT can place it so, else (logged) some on the CPU."""
        errors = []
        while True:
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.add_free_dimension_override_by_name(dim_name, size)
            options.log_severity_level = 3
            if self.strict:  # fail instead of running on the CPU: a missing CUDA library or a node the GPU cannot take
                options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            try:
                cpu = [] if self.strict else ["CPUExecutionProvider"]  # listing it conflicts with disabling it
                return ort.InferenceSession(
                    str(onnx_path), options, providers=[("CUDAExecutionProvider", provider), *cpu]
                )
            except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/RuntimeException types
                text = str(e).strip()
                errors.append(f"{type(e).__name__}: {text.splitlines()[0] if text else ''}")
                if self.strict and "fallback to CPU EP has been explicitly disabled" in text:
                    log.warning(
                        "bucket %d: some nodes cannot run on the GPU; they run on the CPU (%s)", size, errors[-1]
                    )
                    self.strict = False
                elif self.cuda_graphs and "graph capture" in text.lower():
                    log.warning("bucket %d: ONNX Runtime refuses CUDA graphs for this model (%s)", size, errors[-1])
                    self.cuda_graphs = False
                    provider["enable_cuda_graph"] = "0"
                    self.name = self.name.replace("+graphs", "")
                else:
                    break
        raise RuntimeUnavailable(
            f"ONNX Runtime could not create a CUDA session ({'; '.join(errors)}){'; ' + report if report else ''}; "
            f"{GPU_INSTALL_HINT}"
        )

    def _bind(self, ort: Any, session: Any, size: int, device_id: int) -> _Bucket:
        cp = self._cp
        inp, out = session.get_inputs()[0], session.get_outputs()[0]
        if tuple(inp.shape[1:]) != self.input_dims:
            raise ConfigError(
                f"the ONNX input {inp.name!r} is {inp.shape[1:]} per image, "
                f"the model config says {list(self.input_dims)}"
            )
        out_shape = (size, *(int(d) for d in out.shape[1:]))
        with self.stream:
            x = cp.zeros((size, *self.input_dims), dtype=np.float32)  # padded rows stay finite
            y = cp.zeros(out_shape, dtype=np.float32)
        self.stream.synchronize()
        binding = session.io_binding()
        binding.bind_input(inp.name, "cuda", device_id, np.float32, x.shape, x.data.ptr)
        binding.bind_output(out.name, "cuda", device_id, np.float32, y.shape, y.data.ptr)
        return _Bucket(size, session, x, y, binding)

    def _warm_up(self) -> None:
        """Run every bucket once: ORT tunes its convolutions and, with graphs, captures them now."""
        for bucket in self._buckets:
            bucket.session.run_with_iobinding(bucket.binding)

    def bucket_for(self, n: int) -> int:
        """The batch size ``n`` images run at: the smallest bucket that holds them (more than the largest
        bucket run in chunks of it)."""
        return self._bucket(n).size

    def _bucket(self, n: int) -> _Bucket:
        return next((bucket for bucket in self._buckets if bucket.size >= n), self._buckets[-1])

    def infer(self, batch: Any) -> Any:
        """Logits of one batch (numpy or CuPy, N x input_dims); a CuPy array on this instance's GPU."""
        return self.infer_many([batch])

    def infer_many(self, parts: Sequence[Any]) -> Any:
        """Logits of the concatenation of ``parts`` (each numpy or CuPy), without concatenating them first.

        Each part is copied into the bucket's bound input buffer where it lives (device to device for
        GPU tensors, host to device for numpy arrays), the bucket's session (or graph) runs, and the
        rows that hold images are copied out, so the bucket's buffers are free for the next call.
        """
        cp = self._cp
        n = sum(len(p) for p in parts)
        if n == 0:
            return cp.empty((0, *self._buckets[0].y.shape[1:]), dtype=np.float32)
        if threading.get_ident() != self._warm_thread and self.cuda_graphs and not self._warned_thread:
            self._warned_thread = True  # graphs are per thread: ORT captures again on this one, once
            log.warning("classifier runs on another thread than it was warmed up on; CUDA graphs are captured again")
        chunks = []
        with cuda_fault_guard(self.device.id, "the network (ONNX Runtime CUDA)", probe=self.stream.synchronize):
            with self.device, self.stream:
                start = 0
                while start < n:  # more than the largest bucket runs in chunks of it
                    take = min(self.max_batch, n - start)
                    chunks.append(self._run_chunk(parts, start, take))
                    start += take
                out = chunks[0] if len(chunks) == 1 else cp.concatenate(chunks)
            self.stream.synchronize()
        return out

    def _run_chunk(self, parts: Sequence[Any], start: int, n: int) -> Any:
        """Rows ``[start, start + n)`` of the concatenated parts through one bucket."""
        cp = self._cp
        bucket = self._bucket(n)
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
        bucket.session.run_with_iobinding(bucket.binding)
        return bucket.y[:n].copy()
