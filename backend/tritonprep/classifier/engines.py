"""TensorRT engines built from the exported ONNX classifier, rebuilt only when something changed.

Owns an engine's identity and the cache logic around it:

- the **key** of an engine: the ONNX file's SHA-256, the TensorRT version, the GPU model and
  compute capability, the build options and the builder. It is stored beside the plan
  (``model.plan.key.json``); an equal key means the plan is reused, any difference means a
  rebuild (:func:`build_or_reuse`). A timing cache gets the same treatment, keyed on the
  platform only, so a cache from another GPU or TensorRT version is discarded, not fed to
  the builder.
- what a builder is (:class:`Builder`); the two builders, TensorRT's Python API and ``trtexec``,
  and the platform probes live in :mod:`.builders`.

Every builder builds the same engine: explicit batch, one optimization profile over the batch
dimension (min/opt/max), FP16 allowed when asked, FP32 inputs and outputs as in the ONNX.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, RuntimeUnavailable

log = logging.getLogger(__name__)


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


# ------------------------------------------------------------------------------ build or reuse
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


def build_or_reuse(
    onnx_path: Path,
    plan_path: Path,
    options: BuildOptions,
    *,
    builder: Builder,
    platform: Platform,
    timing_cache: Path | None = None,
    device_id: int = 0,
    force: bool = False,
) -> bool:
    """Make sure ``plan_path`` holds an engine for ``onnx_path``; return True if it was (re)built.

    ``builder`` builds it (:mod:`.builders`), ``platform`` is the TensorRT and GPU it is for
    (:func:`~.builders.platform_of`). The key is removed before a build and written after it, so an
    interrupted build leaves a plan without a key, which the next call rebuilds. Builds of one plan
    are serialized by a lock file beside it: the instances of a model load in parallel, and the second
    one to get the lock finds the first one's engine up to date.
    """
    if not Path(onnx_path).is_file():
        raise ConfigError(f"{onnx_path} does not exist; run `make model` (scripts/export_classifier.py) to export it")
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
