"""The GPU side of decode-once-serve-several: OpenCV's INTER_LINEAR in the kernel (cv2_linear) against
OpenCV itself, Ultralytics' letterbox on the GPU, several outputs from one GPU decode, and the embed and
analyze ensembles with provenance on the GPU server."""

from __future__ import annotations

import numpy as np
import pytest

from tritonprep.executors.cpu import CpuExecutor, normalize_window
from tritonprep.repository.configs import as_json, read_config
from tritonprep.spec import OutputSpec, PreprocessConfig
from tritonprep_testkit.compare import agreement, letterbox_sizes, ultralytics_letterbox
from tritonprep_testkit.photos import encode
from tritonprep_testkit.servers import MODEL_REPOSITORY

from .test_kernels import gpu_preprocess

#: the preprocess config a GPU server runs
GPU_CONFIG = MODEL_REPOSITORY / "preprocess" / "configs" / "gpu.pbtxt"

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless (the reference) is not installed")


@pytest.mark.parametrize("size", [(224, 224), (427, 640), (500, 300), (1200, 96), (1000, 1000), (7, 3)])
def test_cv2_linear_kernel_matches_opencv(cp, photos, size):
    """Down and up, per-axis factors, tiny outputs: the kernel's integer arithmetic is OpenCV's."""
    out_h, out_w = size
    spec = OutputSpec(
        resize="stretch",
        output_height=out_h,
        output_width=out_w,
        interpolation="cv2_linear",
        mean=(0, 0, 0),
        std=(1, 1, 1),
        layout="NHWC",
    )
    arrays = list(photos.values())
    got = gpu_preprocess(cp, spec, arrays)
    assert not np.isnan(got).any(), "kernel left output values unwritten"
    for name, arr, g in zip(photos, arrays, got):
        want = cv2.resize(arr, (out_w, out_h), interpolation=cv2.INTER_LINEAR).astype(np.float32)
        d = np.abs(g - want)
        assert d.max() <= 1, (name, float(d.max()))  # the bound: within one level
        assert (d == 0).mean() >= 0.999, (name, float((d == 0).mean()))  # and in practice bit-exact


def test_ultralytics_preset_on_the_gpu_is_letterbox(cp, photos):
    spec = OutputSpec.from_parameters({"preset": "ultralytics"})
    arrays = letterbox_sizes(photos)
    got = gpu_preprocess(cp, spec, arrays)
    assert not np.isnan(got).any()
    for arr, g in zip(arrays, got):
        want, _, _ = ultralytics_letterbox(arr)
        d = np.abs(g.transpose(1, 2, 0) * 255.0 - want.astype(np.float32))
        assert d.max() <= 1.001, (arr.shape, float(d.max()))
        assert (d <= 1e-3).mean() >= 0.999, (arr.shape, float((d <= 1e-3).mean()))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("order", ["RGB", "BGR"])
@pytest.mark.parametrize("dtype", ["FP32", "FP16"])
def test_cv2_linear_with_a_crop_every_layout_order_and_dtype(cp, photos, layout, order, dtype):
    from tritonprep.executors.opencv import resize_cv2

    spec = OutputSpec(
        interpolation="cv2_linear",
        layout=layout,
        channel_order=order,
        dtype=dtype,
        mean=(123.675, 116.28, 103.53),
        std=(58.395, 57.12, 57.375),
    )
    arr = photos["chelsea"]
    got = gpu_preprocess(cp, spec, [arr])[0].astype(np.float32)
    pixels, ox, oy = resize_cv2(spec, arr, cv2)
    want = normalize_window(spec, pixels, ox, oy).astype(np.float32)
    assert got.shape == spec.output_shape
    tol = 1.0 / 57.12 + (2e-3 if dtype == "FP16" else 1e-6)  # one uint8 level, plus fp16 rounding
    diff = np.abs(got - want)
    assert (diff <= tol).mean() >= 0.999 and diff.max() <= 2 * tol + 1e-2


CONFIG = PreprocessConfig(
    (
        ("PIXELS", OutputSpec(mean=(0, 0, 0), std=(1, 1, 1))),
        ("EMBED", OutputSpec(mean=(0, 0, 0), std=(1, 1, 1), resize_shorter=224, interpolation="bicubic")),
        ("DETECT", OutputSpec.from_parameters({"preset": "ultralytics", "mean": "0", "std": "1"})),
    )
)


