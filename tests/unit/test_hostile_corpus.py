"""The hostile-input corpus (tritonprep_testkit.corpus) through the CPU decoder and the CPU executor.

Every item must give either the correct pixels or a clean ImageError subclass: never
another exception, never a hang, never a half-decoded picture.
"""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image

from tritonprep.decode import sniff_format, validate
from tritonprep.decode.headers import header_size
from tritonprep.decode.pillow import decode_rgb
from tritonprep.errors import ImageError
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.spec import Limits, OutputSpec
from tritonprep_testkit.corpus import Item, build, limits_items

LIMITS = Limits()
GROUPS = (
    "valid",
    "orientation",
    "exif-broken",
    "markers",
    "magic",
    "sof",
    "bomb",
    "truncated",
    "bitflip-header",
    "bitflip-data",
)
#: no corpus item may take longer than this to decode or reject (the largest is a 16.7 MP bomb)
MAX_SECONDS = 3.0


@pytest.fixture(scope="module")
def corpus() -> list[Item]:
    return build()


def check(item: Item) -> str | None:
    """None if ``item`` behaves as it must, else what went wrong."""
    start = time.perf_counter()
    try:
        got = decode_rgb(item.data, LIMITS)
    except ImageError as e:
        got, error = None, e
    except Exception as e:  # noqa: BLE001 - the point of the test: report any other exception as a failure
        return f"{item.name}: raised {type(e).__name__}: {e}"
    elapsed = time.perf_counter() - start
    if elapsed > MAX_SECONDS:
        return f"{item.name}: took {elapsed:.1f} s"
    if item.expect == "ok":
        if got is None:
            return f"{item.name}: expected pixels, got {type(error).__name__}: {error}"
        if got.shape != item.want.shape or got.dtype != np.uint8:
            return f"{item.name}: shape {got.shape} {got.dtype}, want {item.want.shape} uint8"
        diff = float(np.abs(got.astype(np.int16) - item.want.astype(np.int16)).mean())
        if diff > item.tol:
            return f"{item.name}: mean |diff| {diff:.3f} > {item.tol}"
    elif item.expect == "error":
        if got is not None:
            return f"{item.name}: decoded to {got.shape}, expected {[e.__name__ for e in item.errors]}"
        if not isinstance(error, item.errors):
            return f"{item.name}: {type(error).__name__} ({error}), expected {[e.__name__ for e in item.errors]}"
        if not str(error):
            return f"{item.name}: {type(error).__name__} without a message"
    elif got is not None and got.shape[:2] != item.shape:
        return f"{item.name}: decoded to {got.shape[:2]}, the header says {item.shape}"
    return None


@pytest.mark.parametrize("group", GROUPS)
def test_corpus_group_decodes_correctly_or_fails_cleanly(corpus, group):
    items = [it for it in corpus if it.group == group]
    assert items, group
    failures = [f for f in map(check, items) if f]
    assert not failures, "\n".join(failures)


def test_corpus_covers_what_the_issue_lists(corpus):
    names = {it.name for it in corpus}
    for needle in (
        "truncated/",
        "bitflip-header/",
        "bitflip-data/",
        "magic/",
        "magic/empty",
        "sof/width-0",
        "sof/65535x65535",
        "exif-broken/",
        "markers/200-app15",
        "markers/200-com",
        "valid/png-16bit",
        "valid/png-palette",
        "valid/jpeg-cmyk",
        "valid/jpeg-gray",
        "valid/jpeg-progressive",
        "valid/gif",
        "valid/webp",
        "valid/bmp",
        "valid/tiff",
        "valid/jpeg2000-jp2",
        "valid/jpeg2000-j2k",
        "valid/png-1x1",
        "valid/png-1x20000",
        "bomb/png",
        "bomb/gif",
        "bomb/tiff",
        "bomb/jpeg2000",
        "bomb/jp2",
        "truncated/jpeg2000-j2k",
        "truncated/jpeg2000-jp2",
    ):
        assert any(n.startswith(needle) for n in names), needle
    assert {f"orientation/jpeg-{o}" for o in range(1, 9)} <= names
    assert len([n for n in names if n.startswith("truncated/")]) >= 100


def test_orientations_turn_a_landscape_photo_as_a_viewer_would(corpus):
    """Orientations 5-8 swap width and height; the pixels match the independently rotated reference."""
    for o in range(1, 9):
        [item] = [it for it in corpus if it.name == f"orientation/jpeg-{o}"]
        got = decode_rgb(item.data, LIMITS)
        assert got.shape[:2] == ((120, 200) if o <= 4 else (200, 120)), o
        others = [
            np.abs(got.astype(int) - ref.want.astype(int)).mean()
            for ref in corpus
            if ref.name.startswith("orientation/jpeg-") and ref.name != item.name and ref.want.shape == got.shape
        ]
        assert min(others) > 10 * max(1.0, np.abs(got.astype(int) - item.want.astype(int)).mean()), o


def test_header_sizes_agree_with_pillow(corpus):
    for item in corpus:
        if item.group != "valid" or sniff_format(item.data) == "JPEG":
            continue
        with Image.open(io.BytesIO(item.data)) as im:
            assert header_size(item.data, sniff_format(item.data)) == im.size, item.name


def test_limits_and_allowed_formats_per_format():
    for name, data, kw, error in limits_items():
        with pytest.raises(error) as e:
            decode_rgb(data, Limits(**kw))
        assert str(e.value), name
        with pytest.raises(error):
            validate(data, Limits(**kw))  # the same verdict before any decoder runs (the GPU path relies on it)


def test_executor_isolates_every_bad_item_in_mixed_batches(corpus):
    """The whole corpus in batches of 24 (every family mixed): errors land exactly on the bad slots,
    every other slot is finite and equals the image preprocessed alone."""
    ex = CpuExecutor(OutputSpec())
    try:
        order = np.random.default_rng(0).permutation(len(corpus))
        items = [corpus[i] for i in order if corpus[i].data and len(corpus[i].data) < 5_000_000]
        for start in range(0, len(items), 24):
            chunk = items[start : start + 24]
            res = ex.run([it.data for it in chunk])
            assert res.output.shape == (len(chunk), 3, 224, 224)
            for i, it in enumerate(chunk):
                if it.expect == "error":
                    assert isinstance(res.errors.get(i), it.errors), it.name
                elif it.expect == "ok":
                    assert i not in res.errors, (it.name, res.errors.get(i))
                if i not in res.errors:
                    assert np.isfinite(res.output[i]).all(), it.name
            assert res.decoded_by == {"cpu": len(chunk) - len(res.errors)}
        good = [it for it in items if it.expect == "ok"][:3]
        alone = [ex.run([it.data]).output[0] for it in good]
        together = ex.run([b"junk"] + [it.data for it in good]).output[1:]
        np.testing.assert_array_equal(np.stack(alone), together)
    finally:
        ex.close()
