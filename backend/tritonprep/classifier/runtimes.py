"""The classifier's runtime in the embedded mode (a Python-backend model), chosen from its config.

``runtime`` ``auto`` takes the fastest one present for the instance: TensorRT (an engine built from
the ONNX and cached beside it) where the ``tensorrt`` package is installed, else ONNX Runtime's CUDA
EP (:mod:`.ort_cuda`: a session per batch bucket, CUDA graphs) where ``onnxruntime-gpu`` and its CUDA
libraries are, else ONNX Runtime on the CPU. A GPU instance that falls back to the CPU says so in
one log line naming what to install. The container serves the same network with Triton's own
``tensorrt_plan`` backend instead (see docker/).

The classifier config's ``parameters`` (all optional; :data:`PARAMETERS`)::

    runtime        auto | tensorrt | onnxruntime
    precision      fp16 | fp32    GPU runtimes (FP16 weights and math, FP32 input/output); the CPU runs FP32
    layout         nhwc | nchw    the GPU runtime's internal layout (the input stays NCHW)
    cuda_graphs    true | false   replay each bucket as a CUDA graph
    batch_buckets  "1,2,4,...,64" batch sizes the GPU runtime runs at (default: powers of two up to
                                  max_batch_size); a batch is padded up to the next one, and one larger
                                  than the largest runs in chunks of it (each bucket holds its own
                                  ONNX Runtime session and memory: fewer, smaller buckets, less memory)
    gpu_memory_mb  ""             the most GPU memory one GPU instance may hold, its CUDA context included,
                                  MiB, or "<largest bucket>:<MiB>,..." (tritonprep.memory); spread over the
                                  bucket sessions' arenas as their caps (empty: no cap)
    gpu_mem_limit_mb  "0"         cap of each bucket's ONNX Runtime arena, overriding the share of
                                  gpu_memory_mb (0: none)
    cudnn_conv_algo_search  heuristic | exhaustive | default    how cuDNN picks each convolution's algorithm
                                  per bucket: exhaustive benchmarks them all while the model loads (slow
                                  start), heuristic asks cuDNN's heuristics, default takes its default
    cudnn_conv_use_max_workspace  false | true   let cuDNN pick algorithms that need a large workspace
                                  (each bucket's arena keeps it: more memory)
    arena_extend_strategy  same_as_requested | next_power_of_two   how a bucket's arena grows

The ONNX Runtime options are the CUDA EP's (tritonprep.classifier.ort_options); the start-up cache
(tritonprep.cache) keeps each bucket's optimized model between starts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError, RuntimeUnavailable
from ..memory import instance_budget_mb
from .engines import EngineBuildError
from .ort_cuda import GPU_INSTALL_HINT, OrtCudaRuntime, cuda_provider_available, import_onnxruntime
from .ort_options import ARENA_EXTEND, CONV_ALGO_SEARCH, CudaEpOptions

log = logging.getLogger(__name__)

RUNTIME_CHOICES = ("auto", "tensorrt", "onnxruntime")
PRECISIONS = ("fp16", "fp32")
LAYOUTS = ("nhwc", "nchw")
#: the FP16 variant of ``model.onnx`` that ``make model`` writes beside it
FP16_SUFFIX = ".fp16.onnx"


class Runtime(Protocol):
    """A loaded network: takes NCHW batches (numpy or CuPy), returns logits."""

    name: str
    on_gpu: bool
    #: seconds of each start-up phase, for the instance report
    timings: dict[str, float]

    def infer(self, batch: Any) -> Any:
        """Logits of ``batch``; a numpy or CuPy array."""
        ...

    def infer_many(self, parts: Sequence[Any]) -> Any:
        """Logits of the concatenation of ``parts`` (what a Triton execute holds: one part per request)."""
        ...

    def close(self) -> None:
        """Release what the runtime holds (on the GPU: its sessions, graphs, buffers), from the model's finalize."""
        ...


def _bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"classifier parameter {name!r} must be true or false, got {text!r}")
    return value == "true"


def _choice(name: str, text: str, choices: tuple[str, ...]) -> str:
    value = text.strip().lower()
    if value not in choices:
        raise ConfigError(f"classifier parameter {name!r} must be one of {', '.join(choices)}; got {text!r}")
    return value


def _ints(name: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"classifier parameter {name!r} must be comma-separated integers, got {text!r}") from None


