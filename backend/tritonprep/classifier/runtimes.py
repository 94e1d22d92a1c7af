"""The classifier's runtime in the embedded mode (a Python-backend model), chosen from its config.

``runtime`` ``auto`` takes the fastest one present for the instance: TensorRT (an engine built from
the ONNX and cached beside it) where the ``tensorrt`` package is installed, else ONNX Runtime's CUDA
EP (:mod:`.ort_cuda`: a session per batch bucket, CUDA graphs) where ``onnxruntime-gpu`` and its CUDA
libraries are, else ONNX Runtime on the CPU. A GPU instance that falls back to the CPU says so in
one log line naming what to install. The container serves the same network with Triton's own
``tensorrt_plan`` backend instead (see docker/).

The classifier's and the embedder's config ``parameters`` (all optional) are the rows of
:data:`RUNTIME_PARAMETERS`, the one place that names them, their defaults and meaning;
``python -m tritonprep.classifier.runtimes`` prints them as the docs' table. The ONNX Runtime CUDA EP
options among them (cuDNN's algorithm search and workspace, the arenas' growth and caps, the instance's
``gpu_memory_mb`` spread over the bucket sessions) are :mod:`.ort_options`'; the start-up cache
(:mod:`tritonprep.cache`) keeps each bucket's optimized model between starts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError, RuntimeUnavailable
from ..memory import instance_budget_mb
from ..network_files import TO_NCHW, channels_last, model_file, nhwc_variant, runs_nhwc_variant
from ..parameters import Parameter, check_choice, markdown_table, read_bool, read_ints, read_lower, read_whole
from .bucket_plan import increasing_sizes
from .builders import import_tensorrt
from .engines import EngineBuildError
from .ort_cuda import GPU_INSTALL_HINT, OrtCudaRuntime, cuda_provider_available, import_onnxruntime
from .ort_options import ARENA_EXTEND, CONV_ALGO_SEARCH, CudaEpOptions

log = logging.getLogger(__name__)

RUNTIME_CHOICES = ("auto", "tensorrt", "onnxruntime")
PRECISIONS = ("fp16", "fp32")
LAYOUTS = ("nhwc", "nchw")


class Runtime(Protocol):
    """A loaded network: takes batches (numpy or CuPy) as its config declares them, NCHW or channel-last (see
    :func:`model_file`), returns logits."""

    name: str
    on_gpu: bool
    #: seconds of each start-up phase, for the instance report
    timings: dict[str, float]

    def infer(self, batch: Any) -> Any:
        """Logits of ``batch``; a numpy or CuPy array."""
        ...

    def infer_many(self, parts: Sequence[Any], then: Callable[[Any], Any] | None = None) -> Any:
        """Logits of the concatenation of ``parts`` (what a Triton execute holds: one part per request); with
        ``then``, ``then(logits)`` instead, run where the logits are before the call ends (on a GPU, on the
        runtime's stream before its one synchronize; the logits it gets may be the runtime's own buffer: it reads or
        copies them before the call ends and keeps no reference). CuPy parts must be complete, or enqueued on the
        runtime's own stream."""
        ...

    def close(self) -> None:
        """Release what the runtime holds (on the GPU: its sessions, graphs, buffers), from the model's finalize."""
        ...


def read_fuse(name: str, text: str) -> bool | tuple[int, ...]:
    """``true``, ``false`` (or empty), or comma-separated batch bucket sizes; a lone ``0`` or ``1`` is refused (ONNX
    Runtime's own option reads them as off and on): the 1 bucket alone is ``1,``."""
    if text.strip().lower() in ("true", "false", ""):
        return read_bool(name, text.strip() or "false")
    if text.strip() in ("0", "1"):
        raise ConfigError(
            f"parameter {name!r} is true, false or bucket sizes; for on or off write true or false, for the 1 bucket "
            "alone 1,"
        )
    try:
        return read_ints()(name, text)
    except ConfigError:
        raise ConfigError(
            f"parameter {name!r} must be true, false or batch bucket sizes (e.g. 64), got {text!r}"
        ) from None


