"""``classify_fused`` through a real tritonserver: the ``classify`` ensemble's answers from one model.

The fused model runs the same preprocessing, network and top-k in one instance, so its answers must
be the ensemble's (the same class ids and labels; scores within the network runtime's rounding),
with the same per-request errors, over gRPC and HTTP.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tritonprep_testkit.photos import encode

pytestmark = pytest.mark.e2e

CATS = {281, 282, 285}
ESPRESSO = 967


@pytest.fixture(params=["grpc", "http"])
def fused(request: pytest.FixtureRequest, server: object):
    from tritonprep_client import ClassifyClient

    url = server.options.grpc_url if request.param == "grpc" else server.options.http_url  # type: ignore[attr-defined]
    with ClassifyClient(url, model="classify_fused") as c:
        yield c


def test_fused_answers_what_the_ensemble_answers(fused, client, jpegs, photos):
    images = [jpegs["chelsea"], encode(photos["coffee"], "PNG"), jpegs["astronaut"], jpegs["rocket"]]
    got, want = fused.classify(images), client.classify(images)
    assert got[0][0].index in CATS and got[1][0].index == ESPRESSO, got
    for g, w in zip(got, want):  # scores sorted best first: close even where two near-ties swap ranks
        assert (g[0].index, g[0].label) == (w[0].index, w[0].label)
        np.testing.assert_allclose([p.score for p in g], [p.score for p in w], atol=5e-3)
        assert len(g) == 5 and g[0].score >= g[1].score >= g[4].score


def test_a_bad_image_fails_only_its_request_inside_a_batch(server, jpegs):
    """Concurrent requests batched together, one with a truncated second image: that request alone fails,
    named as the ensemble names it, and the others are right."""
    from tritonprep_client import ClassifyClient, InferenceFailed

    truncated = jpegs["coffee"][: len(jpegs["coffee"]) // 2]
    work = [[jpegs["chelsea"]] if i % 2 else [jpegs["coffee"], jpegs["chelsea"]] for i in range(15)]
    work.insert(7, [jpegs["chelsea"], truncated])

    def call(images):
        with ClassifyClient(server.options.grpc_url, model="classify_fused") as c:
            try:
                return c.classify(images)
            except InferenceFailed as e:
                return e

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, work))
    failures = [i for i, r in enumerate(results) if isinstance(r, Exception)]
    assert failures == [7], results
    assert "image 2 of 2" in str(results[7]) and "truncated" in str(results[7]).lower()
    for images, preds in zip(work, results):
        if isinstance(preds, Exception):
            continue
        assert [p[0].index in CATS for p in preds] == [x is jpegs["chelsea"] for x in images]


@pytest.mark.parametrize(("data", "needle"), [(b"", "empty"), (b"hello world", "signature")])
def test_bad_input_is_an_error_for_that_request(fused, data, needle):
    from tritonprep_client import InferenceFailed

    with pytest.raises(InferenceFailed) as e:
        fused.classify([data])
    assert needle in str(e.value).lower()


def test_the_log_names_the_network_runtime(server):
    text = server.log_path.read_text()  # type: ignore[attr-defined]
    line = next((ln for ln in text.splitlines() if "classify_fused instance" in ln), "")
    assert "network model" in line and "onnxruntime" in line, line
