"""Building TensorRT engines from the exported ONNX classifier, with a rebuild-only-when-needed cache.

Used in two places: ``scripts/build_engine`` (the container's engine-build step, which
writes ``classifier/1/model.plan`` for Triton's ``tensorrt_plan`` backend) and the
embedded mode's :class:`tritonprep.runtimes.TensorRTRuntime`. An engine is only valid for
the ONNX file, TensorRT version, GPU model and build options it was made with, so each
engine carries a key over exactly those; a changed key means rebuild, an equal key means skip.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, RuntimeUnavailable

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "TensorRT is not installed in this Python environment. Build engines inside NVIDIA's "
    "tritonserver or TensorRT container (docker compose does this for you), or install the "
    "'tensorrt' package that matches your CUDA from NVIDIA's index."
)


@dataclass(frozen=True)
class BuildOptions:
    """Everything besides the ONNX bytes and the platform that shapes an engine."""

    fp16: bool = True
    min_batch: int = 1
    opt_batch: int = 64
    max_batch: int = 256
    workspace_mib: int = 4096

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ConfigError(
                f"batch profile must satisfy 1 <= min <= opt <= max, got "
                f"{self.min_batch}/{self.opt_batch}/{self.max_batch}"
            )
        if self.workspace_mib < 64:
            raise ConfigError(f"workspace must be at least 64 MiB, got {self.workspace_mib}")


@dataclass(frozen=True)
class Platform:
    """The software and hardware an engine is bound to."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def engine_key(onnx_sha256: str, platform: Platform, options: BuildOptions) -> dict[str, Any]:
    """The identity of an engine: equal keys mean the existing engine can be reused."""
    return {"onnx_sha256": onnx_sha256, **asdict(platform), **asdict(options)}


def read_key(plan_path: Path) -> dict[str, Any] | None:
    """The key stored beside an engine (``<plan>.key.json``), or None if absent/unreadable."""
    key_path = plan_path.with_name(plan_path.name + ".key.json")
    if not plan_path.is_file() or not key_path.is_file():
        return None
    try:
        return json.loads(key_path.read_text())
    except (OSError, ValueError):
        return None


def needs_build(plan_path: Path, key: dict[str, Any]) -> bool:
    """True unless ``plan_path`` exists and was built with exactly ``key``."""
    return read_key(plan_path) != key


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename (never a half-written engine)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def import_tensorrt() -> Any:
    """Import the ``tensorrt`` module or raise :class:`RuntimeUnavailable` with the install hint."""
    try:
        import tensorrt
    except ImportError as e:
        raise RuntimeUnavailable(f"{INSTALL_HINT} ({e})") from None
    return tensorrt


def current_platform(device_id: int = 0) -> Platform:
    """TensorRT version and GPU of this machine (needs tensorrt and CuPy)."""
    trt = import_tensorrt()
    try:
        import cupy
    except ImportError as e:
        raise RuntimeUnavailable(f"CuPy is needed to run TensorRT engines here: {e}") from None
    try:
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise RuntimeUnavailable(f"cannot query GPU {device_id}: {e}") from None
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return Platform(trt.__version__, name, f"{props['major']}.{props['minor']}")


def build_engine(onnx_path: Path, options: BuildOptions, timing_cache: Path | None = None) -> bytes:
    """Build a serialized engine from ``onnx_path`` with a dynamic batch profile."""
    trt = import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(Path(onnx_path).read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ConfigError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
    if options.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        chw = tuple(tensor.shape)[1:]
        profile.set_shape(
            tensor.name, (options.min_batch, *chw), (options.opt_batch, *chw), (options.max_batch, *chw)
        )
    config.add_optimization_profile(profile)
    cache = None
    if timing_cache is not None:
        blob = timing_cache.read_bytes() if timing_cache.is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
    log.info("building TensorRT engine from %s (%s)", onnx_path, options)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeUnavailable(f"TensorRT failed to build an engine from {onnx_path}; see the log above")
    if cache is not None and timing_cache is not None:
        write_atomically(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
    return bytes(memoryview(serialized))


def build_or_reuse(
    onnx_path: Path,
    plan_path: Path,
    options: BuildOptions,
    *,
    platform: Platform | None = None,
    timing_cache: Path | None = None,
    force: bool = False,
) -> bool:
    """Make sure ``plan_path`` holds an engine for ``onnx_path``; return True if it was (re)built."""
    platform = platform or current_platform()
    key = engine_key(file_sha256(onnx_path), platform, options)
    if not force and not needs_build(plan_path, key):
        log.info("engine %s is up to date; skipping the build", plan_path)
        return False
    write_atomically(plan_path, build_engine(onnx_path, options, timing_cache))
    write_atomically(plan_path.with_name(plan_path.name + ".key.json"), json.dumps(key, indent=2).encode())
    return True
