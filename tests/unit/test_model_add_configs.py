"""`tritonprep model add`'s configs (tritonprep.repository): built from typed objects, equal to the shipped models'
hand-kept configs where they describe the same network, loadable by the code that serves them, and written
into a repository with nothing of the repository lost."""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import text_format

from tritonprep.classifier.postprocess import TopK
from tritonprep.classifier.runtimes import RuntimeOptions
from tritonprep.repository import configs
from tritonprep.repository.checks import Request, plan
from tritonprep.repository.configs import as_json, read_config, to_text
from tritonprep.repository.models import POSTPROCESS, network_model_py
from tritonprep.repository.network import Network
from tritonprep.repository.write import add, preprocess_configs
from tritonprep.spec import OutputSpec, PreprocessConfig
from tritonprep_testkit.onnx_graphs import network as onnx_network

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "model_repository"
#: what the shipped configs tune by measurement, which a new network's configs leave out or at their default
#: (classify_fused's network buckets 1,64 were measured for it; a new network's are the classifier's 8,64, without the
#: classifier's late 1 bucket, whose memory a new network's gpu_memory_mb does not plan for)
TUNED = {"gpu_memory_mb", "fuse_conv_bias", "network.batch_buckets", "late_batch_buckets"}


def lite0(name: str, kind: str = "classifier", **kw: object) -> Network:
    """The shipped networks as `model add` describes them (EfficientNet-Lite0 with its FP16 variant)."""
    spec = OutputSpec() if kind == "classifier" else OutputSpec(resize_shorter=224, interpolation="bicubic")
    width = 1000 if kind == "classifier" else 1280
    output = "logits" if kind == "classifier" else "embedding"
    top = {"top_k": 5, "labels": "imagenet"} if kind == "classifier" else {}
    return Network(name, kind, spec, "input", output, width, fp16=True, **{**top, **kw})  # type: ignore[arg-type]


def channel_last(net: Network) -> Network:
    """``net`` described with an NHWC input."""
    return replace(net, spec=replace(net.spec, layout="NHWC"))


def shipped(relative: str) -> object:
    return without_tuned(read_config(SHIPPED / relative))


def renamed(config: object, names: dict[str, str]) -> object:
    """``config`` with model and tensor names replaced (the shipped models' names are not ``<name>_network``)."""
    text = text_format.MessageToString(config)
    for old, new in names.items():
        text = re.sub(rf'"{re.escape(old)}"', f'"{new}"', text)
    return text_format.Parse(text, type(config)())


def without_tuned(config: object) -> object:
    for key in TUNED & set(config.parameters):
        del config.parameters[key]
    return config


CLASSIFY = {"classify_network": "classifier", "CLASSIFY_PIXELS": "PIXELS", "classify_postprocess": "postprocess"}
EMBED = {"embed_network": "embedder"}
#: each shipped config, and how `model add` builds it: ``(config, names)`` from the shipped networks' descriptions
PARITY = {
    "classifier/config.pbtxt": lambda c, e: (configs.network_config(c, gpu=False), CLASSIFY),
    # the shipped GPU classifier takes its input channel-last (it runs make model's model.fp16.nhwc.onnx)
    "classifier/configs/gpu.pbtxt": lambda c, e: (
        configs.network_config(channel_last(c), gpu=True, half_input=True),
        CLASSIFY,
    ),
    "classifier/configs/tensorrt.pbtxt": lambda c, e: (configs.container_config(c, "tensorrt"), CLASSIFY),
    "classifier/configs/onnxruntime.pbtxt": lambda c, e: (configs.container_config(c, "onnxruntime"), CLASSIFY),
    "classify/config.pbtxt": lambda c, e: (configs.ensemble_config(c), CLASSIFY),
    "classify/configs/tensorrt.pbtxt": lambda c, e: (configs.ensemble_config(c, container=True), CLASSIFY),
    "classify/configs/onnxruntime.pbtxt": lambda c, e: (configs.ensemble_config(c, container=True), CLASSIFY),
    "postprocess/config.pbtxt": lambda c, e: (configs.postprocess_config(c, container=False), CLASSIFY),
    "postprocess/configs/container.pbtxt": lambda c, e: (configs.postprocess_config(c, container=True), CLASSIFY),
    "embedder/config.pbtxt": lambda c, e: (configs.network_config(e, gpu=False), EMBED),
    "embed/config.pbtxt": lambda c, e: (configs.ensemble_config(e), EMBED),
}


@pytest.mark.parametrize("relative", PARITY)
def test_the_typed_source_gives_the_shipped_configs(relative):
    """One source for every network: described as `model add` would describe EfficientNet-Lite0, it gives the
    shipped configs field for field (but the parameters tuned by measurement, and the models' names)."""
    config, names = PARITY[relative](lite0("classify"), lite0("embed", "embedder"))
    assert renamed(without_tuned(config), names) == shipped(relative)


