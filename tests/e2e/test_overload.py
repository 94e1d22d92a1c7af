"""Overload on the CPU (issue 38): ``classify`` driven closed-loop at 4x its saturating concurrency refuses early and
clearly, never fails inside, and stays ready, its memory bounded.

The sweep (:mod:`tritonprep_testkit.overload_sweep`) finds the saturating concurrency of a server of its own (the
shipped repository), then runs 1x and 4x it. Every request must be answered right (the top-1 class of each photo
as answered alone, at c=1) or refused for overload ("Exceeds maximum queue size", "Request timeout expired");
nothing else. Triton's log must get no E or W line meanwhile; the server must be ready and answer right after.

On 2 cores the shipped queues (64 requests a step) hardly fill at 4x (a handful of clients), so a second server,
whose ``preprocess`` and ``classifier`` queues hold 2 requests, is driven at the same concurrencies: there the
excess really is refused, and the refusals must be as clean.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from tritonprep_testkit.loadgen import memory, report
from tritonprep_testkit.overload_sweep import Plan, Sweep, sweep
from tritonprep_testkit.servers import MODEL_REPOSITORY, running_server

pytestmark = pytest.mark.e2e

FACTOR = 4
IMAGES_PER_REQUEST = 1
#: the CPU saturates at a low concurrency: a short search, two short points (the whole module well under 90 s)
PLAN = Plan(factors=(1, FACTOR), seconds=6.0, warmup_s=2.0, search_seconds=4.0, search_warmup_s=2.0,
            max_concurrency=32)  # fmt: skip
#: the models `classify` needs
MODELS = ("classify", "preprocess", "classifier")
#: the resident memory (tritonserver and its stubs) an image in flight may add: EfficientNet-Lite0 on ONNX Runtime
#: CPU keeps ~10 MB of activations per image of a batch (its largest: 96 x 112 x 112 float32, 4.8 MB, live two at
#: a time), and the image's pixels (3 x 224 x 224 float32, 0.6 MB) and decoded RGB are held in up to 4 copies on
#: the way (gRPC, Triton, the stub's shared memory, its array): 16 MB with margin. A closed loop of C clients has at
#: most C requests in flight, so at 4x the classifier's batches, and with them its arena, may grow by
#: (4 - 1) x C x images/request images.
MB_PER_EXTRA_IMAGE = 16
#: what the allocators swing by with no more work in flight (docs/operations.md, "Overload": ~75 MB for
#: tritonserver between rounds of the same load)
ALLOCATOR_SLACK_MB = 80


def small_queues(root: Path, size: int) -> Path:
    """A copy of `classify`'s models whose ``preprocess`` and ``classifier`` queues (in the config a CPU server
    serves) hold ``size`` requests."""
    repo = root / "repository"
    for model in MODELS:
        shutil.copytree(MODEL_REPOSITORY / model, repo / model)
    for model in ("preprocess", "classifier"):
        config = repo / model / "config.pbtxt"
        text, n = re.subn(r"max_queue_size: \d+", f"max_queue_size: {size}", config.read_text())
        assert n == 1, f"{config}: no queue to shrink"
        config.write_text(text)
    return repo


def run_sweep(root: Path, photos: list[bytes], repository: Path, concurrency: int | None = None) -> Sweep:
    """The sweep against a server of its own on ``repository``; its figures printed; the server ready after."""
    log_path = root / "tritonserver.log"
    with running_server(log_path, repository=repository) as (server, _):
        found = sweep(server.options.grpc_url, "classify", photos, IMAGES_PER_REQUEST, PLAN, concurrency, log_path,
                      lambda: memory(server))  # fmt: skip
        ready = server.is_ready()
    report(found.figures())
    assert ready, "the server is not ready after the overload"
    return found


def assert_held(found: Sweep) -> None:
    """Every request answered right or refused for overload, no E or W line in Triton's log, the server ready and
    answering right after, the 4x point's memory within its bound of the 1x point's."""
    assert not found.problems(), "\n".join(found.problems())
    one, many = found.points[1], found.points[FACTOR]
    extra_images = (many.concurrency - one.concurrency) * IMAGES_PER_REQUEST
    bound = ALLOCATOR_SLACK_MB + MB_PER_EXTRA_IMAGE * extra_images
    grown = many.rss_peak_mb - one.rss_peak_mb  # type: ignore[operator]
    logging.getLogger("test_overload").info("peak memory %.1f -> %.1f MB (+%.1f, bound %d)", one.rss_peak_mb,
                                            many.rss_peak_mb, grown, bound)  # fmt: skip
    assert grown <= bound, (
        f"peak resident memory at {FACTOR}x is {grown:.1f} MB above 1x (bound {bound} MB for {extra_images} more "
        f"images in flight): {one.rss_peak_by_process_mb} -> {many.rss_peak_by_process_mb}"
    )


@pytest.fixture(scope="module")
def jpeg_list(jpegs: dict[str, bytes]) -> list[bytes]:
    """The four photos as JPEGs (a cat, an espresso, an astronaut, a rocket)."""
    return list(jpegs.values())


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory, jpeg_list: list[bytes]) -> Sweep:
    """The sweep against the shipped repository, its saturating concurrency searched."""
    return run_sweep(tmp_path_factory.mktemp("shipped"), jpeg_list, MODEL_REPOSITORY)


def test_classify_at_4x_its_saturating_concurrency_holds(shipped):
    assert shipped.saturating in shipped.search
    assert shipped.points[FACTOR].concurrency == FACTOR * shipped.saturating
    assert_held(shipped)


def test_with_full_queues_the_excess_is_refused_cleanly(tmp_path_factory, jpeg_list, shipped):
    root = tmp_path_factory.mktemp("small-queues")
    found = run_sweep(root, jpeg_list, small_queues(root, 2), concurrency=shipped.saturating)
    assert found.points[FACTOR].refused > 0, "the queues of 2 never filled at 4x: nothing was refused"
    assert_held(found)
