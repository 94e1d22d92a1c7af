"""Several image outputs from one decode: the config convention, the CPU executor, provenance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tritonprep.errors import ConfigError, DecodeError
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.spec import PRESETS, Limits, OutputSpec, PreprocessConfig
from tritonprep.triton.provenance import provenance_arrays
from tritonprep_testkit.photos import encode

from .test_spec import as_json_config, load_config

REPO = Path(__file__).resolve().parents[2] / "model_repository"
DETECT = ("DETECT", 640, 640)


def config_json(outputs: list[tuple[str, str, list[int]]], params: dict[str, str]) -> dict:
    """A preprocess model config in Triton's JSON form."""
    return {
        "max_batch_size": 8,
        "output": [{"name": n, "data_type": t, "dims": d} for n, t, d in outputs],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


PIXELS = ("PIXELS", "TYPE_FP32", [3, 224, 224])


def test_repository_config_has_two_image_outputs_and_provenance():
    config = PreprocessConfig.from_model_config(as_json_config(load_config(REPO / "preprocess" / "config.pbtxt")))
    specs = config.specs
    assert list(specs) == ["PIXELS", "EMBED_PIXELS"]
    assert specs["PIXELS"] == config.spec("PIXELS")
    assert (specs["PIXELS"].resize_shorter, specs["PIXELS"].interpolation) == (256, "bilinear")
    assert (specs["EMBED_PIXELS"].resize_shorter, specs["EMBED_PIXELS"].interpolation) == (224, "bicubic")
    assert specs["EMBED_PIXELS"].mean == specs["PIXELS"].mean
    assert set(config.provenance) == {
        "ORIGINAL_SIZE",
        "DECODER",
        "PIXELS_SCALE",
        "PIXELS_PADDING",
        "EMBED_PIXELS_SCALE",
        "EMBED_PIXELS_PADDING",
    }


def test_prefixed_parameters_override_the_unprefixed_ones_for_one_output():
    cfg = config_json(
        [PIXELS, ("SMALL", "TYPE_FP16", [64, 64, 3])],
        {"mean": "0", "std": "255", "SMALL.output_size": "64,64", "SMALL.resize_shorter": "64", "SMALL.layout": "NHWC",
         "SMALL.dtype": "FP16", "max_pixels": "1000000"},
    )  # fmt: skip
    config = PreprocessConfig.from_model_config(cfg)
    specs = config.specs
    assert specs["PIXELS"].output_shape == (3, 224, 224) and specs["PIXELS"].dtype == "FP32"
    assert specs["SMALL"].output_shape == (64, 64, 3) and specs["SMALL"].dtype == "FP16"
    assert specs["SMALL"].mean == specs["PIXELS"].mean == (0.0,) * 3  # unprefixed: every output
    assert config.limits.max_pixels == 1_000_000  # model-wide: once for all outputs


def test_the_ultralytics_preset_and_what_overrides_it():
    cfg = config_json(
        [PIXELS, (DETECT[0], "TYPE_FP32", [3, 640, 640])],
        {"resize": "shorter_side_crop", "interpolation": "bicubic", "DETECT.preset": "ultralytics"},
    )
    specs = PreprocessConfig.from_model_config(cfg).specs
    det = specs["DETECT"]
    assert (det.resize, det.interpolation, det.pad_value) == ("letterbox", "cv2_linear", 114)  # the preset beats
    assert det.mean == (0.0,) * 3 and det.std == (255.0,) * 3 and det.output_shape == (3, 640, 640)  # unprefixed
    assert specs["PIXELS"].interpolation == "bicubic"
    cfg["parameters"]["DETECT.pad_value"] = {"string_value": "0"}  # an explicit prefixed value beats the preset
    assert PreprocessConfig.from_model_config(cfg).specs["DETECT"].pad_value == 0
    assert OutputSpec.from_parameters({"preset": "ultralytics", "output_size": "320,320"}).output_height == 320
    assert set(PRESETS) == {"none", "ultralytics"}


@pytest.mark.parametrize(
    ("outputs", "params", "message"),
    [
        ([PIXELS], {"PIXELS.max_pixels": "10"}, "max_pixels is shared by all outputs .*without the 'PIXELS.' prefix"),
        ([PIXELS], {"PIXELS.executor": "cpu"}, "executor is shared by all outputs"),
        ([PIXELS], {"EMBED.mean": "0"}, "names 'EMBED', which is not an image output .*\\['PIXELS'\\]"),
        ([PIXELS], {"PIXELS.colour": "red"}, "unknown preprocess parameter 'PIXELS.colour'"),
        ([PIXELS], {"PIXELS.preset": "yolo"}, "output 'PIXELS': preset must be one of none, ultralytics"),
        ([PIXELS, ("B", "TYPE_FP32", [3, 224, 224])], {"B.layout": "NHWC"}, "output 'B' has dims \\[3, 224, 224\\]"),
        ([PIXELS, ("B", "TYPE_FP32", [3, 224, 224])], {"B.dtype": "FP16"}, "output 'B' has data_type TYPE_FP32"),
        ([PIXELS, ("B_SCALE", "TYPE_FP32", [2])], {}, "'B_SCALE' ends in _SCALE.* declares no output 'B'"),
        ([PIXELS, ("PIXELS_SCALE", "TYPE_FP32", [4])], {}, "'PIXELS_SCALE' must be TYPE_FP32 with dims \\[2\\]"),
        ([PIXELS, ("DECODER", "TYPE_INT32", [1])], {}, "'DECODER' must be TYPE_STRING with dims \\[1\\]"),
        ([("ORIGINAL_SIZE", "TYPE_INT32", [2])], {}, "declares no image output"),
    ],
)
def test_configs_that_disagree_with_their_outputs_refuse_to_load(outputs, params, message):
    with pytest.raises(ConfigError, match=message):
        PreprocessConfig.from_model_config(config_json(outputs, params))


def test_decoding_and_limits_are_held_once_for_all_outputs():
    """Model-wide settings live on the config, not on each output, so outputs built in code cannot disagree."""
    from dataclasses import fields

    config = PreprocessConfig((("A", OutputSpec()), ("B", OutputSpec(layout="NHWC"))), executor="cpu")
    assert config.executor == "cpu" and config.limits == Limits()
    model_wide = {"executor", "cpu_threads", "decoding", "limits"}
    assert model_wide <= {f.name for f in fields(PreprocessConfig)}
    assert not model_wide & {f.name for f in fields(OutputSpec)}
    with pytest.raises(ConfigError, match="'C_SCALE' is not a provenance output"):
        PreprocessConfig((("A", OutputSpec()),), ("C_SCALE",))


TWO = PreprocessConfig(
    (
        ("PIXELS", OutputSpec(mean=(0, 0, 0), std=(1, 1, 1))),
        (
            "EMBED",
            OutputSpec(mean=(0, 0, 0), std=(1, 1, 1), resize_shorter=224, interpolation="bicubic", layout="NHWC"),
        ),
    ),
    ("ORIGINAL_SIZE", "DECODER", "PIXELS_SCALE", "PIXELS_PADDING", "EMBED_SCALE"),
)


@pytest.fixture(scope="module")
def two():
    ex = CpuExecutor(TWO)
    yield ex
    ex.close()


def test_one_decode_gives_each_output_what_its_own_executor_gives(two, jpegs, photos):
    images = [jpegs["chelsea"], encode(photos["coffee"], "PNG"), jpegs["astronaut"]]
    res = two.run(images)
    assert set(res.outputs) == {"PIXELS", "EMBED"} and not res.errors
    for name, spec in TWO.outputs:
        alone = CpuExecutor(spec).run(images).output
        np.testing.assert_array_equal(res.outputs[name], alone)
    assert res.outputs["EMBED"].shape == (3, 224, 224, 3)
    assert res.decoded_by == {"cpu": 3}  # three decodes, not six
    assert [res.images[i][:2] for i in range(3)] == [(451, 300), (600, 400), (512, 512)]


def test_each_output_only_for_the_images_that_want_it(two, jpegs):
    images = [jpegs["chelsea"], jpegs["coffee"], b"junk", jpegs["rocket"]]
    res = two.run(images, {"PIXELS": [0, 1], "EMBED": [1, 2, 3]})
    assert res.outputs["PIXELS"].shape[0] == 2 and res.outputs["EMBED"].shape[0] == 3
    assert set(res.errors) == {2} and isinstance(res.errors[2], DecodeError)
    full = two.run([jpegs["coffee"], jpegs["rocket"]])
    np.testing.assert_array_equal(res.outputs["PIXELS"][1], full.outputs["PIXELS"][0])
    np.testing.assert_array_equal(res.outputs["EMBED"][0], full.outputs["EMBED"][0])
    np.testing.assert_array_equal(res.outputs["EMBED"][2], full.outputs["EMBED"][1])
    only_decode = two.run([jpegs["chelsea"]], {})  # provenance only: decoded, nothing resized
    assert only_decode.outputs == {} and only_decode.images[0][:2] == (451, 300)
    with pytest.raises(ValueError, match="unknown image output"):
        two.run([jpegs["chelsea"]], {"LOGITS": [0]})


def test_provenance_rows_per_image(two, jpegs):
    res = two.run([jpegs["chelsea"], jpegs["rocket"]])
    infos = [res.images[0], res.images[1]]
    rows = provenance_arrays(TWO, infos, frozenset(TWO.provenance) - {"EMBED_SCALE"})
    assert set(rows) == {"ORIGINAL_SIZE", "DECODER", "PIXELS_SCALE", "PIXELS_PADDING"}  # only what was asked
    np.testing.assert_array_equal(rows["ORIGINAL_SIZE"], [[451, 300], [640, 427]])
    assert rows["DECODER"] == [["cpu"], ["cpu"]]
    # chelsea 451x300 -> shorter side 256: 384x256, crop 224 at (80, 16)
    np.testing.assert_allclose(rows["PIXELS_SCALE"][0], [384 / 451, 256 / 300], rtol=1e-6)
    np.testing.assert_array_equal(rows["PIXELS_PADDING"][0], [-80, -16, -80, -16])
    assert rows["PIXELS_SCALE"].dtype == np.float32 and rows["PIXELS_PADDING"].dtype == np.int32


def test_a_request_for_a_provenance_output_alone_gets_it_without_its_image_output(two, jpegs):
    rows = provenance_arrays(TWO, [two.run([jpegs["coffee"]], {}).images[0]], frozenset({"EMBED_SCALE"}))
    np.testing.assert_allclose(rows["EMBED_SCALE"], [[336 / 600, 224 / 400]], rtol=1e-6)


def test_describe_names_every_output(two):
    assert "PIXELS (bilinear)" in two.describe() and "EMBED (bicubic)" in two.describe()


def test_an_image_output_reads_the_upright_image(photos):
    """EXIF orientation 6 (rotate 90): the original size is the upright one, as clients see the photo."""
    im = Image.fromarray(photos["chelsea"])
    exif = im.getexif()
    exif[0x0112] = 6
    import io

    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90, exif=exif)
    res = CpuExecutor(TWO).run([buf.getvalue()])
    assert res.images[0][:2] == (300, 451)
