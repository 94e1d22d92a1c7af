"""The hostile-input corpus through the real server on the GPU: the GPU executor refuses exactly
what the CPU executor refuses, with the same message, and decodes the rest to the same pixels
within the GPU decoder's tolerance; the custom metrics count the GPU decoder paths.

Items whose outcome the corpus leaves open (``expect == "any"``: bit flips in entropy data,
frame headers that lie about the size) have no right answer: decoders conceal corrupt data
differently, so for them only an answer is required."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from tritonprep.image_errors import ImageFailure
from tritonprep_testkit.hostile import library_results, metrics, preprocess_concurrently, total

LEVEL = 1 / 128  # one uint8 level after (x - 127) / 128
PATHS = ("gpu_hw", "gpu_cuda", "cpu_fallback", "cpu")
REJECTED = ("decode", "format", "limit", "invalid")


def test_corpus_on_the_gpu_matches_the_cpu_executor(gpu_server):
    from tritonprep_testkit.corpus import build

    items = [it for it in build() if len(it.data) < 3_000_000]
    local = library_results(items)
    before = metrics(gpu_server)
    # concurrent: hostile and good images share GPU batches
    answers = preprocess_concurrently(gpu_server, [it.data for it in items])

    mismatches, worst = [], []
    for item, want, got in zip(items, local, answers):
        if item.expect == "any":
            if not isinstance(got, np.ndarray) and "image 1 of 1" not in str(got.message()):
                mismatches.append(f"{item.name}: no image error but {got.message()}")
            continue
        if want.errors:
            if isinstance(got, np.ndarray):
                mismatches.append(f"{item.name}: GPU decoded what the CPU executor rejects ({want.errors[0]})")
            elif not str(got.message()).endswith(str(ImageFailure(0, 1, want.errors[0].reason, str(want.errors[0])))):
                mismatches.append(f"{item.name}: GPU {got.message()!r} vs CPU {want.errors[0]!s}")
        elif not isinstance(got, np.ndarray):
            mismatches.append(f"{item.name}: GPU rejected a valid image: {got.message()}")
        else:
            d = np.abs(got[0] - want.output[0]) / LEVEL
            worst.append((float(d.max()), float((d > 1.01).mean()), item.name))
            if d.max() > 8 or (d > 2.01).mean() > 0.01:
                mismatches.append(
                    f"{item.name}: pixels differ (max {d.max():.1f} levels, {(d > 1.01).mean():.4%} beyond 1 level)"
                )
    worst.sort(reverse=True)
    print(f"{len(items)} corpus items; 5 largest pixel differences (levels, share > 1 level): {worst[:5]}")  # noqa: T201
    assert not mismatches, "\n".join(mismatches)
    assert gpu_server.is_ready()

    after = metrics(gpu_server)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    paths = {p: total(delta, "tritonprep_images_total", model="preprocess", path=p) for p in PATHS}  # every GPU's
    print(f"decoded by path: {paths}")  # noqa: T201
    decoded = sum(1 for it, got in zip(items, answers) if isinstance(got, np.ndarray))
    assert sum(paths.values()) == decoded
    assert paths["gpu_hw"] + paths["gpu_cuda"] > 0 and paths["cpu_fallback"] > 0 and paths["cpu"] == 0
    reasons = Counter(w.errors[0].reason for it, w in zip(items, local) if w.errors and it.expect != "any")
    for reason, n in reasons.items():  # the "any" items add to some reasons
        assert total(delta, "tritonprep_rejected_total", model="preprocess", reason=reason) >= n, reason
    rejected = [total(delta, "tritonprep_rejected_total", model="preprocess", reason=r) for r in REJECTED]
    assert sum(rejected) == len(items) - decoded
    log = gpu_server.log_path.read_text()
    assert re.search(r"preprocess instance preprocess_0_0 \(GPU, device 0\): GPU executor on device 0: decoder ", log)
