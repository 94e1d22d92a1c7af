"""The folder where model instances keep what a later start can reuse instead of redoing.

A GPU instance spends most of its start on work whose result only depends on its inputs: ONNX
Runtime optimizing the network for each batch bucket, CuPy compiling the preprocessing kernels.
Both are kept here between starts (a fresh process then loads them):

* ``onnxruntime/<key>.onnx``: a bucket session's optimized model (:mod:`tritonprep.classifier.ort_cuda`),
  keyed by everything that shaped it (the ONNX file's hash, ONNX Runtime's version, the GPU, the bucket);
* ``cupy/``: CuPy's kernel cache (``CUPY_CACHE_DIR``, unless the environment already names one);
* ``cuda/``: the CUDA driver's compute cache (``CUDA_CACHE_PATH``, unless the environment already names one):
  GPU code the driver compiles at run time, cuDNN's fused convolutions (``fuse_conv_bias``) among it. Without it
  a network process's first runs took 13.0-13.4 s instead of 7.2 s on an H100, and the driver's default
  (``~/.nv/ComputeCache``) is lost with a container's file system. The launcher sets it for tritonserver;
* ``tensorrt/<key>/``: the embedded TensorRT runtime's engines and timing cache for an ONNX file whose folder is
  read-only (an installed wheel's model repository; :func:`tritonprep.classifier.tensorrt.engine_folder`).

The folder is ``$TRITONPREP_CACHE_DIR`` if set (``off`` turns caching off), else
``$XDG_CACHE_HOME/tritonprep``, else ``~/.cache/tritonprep``. Entries are written beside their final
name and renamed, so instances starting together never read a half-written one; deleting the folder
is always safe (the next start rebuilds what it needs).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "TRITONPREP_CACHE_DIR"
#: the CUDA driver's variable that names its compute cache
CUDA_CACHE_ENV = "CUDA_CACHE_PATH"
OFF = "off"
_warned: set[str] = set()


def cache_root(env: Mapping[str, str] | None = None) -> Path | None:
    """The cache folder (created), or None when caching is off or no folder can be created there."""
    env = os.environ if env is None else env
    named = env.get(ENV, "").strip()
    if named.lower() == OFF:
        return None
    if named:
        root = Path(named)
    else:
        base = env.get("XDG_CACHE_HOME", "").strip()
        root = (Path(base) if base else Path(env.get("HOME", "~")).expanduser() / ".cache") / "tritonprep"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if str(root) not in _warned:
            _warned.add(str(root))
            log.info("no start-up cache (cannot create %s: %s); set %s to a writable folder", root, e.strerror, ENV)
        return None
    return root


def subfolder(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """``<cache>/<name>`` (created), or None without a cache."""
    root = cache_root(env)
    if root is None:
        return None
    try:
        (root / name).mkdir(exist_ok=True)
    except OSError:
        return None
    return root / name


def use_for_cupy() -> Path | None:
    """Point CuPy's kernel cache into the cache folder (unless ``CUPY_CACHE_DIR`` is set already); the folder used.

    CuPy reads the variable when it compiles, so this works as long as it runs before the first kernel is built.
    """
    if os.environ.get("CUPY_CACHE_DIR"):
        return Path(os.environ["CUPY_CACHE_DIR"])
    folder = subfolder("cupy")
    if folder is not None:
        os.environ["CUPY_CACHE_DIR"] = str(folder)
    return folder


def use_for_cuda(env: MutableMapping[str, str]) -> Path | None:
    """Point the CUDA driver's compute cache of the processes that ``env`` starts into the cache folder (sets
    ``CUDA_CACHE_PATH`` in ``env``, unless it names one already); the folder used (None: the driver's default).

    The driver reads the variable when a process initializes CUDA, so it goes into the server's environment.
    """
    if env.get(CUDA_CACHE_ENV):
        return Path(env[CUDA_CACHE_ENV])
    folder = subfolder("cuda", env)
    if folder is not None:
        env[CUDA_CACHE_ENV] = str(folder)
    return folder


def key_of(*parts: object) -> str:
    """A short stable name for an entry made from ``parts`` (their text, hashed)."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:32]


def temporary_beside(path: Path) -> Path:
    """A fresh, unique path in ``path``'s folder to write an entry to before :func:`os.replace` moves it in place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)
