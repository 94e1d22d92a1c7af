"""The two ways to build a TensorRT engine, and the platform an engine is bound to.

- :class:`PythonBuilder`, TensorRT's Python API (the ``tensorrt`` package: the embedded mode's
  :class:`tritonprep.classifier.tensorrt.TensorRTRuntime`, or NVIDIA's TensorRT container), and
  :class:`TrtexecBuilder`, NVIDIA's ``trtexec`` command-line builder, which the tritonserver images
  ship at ``/usr/src/tensorrt/bin/trtexec`` beside the very ``libnvinfer`` that Triton's TensorRT
  backend loads (the container's engine-build step, ``scripts/build_engine.py``); :func:`find_builder`
  picks one.
- the platform (:func:`platform_of`): the GPU through the CUDA driver API (``libcuda``) and, for
  ``trtexec``, the TensorRT version through ``libnvinfer``'s ``getInferLibVersion``: no CuPy or CUDA
  Python needed.

Both builders build the same engine (:class:`~.engines.BuildOptions`); :func:`~.engines.build_or_reuse`
decides whether one is needed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RuntimeUnavailable
from .engines import Builder, BuildOptions, EngineBuildError, Platform, write_atomically

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "TensorRT is not available here: neither the 'tensorrt' Python package nor the trtexec "
    "command was found. Build engines in the tritonserver image (docker compose does it in "
    "its engine-build step), pass --trtexec PATH, or install the 'tensorrt' package that "
    "matches your CUDA from NVIDIA's index."
)
#: where NVIDIA's containers (tritonserver, TensorRT) put trtexec; Triton's own QA scripts call it there
TRTEXEC_DEFAULT = Path("/usr/src/tensorrt/bin/trtexec")
BUILDER_CHOICES = ("auto", "python", "trtexec")
#: tried in this order to read the TensorRT version next to trtexec
LIBNVINFER_NAMES = ("libnvinfer.so.10", "libnvinfer.so.11", "libnvinfer.so")
LIBCUDA_NAMES = ("libcuda.so.1", "libcuda.so")
_CU_ATTR_CC_MAJOR, _CU_ATTR_CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}


# ------------------------------------------------------------------------------ the platform
def _load_library(names: Sequence[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def query_gpu(device_id: int = 0) -> tuple[str, str]:
    """Name and compute capability (``"9.0"``) of CUDA device ``device_id``, through the driver API."""
    cuda = _load_library(LIBCUDA_NAMES)
    if cuda is None:
        raise RuntimeUnavailable(
            "no NVIDIA driver here (libcuda.so.1 not found): a TensorRT engine is built on the GPU model it runs on"
        )

    def check(result: int, what: str) -> None:
        if result != 0:
            raise RuntimeUnavailable(f"CUDA driver call {what} failed with CUresult {result} (GPU {device_id})")

    check(cuda.cuInit(0), "cuInit")
    count = ctypes.c_int(0)
    check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    if not 0 <= device_id < count.value:
        raise RuntimeUnavailable(f"GPU {device_id} does not exist: {count.value} visible")
    dev = ctypes.c_int(0)
    check(cuda.cuDeviceGet(ctypes.byref(dev), device_id), "cuDeviceGet")
    name = ctypes.create_string_buffer(256)
    check(cuda.cuDeviceGetName(name, len(name), dev), "cuDeviceGetName")
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    check(cuda.cuDeviceGetAttribute(ctypes.byref(major), _CU_ATTR_CC_MAJOR, dev), "cuDeviceGetAttribute")
    check(cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CU_ATTR_CC_MINOR, dev), "cuDeviceGetAttribute")
    return name.value.decode(errors="replace"), f"{major.value}.{minor.value}"


def decode_tensorrt_version(number: int) -> str:
    """``getInferLibVersion()`` as ``major.minor.patch``: (MAJOR*100 + MINOR)*100 + PATCH since
    TensorRT 10, MAJOR*1000 + MINOR*100 + PATCH before."""
    if number <= 0:
        raise ValueError(f"not a TensorRT version number: {number}")
    if number >= 100000:
        return f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    return f"{number // 1000}.{number // 100 % 10}.{number % 100}"


def libnvinfer_version() -> str:
    """Version of the ``libnvinfer`` the dynamic loader finds (the one trtexec and Triton use)."""
    lib = _load_library(LIBNVINFER_NAMES)
    if lib is None:
        raise RuntimeUnavailable(f"cannot load libnvinfer ({', '.join(LIBNVINFER_NAMES)}) to read the TensorRT version")
    fn = lib.getInferLibVersion
    fn.restype = ctypes.c_int32
    fn.argtypes = []
    return decode_tensorrt_version(int(fn()))


def platform_of(builder: Builder, device_id: int = 0) -> Platform:
    """The platform an engine built by ``builder`` on GPU ``device_id`` is bound to."""
    return Platform(builder.tensorrt_version(), *query_gpu(device_id))


# ------------------------------------------------------------------------------ builders
def import_tensorrt() -> Any:
    """Import the ``tensorrt`` module or raise :class:`RuntimeUnavailable` with the install hint."""
    try:
        import tensorrt
    except ImportError as e:
        raise RuntimeUnavailable(f"{INSTALL_HINT} ({e})") from None
    return tensorrt


class PythonBuilder:
    """TensorRT's Python API (the ``tensorrt`` package); builds on the current CUDA device."""

    name = "tensorrt-python"

    def __init__(self) -> None:
        self.trt = import_tensorrt()

    def tensorrt_version(self) -> str:
        """``tensorrt.__version__``."""
        return str(self.trt.__version__)

    def build(
        self,
        onnx_path: Path,
        plan_path: Path,
        options: BuildOptions,
        *,
        timing_cache: Path | None = None,
        device_id: int = 0,
    ) -> None:
        """Parse the ONNX, check its input against ``options``, build with one batch profile."""
        trt = self.trt
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise EngineBuildError(f"TensorRT could not parse {onnx_path}: {errors or 'no details'}")
        self._check_input(network, onnx_path, options)
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
        if options.fp16:
            if not hasattr(trt.BuilderFlag, "FP16"):
                raise EngineBuildError(
                    f"TensorRT {trt.__version__} has no FP16 builder flag (weakly typed networks were removed); "
                    "build with --no-fp16 or from an ONNX exported in FP16"
                )
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        profile.set_shape(
            options.input_name,
            options.shape(options.min_batch),
            options.shape(options.opt_batch),
            options.shape(options.max_batch),
        )
        config.add_optimization_profile(profile)
        if timing_cache is not None:
            blob = timing_cache.read_bytes() if timing_cache.is_file() else b""
            config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
        log.info("building a TensorRT engine from %s with the Python API (%s); this takes minutes", onnx_path, options)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise EngineBuildError(f"TensorRT failed to build an engine from {onnx_path}; see its log above")
        write_atomically(plan_path, bytes(memoryview(serialized)))
        if timing_cache is not None:
            write_atomically(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))

    @staticmethod
    def _check_input(network: Any, onnx_path: Path, options: BuildOptions) -> None:
        inputs = [network.get_input(i) for i in range(network.num_inputs)]
        if len(inputs) != 1:
            raise ConfigError(f"{onnx_path} has {len(inputs)} inputs; the classifier engine expects exactly one")
        tensor = inputs[0]
        shape = tuple(tensor.shape)
        if tensor.name != options.input_name or shape[1:] != options.input_dims:
            raise ConfigError(
                f"{onnx_path} takes {tensor.name!r} {list(shape)}, but the engine is configured for "
                f"{options.input_name!r} [-1, {', '.join(map(str, options.input_dims))}]"
            )
        if shape[0] != -1:
            raise ConfigError(f"{onnx_path} has a fixed batch size {shape[0]}; export it with a dynamic batch axis")


