"""The preprocessing spec and the model configurations of the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonprep.errors import ConfigError
from tritonprep.spec import (
    PARAMETERS,
    PER_OUTPUT,
    DecoderOptions,
    Limits,
    OutputSpec,
    PreprocessConfig,
)

REPO = Path(__file__).resolve().parents[2] / "model_repository"


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    """Strict parse of a config.pbtxt with Triton's own protobuf schema."""
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def as_json_config(cfg: model_config_pb2.ModelConfig) -> dict:
    """The JSON form Triton hands to a Python model (``args['model_config']``)."""
    from google.protobuf.json_format import MessageToDict

    d = MessageToDict(cfg, preserving_proto_field_name=True)
    for o in d.get("output", []):
        o["dims"] = [int(x) for x in o.get("dims", [])]
    return d


CONFIGS = sorted(REPO.glob("*/config.pbtxt")) + sorted(REPO.glob("*/configs/*.pbtxt"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_parses_and_is_named_after_its_folder(path):
    cfg = load_config(path)
    folder = path.parent.parent.name if path.parent.name == "configs" else path.parent.name
    assert cfg.name == folder
    assert (REPO / folder / "1").is_dir()


ENSEMBLES = ["classify", "embed", "analyze"]


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_ensemble_wiring_matches_the_models(ensemble):
    configs = {p.parent.name: load_config(p) for p in REPO.glob("*/config.pbtxt")}
    assert sorted(n for n, c in configs.items() if c.platform == "ensemble") == sorted(ENSEMBLES)
    ens = configs[ensemble]
    assert ens.platform == "ensemble" and (REPO / ensemble / "1" / ".gitkeep").is_file()
    produced = {i.name: (i.data_type, list(i.dims)) for i in ens.input}
    for step in ens.ensemble_scheduling.step:
        model = configs[step.model_name]
        assert model.max_batch_size >= ens.max_batch_size, step.model_name
        inputs = {i.name: (i.data_type, list(i.dims)) for i in model.input}
        for model_input, tensor in step.input_map.items():
            assert produced[tensor] == inputs[model_input], (step.model_name, model_input)
        outputs = {o.name: (o.data_type, list(o.dims)) for o in model.output}
        for model_output, tensor in step.output_map.items():
            produced[tensor] = outputs[model_output]
    for out in ens.output:
        assert produced[out.name] == (out.data_type, list(out.dims)), out.name


def test_repository_preprocess_config_gives_the_lite0_spec():
    config = PreprocessConfig.from_model_config(as_json_config(load_config(REPO / "preprocess" / "config.pbtxt")))
    spec = config.spec("PIXELS")
    assert (spec.output_height, spec.output_width, spec.resize_shorter) == (224, 224, 256)
    assert spec.mean == (127.0,) * 3 and spec.std == (128.0,) * 3
    assert spec.layout == "NCHW" and spec.dtype == "FP32" and spec.channel_order == "RGB"
    assert spec.output_shape == (3, 224, 224)
    assert spec.scale[0] == pytest.approx(1 / 128) and spec.bias[0] == pytest.approx(-127 / 128)
    assert config.limits == Limits()


def test_parameters_are_parsed_and_normalised():
    config = PreprocessConfig.from_parameters(
        {
            "output_size": "320,640",
            "resize": "Letterbox",
            "interpolation": "BICUBIC",
            "mean": "0",
            "std": "255",
            "channel_order": "bgr",
            "layout": "nhwc",
            "dtype": "fp16",
            "pad_value": "114",
            "allowed_formats": "jpeg, png",
            "max_pixels": "1000",
        }
    )
    spec = config.spec("PIXELS")
    assert (spec.output_height, spec.output_width) == (320, 640) and spec.resize == "letterbox"
    assert spec.interpolation == "bicubic" and spec.mean == (0.0,) * 3 and spec.std == (255.0,) * 3
    assert (spec.channel_order, spec.layout, spec.dtype, spec.pad_value) == ("BGR", "NHWC", "FP16", 114)
    assert spec.output_shape == (320, 640, 3)
    assert config.limits.allowed_formats == ("JPEG", "PNG") and config.limits.max_pixels == 1000


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"resize": "crop"}, "must be one of"),
        ({"mean": "1,2"}, "1 or 3 values"),
        ({"std": "1,0,1"}, "non-zero"),
        ({"resize_shorter": "200"}, "center crop fits"),
        ({"output_size": "a,b"}, "must be an integer"),
        ({"output_size": "224.9,224"}, "must be an integer, got '224.9'"),  # was truncated to 224
        ({"output_size": "224"}, "2 comma-separated integers"),
        ({"hw_decoder": "yes"}, "true or false"),
        ({"interpolation": "nearest"}, "interpolation must be one of bilinear, bicubic"),
        ({"layout": "CHW"}, "layout"),
        ({"dtype": "INT8"}, "dtype"),
        ({"executor": "tpu"}, "executor"),
        ({"allowed_formats": "JPEG,HEIC"}, "allowed_formats"),
        ({"max_pixels": "0"}, ">= 1"),
        ({"pad_value": "300"}, "0..255"),
        ({"mean_rgb": "1"}, "unknown preprocess parameter"),
    ],
)
def test_invalid_parameters_say_what_is_allowed(params, message):
    with pytest.raises(ConfigError, match=message):
        PreprocessConfig.from_parameters(params)


