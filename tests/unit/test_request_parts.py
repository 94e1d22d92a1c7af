"""The parts the per-request isolation engine runs, without Triton: the preprocess stage's step, the
row-batched steps of the networks, the shared top-k. The engine itself answers real requests in
tests/e2e/test_isolation.py (its test model), test_faults.py and test_hostile.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritonprep.classifier.postprocess import TopK, softmax
from tritonprep.errors import ConfigError, DecodeError
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.image_errors import ImageFailure
from tritonprep.spec import OutputSpec, PreprocessConfig
from tritonprep.triton.isolation import row_batched, split_rows
from tritonprep.triton.preprocess import Preprocessed, PreprocessStage, RequestImages
from tritonprep.triton.responses import ImageRejected

ARGS = {
    "model_name": "preprocess",
    "model_instance_name": "preprocess_0_0",
    "model_instance_kind": "CPU",
    "model_instance_device_id": "0",
}


@pytest.fixture(scope="module")
def stage():
    small = OutputSpec(output_height=32, output_width=32, resize_shorter=32)
    s = PreprocessStage(PreprocessConfig((("PIXELS", OutputSpec()), ("SMALL", small)), ("DECODER",)), ARGS)
    yield s
    s.close()


def test_one_executor_run_gives_each_request_its_rows_or_its_first_bad_image(stage, jpegs):
    good, bad = jpegs["chelsea"], jpegs["coffee"][:500]
    inputs = [
        RequestImages([good, jpegs["coffee"]], frozenset({"PIXELS", "DECODER"})),
        RequestImages([good, bad, b"junk"], frozenset({"PIXELS"})),  # images 2 and 3 bad: the first is named
        RequestImages([jpegs["rocket"]], frozenset({"SMALL"})),
    ]
    first, second, third = stage.preprocess(inputs)
    alone = CpuExecutor(stage.config).run([good, jpegs["coffee"], jpegs["rocket"]])
    assert isinstance(first, Preprocessed) and set(first.outputs) == {"PIXELS"} and len(first) == 2
    np.testing.assert_array_equal(first.outputs["PIXELS"], alone.outputs["PIXELS"][:2])
    assert [i.path for i in first.infos] == ["cpu", "cpu"] and first.wanted == inputs[0].wanted
    assert isinstance(second, ImageRejected) and second.reason == "decode"
    assert second.failure.index == 1 and second.failure.count == 3
    assert str(second).startswith("image 2 of 3 [decode]: ")
    assert isinstance(third, Preprocessed) and set(third.outputs) == {"SMALL"}
    np.testing.assert_array_equal(third.outputs["SMALL"], alone.outputs["SMALL"][2:])


def test_a_request_retried_alone_gets_what_it_got_in_the_batch(stage, jpegs):
    """The engine's retry runs the step on one request: the same rows as inside a batch."""
    request = RequestImages([jpegs["astronaut"], jpegs["chelsea"]], frozenset({"PIXELS", "SMALL"}))
    [alone] = stage.preprocess([request])
    [_, batched] = stage.preprocess([RequestImages([jpegs["coffee"]], frozenset({"PIXELS"})), request])
    for name in ("PIXELS", "SMALL"):
        np.testing.assert_array_equal(alone.outputs[name], batched.outputs[name])


def test_image_rejected_keeps_the_reason_and_message_not_the_error(jpegs):
    error = DecodeError("corrupt JPEG data")
    rejected = ImageRejected(error, 0, 1)
    assert rejected.failure == ImageFailure(0, 1, "decode", "corrupt JPEG data")
    assert rejected.__cause__ is None and error not in vars(rejected).values()


def test_row_batched_splits_each_output_by_the_inputs_rows():
    def double(inputs):
        batch = np.concatenate(inputs)
        return batch * 2, batch[:, :1]

    step = row_batched(double)
    assert step.__name__ == "double"
    a, b = np.ones((2, 3)), np.zeros((1, 3))
    (a2, a1), (b2, b1) = step([a, b])
    np.testing.assert_array_equal(a2, a * 2)
    assert a1.shape == (2, 1) and b2.shape == (1, 3) and b1.shape == (1, 1)


def test_split_rows_refuses_outputs_with_the_wrong_number_of_rows():
    with pytest.raises(ValueError, match="3 rows for 4 inputs"):
        split_rows([np.zeros((3, 1))], [2, 2])


def test_top_k_reads_k_from_the_output_dims_and_names_the_classes():
    from tritonprep.classifier.labels import read_labels

    labels = read_labels("imagenet", Path("."))
    top = TopK.from_output_dims({"SCORES": [3], "CLASS_IDS": [3], "LABELS": [3], "OTHER": [7]}, labels, 1000)
    logits = np.zeros((2, 1000), np.float32)
    logits[0, 285], logits[1, 967] = 10, 10
    scores, ids = top(logits)
    assert ids.dtype == np.int32 and ids.shape == (2, 3) and list(ids[:, 0]) == [285, 967]
    np.testing.assert_allclose(scores[:, 0], softmax(logits)[[0, 1], [285, 967]])
    out = top.outputs(scores, ids)
    assert list(out) == ["SCORES", "CLASS_IDS", "LABELS"] and out["LABELS"].shape == (2, 3)
    assert out["LABELS"].dtype == np.object_ and [row[0] for row in out["LABELS"]] == [b"Egyptian cat", b"espresso"]
    assert out["LABELS"][1, 1] == top.labels.names[ids[1, 1]].encode()


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"SCORES": [5], "CLASS_IDS": [5]}, "declares no output"),
        ({"SCORES": [5], "CLASS_IDS": [5], "LABELS": [3]}, "must all have dims"),
        ({"SCORES": [5, 1], "CLASS_IDS": [5, 1], "LABELS": [5, 1]}, "must all have dims"),
        ({"SCORES": [0], "CLASS_IDS": [0], "LABELS": [0]}, "k >= 1"),
    ],
)
def test_top_k_refuses_outputs_that_disagree(dims, message):
    with pytest.raises(ConfigError, match=message):
        TopK.from_output_dims(dims)
