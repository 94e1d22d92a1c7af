"""What a GPU instance reads about its memory and start-up, checked without a GPU: ``gpu_memory_mb``, the
ONNX Runtime CUDA EP options, the arena caps spread over the bucket sessions, the start-up cache folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tritonprep import cache
from tritonprep.classifier.ort_options import (
    MIN_SESSION_MB,
    SESSION_OVERHEAD_MB,
    CudaEpOptions,
    OptimizedModels,
    session_caps_mb,
)
from tritonprep.classifier.runtimes import RuntimeOptions
from tritonprep.errors import ConfigError
from tritonprep.memory import CUDA_CONTEXT_MB, instance_budget_mb, parse, working_mb


@pytest.mark.parametrize(
    ("text", "buckets", "mib"),
    [
        ("900", (), 900),
        ("900", (1, 8, 64), 900),
        ("64:2200,32:1600", (1, 8, 32, 64), 2200),
        ("64:2200,32:1600", (1, 8, 32), 1600),
        ("64:2200,32:1600", (1, 8, 16), 1600),  # no entry for 16: the next larger bucket's
        ("64:2200,32:1600", (1, 128), 2200),  # larger than any entry: the largest
        ("", (1, 8), None),
        (None, (1, 8), None),
    ],
)
def test_an_instance_takes_the_entry_of_its_largest_bucket(text, buckets, mib):
    assert instance_budget_mb(text, buckets) == mib


@pytest.mark.parametrize("text", ["lots", "64:", "64:2200,900", "0", "64:-1", "0:100", ":"])
def test_a_malformed_budget_says_both_forms(text):
    with pytest.raises(ConfigError, match="gpu_memory_mb"):
        parse(text)


def test_a_budget_below_the_context_names_the_least_that_works():
    assert working_mb(1000, 600, "x") == 400
    with pytest.raises(ConfigError, match="at least 664"):
        working_mb(620, 600, "the batches")


def test_ep_options_default_to_less_memory_and_a_faster_start_than_onnx_runtimes_defaults():
    o = CudaEpOptions()
    assert o.provider() == {
        "cudnn_conv_algo_search": "HEURISTIC",
        "cudnn_conv_use_max_workspace": "0",
        "arena_extend_strategy": "kSameAsRequested",
        "fuse_conv_bias": "0",
    }
    exhaustive = CudaEpOptions("exhaustive", True, "next_power_of_two").provider()
    assert (
        exhaustive["cudnn_conv_algo_search"] == "EXHAUSTIVE"
        and exhaustive["arena_extend_strategy"] == "kNextPowerOfTwo"
    )
    assert exhaustive["cudnn_conv_use_max_workspace"] == "1" and exhaustive["fuse_conv_bias"] == "0"
    fused = CudaEpOptions(fuse_conv_bias=True)
    assert fused.provider()["fuse_conv_bias"] == "1" and fused.describe().endswith("/fused-bias")
    some = CudaEpOptions(fuse_conv_bias=(64,))  # the large bucket only: the small one's first run stays short
    assert [some.provider(b)["fuse_conv_bias"] for b in (8, 64)] == ["0", "1"]
    assert some.describe().endswith("/fused-bias-b64")
    with pytest.raises(ConfigError, match="cudnn_conv_algo_search"):
        CudaEpOptions("fastest")


def test_runtime_parameters_carry_the_ep_options_and_the_budget():
    o = RuntimeOptions.from_parameters(
        {
            "batch_buckets": "1,8,32,64",
            "gpu_memory_mb": "64:2200,32:1600",
            "cudnn_conv_algo_search": "EXHAUSTIVE",
            "cudnn_conv_use_max_workspace": "true",
            "arena_extend_strategy": "next_power_of_two",
            "fuse_conv_bias": "true",
        },
        256,
    )
    assert o.ep == CudaEpOptions("exhaustive", True, "next_power_of_two", True)
    assert o.budget_mb == 2200
    defaults = RuntimeOptions.from_parameters({}, 256)
    assert defaults.ep == CudaEpOptions() and defaults.budget_mb is None
    with pytest.raises(ConfigError, match="gpu_memory_mb"):
        RuntimeOptions.from_parameters({"gpu_memory_mb": "much"}, 256)
    with pytest.raises(ConfigError, match="arena_extend_strategy"):
        RuntimeOptions.from_parameters({"arena_extend_strategy": "grow"}, 256)


@pytest.mark.parametrize(
    ("text", "fused"), [("true", True), ("FALSE", False), ("64", (64,)), ("8, 64", (8, 64)), ("", False), (" ", False)]
)
def test_fuse_conv_bias_is_on_off_or_the_buckets_that_fuse(text, fused):
    o = RuntimeOptions.from_parameters({"batch_buckets": "8,64", "fuse_conv_bias": text}, 256)
    assert o.ep.fuse_conv_bias == fused
    want = [True, True] if fused is True else [b in (fused or ()) for b in (8, 64)]
    assert [o.ep.fuses(b) for b in (8, 64)] == want


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("32", "neither batch_buckets"),
        ("yes", "true, false or batch bucket sizes"),
        ("1", "write true or false"),
        ("0", "write true or false"),
    ],
)
def test_fuse_conv_bias_refuses_what_it_cannot_apply(text, error):
    with pytest.raises(ConfigError, match=error):
        RuntimeOptions.from_parameters({"batch_buckets": "8,64", "fuse_conv_bias": text}, 256)


def test_a_budget_is_spread_over_the_bucket_sessions_larger_buckets_getting_more():
    buckets = (1, 8, 32, 64)
    caps = session_caps_mb(buckets, budget_mb=2200, io_mb=37.0)
    left = 2200 - CUDA_CONTEXT_MB - 37 - SESSION_OVERHEAD_MB * len(buckets)
    assert caps == sorted(caps) and sum(caps) <= left and sum(caps) >= left - len(buckets)
    assert min(caps) >= MIN_SESSION_MB
    assert session_caps_mb(buckets, budget_mb=None) == [0, 0, 0, 0]  # no budget, no caps
    assert session_caps_mb(buckets, budget_mb=2200, explicit_mb=300) == [300] * 4  # gpu_mem_limit_mb wins
    # what classify_fused's preprocessing holds comes off the network's share
    assert sum(session_caps_mb(buckets, budget_mb=2200, shared_mb=400)) < sum(caps)
    with pytest.raises(ConfigError, match="gpu_memory_mb=800"):
        session_caps_mb(buckets, budget_mb=800)


def test_the_cache_folder_follows_the_environment(tmp_path):
    assert cache.cache_root({cache.ENV: str(tmp_path / "c")}) == tmp_path / "c"
    assert (tmp_path / "c").is_dir()
    assert cache.cache_root({cache.ENV: "off"}) is None
    assert cache.cache_root({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "tritonprep"
    assert cache.cache_root({"HOME": str(tmp_path / "h")}) == tmp_path / "h" / ".cache" / "tritonprep"
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cache.cache_root({cache.ENV: str(blocker / "sub")}) is None  # cannot be created: no cache, no error


def test_optimized_models_are_keyed_by_what_shaped_them_and_appear_whole(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"network")
    models = OptimizedModels.open(onnx, "1.31.1", "NVIDIA H100", 9, 0, True)
    other_gpu = OptimizedModels.open(onnx, "1.31.1", "NVIDIA L4", 8, 9, True)
    assert models.path(8) != models.path(64) and models.path(8) != other_gpu.path(8)
    onnx.write_bytes(b"another network")
    assert OptimizedModels.open(onnx, "1.31.1", "NVIDIA H100", 9, 0, True).path(8) != models.path(8)
    saved = models.saving(8)
    assert saved.parent == models.path(8).parent and not models.path(8).exists()
    saved.write_bytes(b"optimized")
    models.keep(saved, 8)
    assert models.path(8).read_bytes() == b"optimized" and not saved.exists()
    empty = models.saving(64)  # ORT saved nothing (the session failed): nothing is kept
    models.keep(empty, 64)
    assert not models.path(64).exists() and not empty.exists()
    models.refuse(8)  # ONNX Runtime could not load it: gone, and never kept again for this key
    assert not models.path(8).exists() and models.refused(8) and not models.refused(64)
    monkeypatch.setenv(cache.ENV, "off")
    assert OptimizedModels.open(onnx, "1.31.1") is None


def test_cupy_kernels_are_cached_in_the_cache_folder_unless_cupy_is_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    monkeypatch.setenv("CUPY_CACHE_DIR", "")  # restored (unset) after the test
    assert cache.use_for_cupy() == tmp_path / "cupy"
    assert os.environ["CUPY_CACHE_DIR"] == str(tmp_path / "cupy")
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.use_for_cupy() == tmp_path / "mine"


def test_the_cuda_drivers_compute_cache_goes_into_the_cache_folder_unless_the_environment_names_one(tmp_path):
    env = {cache.ENV: str(tmp_path)}
    assert cache.use_for_cuda(env) == tmp_path / "cuda" and (tmp_path / "cuda").is_dir()
    assert env[cache.CUDA_CACHE_ENV] == str(tmp_path / "cuda")
    mine = {cache.ENV: str(tmp_path), cache.CUDA_CACHE_ENV: "/elsewhere"}
    assert cache.use_for_cuda(mine) == Path("/elsewhere") and mine[cache.CUDA_CACHE_ENV] == "/elsewhere"
    off = {cache.ENV: "off"}
    assert cache.use_for_cuda(off) is None and cache.CUDA_CACHE_ENV not in off  # the driver's default then


def test_sessions_are_created_with_onnx_runtimes_default_log_at_error_and_it_is_restored_after():
    import types

    from tritonprep.classifier.ort_options import ORT_ERROR, ORT_WARNING, quiet_provider_lookup

    seen = []
    ort = types.SimpleNamespace(set_default_logger_severity=seen.append)
    with quiet_provider_lookup(ort):
        assert seen == [ORT_ERROR]
    assert seen == [ORT_ERROR, ORT_WARNING]
    with pytest.raises(RuntimeError), quiet_provider_lookup(ort):  # restored when the session fails too
        raise RuntimeError("CUDA failure")
    assert seen[-1] == ORT_WARNING
    with quiet_provider_lookup(types.SimpleNamespace()):  # an ONNX Runtime without the call: nothing to do
        pass


def test_the_gpu_decoders_formats_and_the_budget_are_model_wide_preprocess_parameters():
    from tritonprep.spec import DecoderOptions, PreprocessConfig

    config = PreprocessConfig.from_parameters({"gpu_formats": "jpeg", "gpu_memory_mb": "900"})
    assert config.decoding.gpu_formats == ("JPEG",) and config.gpu_memory_mb == "900"
    assert PreprocessConfig.from_parameters({}).decoding.gpu_formats == ("JPEG", "JPEG2000", "TIFF")
    with pytest.raises(ConfigError, match="gpu_formats"):
        DecoderOptions(gpu_formats=("PNG",))
    with pytest.raises(ConfigError, match="gpu_memory_mb"):
        PreprocessConfig.from_parameters({"gpu_memory_mb": "lots"})
    with pytest.raises(ConfigError, match="shared by all outputs"):
        PreprocessConfig.from_parameters({"PIXELS.gpu_memory_mb": "900"})