#: every parameter of a network model (classifier, embedder; ``network.``-prefixed in classify_fused)
RUNTIME_PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "runtime",
        "runtime",
        read_lower,
        "auto",
        "auto (TensorRT where the tensorrt package is installed, else ONNX Runtime's CUDA EP on a GPU instance, "
        "else ONNX Runtime on the CPU), tensorrt or onnxruntime",
    ),
    Parameter(
        "precision",
        "precision",
        read_lower,
        "fp16",
        "fp16 or fp32: the GPU runtimes' weights and math (input and output as the ONNX file declares them: FP32 "
        "for the exported networks; fp16 with a channel-last input runs model.fp16.nhwc.onnx where it is there, FP16 "
        "in); the CPU runs FP32",
    ),
    Parameter(
        "layout",
        "layout",
        read_lower,
        "nhwc",
        "nhwc or nchw: the GPU runtime's internal layout (the input is as the config declares it)",
    ),
    Parameter("cuda_graphs", "cuda_graphs", read_bool, "true", "replay each batch bucket as a CUDA graph"),
    Parameter(
        "batch_buckets",
        "batch_buckets",
        read_ints(),
        "",
        "batch sizes the GPU runtime runs at (empty: the powers of two up to max_batch_size); a batch runs on the "
        "buckets that cover it in the least time, each bucket timed at start (the last one padded); each holds its "
        "own ONNX Runtime session and memory and costs seconds at start",
    ),
    Parameter(
        "late_batch_buckets",
        "late_batch_buckets",
        read_ints(),
        "",
        "GPU runtime: batch sizes below the largest of batch_buckets whose sessions are made on a thread while the "
        "model serves (under the launcher once the server is ready), and used once made (a lone image on a 1 "
        "bucket: less latency without a later ready); their memory comes out of the same gpu_memory_mb",
    ),
    Parameter(
        "gpu_memory_mb",
        "gpu_memory_mb",
        lambda _name, text: text.strip(),
        "",
        'GPU instances: the most GPU memory one instance may hold, its CUDA context included, MiB, or "<largest '
        "bucket>:<MiB>,...\" (tritonprep.memory); spread over the bucket sessions' arenas as their caps (empty: none)",
    ),
    Parameter(
        "gpu_mem_limit_mb",
        "gpu_mem_limit_mb",
        read_whole,
        "0",
        "cap of each bucket's ONNX Runtime arena in MiB, instead of its share of gpu_memory_mb (0: none)",
    ),
    Parameter(
        "cudnn_conv_algo_search",
        "cudnn_conv_algo_search",
        read_lower,
        "heuristic",
        "heuristic, exhaustive or default: how cuDNN picks each convolution's algorithm per bucket (exhaustive "
        "benchmarks them all while the model loads: the slowest start)",
    ),
    Parameter(
        "cudnn_conv_use_max_workspace",
        "cudnn_conv_use_max_workspace",
        read_bool,
        "false",
        "let cuDNN pick algorithms that need a large workspace (each bucket's arena keeps it: more memory)",
    ),
    Parameter(
        "arena_extend_strategy",
        "arena_extend_strategy",
        read_lower,
        "same_as_requested",
        "same_as_requested or next_power_of_two: how a bucket's ONNX Runtime arena grows",
    ),
    Parameter(
        "fuse_conv_bias",
        "fuse_conv_bias",
        read_fuse,
        "false",
        "true, false, or the batch buckets that do: add each convolution's bias inside cuDNN's convolution (one "
        "kernel) instead of in a kernel of its own (cuDNN compiles the fused kernels in each bucket's first run)",
    ),
)
_TABLE = {p.name: p for p in RUNTIME_PARAMETERS}
#: parameters of a network model's config that Triton's Python backend reads itself
BACKEND_PARAMETERS = frozenset({"FORCE_CPU_ONLY_INPUT_TENSORS"})


