"""Softmax, top-k and class names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


# ----------------------------------------------------------------------------------------------- labels
def _config(k: int, classes: int, labels: str | None = None) -> dict:
    params = {"labels": {"string_value": labels}} if labels is not None else {}
    outputs = [{"name": n, "dims": [k]} for n in ("SCORES", "CLASS_IDS", "LABELS")]
    return {"input": [{"name": "LOGITS", "dims": [classes]}], "output": outputs, "parameters": params}


def test_labels_are_named_by_the_config_imagenet_a_file_or_the_class_index(tmp_path):
    from tritonprep.classifier.labels import Labels, read_labels

    assert read_labels("imagenet", tmp_path).names == imagenet_labels()
    assert read_labels("ImageNet", tmp_path).source == "imagenet"
    assert read_labels(None, tmp_path) == read_labels("  ", tmp_path) == Labels()
    (tmp_path / "labels.txt").write_text(" cat \ndog\n\n\n", encoding="utf-8")
    assert read_labels("labels.txt", tmp_path).names == ("cat", "dog")  # trailing empty lines are no classes
    assert read_labels(str(tmp_path / "labels.txt"), tmp_path / "elsewhere").names == ("cat", "dog")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cat\n\ndog\n", "line 2 is empty; give every class a name"),
        ("\n\n", "holds no names"),
        (None, "does not exist"),
    ],
)
def test_a_labels_file_that_would_shift_or_lack_names_is_refused(tmp_path, text, expected):
    from tritonprep.classifier.labels import read_labels
    from tritonprep.errors import ConfigError

    if text is not None:
        (tmp_path / "labels.txt").write_text(text)
    with pytest.raises(ConfigError, match=expected):
        read_labels("labels.txt", tmp_path)


def test_without_names_a_label_is_the_class_index():
    from tritonprep.classifier.postprocess import TopK

    top = TopK.from_config(_config(3, 10), Path("."), classes_of="LOGITS")
    logits = np.zeros((2, 10), np.float32)
    logits[0, 7], logits[1, 2] = 5, 5
    rows = top.outputs(*top(logits))
    assert rows["LABELS"][:, 0].tolist() == [b"7", b"2"] and rows["LABELS"].shape == (2, 3)
    assert rows["LABELS"].dtype == object


def test_the_top_k_and_the_labels_are_checked_against_the_classes(tmp_path):
    from tritonprep.classifier.postprocess import TopK
    from tritonprep.errors import ConfigError

    (tmp_path / "labels.txt").write_text("a\nb\nc\n")
    top = TopK.from_config(_config(2, 3, "labels.txt"), tmp_path, classes_of="LOGITS")
    assert top.outputs(*top(np.array([[0, 9, 1]], np.float32)))["LABELS"].tolist() == [[b"b", b"c"]]
    with pytest.raises(ConfigError, match="hold 3 names but the network has 4 classes"):
        TopK.from_config(_config(2, 4, "labels.txt"), tmp_path, classes_of="LOGITS")
    with pytest.raises(ConfigError, match="top-k 5 is more than the network's 3 classes"):
        TopK.from_config(_config(5, 3), tmp_path, classes_of="LOGITS")
    with pytest.raises(ConfigError, match="hold 1000 names but the network has 3 classes"):
        TopK.from_config(_config(2, 3, "imagenet"), tmp_path, classes_of="LOGITS")
