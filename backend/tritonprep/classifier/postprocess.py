"""Logits to predictions: softmax, top-k and the classes' names.

:class:`TopK` is what the ``postprocess`` model, the ``classifier`` model and ``classify_fused`` answer:
``SCORES``, ``CLASS_IDS`` and ``LABELS``, ``k`` each per image, ``k`` read from the model config's output
dims (at most the network's classes), the names from the config's ``labels`` parameter (:mod:`.labels`:
ImageNet's, a file's, or the class index). It runs where the logits are: NumPy for host logits, CuPy on the
GPU for a GPU runtime's (softmax and the selection stay on the device, one kernel; only the ``k`` scores and
ids per image come to the host).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .labels import PARAMETER as LABELS_PARAMETER
from .labels import Labels, imagenet_labels, read_labels

__all__ = ["OUTPUTS", "TopK", "imagenet_labels", "softmax", "top_k", "top_k_on_device"]

#: the outputs of a top-k answer, each of dims ``[k]``
OUTPUTS = ("SCORES", "CLASS_IDS", "LABELS")


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, in float32."""
    z = logits.astype(np.float32) - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and class indices of the ``k`` best classes per row, best first, ties to the lower index
    (a NaN probability, which a NaN logit gives its whole row, ranks last): what the GPU kernel answers too.

    A partition finds each row's k-th best; the rows where exactly ``k`` classes reach it (no tie at the cut,
    the usual case) sort only those; the others sort the whole row, stably."""
    probs = softmax(logits)
    k = min(k, probs.shape[-1])
    rows = -probs.reshape(-1, probs.shape[-1])
    kth = np.take_along_axis(rows, np.argpartition(rows, k - 1, axis=-1)[:, k - 1 : k], axis=-1)
    reach = rows <= kth
    exact = reach.sum(axis=-1) == k
    idx = np.empty((len(rows), k), np.int64)
    idx[exact] = np.nonzero(reach[exact])[1].reshape(-1, k)  # ids ascending: the stable sort keeps ties in id order
    idx[~exact] = np.argsort(rows[~exact], axis=-1, kind="stable")[:, :k]
    idx = np.take_along_axis(idx, np.argsort(np.take_along_axis(rows, idx, -1), axis=-1, kind="stable"), -1)
    shape = (*probs.shape[:-1], k)
    return np.take_along_axis(-rows, idx, -1).reshape(shape), idx.reshape(shape)


def top_k_on_device(logits: Any, k: int, wait: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` of CuPy ``logits`` on their GPU: host arrays of the ``k`` probabilities (float32) and class ids
    (int32) per row, best first. One kernel (:func:`tritonprep.kernels.launch.softmax_top_k`: float32 softmax, ties
    to the lower id, as the host's stable sort) and one copy to the host, on the current stream; ``wait=False``
    only enqueues the copy (into pinned memory): the arrays, strided views of one pinned block, hold the result
    once the caller synchronized it (:meth:`TopK.outputs` makes rows of them contiguous)."""
    from ..kernels.launch import TOP_K_MAX, softmax_top_k

    k = min(k, logits.shape[-1])
    if k > TOP_K_MAX:  # more than the kernel selects: the host's sort (k that large is rare, its copy is cheap)
        scores, ids = top_k(logits.get(), k)
        return scores, ids.astype(np.int32)
    with logits.device:
        return softmax_top_k(logits, k, wait=wait)


