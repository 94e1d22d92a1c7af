"""The CPU executor: the reference definition of the preprocess output."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tritonprep.errors import DecodeError, LimitExceeded
from tritonprep.executors import create_executor
from tritonprep.executors.cpu import CpuExecutor, normalize_window
from tritonprep.spec import Limits, OutputSpec, PreprocessConfig
from tritonprep_testkit.photos import encode


def test_batch_keeps_order_and_isolates_bad_images(jpegs):
    ex = CpuExecutor(OutputSpec())
    try:
        res = ex.run([jpegs["chelsea"], b"junk", jpegs["coffee"], jpegs["coffee"][:100]])
    finally:
        ex.close()
    assert res.output.shape == (4, 3, 224, 224) and res.output.dtype == np.float32
    assert set(res.errors) == {1, 3}
    assert isinstance(res.errors[1], DecodeError) and isinstance(res.errors[3], DecodeError)
    assert res.decoded_by == {"cpu": 2}
    single = CpuExecutor(OutputSpec()).run([jpegs["coffee"]]).output[0]
    np.testing.assert_array_equal(res.output[2], single)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("order", ["RGB", "BGR"])
@pytest.mark.parametrize("dtype", ["FP32", "FP16"])
def test_layout_channel_order_and_dtype(photos, layout, order, dtype):
    spec = OutputSpec(layout=layout, channel_order=order, dtype=dtype, mean=(10, 20, 30), std=(2, 4, 8))
    out = CpuExecutor(spec).run([encode(photos["astronaut"], "PNG")]).output[0]
    assert out.dtype == (np.float32 if dtype == "FP32" else np.float16)
    ref = CpuExecutor(OutputSpec(mean=(10, 20, 30), std=(2, 4, 8))).run([encode(photos["astronaut"], "PNG")]).output[0]
    chw = out if layout == "NCHW" else out.transpose(2, 0, 1)
    if order == "BGR":
        chw = chw[::-1]
    np.testing.assert_allclose(
        chw.astype(np.float32), ref, rtol=1e-3 if dtype == "FP16" else 0, atol=1e-2 if dtype == "FP16" else 0
    )


def test_letterbox_pads_with_the_normalised_pad_value(photos):
    spec = OutputSpec(
        resize="letterbox", output_height=320, output_width=320, pad_value=114, mean=(0, 0, 0), std=(255, 255, 255)
    )
    wide = encode(photos["astronaut"][:256, :], "PNG")  # 512x256 -> 320x160, 80 rows of padding above and below
    out = CpuExecutor(spec).run([wide]).output[0]
    pad = 114 / 255
    assert np.allclose(out[:, :80], pad, atol=1e-6) and np.allclose(out[:, 240:], pad, atol=1e-6)
    assert not np.allclose(out[:, 80:240], pad, atol=1e-3)


def test_normalize_window_crops_pads_and_scales():
    spec = OutputSpec(output_height=2, output_width=3, resize_shorter=3, mean=(1, 2, 3), std=(2, 2, 2), pad_value=7)
    img = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
    out = normalize_window(spec, img, offset_x=-1, offset_y=0)  # one padded column on the left
    assert out.shape == (3, 2, 3)
    np.testing.assert_allclose(out[:, :, 0], np.broadcast_to((7 - np.array([[1], [2], [3]])) / 2, (3, 2)))
    np.testing.assert_allclose(out[:, 0, 1:], (img[0].T - np.array([[1], [2], [3]])) / 2)


def test_pathological_aspect_ratio_stays_bounded(photos):
    tall = np.resize(photos["rocket"][:, 200:201], (20000, 1, 3))  # 1 x 20000
    assert tall.shape[:2] == (20000, 1)
    ex = CpuExecutor(OutputSpec())
    res = ex.run([encode(tall, "PNG")])
    assert not res.errors and np.isfinite(res.output).all()
    res = ex.run([encode(tall, "PNG")] * 2 + [encode(photos["rocket"], "PNG")])
    assert not res.errors


def test_an_image_too_thin_to_resize_is_refused_alone(photos):
    """1 x 9,000,000 is under max_pixels, but its shorter side at 256 would make it 2.3e9 rows tall: over the
    int32 the GPU kernel addresses. Both executors refuse it (the same check), and only it."""
    thin = np.zeros((9_000_000, 1, 3), np.uint8)
    res = CpuExecutor(OutputSpec()).run([encode(photos["rocket"], "PNG"), encode(thin, "PNG")])
    assert list(res.errors) == [1] and isinstance(res.errors[1], LimitExceeded)
    assert "1x9000000" in str(res.errors[1]) and "2304000000" in str(res.errors[1])
    assert np.isfinite(res.output[0]).all()


def test_limits_reject_per_image(jpegs):
    ex = CpuExecutor(PreprocessConfig.single(limits=Limits(max_pixels=200_000)))
    res = ex.run([jpegs["chelsea"], jpegs["astronaut"]])  # 451x300 ok, 512x512 over
    assert list(res.errors) == [1] and isinstance(res.errors[1], LimitExceeded)


def test_factory_picks_cpu_without_a_gpu_instance():
    assert create_executor(OutputSpec(), "CPU").name == "cpu"
    assert create_executor(PreprocessConfig.single(executor="cpu"), "GPU").name == "cpu"


def test_cpu_output_matches_pillow_resize_then_crop(photos):
    """Bit-exact with Pillow's full resize followed by the crop (training-time preprocessing)."""
    rng = np.random.default_rng(1)
    src = Image.fromarray(photos["astronaut"])
    ex = CpuExecutor(OutputSpec(mean=(0, 0, 0), std=(1, 1, 1)))
    for _ in range(20):
        w, h = int(rng.integers(230, 1500)), int(rng.integers(230, 1500))
        im = src.resize((w, h))
        out = ex.run([encode(np.asarray(im), "PNG")]).output[0]
        s = 256 / min(w, h)
        rw, rh = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        full = np.asarray(im.resize((rw, rh), Image.Resampling.BILINEAR))
        top, left = int(round((rh - 224) / 2)), int(round((rw - 224) / 2))
        np.testing.assert_array_equal(
            out.transpose(1, 2, 0), full[top : top + 224, left : left + 224].astype(np.float32), err_msg=f"{w}x{h} {s}"
        )
