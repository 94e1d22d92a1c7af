"""The embedder: a network's vectors (the shipped one: EfficientNet-Lite0's 1280 pooled features) at unit
length, FP32 or FP16.

The shipped exported graph (``scripts/export_embedder.py``) already ends in L2 normalisation, but its FP16
variant normalises in half precision (lengths off by up to ~3e-4, measured on the H100), so
:func:`as_embeddings` divides by the length once more in FP32: every vector leaves with unit length. The
model config's ``embedding`` output decides the dtype the vectors leave in (``TYPE_FP32`` or
``TYPE_FP16``) and their width (its dims ``[D]``), so the config is the one place that says it. Cosine
similarity of two embeddings is their dot product.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..cuda import cuda_fault_guard, import_cupy
from ..errors import ConfigError

OUTPUT = "embedding"
#: the width of the shipped embedder's vectors (EfficientNet-Lite0's pooled features)
FEATURES = 1280
DTYPES = {"TYPE_FP32": np.dtype(np.float32), "TYPE_FP16": np.dtype(np.float16)}


def embedding_dtype(model_config: Mapping[str, Any]) -> np.dtype:
    """The dtype of the ``embedding`` output that the model config declares (checked: FP32 or FP16, dims ``[D]``)."""
    outputs = {o["name"]: o for o in model_config.get("output", [])}
    if OUTPUT not in outputs:
        raise ConfigError(f"the embedder config declares no output {OUTPUT!r} (outputs: {sorted(outputs)})")
    out = outputs[OUTPUT]
    dims = [int(d) for d in out.get("dims", [])]
    if len(dims) != 1 or dims[0] < 1:
        raise ConfigError(
            f"output {OUTPUT!r} has dims {dims}; an embedding is one axis, [D] (the shipped embedder's: [{FEATURES}])"
        )
    if out.get("data_type") not in DTYPES:
        raise ConfigError(f"output {OUTPUT!r} has data_type {out.get('data_type')}; use one of {', '.join(DTYPES)}")
    return DTYPES[out["data_type"]]


def onnx_file(model_dir: Path) -> Path:
    """The exported embedder in a version folder, or the command that makes it."""
    path = model_dir / "model.onnx"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; run `make model` (scripts/export_embedder.py) to export it")
    return path


def as_embeddings(features: Any, dtype: np.dtype) -> Any:
    """The network's vectors (numpy or CuPy, where they are) at unit length in FP32, in the output dtype.

    On the GPU the work is one kernel (:func:`tritonprep.kernels.launch.unit_rows`, the same for any batch, so a
    warm-up of one image compiles all of it) on the current stream, which is synchronized before the vectors leave
    (Triton reads them right after ``execute``), under the sticky-CUDA-error guard of every GPU path.
    """
    if isinstance(features, np.ndarray):
        return _unit(np, features).astype(dtype, copy=False)
    cp = import_cupy()
    from ..kernels.launch import unit_rows, unit_rows_takes

    with features.device:
        stream = cp.cuda.get_current_stream()
        with cuda_fault_guard(features.device.id, "the embedder", probe=stream.synchronize):
            if unit_rows_takes(features, dtype):
                out = unit_rows(features, dtype)  # one launch, the same kernel for any batch
            else:
                out = _unit(cp, features).astype(dtype, copy=False)
            stream.synchronize()
    return out


def _unit(xp: Any, features: Any) -> Any:
    """``features`` (rows) divided by their length, in FP32 (an all-zero row stays zero)."""
    v = features.astype(np.float32, copy=False)
    return v / xp.maximum(xp.linalg.norm(v, axis=1, keepdims=True), np.float32(1e-12))
