"""Decode once, serve several models: the embed and analyze ensembles, provenance outputs and the
per-request isolation of every output, through a real tritonserver (CPU path)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tritonprep.geometry import window_transform
from tritonprep.spec import OutputSpec
from tritonprep_testkit.compare import cosine
from tritonprep_testkit.photos import encode

pytestmark = pytest.mark.e2e

CATS = {281, 282, 285}
ESPRESSO = 967
PROVENANCE = [
    "ORIGINAL_SIZE",
    "DECODER",
    "PIXELS_SCALE",
    "PIXELS_PADDING",
    "EMBED_PIXELS_SCALE",
    "EMBED_PIXELS_PADDING",
]


def decoders(server: object, fmt: str) -> set[str]:
    """The decoder paths an image of format ``fmt`` may take on this server (CPU executor, or the GPU's)."""
    if "GPU executor on device" not in server.log_path.read_text():  # type: ignore[attr-defined]
        return {"cpu"}
    return {"gpu_hw", "gpu_cuda"} if fmt == "JPEG" else {"cpu_fallback"}


def stats(server: object, model: str) -> dict:
    """Triton's statistics of ``model`` summed over the host's servers (a restricted API: the admin header)."""
    return server.model_statistics(model)["model_stats"][0]  # type: ignore[attr-defined]


def test_jpeg_and_png_of_one_photo_embed_alike_and_different_photos_do_not(client, jpegs, photos):
    images = [jpegs["chelsea"], encode(photos["chelsea"], "PNG"), jpegs["coffee"], encode(photos["coffee"], "PNG")]
    emb = client.embed(images)
    assert emb.shape == (4, 1280) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert cosine(emb[0], emb[1]) >= 0.99 and cosine(emb[2], emb[3]) >= 0.99
    assert cosine(emb[0], emb[2]) < 0.5 and cosine(emb[1], emb[3]) < 0.5
    others = client.embed([jpegs["astronaut"], jpegs["rocket"]])
    assert max(cosine(emb[0], o) for o in others) < 0.5


def test_analyze_gives_classify_and_embed_from_one_decode(server, client, jpegs, photos):
    from tritonprep_client import ClassifyClient

    images = [jpegs["chelsea"], encode(photos["coffee"], "PNG"), jpegs["rocket"]]
    opts = server.options
    url = opts.grpc_url if client.protocol == "grpc" else opts.http_url
    before = stats(server, "preprocess")
    with ClassifyClient(url, client.protocol, model="analyze") as analyze:
        names = analyze.output_names(predictions=True, embedding=True, provenance=False)
        results = dict(analyze.infer_each(images, names, batch_size=3))
    after = stats(server, "preprocess")
    assert int(after["inference_count"]) - int(before["inference_count"]) == 3  # each image through preprocess once
    classified = client.classify(images)
    embedded = client.embed(images)
    for i in range(3):
        assert [p.index for p in results[i].predictions] == [p.index for p in classified[i]]
        np.testing.assert_allclose(
            [p.score for p in results[i].predictions], [p.score for p in classified[i]], atol=1e-5
        )
        np.testing.assert_allclose(results[i].embedding, embedded[i], atol=1e-5)
        assert results[i].provenance is None  # not requested
    assert results[0].predictions[0].index in CATS and results[1].predictions[0].index == ESPRESSO


def test_provenance_is_returned_only_when_requested(server, jpegs, photos):
    from tritonprep_client import ClassifyClient

    png = encode(photos["coffee"], "PNG")
    client = ClassifyClient(server.options.grpc_url, model="analyze")
    names = client.output_names(predictions=True, embedding=False, provenance=True)
    assert names[:3] == ["SCORES", "CLASS_IDS", "LABELS"] and {"ORIGINAL_SIZE", "DECODER", "PIXELS_SCALE"} <= set(names)
    results = dict(client.infer_each([jpegs["chelsea"], png], names, batch_size=2))
    for i, (w, h, fmt) in enumerate([(451, 300, "JPEG"), (600, 400, "PNG")]):
        prov = results[i].provenance
        assert (prov.width, prov.height) == (w, h) and prov.decoder in decoders(server, fmt)
        t = window_transform(OutputSpec(), w, h)
        assert prov.transforms["PIXELS"][2:] == (t.left, t.top, t.right, t.bottom)
        np.testing.assert_allclose(prov.transforms["PIXELS"][:2], (t.scale_x, t.scale_y), rtol=1e-6)
        # the centre of the classifier's input maps back to the centre of the photo
        np.testing.assert_allclose(prov.to_original("PIXELS", 112, 112), (w / 2, h / 2), atol=1.0)
    plain = dict(client.infer_each([jpegs["chelsea"]], ["SCORES", "CLASS_IDS", "LABELS"], batch_size=1))
    assert plain[0].provenance is None
    client.close()


def test_classify_carries_no_provenance(server):
    """Each output an ensemble maps is built for every request: classify, the main path, stays lean."""
    from tritonprep_client import ClassifyClient, ClientError

    with ClassifyClient(server.options.grpc_url) as client:
        with pytest.raises(ClientError, match="offers no provenance"):
            client.output_names(predictions=True, embedding=False, provenance=True)


def test_preprocess_returns_only_the_outputs_a_request_names(server, jpegs):
    import tritonclient.grpc as grpcclient

    from tritonprep_client import image_input

    c = grpcclient.InferenceServerClient(server.options.grpc_url)
    try:
        r = c.infer(
            "preprocess",
            [image_input([jpegs["coffee"]], "grpc")],
            outputs=[grpcclient.InferRequestedOutput(n) for n in ("EMBED_PIXELS_SCALE", "DECODER")],
        )
        got = sorted(o.name for o in r.get_response().outputs)
        assert got == ["DECODER", "EMBED_PIXELS_SCALE"]
        np.testing.assert_allclose(r.as_numpy("EMBED_PIXELS_SCALE"), [[336 / 600, 224 / 400]], rtol=1e-6)
        everything = c.infer("preprocess", [image_input([jpegs["coffee"]], "grpc")])  # no outputs named: all
        assert sorted(o.name for o in everything.get_response().outputs) == sorted(
            ["PIXELS", "EMBED_PIXELS", *PROVENANCE]
        )
        np.testing.assert_array_equal(everything.as_numpy("ORIGINAL_SIZE"), [[600, 400]])
    finally:
        c.close()


def test_a_bad_image_fails_only_its_request_on_every_output(server, jpegs, photos):
    """classify, embed and analyze requests batched together in preprocess, one corrupt: only it fails."""
    from tritonprep_client import ClassifyClient, InferenceFailed

    corrupt = jpegs["chelsea"][: len(jpegs["chelsea"]) // 2]
    work = [(m, jpegs["coffee"]) for m in ("classify", "embed", "analyze") * 6]
    work.insert(7, ("analyze", corrupt))
    work.insert(12, ("embed", corrupt))
    ref_embedding = None

    def call(item):
        model, data = item
        with ClassifyClient(server.options.grpc_url, model=model) as c:
            names = c.output_names(
                predictions=model != "embed", embedding=model != "classify", provenance=model != "classify"
            )
            return model, data is corrupt, dict(c.infer_each([data], names, batch_size=1))[0]

    before = stats(server, "preprocess")
    with ThreadPoolExecutor(len(work)) as pool:
        results = list(pool.map(call, work))
    after = stats(server, "preprocess")
    for model, bad, result in results:
        if bad:
            assert isinstance(result, InferenceFailed) and "truncated" in str(result).lower(), result
            continue
        assert not isinstance(result, Exception), (model, result)
        if model != "classify":
            assert result.provenance.width == 600 and result.provenance.decoder in decoders(server, "JPEG")
        if model != "embed":
            assert result.predictions[0].index == ESPRESSO
        if model != "classify":
            ref_embedding = result.embedding if ref_embedding is None else ref_embedding
            np.testing.assert_allclose(result.embedding, ref_embedding, atol=2e-4)  # GPU: batch-size dependent rounding
    if "GPU executor on device" not in server.log_path.read_text():  # one CPU instance: they shared batches
        assert int(after["execution_count"]) - int(before["execution_count"]) < len(work), "never batched together"
    assert server.is_ready()