@pytest.fixture(scope="module")
def multi(cp, nvimgcodec):
    from tritonprep.executors.gpu import GpuExecutor

    with GpuExecutor(CONFIG, 0) as ex:
        yield ex


def test_one_gpu_decode_feeds_every_output(multi, jpegs, photos):
    images = [jpegs["chelsea"], jpegs["coffee"], encode(photos["coffee"], "PNG"), jpegs["rocket"]]
    g = multi.run(images)
    c = CpuExecutor(CONFIG).run(images)
    assert not g.errors and set(g.outputs) == {"PIXELS", "EMBED", "DETECT"}
    assert sum(g.decoded_by.values()) == len(images), g.decoded_by  # one decode per image, not one per output
    assert g.decoded_by.get("cpu_fallback") == 1 and g.images[2].path == "cpu_fallback"
    assert g.images[0].path in ("gpu_hw", "gpu_cuda")
    assert [g.images[i][:2] for i in range(4)] == [c.images[i][:2] for i in range(4)]
    for name, out in g.outputs.items():
        host = out.get()
        assert host.shape == c.outputs[name].shape
        for i in range(len(images)):
            within, worst = agreement(host[i], c.outputs[name][i])
            assert within >= 0.97, (name, i, within, worst)  # the GPU's JPEG decode is within 1 level of Pillow's
            assert np.abs(host[i] - c.outputs[name][i]).mean() < 1.0, (name, i)
    assert "PIXELS bilinear" in multi.describe() and "DETECT cv2_linear" in multi.describe()


def test_outputs_only_for_the_images_that_want_them_and_bad_images_alone(multi, jpegs):
    images = [jpegs["chelsea"], b"\xff\xd8\xff\xe0garbage", jpegs["coffee"], jpegs["rocket"][:4000]]
    res = multi.run(images, {"PIXELS": [0, 1], "DETECT": [1, 2, 3]})
    assert set(res.errors) == {1, 3}
    assert set(res.outputs) == {"PIXELS", "DETECT"}
    assert res.outputs["PIXELS"].shape[0] == 2 and res.outputs["DETECT"].shape[0] == 3
    alone = multi.run([jpegs["chelsea"], jpegs["coffee"]])
    np.testing.assert_array_equal(res.outputs["PIXELS"].get()[0], alone.outputs["PIXELS"].get()[0])
    np.testing.assert_array_equal(res.outputs["DETECT"].get()[1], alone.outputs["DETECT"].get()[1])


def test_analyze_and_embed_on_the_gpu_server(gpu_server, jpegs, photos):
    from tritonprep_client import ClassifyClient

    images = [jpegs["chelsea"], encode(photos["chelsea"], "PNG"), jpegs["coffee"]]
    with ClassifyClient(gpu_server.options.grpc_url, model="analyze") as c:
        names = c.output_names(predictions=True, embedding=True, provenance=True)
        res = dict(c.infer_each(images, names, batch_size=3))
    assert res[0].provenance.decoder in ("gpu_hw", "gpu_cuda") and res[1].provenance.decoder == "cpu_fallback"
    assert (res[0].provenance.width, res[0].provenance.height) == (451, 300)
    assert res[0].provenance.transforms["PIXELS"][2:] == (-80, -16, -80, -16)
    e = np.stack([res[i].embedding for i in range(3)]).astype(np.float32)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-4)
    assert e[0] @ e[1] >= 0.99 and e[0] @ e[2] < 0.5
    assert res[0].predictions[0].index in {281, 282, 285} and res[2].predictions[0].index == 967
    with ClassifyClient(gpu_server.options.grpc_url) as c:
        embedded = c.embed(images)
    np.testing.assert_allclose(embedded, e, atol=1e-3)  # the same preprocessing through the embed ensemble
    text = gpu_server.log_path.read_text()
    shipped = PreprocessConfig.from_model_config(as_json(read_config(GPU_CONFIG)))  # what the GPU server runs
    for name in ("PIXELS", "EMBED_PIXELS"):  # each output's kernel, as the instance logs it (FP16 NHWC as shipped)
        s = shipped.spec(name)
        assert f"{name} {s.interpolation}/{s.layout}/{s.channel_order}/{s.dtype}" in text, name
