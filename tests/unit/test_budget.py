"""The GPU memory budget (tritonprep.launcher.budget, pure) and the served copy of a repository that carries its
choices (tritonprep.launcher.served): no GPU, no Triton; the copy served by a real tritonserver is in
tests/e2e/test_budget.py."""

from __future__ import annotations

import shutil
from dataclasses import replace
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
#: the shipped GPU configs' models as the budget sees them (configs/gpu.pbtxt)
SHIPPED = [
    Demand("classifier", 2, {64: 2200, 32: 1700, 8: 1200}, (8, 64)),
    Demand("classify_fused", 1, {64: 2400, 32: 1900, 8: 1500}, (1, 64)),
    Demand("embedder", 1, {64: 2400, 32: 1800, 8: 1300}, (8, 64)),
    Demand("preprocess", 4, {None: 900}),
]
#: the same with four classify_fused instances (the counts of stage 3): more than a 12 GB budget holds
WIDE = [replace(d, count=4) if d.model == "classify_fused" else d for d in SHIPPED]
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
    for bad in ("", "lots", "64:", "0", "64:0", "-8:100", "900,64:100"):
        with pytest.raises(ServerError, match="classifier: gpu_memory_mb"):
            parse_gpu_memory(bad, "classifier")


def test_the_configs_counts_where_they_fit():
    chosen = plan(SHIPPED, 77000, FIXED)  # an H100
    assert [(c.model, c.count, c.gpu_memory_mb) for c in chosen.choices] == [
        ("classifier", 2, 2200),
        ("classify_fused", 1, 2400),
        ("embedder", 1, 2400),
        ("preprocess", 4, 900),
    ]
    assert chosen.used_mb == FIXED + 4400 + 2400 + 2400 + 3600
    assert not any(c.changed for c in chosen.choices)
    assert chosen.choice("classifier").buckets == (8, 64)  # type: ignore[union-attr]
    capped = plan([Demand("embedder", 1, {64: 2400}, (1, 2, 4, 8, 16, 32, 64, 128, 256))], 77000, FIXED)
    assert capped.choices[0].buckets == (1, 2, 4, 8, 16, 32, 64)  # at most the largest bucket it declares


def test_counts_go_down_fairly_largest_consumers_first():
    # 21512 MiB asked: classify_fused (9600) gives until it is no longer the largest, then the classifier, ...
    chosen = plan(WIDE, 12000, FIXED)
    counts = {c.model: c.count for c in chosen.choices}
    assert counts == {"classifier": 1, "classify_fused": 1, "embedder": 1, "preprocess": 3}, chosen.describe()
    assert chosen.used_mb == FIXED + 2200 + 2400 + 2400 + 2700 <= 12000
    assert all(c.buckets == c.asked_buckets for c in chosen.choices)  # buckets only once counts are at 1
    assert chosen.choice("preprocess").changed and not chosen.choice("embedder").changed  # type: ignore[union-attr]


def test_then_the_largest_bucket_then_a_refusal_naming_the_models():
    one_each = FIXED + 2200 + 2400 + 2400 + 900
    chosen = plan(WIDE, one_each - 100, FIXED)
    assert [c.count for c in chosen.choices] == [1, 1, 1, 1]
    embedder = chosen.choice("embedder")  # the largest instances (a tie with classify_fused, by name)
    assert embedder is not None and embedder.buckets == (8, 32) and embedder.gpu_memory_mb == 1800
    assert chosen.choice("classify_fused").buckets == (1, 64)  # type: ignore[union-attr]
    with pytest.raises(ServerError) as refused:
        plan(WIDE, 6000, FIXED)  # even the smallest buckets need 6412 MiB
    message = str(refused.value)
    assert "budget of 6000 MiB per GPU cannot hold one instance of each GPU model" in message
    for part in ("tritonserver 1512 MiB", "preprocess 1x900 MiB", "classifier 1x1200 MiB", "embedder 1x1300 MiB"):
        assert part in message, message
    assert "classify_fused 1x1500 MiB" in message and "= 6412 MiB" in message and "--gpu-memory-budget" in message


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
    served, chosen, _ = serve_copy(repo, tmp_path / "served", "gpu", 12000, FIXED, 1024)
    assert chosen is not None
    assert sorted(p.name for p in served.iterdir()) == sorted(p.name for p in repo.iterdir())
    # neither budgeted nor limited by the admission: linked as it is
    assert (served / "postprocess").is_symlink() and (served / "postprocess").resolve() == repo / "postprocess"
    pre = served / "preprocess"
    assert not pre.is_symlink() and (pre / "1").is_symlink() and (pre / "config.pbtxt").is_symlink()
    assert not (pre / "configs" / "gpu.pbtxt").is_symlink()
    assert (pre / "configs" / "tensorrt.pbtxt").resolve() == (repo / "preprocess" / "configs" / "tensorrt.pbtxt")
    config = read(pre / "configs" / "gpu.pbtxt")
    assert config.instance_group[0].count == 3 and config.parameters["gpu_memory_mb"].string_value == "900"
    fused = read(served / "classify_fused" / "configs" / "gpu.pbtxt")
    assert fused.instance_group[0].count == 1 and fused.parameters["gpu_memory_mb"].string_value == "2400"
    assert fused.parameters["network.batch_buckets"].string_value == "1,64"
    assert fused.parameters["network.model"].string_value == "classifier/1/model.onnx"
    # classify_fused finds the network where Triton tells it its folder is: <served>/classify_fused
    assert (served / "classify_fused").parent.joinpath("classifier/1/model.onnx").read_bytes() == b"onnx"
    embedder = read(served / "embedder" / "configs" / "gpu.pbtxt")
    assert embedder.parameters["gpu_memory_mb"].string_value == "2400"
    original = read(repo / "preprocess" / "configs" / "gpu.pbtxt")
    original.instance_group[0].count = 3
    original.max_batch_size = 64  # the admission's: requests of at most max_images_per_request
    assert config == original  # nothing else changed
    assert (pre / "configs" / "gpu.pbtxt").read_text().startswith("# Served by tritonprep's launcher")
    assert chosen.used_mb <= 12000


