"""TensorRT engines built from the exported ONNX classifier, rebuilt only when something changed.

Owns an engine's identity and the cache logic around it, and the two ways to build one:

- the **key** of an engine: the ONNX file's SHA-256, the TensorRT version, the GPU model and
  compute capability, the build options and the builder. It is stored beside the plan
  (``model.plan.key.json``); an equal key means the plan is reused, any difference means a
  rebuild (:func:`build_or_reuse`). A timing cache gets the same treatment, keyed on the
  platform only, so a cache from another GPU or TensorRT version is discarded, not fed to
  the builder.
- :class:`PythonBuilder`, TensorRT's Python API (the ``tensorrt`` package: the embedded
  mode's :class:`tritonprep.classifier.tensorrt.TensorRTRuntime`, or NVIDIA's TensorRT container), and
  :class:`TrtexecBuilder`, NVIDIA's ``trtexec`` command-line builder, which the tritonserver
  images ship at ``/usr/src/tensorrt/bin/trtexec`` beside the very ``libnvinfer`` that Triton's
  TensorRT backend loads (the container's engine-build step, ``scripts/build_engine.py``).

Both build the same engine: explicit batch, one optimization profile over the batch
dimension (min/opt/max), FP16 allowed when asked, FP32 inputs and outputs as in the ONNX.
The GPU is identified through the CUDA driver API (``libcuda``) and, for ``trtexec``, the
TensorRT version through ``libnvinfer``'s ``getInferLibVersion``: no CuPy or CUDA Python needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, RuntimeUnavailable

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


class EngineBuildError(RuntimeUnavailable):
    """TensorRT is present but did not produce an engine (parse error, build failure, trtexec error)."""


_CONFIG_INPUT = re.compile(r"\binput\s*\[\s*\{(?P<body>[^}]*)\}", re.S)


def network_input(config: Path) -> tuple[str, tuple[int, ...]]:
    """Name and dims (without the batch axis) of the first input of a classifier ``config.pbtxt``.

    The config Triton serves the network with is the one definition of its input; this reads it
    without protobuf (the engine-build step runs where only the serving image's Python is).
    """
    try:
        text = config.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the classifier config {config}: {e.strerror}") from None
    match = _CONFIG_INPUT.search(re.sub(r"#[^\n]*", "", text))
    name = re.search(r'\bname:\s*"([^"]+)"', match.group("body")) if match else None
    dims = re.search(r"\bdims:\s*\[([^\]]*)\]", match.group("body")) if match else None
    if not (name and dims):
        raise ConfigError(f"{config} declares no input with a name and dims")
    return name.group(1), tuple(int(d) for d in dims.group(1).replace(",", " ").split())


@dataclass(frozen=True)
class BuildOptions:
    """Everything besides the ONNX bytes and the platform that shapes an engine.

    ``input_name`` and ``input_dims`` describe the network input without its batch axis, as the
    classifier's model config declares it (:func:`network_input`); the Python builder checks them
    against the ONNX graph, ``trtexec`` needs them for its shapes.
    """

    input_dims: tuple[int, ...]
    input_name: str = "input"
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
        if not self.input_name or any(c in self.input_name for c in ":,'\" "):
            raise ConfigError(f"input name must be non-empty, without ':', ',', quotes or spaces: {self.input_name!r}")
        object.__setattr__(self, "input_dims", tuple(int(d) for d in self.input_dims))
        if not self.input_dims or any(d < 1 for d in self.input_dims):
            raise ConfigError(f"input dims (without the batch axis) must be positive, got {self.input_dims}")

    def shape(self, batch: int) -> tuple[int, ...]:
        """The full input shape for ``batch`` images."""
        return (batch, *self.input_dims)


@dataclass(frozen=True)
class Platform:
    """The software and hardware an engine is bound to."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str


# ------------------------------------------------------------------------------ cache keys
def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def engine_key(onnx_sha256: str, platform: Platform, options: BuildOptions, builder: str) -> dict[str, Any]:
    """The identity of an engine: equal keys mean the existing engine can be reused.

    Returned in its JSON form (tuples become lists), so it compares equal to a stored key.
    """
    key = {"onnx_sha256": onnx_sha256, "builder": builder, **asdict(platform), **asdict(options)}
    return json.loads(json.dumps(key))


def timing_cache_key(platform: Platform, builder: str) -> dict[str, Any]:
    """The identity of a timing cache: it is only valid for one TensorRT version and GPU."""
    return {"builder": builder, **asdict(platform)}


def key_path(artifact: Path) -> Path:
    """Where the key of ``artifact`` is stored: ``<artifact>.key.json`` beside it."""
    return artifact.with_name(artifact.name + ".key.json")


def read_key(artifact: Path) -> dict[str, Any] | None:
    """The key stored beside ``artifact``, or None if either is absent or the key is unreadable."""
    kp = key_path(artifact)
    if not artifact.is_file() or not kp.is_file():
        return None
    try:
        key = json.loads(kp.read_text())
    except (OSError, ValueError):
        return None
    return key if isinstance(key, dict) else None


def needs_build(plan_path: Path, key: dict[str, Any]) -> bool:
    """True unless ``plan_path`` exists and was built with exactly ``key``."""
    return read_key(plan_path) != key


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename (never a half-written file).

    The file gets ``mode`` (engines are not secrets, and Triton may run as another user).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_key(artifact: Path, key: dict[str, Any]) -> None:
    """Store ``key`` beside ``artifact``."""
    write_atomically(key_path(artifact), (json.dumps(key, indent=2, sort_keys=True) + "\n").encode())


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


# ------------------------------------------------------------------------------ builders
def import_tensorrt() -> Any:
    """Import the ``tensorrt`` module or raise :class:`RuntimeUnavailable` with the install hint."""
    try:
        import tensorrt
    except ImportError as e:
        raise RuntimeUnavailable(f"{INSTALL_HINT} ({e})") from None
    return tensorrt


class Builder(Protocol):
    """Turns an ONNX file into a serialized engine at ``plan_path``."""

    name: str

    def tensorrt_version(self) -> str:
        """Version of the TensorRT this builder uses."""
        ...

    def build(
        self,
        onnx_path: Path,
        plan_path: Path,
        options: BuildOptions,
        *,
        timing_cache: Path | None = None,
        device_id: int = 0,
    ) -> None:
        """Build the engine and write it atomically to ``plan_path``."""
        ...


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


# ------------------------------------------------------------------------------ build or reuse
def build_or_reuse(
    onnx_path: Path,
    plan_path: Path,
    options: BuildOptions,
    *,
    builder: Builder | None = None,
    platform: Platform | None = None,
    timing_cache: Path | None = None,
    device_id: int = 0,
    force: bool = False,
) -> bool:
    """Make sure ``plan_path`` holds an engine for ``onnx_path``; return True if it was (re)built.

    The key is removed before a build and written after it, so an interrupted build leaves a
    plan without a key, which the next call rebuilds. Builds of one plan are serialized by a lock
    file beside it: the instances of a model load in parallel, and the second one to get the lock
    finds the first one's engine up to date.
    """
    if not Path(onnx_path).is_file():
        raise ConfigError(f"{onnx_path} does not exist; run `make model` (scripts/export_classifier.py) to export it")
    builder = builder or find_builder()
    platform = platform or Platform(builder.tensorrt_version(), *query_gpu(device_id))
    key = engine_key(file_sha256(onnx_path), platform, options, builder.name)
    with _build_lock(plan_path):
        return _build_unless_current(
            onnx_path, plan_path, options, builder, platform, key, timing_cache, device_id, force
        )


@contextlib.contextmanager
def _build_lock(plan_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<plan>.lock`` (released when the process ends, whatever happens)."""
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    with open(plan_path.with_name(plan_path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_unless_current(
    onnx_path: Path,
    plan_path: Path,
    options: BuildOptions,
    builder: Builder,
    platform: Platform,
    key: dict[str, Any],
    timing_cache: Path | None,
    device_id: int,
    force: bool,
) -> bool:
    if not force and not needs_build(plan_path, key):
        log.info("engine %s is up to date; skipping the build", plan_path)
        return False
    key_path(plan_path).unlink(missing_ok=True)
    cache_key = timing_cache_key(platform, builder.name)
    if timing_cache is not None and timing_cache.exists() and read_key(timing_cache) != cache_key:
        log.info("discarding timing cache %s: it was made for another GPU, TensorRT or builder", timing_cache)
        timing_cache.unlink(missing_ok=True)
        key_path(timing_cache).unlink(missing_ok=True)
    builder.build(onnx_path, plan_path, options, timing_cache=timing_cache, device_id=device_id)
    if timing_cache is not None and timing_cache.is_file():
        write_key(timing_cache, cache_key)
    write_key(plan_path, key)
    return True