@dataclass(frozen=True)
class RuntimeOptions:
    """How the classifier runs; read from its config's ``parameters``."""

    runtime: str = "auto"
    precision: str = "fp16"
    layout: str = "nhwc"
    cuda_graphs: bool = True
    batch_buckets: tuple[int, ...] = ()
    gpu_mem_limit_mb: int = 0
    #: the instance's GPU memory budget (the parameter's text: tritonprep.memory), "" for none
    gpu_memory_mb: str = ""
    cudnn_conv_algo_search: str = "heuristic"
    cudnn_conv_use_max_workspace: bool = False
    arena_extend_strategy: str = "same_as_requested"

    def __post_init__(self) -> None:
        self.ep  # noqa: B018 - checks the ONNX Runtime options however the options were made

    @property
    def ep(self) -> CudaEpOptions:
        """The ONNX Runtime CUDA EP options (tritonprep.classifier.ort_options)."""
        return CudaEpOptions(self.cudnn_conv_algo_search, self.cudnn_conv_use_max_workspace, self.arena_extend_strategy)

    @property
    def budget_mb(self) -> int | None:
        """The MiB one GPU instance may hold with these buckets (None: no cap)."""
        return instance_budget_mb(self.gpu_memory_mb, self.batch_buckets)

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], max_batch: int) -> RuntimeOptions:
        """Options from ``{name: string}``; buckets default to the powers of two up to ``max_batch``."""
        known = {
            "runtime",
            "precision",
            "layout",
            "cuda_graphs",
            "batch_buckets",
            "gpu_mem_limit_mb",
            "gpu_memory_mb",
            "cudnn_conv_algo_search",
            "cudnn_conv_use_max_workspace",
            "arena_extend_strategy",
        }
        ignored = {"FORCE_CPU_ONLY_INPUT_TENSORS"}  # the Python backend's own
        unknown = sorted(set(params) - known - ignored)
        if unknown:
            raise ConfigError(f"unknown classifier parameter(s) {unknown}; known: {sorted(known)}")
        buckets = _ints("batch_buckets", params["batch_buckets"]) if params.get("batch_buckets") else ()
        if not buckets:
            buckets = tuple(1 << k for k in range(max_batch.bit_length()) if 1 << k < max_batch) + (max_batch,)
        if sorted(set(buckets)) != list(buckets) or buckets[0] < 1 or buckets[-1] > max_batch:
            raise ConfigError(
                f"batch_buckets must be increasing positive sizes up to max_batch_size ({max_batch}), "
                f"got {list(buckets)}"
            )
        limit = params.get("gpu_mem_limit_mb", "0").strip() or "0"
        if not limit.isdigit():
            raise ConfigError(f"classifier parameter 'gpu_mem_limit_mb' must be a whole number, got {limit!r}")
        return cls(
            runtime=_choice("runtime", params.get("runtime", "auto"), RUNTIME_CHOICES),
            precision=_choice("precision", params.get("precision", "fp16"), PRECISIONS),
            layout=_choice("layout", params.get("layout", "nhwc"), LAYOUTS),
            cuda_graphs=_bool("cuda_graphs", params.get("cuda_graphs", "true")),
            batch_buckets=buckets,
            gpu_mem_limit_mb=int(limit),
            gpu_memory_mb=_budget(params.get("gpu_memory_mb", ""), buckets),
            cudnn_conv_algo_search=_choice(
                "cudnn_conv_algo_search", params.get("cudnn_conv_algo_search", "heuristic"), CONV_ALGO_SEARCH
            ),
            cudnn_conv_use_max_workspace=_bool(
                "cudnn_conv_use_max_workspace", params.get("cudnn_conv_use_max_workspace", "false")
            ),
            arena_extend_strategy=_choice(
                "arena_extend_strategy", params.get("arena_extend_strategy", "same_as_requested"), ARENA_EXTEND
            ),
        )


def _budget(text: str, buckets: tuple[int, ...]) -> str:
    """The ``gpu_memory_mb`` text, checked now (a malformed one fails the model's load, not its first GPU use)."""
    instance_budget_mb(text, buckets)
    return text.strip()


