"""A TensorRT engine built from the classifier's ONNX (cached beside it), run on CuPy buffers.

Used in the embedded mode where the ``tensorrt`` Python package is installed; the container serves
the same network with Triton's own ``tensorrt_plan`` backend instead (``configs/tensorrt.pbtxt``).
The engine and its timing cache are kept beside the ONNX file where its folder is writable (a checkout),
else in the start-up cache (:func:`engine_folder`: an installed wheel's repository may be read-only).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import cache
from ..cuda import cuda_fault_guard, import_cupy
from ..errors import InferenceError, RuntimeUnavailable
from .builders import PythonBuilder, import_tensorrt, platform_of
from .engines import BuildOptions, build_or_reuse
from .rows import copy_rows


def engine_folder(onnx_path: Path) -> Path:
    """Where the engines built from ``onnx_path`` and their timing cache go: its own folder where that is
    writable, else ``<start-up cache>/tensorrt/<key of its path>/``; RuntimeUnavailable without either."""
    if os.access(onnx_path.parent, os.W_OK):
        return onnx_path.parent
    root = cache.subfolder("tensorrt")
    if root is None:
        raise RuntimeUnavailable(
            f"{onnx_path.parent} is read-only and there is no start-up cache for the TensorRT engine: "
            f"set {cache.ENV} to a writable folder"
        )
    folder = root / cache.key_of(onnx_path.resolve())
    folder.mkdir(exist_ok=True)
    return folder


class TensorRTRuntime:
    """A TensorRT engine built from the ONNX file (cached beside it), run on CuPy buffers."""

    name = "tensorrt"
    on_gpu = True

    def __init__(
        self, onnx_path: Path, input_dims: tuple[int, ...], device_id: int = 0, max_batch: int = 256, fp16: bool = True
    ) -> None:
        t0 = time.perf_counter()
        #: seconds of each start-up phase (the instance report's)
        self.timings: dict[str, float] = {}
        trt = import_tensorrt()
        cupy = import_cupy()
        self._cp = cupy
        try:
            self._device = cupy.cuda.Device(device_id)
            self._device.use()
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise RuntimeUnavailable(f"GPU {device_id} is not usable: {e}") from None
        self.timings["imports"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        folder = engine_folder(onnx_path)
        plan = folder / f"{onnx_path.stem}.gpu{device_id}.plan"
        options = BuildOptions(input_dims, fp16=fp16, max_batch=max_batch, opt_batch=min(64, max_batch))
        builder = PythonBuilder()
        build_or_reuse(
            onnx_path,
            plan,
            options,
            builder=builder,
            platform=platform_of(builder, device_id),
            device_id=device_id,
            timing_cache=folder / "timing.cache",
        )
        self.timings["engine_build"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
        if self._engine is None:
            raise RuntimeUnavailable(f"TensorRT could not load {plan}; delete it to rebuild")
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        modes = {n: self._engine.get_tensor_mode(n) for n in names}
        self.input_name = next(n for n in names if modes[n] == trt.TensorIOMode.INPUT)
        self.output_name = next(n for n in names if modes[n] == trt.TensorIOMode.OUTPUT)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self.timings["engine_load"] = time.perf_counter() - t0

    def close(self) -> None:
        """Release the execution context and the engine after the stream's work is done, then the stream; idempotent."""
        stream = getattr(self, "_stream", None)
        if stream is None:
            return
        try:
            stream.synchronize()
        except (self._cp.cuda.runtime.CUDARuntimeError, self._cp.cuda.driver.CUDADriverError):
            pass  # a poisoned context: release the rest all the same
        self._context = None
        self._engine = None
        self._stream = None

    @property
    def stream(self) -> Any:
        """The CuPy stream the engine runs on (the network's turns order it: :mod:`tritonprep.triton.turns`)."""
        return self._stream

    def infer(self, batch: Any) -> Any:
        """Run the engine on ``batch`` (numpy or CuPy); returns a CuPy array.

        A sticky CUDA error (the engine's kernels, or a copy, poisoned the context) raises
        :class:`~tritonprep.errors.InstanceFailed`, so that the instance is restarted instead of failing
        every later request; TensorRT refusing a batch otherwise raises :class:`~tritonprep.errors.InferenceError`.
        """
        return self.infer_many([batch])

    def infer_many(self, parts: Sequence[Any], then: Callable[[Any], Any] | None = None) -> Any:
        """Logits of the concatenated ``parts`` (numpy, or CuPy on any GPU: copied peer to peer onto this one); with
        ``then``, ``then(logits)``, enqueued on the engine's stream before its one synchronize."""
        cp = self._cp
        with cuda_fault_guard(self._device.id, "the network (TensorRT)", probe=self._stream.synchronize):
            with self._device, self._stream:
                x = cp.empty((sum(len(p) for p in parts), *parts[0].shape[1:]), dtype=cp.float32)
                row = 0
                for part in parts:
                    copy_rows(cp, x[row : row + len(part)], part, self._stream)
                    row += len(part)
                self._context.set_input_shape(self.input_name, tuple(x.shape))
                out = cp.empty(tuple(self._context.get_tensor_shape(self.output_name)), dtype=cp.float32)
                self._context.set_tensor_address(self.input_name, x.data.ptr)
                self._context.set_tensor_address(self.output_name, out.data.ptr)
                if not self._context.execute_async_v3(self._stream.ptr):
                    raise InferenceError(
                        f"TensorRT could not run the engine on a batch of {len(x)}; its reason is in the server log"
                    )
                if then is not None:
                    out = then(out)
            self._stream.synchronize()
        return out