@dataclass(frozen=True)
class RuntimeOptions:
    """How the network runs; built from its config's ``parameters`` by :data:`RUNTIME_PARAMETERS`."""

    runtime: str = "auto"
    precision: str = "fp16"
    layout: str = "nhwc"
    cuda_graphs: bool = True
    #: empty: every power of two up to max_batch_size (:meth:`from_parameters` fills them in)
    batch_buckets: tuple[int, ...] = ()
    #: buckets made while the model serves (tritonprep.classifier.late_buckets)
    late_batch_buckets: tuple[int, ...] = ()
    #: the instance's GPU memory budget (the parameter's text: tritonprep.memory), "" for none
    gpu_memory_mb: str = ""
    gpu_mem_limit_mb: int = 0
    cudnn_conv_algo_search: str = "heuristic"
    cudnn_conv_use_max_workspace: bool = False
    arena_extend_strategy: str = "same_as_requested"
    #: every bucket (True), none (False), or the bucket sizes named
    fuse_conv_bias: bool | tuple[int, ...] = False

    def __post_init__(self) -> None:
        for name, choices in (
            ("runtime", RUNTIME_CHOICES),
            ("precision", PRECISIONS),
            ("layout", LAYOUTS),
            ("cudnn_conv_algo_search", CONV_ALGO_SEARCH),
            ("arena_extend_strategy", ARENA_EXTEND),
        ):
            try:
                check_choice(name, getattr(self, name), choices)
            except ConfigError as e:
                raise ConfigError(f"classifier parameter {e}") from None
        buckets = self.batch_buckets
        if not increasing_sizes(buckets):
            raise ConfigError(f"batch_buckets must be increasing positive sizes, got {list(buckets)}")
        instance_budget_mb(self.gpu_memory_mb, buckets)  # a malformed budget fails the load, not the first GPU use
        late = self.late_batch_buckets
        if not increasing_sizes(late):
            raise ConfigError(f"late_batch_buckets must be increasing positive sizes, got {list(late)}")
        if late and buckets and (set(late) & set(buckets) or late[-1] > buckets[-1]):
            raise ConfigError(
                f"late_batch_buckets ({','.join(map(str, late))}) must be sizes below the largest of batch_buckets "
                f"({','.join(map(str, buckets))}) that it does not have"
            )
        fused = () if isinstance(self.fuse_conv_bias, bool) else self.fuse_conv_bias
        if buckets and set(fused) - set(buckets) - set(late):
            raise ConfigError(
                f"fuse_conv_bias names batch size(s) {sorted(set(fused) - set(buckets) - set(late))} that neither "
                f"batch_buckets ({','.join(map(str, buckets))}) nor late_batch_buckets has"
            )

    @property
    def ep(self) -> CudaEpOptions:
        """The ONNX Runtime CUDA EP options (tritonprep.classifier.ort_options)."""
        return CudaEpOptions(
            self.cudnn_conv_algo_search,
            self.cudnn_conv_use_max_workspace,
            self.arena_extend_strategy,
            self.fuse_conv_bias,
        )

    @property
    def budget_mb(self) -> int | None:
        """The MiB one GPU instance may hold with these buckets (None: no cap)."""
        return instance_budget_mb(self.gpu_memory_mb, self.batch_buckets)

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], max_batch: int) -> RuntimeOptions:
        """Options from ``{name: string}``; buckets default to the powers of two up to ``max_batch``."""
        unknown = sorted(set(params) - set(_TABLE) - BACKEND_PARAMETERS)
        if unknown:
            raise ConfigError(f"unknown classifier parameter(s) {unknown}; known: {sorted(_TABLE)}")
        values: dict[str, Any] = {}
        for name, text in params.items():
            if name in _TABLE:
                try:
                    values.update(_TABLE[name].values(text))
                except ConfigError as e:
                    raise ConfigError(f"classifier {e}") from None
        buckets = values.get("batch_buckets") or default_buckets(max_batch)
        if not increasing_sizes(buckets) or buckets[-1] > max_batch:
            raise ConfigError(
                f"batch_buckets must be increasing positive sizes up to max_batch_size ({max_batch}), "
                f"got {list(buckets)}"
            )
        return cls(**{**values, "batch_buckets": buckets})


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """The powers of two below ``max_batch``, and ``max_batch``."""
    return tuple(1 << k for k in range(max_batch.bit_length()) if 1 << k < max_batch) + (max_batch,)


def runtime_parameter_table() -> str:
    """The network models' parameters as a Markdown table (name, default, meaning), as the docs show them."""
    return markdown_table(
        ("parameter", "default", "meaning"),
        ((f"`{p.name}`", f"`{p.default}`" if p.default else "(empty)", p.help) for p in RUNTIME_PARAMETERS),
    )


