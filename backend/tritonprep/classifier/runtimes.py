"""Inference runtimes for the classifier in the embedded mode (a Python-backend model).

The best runtime present wins: TensorRT (an engine built from the ONNX file and cached
beside it), else ONNX Runtime with its TensorRT or CUDA execution provider when the GPU
build is installed, else ONNX Runtime on the CPU. In the container the same network is
served by Triton's own ``tensorrt_plan`` backend instead (see docker/).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError, RuntimeUnavailable
from .engines import BuildOptions, PythonBuilder, build_or_reuse, import_tensorrt

log = logging.getLogger(__name__)

RUNTIME_CHOICES = ("auto", "tensorrt", "onnxruntime")


class Runtime(Protocol):
    """A loaded network: takes an NCHW batch (numpy or CuPy), returns logits."""

    name: str
    on_gpu: bool

    def infer(self, batch: Any) -> Any:
        """Run the network on ``batch``; returns a numpy or CuPy array."""
        ...


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


class OnnxRuntime:
    """ONNX Runtime session with the fastest execution provider installed."""

    def __init__(self, onnx_path: Path, device_id: int = 0, use_gpu: bool = True, threads: int = 0) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise RuntimeUnavailable(f"onnxruntime is not installed: {e}") from None
        available = ort.get_available_providers()
        wanted: list[Any] = []
        if use_gpu and "TensorrtExecutionProvider" in available:
            cache = str(onnx_path.parent / "ort-trt-cache")
            wanted.append(
                (
                    "TensorrtExecutionProvider",
                    {
                        "device_id": device_id,
                        "trt_fp16_enable": True,
                        "trt_engine_cache_enable": True,
                        "trt_engine_cache_path": cache,
                    },
                )
            )
        if use_gpu and "CUDAExecutionProvider" in available:
            wanted.append(("CUDAExecutionProvider", {"device_id": device_id}))
        wanted.append("CPUExecutionProvider")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_path), options, providers=wanted)
        used = self.session.get_providers()[0]
        self.on_gpu = used != "CPUExecutionProvider"
        self.name = {
            "TensorrtExecutionProvider": "onnxruntime-tensorrt",
            "CUDAExecutionProvider": "onnxruntime-cuda",
        }.get(used, "onnxruntime-cpu")
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name

    def infer(self, batch: Any) -> Any:
        """Run the session; GPU inputs are copied to the host only for the CPU provider."""
        if _is_cupy(batch):
            batch = batch.get()
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        return self.session.run([self.output_name], {self.input_name: batch})[0]


class TensorRTRuntime:
    """A TensorRT engine built from the ONNX file (cached beside it), run on CuPy buffers."""

    name = "tensorrt"
    on_gpu = True

    def __init__(
        self, onnx_path: Path, input_dims: tuple[int, ...], device_id: int = 0, max_batch: int = 256, fp16: bool = True
    ) -> None:
        trt = import_tensorrt()
        try:
            import cupy
        except ImportError as e:
            raise RuntimeUnavailable(f"CuPy is needed to run TensorRT engines: {e}") from None
        self._cp = cupy
        self._device = cupy.cuda.Device(device_id)
        self._device.use()
        plan = onnx_path.with_name(f"{onnx_path.stem}.gpu{device_id}.plan")
        options = BuildOptions(input_dims, fp16=fp16, max_batch=max_batch, opt_batch=min(64, max_batch))
        build_or_reuse(
            onnx_path,
            plan,
            options,
            builder=PythonBuilder(),
            device_id=device_id,
            timing_cache=onnx_path.with_name("timing.cache"),
        )
        self._engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
        if self._engine is None:
            raise RuntimeUnavailable(f"TensorRT could not load {plan}; delete it to rebuild")
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        modes = {n: self._engine.get_tensor_mode(n) for n in names}
        self.input_name = next(n for n in names if modes[n] == trt.TensorIOMode.INPUT)
        self.output_name = next(n for n in names if modes[n] == trt.TensorIOMode.OUTPUT)
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def infer(self, batch: Any) -> Any:
        """Run the engine on ``batch`` (numpy or CuPy); returns a CuPy array."""
        cp = self._cp
        with self._device, self._stream:
            x = cp.ascontiguousarray(cp.asarray(batch, dtype=cp.float32))
            self._context.set_input_shape(self.input_name, tuple(x.shape))
            out = cp.empty(tuple(self._context.get_tensor_shape(self.output_name)), dtype=cp.float32)
            self._context.set_tensor_address(self.input_name, x.data.ptr)
            self._context.set_tensor_address(self.output_name, out.data.ptr)
            if not self._context.execute_async_v3(self._stream.ptr):
                raise RuntimeUnavailable("TensorRT execution failed; see the server log")
            self._stream.synchronize()
        return out


def load_runtime(
    onnx_path: Path,
    input_dims: tuple[int, ...],
    *,
    prefer: str = "auto",
    device_id: int = 0,
    use_gpu: bool = True,
    max_batch: int = 256,
) -> Runtime:
    """Load the classifier on the best runtime available (``prefer`` narrows the choice).

    ``input_dims`` is the network input without the batch axis, as the model config declares it.
    """
    if prefer not in RUNTIME_CHOICES:
        raise ConfigError(f"runtime must be one of {RUNTIME_CHOICES}, got {prefer!r}")
    if not onnx_path.is_file():
        raise ConfigError(f"{onnx_path} does not exist; run `make model` (scripts/export_classifier.py) to export it")
    if prefer in ("auto", "tensorrt") and use_gpu:
        try:
            return TensorRTRuntime(onnx_path, input_dims, device_id, max_batch)
        except RuntimeUnavailable as e:
            if prefer == "tensorrt":
                raise
            log.info("TensorRT runtime not used: %s", e)
    if prefer == "tensorrt":
        raise RuntimeUnavailable("runtime=tensorrt needs a GPU instance (instance_group kind KIND_GPU)")
    threads = int(os.environ.get("TRITONPREP_ORT_THREADS", "0"))
    return OnnxRuntime(onnx_path, device_id, use_gpu, threads)