def test_output_config_must_agree_with_the_spec():
    cfg = as_json_config(load_config(REPO / "preprocess" / "config.pbtxt"))
    cfg["output"][0]["dims"] = [224, 224, 3]
    with pytest.raises(ConfigError, match="has dims \\[224, 224, 3\\] but the parameters describe \\[3, 224, 224\\]"):
        PreprocessConfig.from_model_config(cfg)
    cfg = as_json_config(load_config(REPO / "preprocess" / "config.pbtxt"))
    cfg["output"][0]["data_type"] = "TYPE_FP16"
    with pytest.raises(ConfigError, match="data_type TYPE_FP16 but parameter dtype is FP32"):
        PreprocessConfig.from_model_config(cfg)
    with pytest.raises(ConfigError, match="no output named 'OUT'"):
        PreprocessConfig.from_model_config(as_json_config(load_config(REPO / "preprocess" / "config.pbtxt"))).spec(
            "OUT"
        )


def test_the_table_defaults_are_the_dataclass_defaults():
    """Every parameter's documented default builds the same config as the dataclass defaults."""
    assert PreprocessConfig.from_parameters({p.name: p.default for p in PARAMETERS}) == PreprocessConfig.single()
    per_output = {p.name: p.default for p in PARAMETERS if p.name in PER_OUTPUT}
    assert OutputSpec.from_parameters(per_output) == OutputSpec()


def test_every_field_has_exactly_one_parameter():
    """Each field of the per-output spec, the decoder options, the limits and the config's own model-wide
    fields is set by exactly one row of the table, and model-wide settings exist once (not per output)."""
    from dataclasses import fields

    targets = [t for p in PARAMETERS for t in p.targets]
    model = {f.name for f in fields(PreprocessConfig)} - {"outputs", "provenance", "decoding", "limits"}
    expected = (
        {f"output.{f.name}" for f in fields(OutputSpec)}
        | {f"decoding.{f.name}" for f in fields(DecoderOptions)}
        | {f"limits.{f.name}" for f in fields(Limits)}
        | {f"model.{name}" for name in model}
    )
    assert sorted(targets) == sorted(expected)
    assert PER_OUTPUT == {p.name for p in PARAMETERS if p.name == "preset" or p.targets[0].startswith("output.")}


def test_a_per_output_spec_refuses_model_wide_parameters():
    with pytest.raises(ConfigError, match="model-wide parameters"):
        OutputSpec.from_parameters({"max_pixels": "1000"})