class OrtCpuRuntime:
    """ONNX Runtime on the CPU (FP32): any batch size, numpy in and out."""

    name = "onnxruntime-cpu"
    on_gpu = False

    def __init__(self, onnx_path: Path, threads: int = 0, input_dims: Sequence[int] = ()) -> None:
        t0 = time.perf_counter()
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        #: a channel-last config over an NCHW network (a GPU config's instance on the CPU): rows are transposed
        self.to_network = TO_NCHW if channels_last(input_dims) and not channels_last(self.session_dims()) else None
        #: seconds of each start-up phase (the instance report's)
        self.timings = {"session": time.perf_counter() - t0}

    def session_dims(self) -> tuple[Any, ...]:
        """The network's input dims without the batch axis (sizes, or names of dynamic axes)."""
        return tuple(self.session.get_inputs()[0].shape[1:])

    def close(self) -> None:
        """Release the session (nothing on a GPU: dropping it is enough)."""
        self.session = None

    def infer(self, batch: Any) -> np.ndarray:
        """Logits of ``batch``; GPU inputs are copied to the host."""
        if not isinstance(batch, np.ndarray):
            batch = batch.get()
        if self.to_network is not None:
            batch = batch.transpose(self.to_network)
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def infer_many(self, parts: Sequence[Any], then: Callable[[Any], Any] | None = None) -> Any:
        """Logits of the concatenated ``parts`` (or ``then`` of them)."""
        host = [p if isinstance(p, np.ndarray) else p.get() for p in parts]
        logits = self.infer(host[0] if len(host) == 1 else np.concatenate(host))
        return logits if then is None else then(logits)


def _once(work: Callable[[], object]) -> Callable[[], None]:
    """``work`` run at its first call only (a fallback from one runtime to the next calls it again)."""
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            work()

    return run


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
    meanwhile: Callable[[], object] | None = None,
    late_start: Callable[[], bool] | None = None,
) -> Runtime:
    """Load the classifier on the best runtime available for the instance.

    ``input_dims`` is the network input without the batch axis, as the model config declares it;
    ``options`` come from the config's parameters (``prefer`` overrides ``options.runtime``);
    ``stream``: a CuPy stream the ONNX Runtime CUDA network runs on (default: one of its own), e.g. the
    preprocess executor's, so that decode, kernels and network are ordered on one stream; ``shared_mb``:
    what else the instance holds of its ``gpu_memory_mb`` (``classify_fused``'s preprocessing);
    ``meanwhile``: the caller's other start-up work, run once: ONNX Runtime's CUDA EP runs it while its buckets'
    first runs go on a thread of their own (:class:`OrtCudaRuntime`), the other runtimes before they load (TensorRT
    only where its package is there: otherwise the overlap with ONNX Runtime would be lost); ``late_start``: what
    ONNX Runtime's late buckets wait for before they are made (:mod:`.late_buckets`; None: nothing).
    """
    options = options or RuntimeOptions.from_parameters({}, max_batch)
    meanwhile = _once(meanwhile) if meanwhile is not None else None
    prefer = prefer or options.runtime
    if prefer not in RUNTIME_CHOICES:
        raise ConfigError(f"runtime must be one of {RUNTIME_CHOICES}, got {prefer!r}")
    if not onnx_path.is_file():
        raise ConfigError(f"{onnx_path} does not exist; run `make model` (scripts/export_classifier.py) to export it")
    if prefer in ("auto", "tensorrt") and use_gpu and runs_nhwc_variant(onnx_path, options.precision, input_dims):
        if prefer == "tensorrt":
            raise ConfigError(
                f"runtime=tensorrt builds its engine from {onnx_path.name}, which takes NCHW: declare the input "
                f"NCHW, not {list(input_dims)} (classify_fused: its layout parameter), or use runtime auto"
            )
        log.info(
            "TensorRT runtime not used: the channel-last input %s runs %s",
            list(input_dims),
            nhwc_variant(onnx_path).name,
        )
    elif prefer in ("auto", "tensorrt") and use_gpu:
        from .tensorrt import TensorRTRuntime

        try:
            import_tensorrt()  # absent (the usual case): meanwhile is left to overlap ONNX Runtime's first runs
            if meanwhile is not None:
                meanwhile()
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
                    model_file(onnx_path, options.precision, input_dims),
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
                    meanwhile=meanwhile,
                    late_buckets=options.late_batch_buckets,
                    late_start=late_start,
                )
            except RuntimeUnavailable as e:
                log.warning("classifier on a GPU instance runs on the CPU: %s", e)
        else:
            log.warning(
                "classifier on a GPU instance runs on the CPU: onnxruntime %s has no CUDA EP; %s",
                ort.__version__,
                GPU_INSTALL_HINT,
            )
    if meanwhile is not None:
        meanwhile()
    threads = int(os.environ.get("TRITONPREP_ORT_THREADS", "0"))
    return OrtCpuRuntime(onnx_path, threads, input_dims)


if __name__ == "__main__":
    import sys

    sys.stdout.write(runtime_parameter_table() + "\n")
