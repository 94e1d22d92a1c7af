"""Softmax, top-k and class names."""

from __future__ import annotations

import numpy as np

from tritonprep.classifier.postprocess import imagenet_labels, softmax, top_k


def test_labels_are_the_imagenet_1k_names():
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert (labels[0], labels[281], labels[285], labels[967], labels[999]) == (
        "tench",
        "tabby",
        "Egyptian cat",
        "espresso",
        "toilet tissue",
    )


def test_top_k_agrees_with_a_full_sort():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(7, 1000)).astype(np.float32) * 5
    scores, idx = top_k(logits, 5)
    probs = softmax(logits)
    want = np.argsort(-probs, axis=1)[:, :5]
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_allclose(scores, np.take_along_axis(probs, want, 1), rtol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_softmax_is_stable_for_large_logits():
    p = softmax(np.array([[1000.0, 1000.0, -1000.0]], np.float32))
    np.testing.assert_allclose(p, [[0.5, 0.5, 0.0]], atol=1e-7)
