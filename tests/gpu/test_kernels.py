"""The fused resize/crop/normalize kernel against the CPU executor (Pillow), on real photos; the softmax/top-k
kernel against the host's NumPy top-k; the unit-length kernel against the host's step."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tritonprep.executors.cpu import normalize_window, resize_pil
from tritonprep.spec import OutputSpec
from tritonprep_testkit.compare import agreement


def gpu_preprocess(cp, spec: OutputSpec, arrays: list[np.ndarray]) -> np.ndarray:
    """Upload uint8 RGB arrays and run the kernel on all of them in one launch."""
    from tritonprep.executors.resize import resize_into

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = [cp.asarray(a) for a in arrays]
        sources = {i: (d.data.ptr, a.shape[1], a.shape[0], a.shape[1] * 3) for i, (d, a) in enumerate(zip(dev, arrays))}
        out = cp.full((len(arrays),) + spec.output_shape, np.nan, dtype=spec.numpy_dtype)
        resize_into(spec, sources, out, stream)
        stream.synchronize()
        return cp.asnumpy(out)


def cpu_preprocess(spec: OutputSpec, arr: np.ndarray) -> np.ndarray:
    pixels, ox, oy = resize_pil(spec, Image.fromarray(arr))
    return normalize_window(spec, pixels, ox, oy)


RAW = OutputSpec(mean=(0, 0, 0), std=(1, 1, 1))  # outputs in pixel units


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "geometry",
    [
        {"resize_shorter": 256},  # ImageNet eval: ~1.2-2.5x down
        {"resize_shorter": 64, "output_size": (56, 56)},  # ~5-10x down
        {"resize_shorter": 1024, "output_size": (896, 896)},  # 1.6-3.4x up
        {"resize": "stretch", "output_size": (300, 500)},  # different factor per axis
        {"resize": "letterbox", "output_size": (640, 640), "pad_value": 114},
    ],
    ids=["crop256", "down8x", "up2x", "stretch", "letterbox"],
)
def test_kernel_matches_pillow_on_real_photos(cp, photos, interpolation, geometry):
    geometry = dict(geometry)
    size = geometry.pop("output_size", (224, 224))
    spec = OutputSpec(
        output_height=size[0],
        output_width=size[1],
        interpolation=interpolation,
        mean=(0, 0, 0),
        std=(1, 1, 1),
        **geometry,
    )
    arrays = list(photos.values())
    got = gpu_preprocess(cp, spec, arrays)
    assert not np.isnan(got).any(), "kernel left output values unwritten"
    for name, arr, g in zip(photos, arrays, got):
        within, worst = agreement(g, cpu_preprocess(spec, arr))
        assert within >= 0.999, (name, within, worst)
        assert worst <= 2, (name, worst)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("order", ["RGB", "BGR"])
@pytest.mark.parametrize("dtype", ["FP32", "FP16"])
def test_layout_order_dtype_and_normalization(cp, photos, layout, order, dtype):
    spec = OutputSpec(
        layout=layout, channel_order=order, dtype=dtype, mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375)
    )
    arr = photos["chelsea"]
    got = gpu_preprocess(cp, spec, [arr])[0].astype(np.float32)
    want = cpu_preprocess(spec, arr).astype(np.float32)
    assert got.shape == spec.output_shape
    tol = 1.0 / 57.12 + (2e-3 if dtype == "FP16" else 1e-6)  # one uint8 level, plus fp16 rounding
    diff = np.abs(got - want)
    assert (diff <= tol).mean() >= 0.999 and diff.max() <= 2 * tol + 1e-2


def test_identical_pixels_normalize_bit_exactly(cp):
    """No resize: the kernel's normalize must equal numpy's bit for bit."""
    spec = OutputSpec(resize="stretch", output_height=31, output_width=17, mean=(1.5, 2.5, 3.5), std=(3, 7, 11))
    arr = np.random.default_rng(0).integers(0, 256, (31, 17, 3), dtype=np.uint8)
    np.testing.assert_array_equal(gpu_preprocess(cp, spec, [arr])[0], cpu_preprocess(spec, arr))


def test_one_launch_over_many_variable_sizes(cp, photos):
    rng = np.random.default_rng(7)
    src = Image.fromarray(photos["astronaut"])
    arrays = [np.asarray(src.resize((int(rng.integers(40, 1500)), int(rng.integers(40, 1500))))) for _ in range(64)]
    got = gpu_preprocess(cp, RAW, arrays)
    assert not np.isnan(got).any()
    worst_fraction = min(agreement(g, cpu_preprocess(RAW, a))[0] for g, a in zip(got, arrays))
    assert worst_fraction >= 0.999


# ------------------------------------------------------------------ softmax / top-k
@pytest.mark.parametrize(("rows", "classes", "k"), [(1, 1000, 5), (200, 1000, 5), (3, 7, 7), (0, 1000, 5), (5, 10, 1)])
def test_softmax_top_k_kernel_is_the_host_top_k(cp, rows, classes, k):
    from tritonprep.classifier.postprocess import top_k
    from tritonprep.kernels.launch import softmax_top_k

    logits = np.random.default_rng(rows + classes).standard_normal((rows, classes)).astype(np.float32) * 4
    scores, ids = softmax_top_k(cp.asarray(logits), k)
    want_scores, want_ids = top_k(logits, k)
    assert scores.shape == ids.shape == (rows, k) and scores.dtype == np.float32 and ids.dtype == np.int32
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-7)


def test_softmax_top_k_kernel_breaks_ties_to_the_lower_id_and_keeps_nan(cp):
    from tritonprep.kernels.launch import softmax_top_k

    logits = np.zeros((2, 300), np.float32)
    logits[0, [250, 7, 120]] = 3.0  # a three-way tie at the top, then 297 equal others
    logits[1, :] = -1.0
    logits[1, 5] = np.nan
    logits[1, 9] = 2.0
    scores, ids = softmax_top_k(cp.asarray(logits), 5)
    assert ids[0].tolist() == [7, 120, 250, 0, 1]
    assert scores[0, 0] == scores[0, 1] == scores[0, 2] > scores[0, 3]
    # a NaN logit makes the row's sum, so every probability, NaN (as the host's softmax does): ids in order
    assert np.isnan(scores[1]).all() and ids[1].tolist() == [0, 1, 2, 3, 4]
    from tritonprep.classifier.postprocess import top_k

    host_scores, host_ids = top_k(logits, 5)  # the host answers the same ids for ties and NaN rows
    np.testing.assert_array_equal(ids, host_ids)
    np.testing.assert_allclose(scores, host_scores, rtol=1e-5, equal_nan=True)


def test_top_k_beyond_the_kernel_uses_the_host(cp):
    from tritonprep.classifier.postprocess import TopK, softmax
    from tritonprep.kernels.launch import TOP_K_MAX

    logits = np.random.default_rng(1).standard_normal((4, 1000)).astype(np.float32)
    scores, ids = TopK(TOP_K_MAX + 1)(cp.asarray(logits))
    probs = softmax(logits)
    want = np.argsort(-probs, axis=-1, kind="stable")[:, : TOP_K_MAX + 1]  # an independent full sort
    assert ids.dtype == np.int32 and ids.shape == (4, TOP_K_MAX + 1)
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_allclose(scores, np.take_along_axis(probs, want, -1), rtol=1e-6)


# ------------------------------------------------------------------ unit length (the embedder's last step)
def _tolerance(dtype_out) -> dict:
    """float32: the sum's order differs from NumPy's; float16: the result rounds once more (half an ulp, ~3e-5 at
    the shipped width's typical 0.03)."""
    return {"rtol": 1e-6, "atol": 1e-7} if dtype_out == np.float32 else {"rtol": 2e-3, "atol": 1e-4}


@pytest.mark.parametrize("dtype_in", [np.float32, np.float16])
@pytest.mark.parametrize("dtype_out", [np.float32, np.float16])
@pytest.mark.parametrize(("rows", "dim"), [(1, 1280), (7, 1280), (64, 1280), (3, 5), (5, 1000), (0, 1280)])
def test_unit_rows_kernel_is_the_host_step(cp, dtype_in, dtype_out, rows, dim):
    from tritonprep.classifier.embedding import _unit
    from tritonprep.kernels.launch import unit_rows

    x = (np.random.default_rng(rows + dim).standard_normal((rows, dim)) * 3).astype(dtype_in)
    got = unit_rows(cp.asarray(x), np.dtype(dtype_out))
    assert got.shape == (rows, dim) and got.dtype == dtype_out and got.flags.c_contiguous
    want = _unit(np, x).astype(dtype_out)
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float32), want.astype(np.float32), **_tolerance(dtype_out))
    if rows:
        lengths = np.linalg.norm(cp.asnumpy(got).astype(np.float32), axis=1)
        np.testing.assert_allclose(lengths, 1.0, rtol=1e-6 if dtype_out == np.float32 else 4e-3)