class TrtexecBuilder:
    """NVIDIA's ``trtexec``; the TensorRT version is read from the ``libnvinfer`` beside it."""

    name = "trtexec"

    def __init__(self, executable: Path, timeout_s: float | None = None) -> None:
        self.executable = Path(executable)
        self.timeout_s = timeout_s

    def tensorrt_version(self) -> str:
        """Version of the ``libnvinfer`` the loader resolves."""
        return libnvinfer_version()

    def command(
        self,
        onnx_path: Path,
        plan_path: Path,
        options: BuildOptions,
        *,
        timing_cache: Path | None = None,
        device_id: int = 0,
    ) -> list[str]:
        """The trtexec command line that builds the engine into ``plan_path`` (no inference run)."""

        def shapes(batch: int) -> str:
            return f"{options.input_name}:{'x'.join(map(str, options.shape(batch)))}"

        cmd = [
            str(self.executable),
            f"--onnx={onnx_path}",
            f"--saveEngine={plan_path}",
            f"--minShapes={shapes(options.min_batch)}",
            f"--optShapes={shapes(options.opt_batch)}",
            f"--maxShapes={shapes(options.max_batch)}",
            f"--memPoolSize=workspace:{options.workspace_mib}",  # MiB when no suffix is given
            f"--device={device_id}",
            "--skipInference",
        ]
        if options.fp16:
            cmd.append("--fp16")
        if timing_cache is not None:
            cmd.append(f"--timingCacheFile={timing_cache}")
        return cmd

    def build(
        self,
        onnx_path: Path,
        plan_path: Path,
        options: BuildOptions,
        *,
        timing_cache: Path | None = None,
        device_id: int = 0,
    ) -> None:
        """Run trtexec into a temporary file beside ``plan_path``, then rename it into place."""
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=plan_path.parent, prefix=f".{plan_path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(tmp_name)
        cmd = self.command(onnx_path, tmp, options, timing_cache=timing_cache, device_id=device_id)
        log.info("building a TensorRT engine from %s with trtexec (%s); this takes minutes", onnx_path, options)
        log.debug("running %s", " ".join(cmd))
        try:
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, errors="replace", check=False, timeout=self.timeout_s
                )
            except (OSError, subprocess.SubprocessError) as e:
                raise EngineBuildError(f"could not run {self.executable}: {e}") from e
            if proc.returncode != 0 or tmp.stat().st_size == 0:
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
                raise EngineBuildError(f"trtexec failed with exit code {proc.returncode}:\n{tail}")
            os.chmod(tmp, 0o644)
            os.replace(tmp, plan_path)
        finally:
            tmp.unlink(missing_ok=True)


