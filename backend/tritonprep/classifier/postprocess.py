"""Logits to predictions: softmax, top-k and ImageNet-1k class names."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np


@lru_cache(maxsize=1)
def imagenet_labels() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names, index-aligned with the classifier's logits."""
    text = resources.files("tritonprep").joinpath("data/imagenet_labels.txt").read_text(encoding="utf-8")
    labels = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(labels) != 1000:
        raise ValueError(f"imagenet_labels.txt must hold 1000 names, found {len(labels)}")
    return labels


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, in float32."""
    z = logits.astype(np.float32) - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and class indices of the ``k`` best classes per row, best first."""
    probs = softmax(logits)
    k = min(k, probs.shape[-1])
    idx = np.argpartition(-probs, k - 1, axis=-1)[..., :k]
    part = np.take_along_axis(probs, idx, axis=-1)
    order = np.argsort(-part, axis=-1, kind="stable")
    return np.take_along_axis(part, order, axis=-1), np.take_along_axis(idx, order, axis=-1)