@pytest.mark.parametrize("dtype_in", [np.float32, np.float16])
@pytest.mark.parametrize("dtype_out", [np.float32, np.float16])
def test_unit_rows_kernel_keeps_zero_rows_zero_and_nan_rows_nan(cp, dtype_in, dtype_out):
    from tritonprep.classifier.embedding import _unit
    from tritonprep.kernels.launch import unit_rows

    x = np.ones((3, 1280), dtype_in)
    x[0] = 0.0
    x[1, 17] = np.nan
    got = cp.asnumpy(unit_rows(cp.asarray(x), np.dtype(dtype_out)))
    assert (got[0] == 0).all()
    assert np.isnan(got[1]).all()  # np.maximum keeps the NaN, so the host's row is all NaN too
    np.testing.assert_allclose(got[2].astype(np.float32), 1 / np.sqrt(1280), **_tolerance(dtype_out))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(_unit(np, x)))


def test_unit_rows_kernel_reads_a_strided_batch(cp):
    from tritonprep.classifier.embedding import _unit
    from tritonprep.kernels.launch import unit_rows

    wide = np.random.default_rng(3).standard_normal((6, 2560)).astype(np.float32)
    view = cp.asarray(wide)[::2, ::2]  # every other row and column: not contiguous
    got = cp.asnumpy(unit_rows(view, np.dtype(np.float32)))
    np.testing.assert_allclose(got, _unit(np, wide[::2, ::2]), **_tolerance(np.float32))


def test_unit_rows_kernel_refuses_what_it_does_not_take(cp):
    from tritonprep.kernels.launch import unit_rows

    with pytest.raises(ValueError, match="2-D float32/float16"):
        unit_rows(cp.ones((2, 3, 4), cp.float32), np.dtype(np.float32))
    with pytest.raises(ValueError, match="2-D float32/float16"):
        unit_rows(cp.ones((2, 3), cp.float64), np.dtype(np.float32))
    with pytest.raises(ValueError, match="into float64"):
        unit_rows(cp.ones((2, 3), cp.float32), np.dtype(np.float64))