@pytest.mark.parametrize("key", ["hw_decoder_streams", "PIXELS.hw_decoder_streams"])
def test_the_retired_decoder_stream_mode_says_what_to_do(key):
    """hw_decoder_streams=caller was removed (decoders always decode on their own streams): a config that
    still asks for it fails to load saying so; 'own', what every decoder now does, still loads."""
    with pytest.raises(ConfigError, match="'caller' is no longer supported: .*own.*delete the parameter"):
        PreprocessConfig.from_parameters({key: "caller"})
    assert PreprocessConfig.from_parameters({key: "own"}) == PreprocessConfig.single()


def test_a_choice_is_checked_once_in_code_as_in_config():
    """Choices are validated by the dataclass, so a spec built in code is held to the same rules."""
    with pytest.raises(ConfigError, match="resize must be one of"):
        OutputSpec(resize="crop")
    with pytest.raises(ConfigError, match="resize must be one of"):
        OutputSpec.from_parameters({"resize": "crop"})
    with pytest.raises(ConfigError, match="gpu_decoder must be one of"):
        DecoderOptions(gpu_decoder="cpu")


def test_the_cuda_decoder_backends_are_nvimagecodecs_names_one_or_both():
    """cuda_decoder_backends reads nvImageCodec's backend names (any case) and refuses others, none or repeats."""
    options = PreprocessConfig.from_parameters({"cuda_decoder_backends": " HYBRID_CPU_GPU "}).decoding
    assert options.cuda_decoder_backends == ("hybrid_cpu_gpu",)
    assert DecoderOptions().cuda_decoder_backends == ("gpu_only", "hybrid_cpu_gpu")
    for bad in ("cpu_only", "", "gpu_only,gpu_only", "hw_gpu_only"):
        with pytest.raises(ConfigError, match="cuda_decoder_backends must be one or both of gpu_only, hybrid_cpu_gpu"):
            PreprocessConfig.from_parameters({"cuda_decoder_backends": bad})


def test_the_gpu_config_is_the_default_one_with_gpu_instances_and_batching():
    """configs/gpu.pbtxt (picked on GPU machines) changes only instances and batching, and hands the networks FP16
    channel-last; the container's configs are the same in FP32 NCHW (its networks' input)."""
    default = load_config(REPO / "preprocess" / "config.pbtxt")
    gpu = load_config(REPO / "preprocess" / "configs" / "gpu.pbtxt")
    container = load_config(REPO / "preprocess" / "configs" / "tensorrt.pbtxt")
    assert [g.kind for g in gpu.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_GPU]
    assert gpu.instance_group[0].count > 1 and gpu.dynamic_batching.max_queue_delay_microseconds == 0
    images = [o for o in gpu.output if o.name in ("PIXELS", "EMBED_PIXELS")]
    assert [o.data_type for o in images] == [model_config_pb2.DataType.TYPE_FP16] * 2
    assert gpu.parameters["dtype"].string_value == "FP16"
    assert [list(o.dims) for o in images] == [[224, 224, 3], [224, 224, 3]]
    assert gpu.parameters["layout"].string_value == "NHWC"
    gpu.parameters["layout"].string_value = "NCHW"
    for o in images:
        o.data_type = model_config_pb2.DataType.TYPE_FP32
        o.dims[:] = [3, 224, 224]
    gpu.parameters["dtype"].string_value = "FP32"
    for cfg in (default, gpu, container):
        cfg.ClearField("instance_group")
        cfg.dynamic_batching.ClearField("max_queue_delay_microseconds")
    assert default == gpu == container
    onnxruntime = REPO / "preprocess" / "configs" / "onnxruntime.pbtxt"  # the container's other name: the same file
    assert onnxruntime.resolve() == (REPO / "preprocess" / "configs" / "tensorrt.pbtxt")