@pytest.mark.parametrize(("buckets", "fused"), [((8, 64), "1,64"), ((8, 32), "1,"), ((8,), "1,")])
def test_the_fused_buckets_follow_the_buckets_the_budget_chose(buckets, fused):
    from tritonprep.classifier.runtimes import RuntimeOptions
    from tritonprep.launcher.budget import Choice
    from tritonprep.launcher.served import ModelFile, apply

    mf = ModelFile("classifier", Path("configs/gpu.pbtxt"), read(REPO / "classifier" / "configs" / "gpu.pbtxt"))
    assert mf.config.parameters["fuse_conv_bias"].string_value == "1,64"  # as shipped: the late 1 and the 64
    apply(mf, Choice("classifier", 1, buckets, 1500, 2, (8, 64)))
    params = {k: v.string_value for k, v in mf.config.parameters.items()}
    assert params["fuse_conv_bias"] == fused and params["batch_buckets"] == ",".join(map(str, buckets))
    runtime = {k: v for k, v in params.items() if k not in ("network_turns", "FORCE_CPU_ONLY_INPUT_TENSORS", "labels")}
    RuntimeOptions.from_parameters(runtime, 256)  # the served config loads


@pytest.mark.parametrize(
    ("buckets", "late", "fuse", "kept_late", "kept_fuse"),
    [((8, 64), "1", "1,64", "1", "1,64"), ((8, 32), "1,16", "1,64", "1,16", "1,"), ((8,), "1,16", "16", "1", "false")],
)
def test_the_late_buckets_follow_the_buckets_the_budget_chose(buckets, late, fuse, kept_late, kept_fuse):
    from tritonprep.classifier.runtimes import RuntimeOptions
    from tritonprep.launcher.budget import Choice
    from tritonprep.launcher.served import ModelFile, apply

    mf = ModelFile("classifier", Path("configs/gpu.pbtxt"), read(REPO / "classifier" / "configs" / "gpu.pbtxt"))
    assert mf.config.parameters["late_batch_buckets"].string_value == "1"  # as shipped
    mf.config.parameters["late_batch_buckets"].string_value = late
    mf.config.parameters["fuse_conv_bias"].string_value = fuse
    apply(mf, Choice("classifier", 1, buckets, 1500, 2, (8, 64)))
    params = {k: v.string_value for k, v in mf.config.parameters.items()}
    assert (params["late_batch_buckets"], params["fuse_conv_bias"]) == (kept_late, kept_fuse)
    runtime = {k: v for k, v in params.items() if k not in ("network_turns", "FORCE_CPU_ONLY_INPUT_TENSORS", "labels")}
    RuntimeOptions.from_parameters(runtime, 256)  # the served config loads


def test_a_budget_that_cannot_fit_refuses_before_anything_is_written(tmp_path):
    with pytest.raises(ServerError, match="cannot hold one instance of each GPU model"):
        serve_copy(gpu_repository(tmp_path), tmp_path / "served", "gpu", 4000, FIXED, 1024)
    assert not (tmp_path / "served").exists()


def test_on_the_cpu_configs_each_declaring_model_is_one_instance_and_cpu_models_are_not_planned(tmp_path):
    models = read_models(gpu_repository(tmp_path), None)  # every config.pbtxt: KIND_AUTO, or postprocess KIND_CPU
    demands = {d.model: d.count for d in map(demand_of, models) if d is not None}
    assert demands == {"classifier": 1, "classify_fused": 1, "embedder": 1, "preprocess": 1}


@pytest.mark.parametrize(
    ("model", "config"),
    [
        ("preprocess", "configs/gpu.pbtxt"),
        ("classifier", "configs/gpu.pbtxt"),
        ("classify_fused", "configs/gpu.pbtxt"),
        ("embedder", "config.pbtxt"),
    ],
)
def test_the_models_take_the_value_the_launcher_serves(model, config):
    """The served copy writes one number (the MiB of one instance at its chosen buckets): each model's parameter
    parsing takes it, as it takes the shipped declaration."""
    from google.protobuf.json_format import MessageToDict

    from tritonprep.classifier.runtimes import RuntimeOptions
    from tritonprep.launcher.served import GPU_MEMORY_PARAM
    from tritonprep.pipeline.fused import split_parameters
    from tritonprep.spec import PreprocessConfig
    from tritonprep.triton import turns

    parsed = read(REPO / model / config)
    for value in (parsed.parameters[GPU_MEMORY_PARAM].string_value, "1500"):
        parsed.parameters[GPU_MEMORY_PARAM].string_value = value
        as_json = MessageToDict(parsed, preserving_proto_field_name=True)
        for o in as_json.get("output", []):
            o["dims"] = [int(x) for x in o.get("dims", [])]
        params = {k: v["string_value"] for k, v in as_json["parameters"].items()}
        if model == "preprocess":
            PreprocessConfig.from_model_config(as_json)
        elif model == "classify_fused":
            prep, net = split_parameters(params)
            PreprocessConfig.from_parameters(prep, ["PIXELS"])
            RuntimeOptions.from_parameters(
                {k: v for k, v in net.items() if k not in ("model", "labels")}, parsed.max_batch_size
            )
        else:
            params.pop(turns.PARAMETER, None)  # the classifier model reads these itself (ClassifierModel)
            params.pop("labels", None)
            RuntimeOptions.from_parameters(params, parsed.max_batch_size)
