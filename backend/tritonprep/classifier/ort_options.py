"""How ONNX Runtime's CUDA EP sessions are made and run: finding ONNX Runtime and its CUDA EP (and what to say when
they are missing or a session cannot be made), the options behind memory and start time, the way
ONNX Runtime 1.26+ expects the CUDA EP to be found, the optimized models kept between starts, and the run options
(:func:`run_options`).

**Options** (:class:`CudaEpOptions`; the classifier config's parameters, :mod:`.runtimes`):

* ``cudnn_conv_algo_search``: ``EXHAUSTIVE`` benchmarks every convolution's algorithms for each bucket
  while the model loads (most of a bucket session's start), ``HEURISTIC`` asks cuDNN's heuristics
  (no benchmark), ``DEFAULT`` takes cuDNN's default algorithm;
* ``cudnn_conv_use_max_workspace``: lets cuDNN pick algorithms that need a large workspace (ONNX
  Runtime's default is on; each bucket's arena then keeps that workspace);
* ``arena_extend_strategy``: how a bucket's arena grows: by what is asked (``kSameAsRequested``) or by
  powers of two (``kNextPowerOfTwo``, ONNX Runtime's default: up to twice what it needs);
* ``fuse_conv_bias``: each convolution adds its bias inside cuDNN's own kernel (a cuDNN frontend graph of
  convolution and bias) instead of in a second kernel over the whole output (``cudnnAddTensor``); where cuDNN
  has no fused kernel for a convolution, ONNX Runtime falls back to the two kernels by itself. cuDNN compiles
  the fused kernels in each bucket's first run (seconds), so it may be set for some buckets only;
* ``gpu_mem_limit``: the most one bucket session's arena may hold (:func:`session_caps_mb` spreads an
  instance's ``gpu_memory_mb`` over its buckets).

**The CUDA EP as ONNX Runtime 1.26+ finds it.** Creating a session with ``("CUDAExecutionProvider",
{"device_id": ...})`` first looks for a registered *plugin EP device* of that name, and without one logs
``No registered plugin EP device found for 'CUDAExecutionProvider' with device_id=N`` through ONNX
Runtime's default logger before it uses the built-in provider: once per session, on every healthy start.
Registering the wheel's provider library as a plugin EP silences it, but sessions made through it
ignore ``user_compute_stream`` (measured on the H100 with ONNX Runtime 1.31.1: every CUDA-graph capture
then fails with CUDA error 900), so the built-in provider stays. :func:`quiet_provider_lookup` raises the
default logger's severity to ERROR while a session is created and restores it after: that warning is
the only one this step logs for a session whose nodes all run on the GPU (CPU fallback is disabled, so
a node the GPU cannot take is an error, not a warning), and ONNX Runtime's errors still show.

**Optimized models** (:class:`OptimizedModels`): the first start saves each bucket session's optimized
graph (``SessionOptions.optimized_model_filepath``) in the start-up cache (:mod:`tritonprep.cache`);
later starts load it with graph optimizations off. An entry that ONNX Runtime cannot load is deleted
and none is kept for that key again (a ``.refused`` marker): that bucket is optimized at every start.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import cache
from ..errors import ConfigError, RuntimeUnavailable
from ..memory import CUDA_CONTEXT_MB, working_mb
from .engines import file_sha256

log = logging.getLogger(__name__)

CONV_ALGO_SEARCH = ("heuristic", "exhaustive", "default")
ARENA_EXTEND = ("same_as_requested", "next_power_of_two")
_ARENA_NAMES = {"same_as_requested": "kSameAsRequested", "next_power_of_two": "kNextPowerOfTwo"}
#: what each bucket session holds besides its arena (its cuDNN and cuBLAS handles and workspaces), MiB
SESSION_OVERHEAD_MB = 48
#: the least arena a bucket session gets, MiB (the FP16 weights and a batch of one)
MIN_SESSION_MB = 64
#: ONNX Runtime's words for a model file it cannot read (a truncated or foreign file): no CUDA install fixes it
MODEL_FILE_ERRORS = ("INVALID_PROTOBUF", "NO_SUCHFILE", "INVALID_GRAPH", "Protobuf parsing failed")
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


def session_error(model: Path, errors: list[str], preload_report: str = "") -> RuntimeUnavailable:
    """What to tell when no CUDA session of ``model`` could be made (``errors``: ORT's, last one last): a model
    file ORT cannot read says so and how to rebuild it; anything else names the GPU install."""
    if errors and any(marker in errors[-1] for marker in MODEL_FILE_ERRORS):
        return RuntimeUnavailable(f"ONNX Runtime could not read {model} ({errors[-1]}); rebuild it (make model)")
    return RuntimeUnavailable(
        f"ONNX Runtime could not create a CUDA session ({'; '.join(errors)})"
        f"{'; ' + preload_report if preload_report else ''}; {GPU_INSTALL_HINT}"
    )


@dataclass(frozen=True)
class CudaEpOptions:
    """The CUDA EP options that decide a bucket session's memory and start time (see the module's description)."""

    conv_algo_search: str = "heuristic"
    conv_max_workspace: bool = False
    arena_extend_strategy: str = "same_as_requested"
    #: every bucket (True), none (False), or the bucket sizes named
    fuse_conv_bias: bool | tuple[int, ...] = False

    def __post_init__(self) -> None:
        if self.conv_algo_search not in CONV_ALGO_SEARCH:
            raise ConfigError(
                f"cudnn_conv_algo_search must be one of {', '.join(CONV_ALGO_SEARCH)}; got {self.conv_algo_search!r}"
            )
        if self.arena_extend_strategy not in ARENA_EXTEND:
            raise ConfigError(
                f"arena_extend_strategy must be one of {', '.join(ARENA_EXTEND)}; got {self.arena_extend_strategy!r}"
            )

    def fuses(self, bucket: int) -> bool:
        """Whether the session of ``bucket`` adds the convolutions' bias inside cuDNN's kernels."""
        if isinstance(self.fuse_conv_bias, bool):
            return self.fuse_conv_bias
        return bucket in self.fuse_conv_bias

    def provider(self, bucket: int = 0) -> dict[str, str]:
        """These options as the CUDA EP provider options of ``bucket``'s session."""
        return {
            "cudnn_conv_algo_search": self.conv_algo_search.upper(),
            "cudnn_conv_use_max_workspace": "1" if self.conv_max_workspace else "0",
            "arena_extend_strategy": _ARENA_NAMES[self.arena_extend_strategy],
            "fuse_conv_bias": "1" if self.fuses(bucket) else "0",
        }

    def describe(self) -> str:
        """For the log and the benchmarks' rows: ``heuristic/ws0/same_as_requested`` (``/fused-bias``, or
        ``/fused-bias-b64`` for some buckets only)."""
        fused = self.fuse_conv_bias
        tail = "/fused-bias" if fused is True else "".join(f"/fused-bias-b{b}" for b in fused or ())
        return f"{self.conv_algo_search}/ws{int(self.conv_max_workspace)}/{self.arena_extend_strategy}{tail}"