def test_the_classifier_gpu_config_changes_only_instances_and_batching():
    default = load_config(REPO / "classifier" / "config.pbtxt")
    gpu = load_config(REPO / "classifier" / "configs" / "gpu.pbtxt")
    assert [g.kind for g in gpu.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_GPU]
    assert gpu.dynamic_batching.max_queue_delay_microseconds == 0
    # preferred sizes are whole multiples of the largest batch bucket (full CUDA graphs under load)
    largest = int(gpu.parameters["batch_buckets"].string_value.split(",")[-1])
    assert list(gpu.dynamic_batching.preferred_batch_size) == [largest, 2 * largest]
    # as the GPU preprocess makes PIXELS: FP16 channel-last (the runtime runs model.fp16.nhwc.onnx for it)
    assert gpu.input[0].data_type == model_config_pb2.DataType.TYPE_FP16 and list(gpu.input[0].dims) == [224, 224, 3]
    preprocess = load_config(REPO / "preprocess" / "configs" / "gpu.pbtxt")
    pixels = next(o for o in preprocess.output if o.name == "PIXELS")
    assert (pixels.data_type, pixels.dims) == (gpu.input[0].data_type, gpu.input[0].dims)
    gpu.input[0].data_type = model_config_pb2.DataType.TYPE_FP32
    gpu.input[0].dims[:] = [3, 224, 224]
    for cfg in (default, gpu):
        cfg.ClearField("instance_group")
        cfg.dynamic_batching.ClearField("max_queue_delay_microseconds")
        cfg.dynamic_batching.ClearField("preferred_batch_size")
    assert default == gpu


def test_the_embedder_gpu_config_takes_what_the_gpu_preprocess_makes_and_changes_nothing_else():
    """The embedder's GPU config: EMBED_PIXELS as the GPU preprocess makes them (FP16 channel-last, which the runtime
    runs as model.fp16.nhwc.onnx), its 64 bucket fused and no queue delay (a lone request runs at once, as the
    classifier's GPU config); otherwise the default config but for its queue."""
    default = load_config(REPO / "embedder" / "config.pbtxt")
    gpu = load_config(REPO / "embedder" / "configs" / "gpu.pbtxt")
    preprocess = load_config(REPO / "preprocess" / "configs" / "gpu.pbtxt")
    pixels = next(o for o in preprocess.output if o.name == "EMBED_PIXELS")
    assert (pixels.data_type, list(pixels.dims)) == (gpu.input[0].data_type, list(gpu.input[0].dims))
    assert list(gpu.input[0].dims) == [224, 224, 3] and gpu.parameters["precision"].string_value == "fp16"
    gpu.input[0].data_type = model_config_pb2.DataType.TYPE_FP32
    gpu.input[0].dims[:] = [3, 224, 224]
    assert (gpu.parameters["fuse_conv_bias"].string_value, default.parameters["fuse_conv_bias"].string_value) == (
        "64",
        "false",  # the container's embedder runs config.pbtxt: not measured fused
    )
    delays = (gpu.dynamic_batching.max_queue_delay_microseconds, default.dynamic_batching.max_queue_delay_microseconds)
    assert delays == (0, 1000)  # the CPU keeps batching a little
    for cfg in (default, gpu):
        cfg.dynamic_batching.default_queue_policy.ClearField("max_queue_size")
        cfg.dynamic_batching.ClearField("max_queue_delay_microseconds")
        del cfg.parameters["fuse_conv_bias"]
    assert default == gpu


def test_classify_fused_gpu_config_feeds_its_network_what_the_classifier_gpu_config_takes():
    """classify_fused's GPU config runs the classifier's network on the classifier GPU config's input: FP16
    channel-last, which both run as model.fp16.nhwc.onnx."""
    from tritonprep.pipeline.fused import split_parameters

    fused = load_config(REPO / "classify_fused" / "configs" / "gpu.pbtxt")
    prep, net = split_parameters({k: v.string_value for k, v in fused.parameters.items()})
    spec = PreprocessConfig.from_parameters(prep, ["PIXELS"]).spec("PIXELS")
    classifier = load_config(REPO / "classifier" / "configs" / "gpu.pbtxt")
    assert spec.output_shape == tuple(classifier.input[0].dims) == (224, 224, 3) and spec.dtype == "FP16"
    assert (net["model"], net["precision"]) == ("classifier/1/model.onnx", "fp16")