class TopK:
    """The ``k`` best classes of each row of logits: probabilities, class ids and names (``labels``; without
    names, a class's label is its index)."""

    def __init__(self, k: int, labels: Labels | None = None) -> None:
        if k < 1:
            raise ConfigError(f"top-k needs k >= 1; the outputs {list(OUTPUTS)} have dims [{k}]")
        self.k = k
        self.labels = labels or Labels()
        #: the names as UTF-8 bytes, indexed by class id (a BYTES output is gathered from it, no per-name work);
        #: None: the labels are the class indices
        self.label_bytes = (
            None if self.labels.names is None else np.array(self.labels.encoded(range(len(self.labels.names))), object)
        )

    @classmethod
    def from_output_dims(
        cls, dims: Mapping[str, Sequence[int]], labels: Labels | None = None, classes: int | None = None
    ) -> TopK:
        """The top-k a model config's outputs declare (``{name: dims}``): each of :data:`OUTPUTS`, dims ``[k]``;
        checked against the network's ``classes`` where the caller knows them (:meth:`check_classes`)."""
        missing = [name for name in OUTPUTS if name not in dims]
        if missing:
            raise ConfigError(f"the config declares no output {missing}; a top-k model answers {list(OUTPUTS)}")
        declared = {name: list(dims[name]) for name in OUTPUTS}
        k = declared["SCORES"]
        if len(k) != 1 or any(d != k for d in declared.values()):
            raise ConfigError(f"SCORES, CLASS_IDS and LABELS must all have dims [k]; the config has {declared}")
        top = cls(int(k[0]), labels)
        if classes is not None:
            top.check_classes(classes)
        return top

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        folder: Path,
        *,
        classes_of: str | None = None,
        labels_key: str = LABELS_PARAMETER,
    ) -> TopK:
        """The top-k a model config (Triton's JSON, as a dict) declares: ``k`` from its outputs' dims, the names from
        its ``labels_key`` parameter (a file read from ``folder``), checked against the classes of the input or
        output ``classes_of`` (dims ``[classes]``) where given."""
        tensors = [*config.get("input", []), *config.get("output", [])]
        dims = {t["name"]: [int(d) for d in t.get("dims", [])] for t in tensors}
        params = config.get("parameters") or {}
        labels = read_labels((params.get(labels_key) or {}).get("string_value"), folder)
        classes = None
        if classes_of is not None:
            if len(dims.get(classes_of, ())) != 1:
                raise ConfigError(f"{classes_of!r} must be declared with dims [classes]; the config has {dims}")
            classes = dims[classes_of][0]
        return cls.from_output_dims(dims, labels, classes)

    def check_classes(self, classes: int) -> None:
        """:class:`ConfigError` unless ``k`` is at most the network's ``classes`` and the labels name each of them."""
        if self.k > classes:
            raise ConfigError(
                f"top-k {self.k} is more than the network's {classes} classes; make the dims of "
                f"{', '.join(OUTPUTS)} at most [{classes}]"
            )
        self.labels.check(classes)

    def __call__(self, logits: Any, wait: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities (float32) and class ids (int32) of the ``k`` best classes per row, best first, as host
        arrays; ``logits`` is a numpy array or a CuPy array (computed on its GPU; ``wait=False``: the arrays are
        filled once the caller synchronized the current stream, :func:`top_k_on_device`)."""
        if not isinstance(logits, np.ndarray) and type(logits).__module__.startswith("cupy"):
            return top_k_on_device(logits, self.k, wait)
        scores, ids = top_k(np.asarray(logits), self.k)
        return scores, ids.astype(np.int32)

    def enqueued(self, logits: Any) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`__call__` with ``wait=False``: a runtime's ``infer_many(then=...)`` synchronizes its stream once
        after it, so the top-k's copy into pinned memory costs no wait of its own."""
        return self(logits, wait=False)

    def outputs(self, scores: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
        """``{output name: rows}`` of some rows of :meth:`__call__`'s result; ``LABELS`` as an object array of the
        names' UTF-8 bytes (what a BYTES tensor holds)."""
        scores, ids = np.ascontiguousarray(scores), np.ascontiguousarray(ids)  # rows of a wider pinned copy
        if self.label_bytes is None:
            names = np.array(self.labels.encoded(ids.ravel()), object).reshape(ids.shape)
        else:
            names = self.label_bytes[ids]
        return {"SCORES": scores, "CLASS_IDS": ids, "LABELS": names}
