"""Hostile input through a real tritonserver: a corpus subset, mixed in dynamic batches, and the metrics."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from tritonprep.image_errors import ImageFailure
from tritonprep_testkit.corpus import Item, build
from tritonprep_testkit.hostile import library_results, metric_key, metrics, parse_metrics, preprocess_concurrently

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def subset() -> list[Item]:
    """Up to 6 items of every corpus family (under 3 MB each): about 60 requests."""
    by_group: dict[str, list[Item]] = {}
    for item in build():
        if len(item.data) < 3_000_000:
            by_group.setdefault(item.group, []).append(item)
    return [it for items in by_group.values() for it in items[:: max(1, len(items) // 6)][:6]]


def test_corpus_subset_through_the_server_matches_the_library(server, subset):
    """Sent concurrently (so hostile and good images share dynamic batches): every request gets
    exactly what the CPU executor gives for its image alone: the same tensor or the same error."""
    local = library_results(subset)
    before = metrics(server)
    answers = preprocess_concurrently(server, [it.data for it in subset])
    assert len(subset) >= 50
    for item, want, got in zip(subset, local, answers):
        if want.errors:
            assert not isinstance(got, np.ndarray), f"{item.name}: the server decoded what the library rejects"
            refusal = ImageFailure(0, 1, want.errors[0].reason, str(want.errors[0]))  # the per-image contract
            assert str(got.message()).endswith(str(refusal)), (item.name, got.message())
            assert "INVALID_ARG" in str(got.status()), item.name
        else:
            assert isinstance(got, np.ndarray), f"{item.name}: {got}"
            np.testing.assert_array_equal(got[0], want.output[0], err_msg=item.name)
    assert server.is_ready()

    # the custom metrics counted exactly these images, by path and by rejection reason
    after = metrics(server)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    ok = sum(1 for w in local if not w.errors)
    reasons = Counter(w.errors[0].reason for w in local if w.errors)
    assert delta[metric_key("tritonprep_images_total", model="preprocess", device="cpu", path="cpu")] == ok
    for reason in ("decode", "format", "limit", "invalid"):
        key = metric_key("tritonprep_rejected_total", model="preprocess", device="cpu", reason=reason)
        assert delta[key] == reasons.get(reason, 0), reason
    assert reasons["decode"] > 10 and reasons["limit"] >= 3
    batches = delta[metric_key("tritonprep_preprocess_seconds_count", model="preprocess", device="cpu")]
    assert 1 <= batches < len(subset), "requests were never batched together"
    assert delta[metric_key("tritonprep_decode_seconds_total", model="preprocess", device="cpu")] > 0


def test_metrics_are_documented_and_typed(server):
    text = server.metrics_text()
    samples = parse_metrics(text)
    for name, kind in (
        ("tritonprep_images_total", "counter"),
        ("tritonprep_rejected_total", "counter"),
        ("tritonprep_decode_seconds_total", "counter"),
        ("tritonprep_preprocess_seconds", "histogram"),
        ("tritonprep_executing_requests", "gauge"),
    ):
        assert f"# TYPE {name} {kind}" in text, name
    for path in ("cpu", "gpu_hw", "gpu_cuda", "cpu_fallback"):
        assert metric_key("tritonprep_images_total", model="preprocess", device="cpu", path=path) in samples
    assert metric_key("tritonprep_preprocess_seconds_bucket", model="preprocess", device="cpu", le="0.01") in samples


def test_model_instance_logs_its_executor_and_decoder(server):
    log = server.log_path.read_text()
    assert re.search(
        r"preprocess instance preprocess_0_0 \(CPU, device 0\): CPU executor: Pillow decode, resize to "
        r"PIXELS \(bilinear\), EMBED_PIXELS \(bicubic\); \d+ threads; limits",
        log,
    )
