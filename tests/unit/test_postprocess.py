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


def test_top_k_breaks_ties_to_the_lower_id_and_ranks_nan_rows_in_id_order():
    """The host's top-k is the GPU kernel's: ties at the cut and inside the k go to the lower id; a NaN logit
    makes its row's probabilities NaN (as the kernel's softmax does) and the ids come in order."""
    logits = np.zeros((3, 300), np.float32)
    logits[0, [250, 7, 120]] = 3.0  # a three-way tie at the top, then 297 equal others
    logits[1, 5] = np.nan
    logits[2, [9, 4]] = 1.0  # a tie inside the k, then zeros tied at the cut (ids 1-3 lower, -1)
    logits[2, [1, 2, 3]] = -1.0
    scores, idx = top_k(logits, 5)
    assert idx[0].tolist() == [7, 120, 250, 0, 1]
    assert idx[1].tolist() == [0, 1, 2, 3, 4] and np.isnan(scores[1]).all()
    assert idx[2].tolist() == [4, 9, 0, 5, 6]
    assert scores[0, 0] == scores[0, 2] > scores[0, 3]


def test_top_k_keeps_leading_dims_and_matches_a_stable_full_sort():
    logits = np.random.default_rng(5).integers(-3, 3, size=(2, 4, 50)).astype(np.float32)  # many ties
    scores, idx = top_k(logits, 7)
    probs = softmax(logits)
    want = np.argsort(-probs, axis=-1, kind="stable")[..., :7]
    assert idx.shape == scores.shape == (2, 4, 7)
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(scores, np.take_along_axis(probs, want, -1))