def session_caps_mb(
    buckets: Sequence[int], *, budget_mb: int | None, explicit_mb: int = 0, io_mb: float = 0.0, shared_mb: int = 0
) -> list[int]:
    """The arena cap (MiB, 0: none) of each bucket session.

    ``explicit_mb`` (the ``gpu_mem_limit_mb`` parameter) caps every session alike. Otherwise an instance
    budget (``gpu_memory_mb``) less the CUDA context, ``shared_mb`` (what else the instance holds: the
    preprocessing of ``classify_fused``), the bound input/output buffers (``io_mb``) and each session's
    handles is spread over the sessions in proportion to ``bucket + 8`` (the activations grow with the
    batch; every session holds the weights), each getting at least :data:`MIN_SESSION_MB`.
    """
    if explicit_mb:
        return [explicit_mb] * len(buckets)
    if budget_mb is None:
        return [0] * len(buckets)
    reserved = CUDA_CONTEXT_MB + shared_mb + int(io_mb + 0.5) + SESSION_OVERHEAD_MB * len(buckets)
    left = working_mb(budget_mb, reserved, f"the network's {len(buckets)} bucket sessions")
    weights = [b + 8 for b in buckets]
    caps = [max(MIN_SESSION_MB, left * w // sum(weights)) for w in weights]
    if sum(caps) > left:
        raise ConfigError(
            f"gpu_memory_mb={budget_mb} leaves {left} MiB for {len(buckets)} bucket sessions, less than the "
            f"{MIN_SESSION_MB} MiB each needs; raise it or use fewer batch buckets"
        )
    return caps


# ------------------------------------------------------------------ the built-in CUDA EP's lookup warning
#: ONNX Runtime's default logger severities: 2 (WARNING) is its default, 3 (ERROR)
ORT_WARNING, ORT_ERROR = 2, 3


@contextlib.contextmanager
def quiet_provider_lookup(ort: Any) -> Iterator[None]:
    """Create sessions inside this block: ONNX Runtime's default logger shows errors only while it runs
    (the plugin-EP lookup's warning, see the module's description), then warnings again."""
    setter = getattr(ort, "set_default_logger_severity", None)
    if setter is None:
        yield
        return
    setter(ORT_ERROR)
    try:
        yield
    finally:
        setter(ORT_WARNING)


# ------------------------------------------------------------------ optimized models between starts
class OptimizedModels:
    """Each bucket session's optimized model in the start-up cache, keyed by what shaped it."""

    def __init__(self, folder: Path, onnx_path: Path, *key: object) -> None:
        self.folder = folder
        self._key = (file_sha256(onnx_path), *key)

    @classmethod
    def open(cls, onnx_path: Path, *key: object) -> OptimizedModels | None:
        """The cache for ``onnx_path`` (None where caching is off)."""
        folder = cache.subfolder("onnxruntime")
        return None if folder is None else cls(folder, onnx_path, *key)

    def path(self, bucket: int) -> Path:
        """Where bucket ``bucket``'s optimized model is kept."""
        return self.folder / f"{cache.key_of(*self._key, bucket)}.b{bucket}.onnx"

    def saving(self, bucket: int) -> Path:
        """A temporary path for ONNX Runtime to save the optimized model to; :meth:`keep` moves it in place."""
        return cache.temporary_beside(self.path(bucket))

    def keep(self, saved: Path, bucket: int) -> None:
        """Move a saved model in place (an empty or missing one is dropped)."""
        try:
            if saved.is_file() and saved.stat().st_size > 0:
                os.replace(saved, self.path(bucket))
        except OSError as e:
            log.info("cannot keep the optimized model of bucket %d: %s", bucket, e)
        finally:
            saved.unlink(missing_ok=True)

    def drop(self, bucket: int) -> None:
        """Delete bucket ``bucket``'s entry."""
        self.path(bucket).unlink(missing_ok=True)

    def refuse(self, bucket: int) -> None:
        """ONNX Runtime could not load bucket ``bucket``'s entry: delete it, and keep none for this key again
        (a marker beside it), so that no later start pays a failed load and a save."""
        self.drop(bucket)
        try:
            self.path(bucket).with_suffix(".refused").touch()
        except OSError as e:
            log.info("cannot mark bucket %d's optimized model as refused: %s", bucket, e)

    def refused(self, bucket: int) -> bool:
        """Whether an earlier start could not load bucket ``bucket``'s optimized model (see :meth:`refuse`)."""
        return self.path(bucket).with_suffix(".refused").is_file()


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


def run_options(ort: Any) -> Any:
    """The options of a bucket's run under ``infer_many``: ONNX Runtime leaves the stream unsynchronized (the
    runtime waits once per call), and the default CUDA graph is named (``gpu_graph_id`` 0): ONNX Runtime's Python
    ``run_with_iobinding`` looks the entry up on every run, and a missing one is a C++ exception it turns into a
    Python one and catches (~0.1 ms a call on an H100's host)."""
    options = ort.RunOptions()
    options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    options.add_run_config_entry("gpu_graph_id", "0")
    return options


def batch_dim_name(ort: Any, onnx_path: Path) -> str:
    """The name of the ONNX input's batch dimension (its ``dim_param``), read with a CPU session that only
    loads the graph (no optimization: it is only asked for its input)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    dim = session.get_inputs()[0].shape[0]
    if not isinstance(dim, str):
        raise ConfigError(f"{onnx_path} has a fixed batch size {dim}; export it with a named dynamic batch axis")
    return dim