def test_every_config_reads_back_to_its_message_and_says_its_defaults():
    net = lite0("mine")
    for config in (
        configs.network_config(net, gpu=False),
        configs.network_config(net, gpu=True),
        configs.container_config(net, "tensorrt"),
        configs.container_config(net, "onnxruntime"),
        configs.postprocess_config(net, container=True),
        configs.ensemble_config(net),
        configs.ensemble_config(net, container=True),
        configs.ensemble_config(lite0("emb", "embedder")),
    ):
        text = to_text(config, "a header\nof two lines")
        assert text.startswith("# a header\n# of two lines\n")
        assert text_format.Parse(text, configs.pb().ModelConfig()) == config
    text = to_text(configs.network_config(net, gpu=False))
    assert "kind: KIND_AUTO" in text and "timeout_action: REJECT" in text
    assert 'output { name: "SCORES" data_type: TYPE_FP32 dims: [5] }' in text
    assert 'parameters { key: "labels" value { string_value: "imagenet" } }' in text


def test_the_network_configs_load_with_the_code_that_serves_them(tmp_path):
    net = Network("mine", "classifier", OutputSpec(output_height=260, output_width=260, resize_shorter=292),
                  "x", "y", 37, top_k=7, labels="")  # fmt: skip
    for gpu in (False, True):
        config = as_json(configs.network_config(net, gpu))
        top = TopK.from_config(config, tmp_path, classes_of="logits")
        assert (top.k, top.labels.names) == (7, None)
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        params.pop("network_turns")
        options = RuntimeOptions.from_parameters(params, config["max_batch_size"])
        assert (options.precision, options.batch_buckets) == ("fp32", (8, 64))
    post = as_json(configs.postprocess_config(net, container=True))
    assert TopK.from_config(post, tmp_path, classes_of="LOGITS").k == 7
    embedder = as_json(configs.network_config(Network("e", "embedder", OutputSpec(), "x", "y", 64), gpu=True))
    assert "labels" not in embedder["parameters"] and "network_turns" not in embedder["parameters"]
    RuntimeOptions.from_parameters({k: v["string_value"] for k, v in embedder["parameters"].items()}, 256)


def _code(source: str) -> str:
    """A model.py's code without its docstring, the error prefix written as the generated files write it."""
    tree = ast.parse(source.replace('f"classifier: {e}"', "f\"{args['model_name']}: {e}\"").replace(
        'f"embedder: {e}"', "f\"{args['model_name']}: {e}\""))  # fmt: skip
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return ast.dump(tree)


