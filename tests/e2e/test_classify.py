"""End to end through a real tritonserver: raw images in, predictions and pixels out."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image
from tritonclient.utils import np_to_triton_dtype

from tritonprep_testkit.compare import reference_pixels
from tritonprep_testkit.photos import encode

pytestmark = pytest.mark.e2e

CATS = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967


def stats(server: object, model: str) -> dict:
    """Triton's statistics of ``model`` summed over the host's servers (a restricted API: the admin header)."""
    return server.model_statistics(model)["model_stats"][0]  # type: ignore[attr-defined]


def test_single_image_requests(client, jpegs):
    [cat] = client.classify([jpegs["chelsea"]])
    [coffee] = client.classify([jpegs["coffee"]])
    assert cat[0].index in CATS, cat
    assert coffee[0].index == ESPRESSO and coffee[0].label == "espresso", coffee
    assert len(cat) == 5 and abs(sum(p.score for p in cat) - 1) < 1 and cat[0].score >= cat[1].score


def test_multi_image_request_of_mixed_formats_and_sizes(client, jpegs, photos):
    """Several images of different byte lengths and sizes in one [n, 1] BYTES request: no padding."""
    png = encode(photos["coffee"], "PNG")
    small = encode(np.asarray(Image.fromarray(photos["chelsea"]).resize((200, 133))), "JPEG", quality=95)
    images = [jpegs["chelsea"], png, small, jpegs["coffee"]]
    assert len({len(x) for x in images}) == 4
    preds = client.classify(images)
    assert [p[0].index in CATS for p in preds] == [True, False, True, False]
    assert preds[1][0].index == ESPRESSO and preds[3][0].index == ESPRESSO


def test_preprocessed_tensor_equals_independent_reference(server, client, jpegs, photos):
    images = [jpegs["chelsea"], encode(photos["coffee"], "PNG"), jpegs["astronaut"]]
    got = client.preprocess(images)
    on_gpu = "GPU executor on device" in server.log_path.read_text()
    # FP16 channel-last from the GPU config (the network runs in FP16 NHWC; half the bytes between the steps), FP32
    # NCHW on the CPU
    assert got.shape == ((3, 224, 224, 3) if on_gpu else (3, 3, 224, 224))
    assert got.dtype == (np.float16 if on_gpu else np.float32)
    got = got.astype(np.float32).transpose(0, 3, 1, 2) if on_gpu else got
    for i, data in enumerate(images):
        want = reference_pixels(data)
        if on_gpu:  # GPU decode + kernel: within one uint8 level and FP16's rounding (tests/gpu: the tight checks)
            assert (np.abs(got[i] - want) <= 1.001 / 128 + 2**-11).mean() >= 0.999
        else:  # CPU executor: bit-exact with Pillow
            np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-6)
    # the values are real pixels, not a constant: the cat's crop spans most of the range
    assert got[0].std() > 0.2 and got[0].min() < -0.5 and got[0].max() > 0.5


def test_corrupt_image_fails_only_its_own_request_in_a_dynamic_batch(server, jpegs, photos):
    """Concurrent requests of mixed sizes, one corrupt: exactly that one fails, the rest are
    correct, they were batched together, and the server stays ready."""
    from tritonprep_client import ClassifyClient, InferenceFailed

    corrupt = jpegs["coffee"][: len(jpegs["coffee"]) // 2]  # truncated JPEG
    good = [jpegs["chelsea"], jpegs["coffee"], encode(photos["chelsea"][::2, ::2].copy()), jpegs["rocket"]]
    expected = ["cat", "espresso", "cat", None]
    work = [(i % 4, good[i % 4]) for i in range(23)]
    work.insert(11, (-1, corrupt))
    before = stats(server, "preprocess")

    def call(item):
        kind, data = item
        with ClassifyClient(server.options.grpc_url) as c:
            try:
                return kind, c.classify([data])[0]
            except InferenceFailed as e:
                return kind, e

    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(call, work))
    failures = [(k, r) for k, r in results if isinstance(r, Exception)]
    assert [k for k, _ in failures] == [-1], failures
    assert "truncated" in str(failures[0][1]).lower(), failures
    for kind, preds in results:
        if kind >= 0 and expected[kind] == "cat":
            assert preds[0].index in CATS
        elif kind >= 0 and expected[kind] == "espresso":
            assert preds[0].index == ESPRESSO
    after = stats(server, "preprocess")
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 24
    if "GPU executor on device" not in server.log_path.read_text():
        # one CPU instance with a queue delay: they must have shared batches (on a GPU, four instances
        # without queue delay may take each request alone; tests/e2e/test_isolation.py forces a shared batch)
        assert executions < 24, "requests were never batched together"
    assert server.is_ready()


def test_bad_inputs_are_errors_for_that_request(client, jpegs):
    from tritonprep_client import InferenceFailed

    for data, needle in [(b"", "empty"), (b"GIF89a\x01\x00\x01", "gif"), (b"hello world", "signature")]:
        with pytest.raises(InferenceFailed) as e:
            client.classify([data])
        assert needle in str(e.value).lower()
    # a request whose second image is bad names that image
    with pytest.raises(InferenceFailed, match="image 2 of 2"):
        client.classify([jpegs["chelsea"], b"\xff\xd8\xff\xe0 truncated"])
    assert client.classify([jpegs["coffee"]])[0][0].index == ESPRESSO


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_servers_error_for_a_bad_image_names_its_index_and_reason(server, jpegs, protocol):
    """The per-image error contract end to end: the real server's error for one bad image of a multi-image
    request, as tritonclient hands it over, reads back (tritonprep.image_errors.parse) to that image's
    index, the request's count and the reason; from preprocess, the classify ensemble and classify_fused."""
    import importlib

    from tritonclient.utils import InferenceServerException

    from tritonprep.image_errors import parse
    from tritonprep_client import image_input
    from tritonprep_client.client import parse_url
    from tritonprep_testkit.corpus import jpeg_set_size

    module = importlib.import_module(f"tritonclient.{protocol}")
    _, target = parse_url(server.options.grpc_url if protocol == "grpc" else server.options.http_url, protocol)
    triton = module.InferenceServerClient(target)
    good = jpegs["chelsea"]
    cases = [(2, jpegs["coffee"][:3000], "decode", "truncated"), (0, jpeg_set_size(good, 65535, 65535), "limit", "")]
    try:
        for model in ("preprocess", "classify", "classify_fused"):
            for index, bad, reason, needle in cases:
                images = [good, jpegs["coffee"], good, jpegs["rocket"]]
                images[index] = bad
                with pytest.raises(InferenceServerException) as e:
                    triton.infer(model, [image_input(images, module)])
                failure = parse(e.value.message())
                assert failure is not None, (model, e.value.message())
                assert (failure.index, failure.count, failure.reason) == (index, 4, reason), (model, e.value.message())
                assert needle in failure.message.lower(), (model, failure)
                assert str(e.value.status()) in ("StatusCode.INVALID_ARGUMENT", "400"), (model, e.value.status())
    finally:
        triton.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_classifiers_own_top_k_answers_what_the_postprocess_step_did(server, jpegs, photos, protocol):
    """Issue 24: ``classify`` is preprocess -> classifier, whose top-k (computed where the logits are) replaced
    the postprocess step. Its answers equal the old path's: the same images' pixels through the classifier's
    logits and the postprocess model, request by request, whichever protocol carries them."""
    import importlib

    from tritonprep_client.client import parse_url

    module = importlib.import_module(f"tritonclient.{protocol}")
    _, target = parse_url(server.options.grpc_url if protocol == "grpc" else server.options.http_url, protocol)
    triton = module.InferenceServerClient(target)

    def infer(model, name, array, outputs):
        # the classifier's input is FP32 on the CPU, FP16 on a GPU (its configs/gpu.pbtxt): as preprocess made it
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        wanted = [module.InferRequestedOutput(o) for o in outputs]
        result = triton.infer(model, [tensor], outputs=wanted)
        return [result.as_numpy(o) for o in outputs]

    small = encode(np.asarray(Image.fromarray(photos["astronaut"]).resize((150, 150))), "PNG")
    try:
        for images in ([jpegs["chelsea"]], [jpegs["coffee"], small, jpegs["rocket"], jpegs["chelsea"]]):
            steps = [s["model_name"] for s in _ensemble_steps(server, triton, protocol, "classify")]
            assert steps == ["preprocess", "classifier"], steps
            scores, ids, labels = infer("classify", "IMAGE", _bytes(images), ["SCORES", "CLASS_IDS", "LABELS"])
            [pixels] = infer("preprocess", "IMAGE", _bytes(images), ["PIXELS"])
            [logits] = infer("classifier", "input", pixels, ["logits"])
            old_scores, old_ids, old_labels = infer("postprocess", "LOGITS", logits, ["SCORES", "CLASS_IDS", "LABELS"])
            assert ids.dtype == np.int32 and ids.shape == (len(images), 5)
            np.testing.assert_array_equal(ids, old_ids)
            np.testing.assert_array_equal(labels, old_labels)
            np.testing.assert_allclose(scores, old_scores, rtol=1e-5, atol=1e-6)
            # and the classifier answers its top-k to a client that asks it directly, beside the logits
            own_ids, own_logits = infer("classifier", "input", pixels, ["CLASS_IDS", "logits"])
            np.testing.assert_array_equal(own_ids, old_ids)
            np.testing.assert_allclose(own_logits, logits, rtol=0, atol=0)
    finally:
        triton.close()


def _bytes(images):
    """A BYTES array [n, 1] of encoded images."""
    return np.array([[x] for x in images], dtype=object)


def _ensemble_steps(server, triton, protocol, model):
    """The steps of ensemble ``model`` as the server reports its config (a restricted API: the admin header)."""
    if protocol == "grpc":
        config = triton.get_model_config(model, headers=server.grpc_admin_headers, as_json=True)
    else:
        config = triton.get_model_config(model, headers=server.admin_headers)
    config = config.get("config", config)
    return config["ensemble_scheduling"]["step"]
