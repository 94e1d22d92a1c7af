"""The GPU memory budget (tritonprep.launcher.budget, pure) and the served copy of a repository that carries its
choices (tritonprep.launcher.served): no GPU, no Triton; the copy served by a real tritonserver is in
tests/e2e/test_budget.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonprep.errors import ServerError
from tritonprep.launcher.budget import (
    Demand,
    auto_budget_mb,
    parse_budget,
    parse_gpu_memory,
    parse_size_mb,
    plan,
)
from tritonprep.launcher.served import demand_of, read_models, serve_copy

REPO = Path(__file__).resolve().parents[2] / "model_repository"
#: the shipped GPU configs, as the brief's provisional declarations give them
SHIPPED = [
    Demand("preprocess", 4, {None: 1800}),
    Demand("classifier", 2, {64: 1600, 32: 1200}, (1, 8, 32, 64)),
    Demand("classify_fused", 4, {64: 1800}, (1, 8, 32, 64)),
    Demand("embedder", 1, {64: 1600}, (1, 2, 4, 8, 16, 32, 64, 128, 256)),
]
FIXED = 1000 + 512


@pytest.mark.parametrize(
    ("text", "mb"), [("16G", 16384), ("16GiB", 16384), ("16gb", 16384), ("12000M", 12000), ("12000", 12000)]
)
def test_sizes(text, mb):
    assert parse_size_mb(text) == mb and parse_budget(text) == mb


def test_budget_words_and_bad_sizes():
    assert parse_budget("auto") == "auto" and parse_budget("OFF") == "off"
    for bad in ("lots", "16 X", "-1G", "0"):
        with pytest.raises(ServerError):
            parse_budget(bad)
    assert auto_budget_mb(81559) == 81559 - 4077  # 5 % of an H100's 80 GB
    assert auto_budget_mb(8000) == 8000 - 512  # at least 512 MiB


def test_declarations():
    assert parse_gpu_memory("1800") == {None: 1800}
    assert parse_gpu_memory("64:1600,32:1200") == {64: 1600, 32: 1200}
    for bad in ("", "lots", "64:", "0", "64:0", "-8:100"):
        with pytest.raises(ServerError, match="classifier: gpu_memory_mb must be"):
            parse_gpu_memory(bad, "classifier")


def test_the_configs_counts_where_they_fit():
    chosen = plan(SHIPPED, 77000, FIXED)  # an H100
    assert [(c.model, c.count, c.gpu_memory_mb) for c in chosen.choices] == [
        ("preprocess", 4, 1800),
        ("classifier", 2, 1600),
        ("classify_fused", 4, 1800),
        ("embedder", 1, 1600),
    ]
    assert chosen.used_mb == FIXED + 7200 + 3200 + 7200 + 1600
    assert [c.model for c in chosen.choices if c.changed] == ["embedder"]  # its buckets: capped, below
    embedder = chosen.choice("embedder")
    assert embedder is not None and embedder.buckets == (1, 2, 4, 8, 16, 32, 64)  # capped at what it declares
    assert chosen.choice("classifier").buckets == (1, 8, 32, 64)  # type: ignore[union-attr]


def test_counts_go_down_fairly_largest_consumers_first():
    # 20712 MiB asked; 16000 leaves room for 14488 MiB of instances
    chosen = plan(SHIPPED, 16000, FIXED)
    counts = {c.model: c.count for c in chosen.choices}
    # the two largest (7200 MiB each) give in turn: 5400 each, then one more (a tie; by name)
    assert counts == {"preprocess": 2, "classifier": 2, "classify_fused": 3, "embedder": 1}, chosen.describe()
    assert chosen.used_mb <= 16000
    assert all(c.buckets == c.asked_buckets for c in chosen.choices if c.model != "embedder")  # counts first
    assert chosen.choice("preprocess").changed and chosen.choice("classifier").count == 2  # type: ignore[union-attr]


def test_then_the_largest_bucket_then_a_refusal_naming_the_models():
    one_each = FIXED + 1800 + 1600 + 1800 + 1600
    chosen = plan(SHIPPED, one_each - 100, FIXED)
    assert [c.count for c in chosen.choices] == [1, 1, 1, 1]
    classifier = chosen.choice("classifier")
    assert classifier is not None and classifier.buckets == (1, 8, 32) and classifier.gpu_memory_mb == 1200
    with pytest.raises(ServerError) as refused:
        plan(SHIPPED, one_each - 500, FIXED)
    message = str(refused.value)
    assert f"budget of {one_each - 500} MiB per GPU cannot hold one instance of each GPU model" in message
    for part in ("tritonserver 1512 MiB", "preprocess 1x1800 MiB", "classifier 1x1200 MiB", "embedder 1x1600 MiB"):
        assert part in message, message
    assert "--gpu-memory-budget" in message


def test_pinned_counts_are_kept():
    demands = [Demand("a", 3, {None: 1000}, adjustable=False), Demand("b", 3, {None: 1000})]
    assert [c.count for c in plan(demands, 4500, 0).choices] == [3, 1]


# ---------------------------------------------------------------------- the served copy
def gpu_repository(tmp_path: Path) -> Path:
    """The shipped repository's configs (not its weights) with the GPU configs as they ship."""
    repo = tmp_path / "repo"
    for model in REPO.iterdir():
        if model.is_dir():
            ignore = shutil.ignore_patterns("*.onnx", "*.plan", "__pycache__")
            shutil.copytree(model, repo / model.name, symlinks=True, ignore=ignore)
    return repo