class OrtCpuRuntime:
    """ONNX Runtime on the CPU (FP32): any batch size, numpy in and out."""

    name = "onnxruntime-cpu"
    on_gpu = False

    def __init__(self, onnx_path: Path, threads: int = 0) -> None:
        t0 = time.perf_counter()
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        #: seconds of each start-up phase (the instance report's)
        self.timings = {"session": time.perf_counter() - t0}

    def close(self) -> None:
        """Release the session (nothing on a GPU: dropping it is enough)."""
        self.session = None

    def infer(self, batch: Any) -> np.ndarray:
        """Logits of ``batch``; GPU inputs are copied to the host."""
        if not isinstance(batch, np.ndarray):
            batch = batch.get()
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def infer_many(self, parts: Sequence[Any]) -> np.ndarray:
        """Logits of the concatenated ``parts``."""
        host = [p if isinstance(p, np.ndarray) else p.get() for p in parts]
        return self.infer(host[0] if len(host) == 1 else np.concatenate(host))


def model_file(onnx_path: Path, precision: str) -> Path:
    """The ONNX file of ``precision``: ``model.onnx`` or its FP16 variant beside it.

    Without an FP16 variant the network runs in FP32, with a log line saying so (a network exported
    without one, such as the embedder, still loads).
    """
    if precision == "fp32":
        return onnx_path
    fp16 = onnx_path.with_name(onnx_path.name.removesuffix(".onnx") + FP16_SUFFIX)
    if not fp16.is_file():
        log.warning(
            "%s has no FP16 variant (%s); running FP32 (`make model` writes it for the classifier)",
            onnx_path,
            fp16.name,
        )
        return onnx_path
    return fp16


def load_runtime(
    onnx_path: Path,
    input_dims: tuple[int, ...],
    *,
    options: RuntimeOptions | None = None,
    prefer: str | None = None,
    device_id: int = 0,
    use_gpu: bool = True,
    max_batch: int = 256,
    stream: Any = None,
    shared_mb: int = 0,
) -> Runtime:
    """Load the classifier on the best runtime available for the instance.

    ``input_dims`` is the network input without the batch axis, as the model config declares it;
    ``options`` come from the config's parameters (``prefer`` overrides ``options.runtime``);
    ``stream``: a CuPy stream the ONNX Runtime CUDA network runs on (default: one of its own), e.g. the
    preprocess executor's, so that decode, kernels and network are ordered on one stream; ``shared_mb``:
    what else the instance holds of its ``gpu_memory_mb`` (``classify_fused``'s preprocessing).
    """
    options = options or RuntimeOptions.from_parameters({}, max_batch)
    prefer = prefer or options.runtime
    if prefer not in RUNTIME_CHOICES:
        raise ConfigError(f"runtime must be one of {RUNTIME_CHOICES}, got {prefer!r}")
    if not onnx_path.is_file():
        raise ConfigError(f"{onnx_path} does not exist; run `make model` (scripts/export_classifier.py) to export it")
    if prefer in ("auto", "tensorrt") and use_gpu:
        from .tensorrt import TensorRTRuntime

        try:
            return TensorRTRuntime(onnx_path, input_dims, device_id, max_batch, fp16=options.precision == "fp16")
        except RuntimeUnavailable as e:
            if prefer == "tensorrt":
                raise
            # TensorRT absent is the usual case; TensorRT present but failing to build deserves a warning
            (log.warning if isinstance(e, EngineBuildError) else log.info)("TensorRT runtime not used: %s", e)
    if prefer == "tensorrt":
        raise RuntimeUnavailable("runtime=tensorrt needs a GPU instance (instance_group kind KIND_GPU)")
    if use_gpu:
        ort = import_onnxruntime()
        if cuda_provider_available(ort):
            try:
                return OrtCudaRuntime(
                    model_file(onnx_path, options.precision),
                    input_dims,
                    device_id=device_id,
                    buckets=options.batch_buckets,
                    nhwc=options.layout == "nhwc",
                    cuda_graphs=options.cuda_graphs,
                    ep_options=options.ep,
                    gpu_memory_mb=options.budget_mb,
                    gpu_mem_limit_mb=options.gpu_mem_limit_mb,
                    shared_mb=shared_mb,
                    stream=stream,
                )
            except RuntimeUnavailable as e:
                log.warning("classifier on a GPU instance runs on the CPU: %s", e)
        else:
            log.warning(
                "classifier on a GPU instance runs on the CPU: onnxruntime %s has no CUDA EP; %s",
                ort.__version__,
                GPU_INSTALL_HINT,
            )
    threads = int(os.environ.get("TRITONPREP_ORT_THREADS", "0"))
    return OrtCpuRuntime(onnx_path, threads)