def find_trtexec(explicit: Path | None = None) -> Path | None:
    """``explicit`` if given (it must be executable), else ``trtexec`` on PATH, else NVIDIA's default path."""
    if explicit is not None:
        if not (explicit.is_file() and os.access(explicit, os.X_OK)):
            raise ConfigError(f"--trtexec {explicit} is not an executable file")
        return explicit
    on_path = shutil.which("trtexec")
    if on_path:
        return Path(on_path)
    return TRTEXEC_DEFAULT if TRTEXEC_DEFAULT.is_file() and os.access(TRTEXEC_DEFAULT, os.X_OK) else None


def find_builder(prefer: str = "auto", trtexec: Path | None = None) -> Builder:
    """The builder to use: the Python API where ``tensorrt`` imports, else trtexec, else the install hint.

    ``prefer`` narrows the choice to ``python`` or ``trtexec``; ``trtexec`` names the executable.
    """
    if prefer not in BUILDER_CHOICES:
        raise ConfigError(f"builder must be one of {BUILDER_CHOICES}, got {prefer!r}")
    if prefer == "python" or (prefer == "auto" and trtexec is None):
        try:
            return PythonBuilder()
        except RuntimeUnavailable:
            if prefer == "python":
                raise
    exe = find_trtexec(trtexec)
    if exe is None:
        raise RuntimeUnavailable(INSTALL_HINT)
    return TrtexecBuilder(exe)