def test_the_shipped_gpu_configs_declare_their_gpu_memory(tmp_path):
    demands = {d.model: d for d in map(demand_of, read_models(gpu_repository(tmp_path), "gpu")) if d is not None}
    assert demands == {d.model: d for d in SHIPPED}


def read(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def test_the_served_copy_rewrites_the_chosen_configs_and_links_the_rest(tmp_path):
    repo = gpu_repository(tmp_path)
    (repo / "classifier" / "1" / "model.onnx").write_bytes(b"onnx")
    served, chosen = serve_copy(repo, tmp_path / "served", "gpu", 16000, FIXED)
    assert sorted(p.name for p in served.iterdir()) == sorted(p.name for p in repo.iterdir())
    for model in ("analyze", "classify", "postprocess"):  # not budgeted: linked as they are
        assert (served / model).is_symlink() and (served / model).resolve() == repo / model
    pre = served / "preprocess"
    assert not pre.is_symlink() and (pre / "1").is_symlink() and (pre / "config.pbtxt").is_symlink()
    assert not (pre / "configs" / "gpu.pbtxt").is_symlink()
    assert (pre / "configs" / "tensorrt.pbtxt").resolve() == (repo / "preprocess" / "configs" / "gpu.pbtxt")
    config = read(pre / "configs" / "gpu.pbtxt")
    assert config.instance_group[0].count == 2 and config.parameters["gpu_memory_mb"].string_value == "1800"
    fused = read(served / "classify_fused" / "configs" / "gpu.pbtxt")
    assert fused.instance_group[0].count == 3
    assert fused.parameters["network.batch_buckets"].string_value == "1,8,32,64"
    assert fused.parameters["network.model"].string_value == "classifier/1/model.onnx"
    # classify_fused finds the network where Triton tells it its folder is: <served>/classify_fused
    assert (served / "classify_fused").parent.joinpath("classifier/1/model.onnx").read_bytes() == b"onnx"
    embedder = read(served / "embedder" / "configs" / "gpu.pbtxt")
    assert embedder.parameters["batch_buckets"].string_value == "1,2,4,8,16,32,64"
    original = read(repo / "preprocess" / "configs" / "gpu.pbtxt")
    original.instance_group[0].count = 2
    assert config == original  # nothing else changed
    assert (pre / "configs" / "gpu.pbtxt").read_text().startswith("# Served by tritonprep's launcher")
    assert chosen.used_mb <= 16000


def test_a_budget_that_cannot_fit_refuses_before_anything_is_written(tmp_path):
    with pytest.raises(ServerError, match="cannot hold one instance of each GPU model"):
        serve_copy(gpu_repository(tmp_path), tmp_path / "served", "gpu", 4000, FIXED)
    assert not (tmp_path / "served").exists()


def test_without_declarations_or_on_cpu_configs_nothing_is_planned(tmp_path):
    models = read_models(gpu_repository(tmp_path), None)  # every config.pbtxt: CPU or KIND_AUTO, no declaration
    assert [d for d in map(demand_of, models) if d is not None] == []


def test_the_embedders_gpu_config_is_its_config_with_a_gpu_instance_and_a_declaration():
    default, gpu = read(REPO / "embedder" / "config.pbtxt"), read(REPO / "embedder" / "configs" / "gpu.pbtxt")
    assert [(g.count, g.kind) for g in gpu.instance_group] == [(1, model_config_pb2.ModelInstanceGroup.KIND_GPU)]
    assert gpu.parameters["gpu_memory_mb"].string_value == "64:1600"
    del gpu.parameters["gpu_memory_mb"]
    for cfg in (default, gpu):
        cfg.ClearField("instance_group")
    assert default == gpu


@pytest.mark.parametrize("model", ["preprocess", "classifier", "classify_fused", "embedder"])
def test_the_models_accept_the_declaration_they_ship_with(model):
    """gpu_memory_mb is the launcher's: each model's parameter parsing takes the GPU config that carries it."""
    from google.protobuf.json_format import MessageToDict

    from tritonprep.classifier.runtimes import RuntimeOptions
    from tritonprep.launcher.served import GPU_MEMORY_PARAM
    from tritonprep.parameters import LAUNCHER_PARAMETERS
    from tritonprep.pipeline.fused import split_parameters
    from tritonprep.spec import PreprocessConfig

    assert GPU_MEMORY_PARAM in LAUNCHER_PARAMETERS
    config = read(REPO / model / "configs" / "gpu.pbtxt")
    as_json = MessageToDict(config, preserving_proto_field_name=True)
    for o in as_json.get("output", []):
        o["dims"] = [int(x) for x in o.get("dims", [])]
    params = {k: v["string_value"] for k, v in as_json["parameters"].items()}
    assert GPU_MEMORY_PARAM in params
    if model == "preprocess":
        PreprocessConfig.from_model_config(as_json)
    elif model == "classify_fused":
        prep, net = split_parameters(params)
        PreprocessConfig.from_parameters(prep, ["PIXELS"])
        RuntimeOptions.from_parameters({k: v for k, v in net.items() if k != "model"}, config.max_batch_size)
    else:
        RuntimeOptions.from_parameters(params, config.max_batch_size)
