"""The real server on a GPU: GPU executor inside Triton, zero-copy handoff, same answers as the CPU path."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tritonprep_testkit.compare import reference_pixels
from tritonprep_testkit.photos import encode
from tritonprep_testkit.servers import ONNX


def cpu_reference(images: list[bytes]) -> np.ndarray:
    """Probabilities from the CPU executor + ONNX Runtime, in this process."""
    import onnxruntime as ort

    from tritonprep.classifier.postprocess import softmax
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.spec import OutputSpec

    x = CpuExecutor(OutputSpec()).run(images).output
    session = ort.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    return softmax(session.run(["logits"], {"input": x})[0])


@pytest.fixture(params=["grpc", "http"])
def gpu_client(request, gpu_server):
    from tritonprep_client import ClassifyClient

    url = gpu_server.options.grpc_url if request.param == "grpc" else gpu_server.options.http_url
    with ClassifyClient(url, request.param) as c:
        yield c


def test_classification_matches_the_cpu_path(gpu_client, jpegs, photos):
    client = gpu_client
    images = [jpegs["chelsea"], jpegs["coffee"], encode(photos["coffee"], "PNG"), jpegs["rocket"], jpegs["astronaut"]]
    preds = client.classify(images)
    ref = cpu_reference(images)
    for p, r in zip(preds, ref):
        assert p[0].index == int(r.argmax())
        for q in p:
            assert abs(q.score - float(r[q.index])) <= 0.01


def test_outputs_stay_on_the_gpu_into_the_classifier(gpu_server, gpu_client, jpegs):
    gpu_client.classify([jpegs["chelsea"]])
    text = gpu_server.log_path.read_text()
    assert "classifier: first batch input on the GPU" in text
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():  # the GPU build: the network runs there too
        assert "runtime onnxruntime-cuda" in text, "the classifier did not run on ONNX Runtime's CUDA EP"
        assert "captured while loading" in text


def test_gpu_outputs_leave_through_the_dlpack_protocol_without_a_warning(gpu_server, gpu_client, jpegs):
    """GPU output tensors leave through ``__dlpack__`` (tritonprep.triton.tensors.output_tensor), not CuPy's
    deprecated ``toDlpack()``, whose VisibleDeprecationWarning every GPU stub printed into the server log;
    and they still stay on the GPU (the classifier reads its input there)."""
    gpu_client.classify([jpegs["chelsea"]])
    gpu_client.preprocess([jpegs["coffee"]])
    text = gpu_server.log_path.read_text()
    assert "classifier: first batch input on the GPU" in text
    warned = [ln for ln in text.splitlines() if "toDlpack" in ln or ("Deprecat" in ln and "lpack" in ln.lower())]
    assert not warned, warned


def test_the_capsule_of_a_gpu_output_needs_no_synchronization_and_warns_nothing(cp):
    """What output_tensor hands to pb_utils.Tensor.from_dlpack: a bare "dltensor" capsule from
    ``__dlpack__(stream=-1)`` (no stream ordering: the executor has synchronized), without a warning."""
    import ctypes
    import warnings

    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)[1:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        capsule = x.__dlpack__(stream=-1)
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    assert is_valid(capsule, b"dltensor") == 1


def test_preprocessed_pixels_within_one_level_of_pillow(gpu_client, jpegs):
    images = [jpegs["chelsea"], jpegs["astronaut"]]
    got = gpu_client.preprocess(images)
    assert got.shape[1:] == (224, 224, 3)  # the GPU config's PIXELS are channel-last (FP16 NHWC)
    for g, data in zip(got, images):
        d = np.abs(g - reference_pixels(data).transpose(1, 2, 0)) * 128  # back to uint8 levels
        assert (d <= 1.001).mean() >= 0.999 and d.max() <= 3


def test_corrupt_image_isolated_in_a_gpu_batch(gpu_server, jpegs):
    from tritonprep_client import ClassifyClient, InferenceFailed

    work = [jpegs["chelsea"]] * 10 + [jpegs["coffee"][:3000]] + [jpegs["coffee"]] * 10

    def call(data):
        with ClassifyClient(gpu_server.options.grpc_url) as c:
            try:
                return c.classify([data])[0][0].index
            except InferenceFailed as e:
                return e

    with ThreadPoolExecutor(21) as pool:
        results = list(pool.map(call, work))
    assert [i for i, r in enumerate(results) if isinstance(r, Exception)] == [10]
    assert all(r in (281, 282, 285) for r in results[:10]) and all(r == 967 for r in results[11:])
    assert gpu_server.is_ready()