@pytest.mark.parametrize("model", ["classifier", "embedder", "postprocess"])
def test_the_model_py_files_are_the_shipped_ones_code(model):
    generated = POSTPROCESS if model == "postprocess" else network_model_py(model)
    assert _code(generated) == _code((SHIPPED / model / "1" / "model.py").read_text())


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A copy of the shipped repository without its ONNX files (what model add reads and writes)."""
    dest = tmp_path / "models"
    shutil.copytree(SHIPPED, dest, symlinks=True, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    return dest


def test_the_preprocess_output_is_appended_to_every_config_and_comments_stay(repository, tmp_path):
    before = {p: p.read_text() for p in preprocess_configs(repository)}
    # onnxruntime.pbtxt links to tensorrt.pbtxt (the container's, FP32); gpu.pbtxt is FP16
    assert {p.name for p in before} == {"config.pbtxt", "gpu.pbtxt", "tensorrt.pbtxt"}
    onnx = onnx_network(tmp_path / "net.onnx", ("batch", 260, 260, 3), 12)
    sets = ("output_size=260,260", "resize_shorter=292", "layout=NHWC", "mean=123.675,116.28,103.53", "std=58.4")
    add(plan(Request("my-net", onnx, repository, sets=sets)))
    for path, text in before.items():
        after = path.read_text()
        assert after.startswith(text.rstrip("\n"))  # the config's own text and comments, untouched
        config = PreprocessConfig.from_model_config(as_json(read_config(path)))
        spec = config.spec("MY_NET_PIXELS")
        assert (spec.output_shape, spec.resize_shorter, spec.mean[0], spec.std) == ((260, 260, 3), 292, 123.675,
                                                                                      (58.4,) * 3)  # fmt: skip
        gpu = path.name == "gpu.pbtxt"
        # the classifier's input as it was: FP16 channel-last in the GPU config
        assert config.spec("PIXELS") == (OutputSpec(dtype="FP16", layout="NHWC") if gpu else OutputSpec(dtype="FP32"))
        assert config.spec("MY_NET_PIXELS").dtype == "FP32"  # its network's input, whatever the config's default
        assert {"MY_NET_PIXELS_SCALE", "MY_NET_PIXELS_PADDING"} <= set(config.provenance)
    assert (repository / "preprocess" / "configs" / "onnxruntime.pbtxt").is_symlink()


def test_a_classifier_brings_its_models_labels_and_container_configs(repository, tmp_path):
    onnx = onnx_network(tmp_path / "net.onnx", ("batch", 3, 224, 224), 3, input_name="images", output_name="scores")
    labels = tmp_path / "names.txt"
    labels.write_text("cat\ndog\nbird\n")
    written = add(plan(Request("pets", onnx, repository, labels=str(labels), top_k=2)))
    assert written.copied_from is None
    files = {p.as_posix() for p in written.files}
    assert {
        "pets/config.pbtxt", "pets/1/.gitkeep", "pets/configs/tensorrt.pbtxt", "pets/configs/onnxruntime.pbtxt",
        "pets_network/config.pbtxt", "pets_network/configs/gpu.pbtxt", "pets_network/configs/tensorrt.pbtxt",
        "pets_network/configs/onnxruntime.pbtxt", "pets_network/1/model.py", "pets_network/1/model.onnx",
        "pets_network/labels.txt", "pets_postprocess/config.pbtxt", "pets_postprocess/labels.txt",
        "pets_postprocess/1/model.py", "preprocess/config.pbtxt", "preprocess/configs/gpu.pbtxt",
    } <= files  # fmt: skip
    for model in ("pets_network", "pets_postprocess"):
        config = as_json(read_config(repository / model / "config.pbtxt"))
        top = TopK.from_config(config, repository / model, classes_of="logits" if "network" in model else "LOGITS")
        assert top.labels.names == ("cat", "dog", "bird") and top.k == 2
    trt = read_config(repository / "pets_network" / "configs" / "tensorrt.pbtxt")
    assert (trt.platform, trt.input[0].name, list(trt.input[0].dims), trt.output[0].name) == (
        "tensorrt_plan", "images", [3, 224, 224], "scores")  # fmt: skip
    steps = read_config(repository / "pets" / "configs" / "tensorrt.pbtxt").ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocess", "pets_network", "pets_postprocess"]
    assert dict(steps[1].input_map) == {"images": "pets.pixels"} and dict(steps[1].output_map) == {
        "scores": "pets.logits"
    }
    ort = read_config(repository / "pets_network" / "configs" / "onnxruntime.pbtxt")
    profile = ort.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    assert profile["trt_profile_max_shapes"] == "images:256x3x224x224"


def test_an_fp16_variant_beside_the_onnx_ships_and_the_gpu_runs_it(repository, tmp_path):
    onnx = onnx_network(tmp_path / "model.onnx")
    onnx_network(tmp_path / "model.fp16.onnx")
    add(plan(Request("half", onnx, repository)))
    assert (repository / "half_network" / "1" / "model.fp16.onnx").is_file()
    assert (
        read_config(repository / "half_network" / "configs" / "gpu.pbtxt").parameters["precision"].string_value
        == "fp16"
    )


def test_a_new_repository_is_a_copy_of_the_shipped_one_with_the_network(repository, tmp_path, monkeypatch):
    from tritonprep.repository import checks

    monkeypatch.setattr(checks, "shipped_repository", lambda: repository)
    (repository / "classifier" / "1" / "model.plan").write_bytes(b"an engine of another GPU")
    onnx = onnx_network(tmp_path / "net.onnx", width=64)
    new = tmp_path / "fresh" / "models"
    written = add(plan(Request("vectors", onnx, new, kind="embedder")))
    assert written.copied_from == repository and written.repository == new
    assert {p.name for p in new.iterdir()} == {p.name for p in repository.iterdir()} | {"vectors", "vectors_network"}
    assert not (new / "classifier" / "1" / "model.plan").exists()  # engines are per GPU: not copied
    assert (new / "preprocess" / "configs" / "onnxruntime.pbtxt").is_symlink()
    assert [p.name for p in new.parent.iterdir()] == ["models"]  # no staging folder left
    ensemble = read_config(new / "vectors" / "config.pbtxt")
    assert [o.name for o in ensemble.output] == ["EMBEDDING", "ORIGINAL_SIZE", "DECODER", "VECTORS_PIXELS_SCALE",
                                                 "VECTORS_PIXELS_PADDING"]  # fmt: skip
    assert list(ensemble.output[0].dims) == [64]
    assert (
        not (new / "vectors_postprocess").exists()
        and not (new / "vectors_network" / "configs" / "tensorrt.pbtxt").exists()
    )
