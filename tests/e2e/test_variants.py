"""Variants of the repository's configs through a real tritonserver: a detector input with Ultralytics'
letterbox beside the classifier's (one decode), and the embedder in FP16."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit.compare import letterbox_sizes, ultralytics_letterbox
from tritonprep_testkit.photos import encode
from tritonprep_testkit.servers import MODEL_REPOSITORY, running_server

pytestmark = pytest.mark.e2e

DETECT_OUTPUTS = """  { name: "DETECT" data_type: TYPE_FP32 dims: [ 3, 640, 640 ] },
  { name: "DETECT_SCALE" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "DETECT_PADDING" data_type: TYPE_INT32 dims: [ 4 ] },
"""


def variant_repository(dest: Path) -> Path:
    """preprocess with a DETECT output (preset ultralytics) added; embedder and embed in FP16."""
    for model in ("preprocess", "embedder", "embed"):
        shutil.copytree(MODEL_REPOSITORY / model, dest / model, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = dest / "preprocess" / "config.pbtxt"
    text = cfg.read_text().replace('  { name: "ORIGINAL_SIZE"', DETECT_OUTPUTS + '  { name: "ORIGINAL_SIZE"', 1)
    cfg.write_text(text + 'parameters { key: "DETECT.preset" value: { string_value: "ultralytics" } }\n')
    for model, output in (("embedder", "embedding"), ("embed", "EMBEDDING")):
        cfg = dest / model / "config.pbtxt"
        pattern = rf'(name: "{output}"\s*data_type: )TYPE_FP32'
        text, n = re.subn(pattern, r"\1TYPE_FP16", cfg.read_text())
        assert n == 1, model
        cfg.write_text(text)
    return dest


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    work = tmp_path_factory.mktemp("variants")
    repository = variant_repository(work / "models")
    # the variants are edits of config.pbtxt, which a GPU server does not read (configs/gpu.pbtxt): the CPU server
    with running_server(work / "tritonserver.log", repository=repository, gpus=()) as (srv, _):
        yield srv


def infer(server: object, model: str, images: list[bytes], outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    from tritonprep_client import image_input

    c = grpcclient.InferenceServerClient(server.options.grpc_url)  # type: ignore[attr-defined]
    try:
        r = c.infer(model, [image_input(images, "grpc")], outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
        return {n: r.as_numpy(n) for n in outputs}
    finally:
        c.close()


def test_detector_input_is_ultralytics_letterbox_beside_the_classifier_input(variants, photos):
    arrays = letterbox_sizes(photos)
    images = [encode(a, "PNG") for a in arrays]
    got = infer(variants, "preprocess", images, ["DETECT", "DETECT_SCALE", "DETECT_PADDING", "PIXELS"])
    assert got["DETECT"].shape == (len(images), 3, 640, 640) and got["PIXELS"].shape == (len(images), 3, 224, 224)
    for i, arr in enumerate(arrays):
        want, r, (left, top) = ultralytics_letterbox(arr)
        np.testing.assert_allclose(got["DETECT"][i].transpose(1, 2, 0) * 255, want, atol=1e-3, err_msg=str(arr.shape))
        assert tuple(got["DETECT_PADDING"][i][:2]) == (left, top)
        h, w = arr.shape[:2]
        # a box over the whole picture maps back onto the original's pixels
        x = (np.array([left, 640 - got["DETECT_PADDING"][i][2]]) - left) / got["DETECT_SCALE"][i][0]
        y = (np.array([top, 640 - got["DETECT_PADDING"][i][3]]) - top) / got["DETECT_SCALE"][i][1]
        np.testing.assert_allclose(x, [0, w], atol=1e-3)
        np.testing.assert_allclose(y, [0, h], atol=1e-3)
        assert abs(got["DETECT_SCALE"][i][0] - r) * w <= 0.5  # Ultralytics' own gain, within half a pixel


def test_fp16_embedder(variants, jpegs, photos):
    import onnxruntime as ort

    from tritonprep_testkit.servers import EMBEDDER_ONNX

    images = [jpegs["chelsea"], encode(photos["chelsea"], "PNG"), jpegs["coffee"]]
    emb = infer(variants, "embed", images, ["EMBEDDING"])["EMBEDDING"]
    assert emb.dtype == np.float16 and emb.shape == (3, 1280)
    e = emb.astype(np.float32)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=2e-3)
    assert e[0] @ e[1] >= 0.99 and e[0] @ e[2] < 0.5
    pixels = infer(variants, "preprocess", images, ["EMBED_PIXELS"])["EMBED_PIXELS"]  # the embedder's own input
    session = ort.InferenceSession(str(EMBEDDER_ONNX), providers=["CPUExecutionProvider"])
    want = session.run(["embedding"], {"input": pixels})[0]
    np.testing.assert_allclose(e, want, atol=2e-3)  # fp16 has 11 significant bits
