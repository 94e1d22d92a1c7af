"""Engine builds without TensorRT: build options, cache keys, atomic writes, build-or-reuse, the platform
queries (against fakes: TensorRT cannot be installed here). The builders themselves and
scripts/build_engine.py: tests/unit/test_build_engine_builders.py."""

from __future__ import annotations

import ctypes
import stat
import threading
import types

import pytest

from tests.unit.engine_fakes import (
    CLASSIFIER,
    DIMS,
    H100,
    L4,
    FakeBuilder,
    SlowBuilder,
)
from tritonprep.classifier import builders as trt_builders
from tritonprep.classifier import engines as trt_engine
from tritonprep.classifier.builders import (
    decode_tensorrt_version,
)
from tritonprep.classifier.engines import (
    BuildOptions,
    EngineBuildError,
    Platform,
    build_or_reuse,
    engine_key,
    key_path,
    needs_build,
    network_input,
    read_key,
    timing_cache_key,
    write_atomically,
    write_key,
)
from tritonprep.errors import ConfigError, RuntimeUnavailable


# ------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_batch": 0},
        {"min_batch": 8, "opt_batch": 4},
        {"opt_batch": 512, "max_batch": 256},
        {"workspace_mib": 32},
        {"input_name": ""},
        {"input_name": "in:put"},
        {"input_dims": (3, 0, 224)},
        {"input_dims": ()},
    ],
)
def test_build_options_reject_inconsistent_values(kwargs):
    with pytest.raises(ConfigError):
        BuildOptions(**{"input_dims": DIMS, **kwargs})


def test_build_options_defaults_match_the_classifier_config():
    o = BuildOptions(DIMS)
    assert (o.fp16, o.min_batch, o.opt_batch, o.max_batch) == (True, 1, 64, 256)
    assert o.input_name == "input" and o.shape(256) == (256, *DIMS)
    assert BuildOptions(input_dims=[3, 224, 224]).input_dims == (3, 224, 224)  # normalized to a tuple
    with pytest.raises(TypeError):
        BuildOptions()  # the dims come from the classifier config, never from a default here


def test_network_input_is_read_from_the_classifier_configs():
    for name in ("config.pbtxt", "configs/tensorrt.pbtxt", "configs/onnxruntime.pbtxt"):
        assert network_input(CLASSIFIER / name) == ("input", DIMS), name
    with pytest.raises(ConfigError, match="declares no input"):
        network_input(CLASSIFIER.parent / "classify" / "1" / ".gitkeep")


# ------------------------------------------------------------------------------ keys
def test_engine_key_survives_a_round_trip_through_the_key_file(tmp_path):
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"x")
    key = engine_key("abc", H100, BuildOptions(DIMS), "trtexec")
    write_key(plan, key)
    assert read_key(plan) == key and not needs_build(plan, key)
    assert key["input_dims"] == [3, 224, 224] and key["gpu_name"] == H100.gpu_name and key["builder"] == "trtexec"


@pytest.mark.parametrize(
    "change",
    [
        {"onnx_sha256": "def"},
        {"platform": Platform("10.12.0", H100.gpu_name, "9.0")},
        {"platform": L4},
        {"options": BuildOptions(DIMS, fp16=False)},
        {"options": BuildOptions(DIMS, max_batch=128)},
        {"options": BuildOptions(DIMS, opt_batch=32)},
        {"builder": "tensorrt-python"},
    ],
    ids=["onnx", "tensorrt", "gpu", "fp16", "max-batch", "opt-batch", "builder"],
)
def test_any_change_of_onnx_platform_options_or_builder_changes_the_key(tmp_path, change):
    base = {"onnx_sha256": "abc", "platform": H100, "options": BuildOptions(DIMS), "builder": "trtexec"}
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"x")
    write_key(plan, engine_key(**base))
    changed = engine_key(**{**base, **change})
    assert changed != engine_key(**base) and needs_build(plan, changed)


def test_read_key_is_none_without_plan_without_key_or_with_a_bad_key(tmp_path):
    plan = tmp_path / "model.plan"
    assert read_key(plan) is None  # neither
    key_path(plan).write_text("{}")
    assert read_key(plan) is None  # key without plan
    plan.write_bytes(b"x")
    key_path(plan).unlink()
    assert read_key(plan) is None and needs_build(plan, {"a": 1})  # plan without key
    for junk in ("{not json", "[1, 2]", ""):
        key_path(plan).write_text(junk)
        assert read_key(plan) is None


def test_write_atomically_writes_readable_files_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "deep" / "model.plan"
    write_atomically(target, b"engine")
    assert target.read_bytes() == b"engine"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # Triton may run as another user
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.plan"]


def test_write_atomically_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "model.plan"
    target.write_bytes(b"old")

    def fail(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(trt_engine.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["model.plan"]


# ------------------------------------------------------------------------------ build_or_reuse
def test_build_or_reuse_builds_once_and_rebuilds_only_on_change(tmp_path, onnx):
    plan, builder = tmp_path / "repo" / "model.plan", FakeBuilder()
    opts = BuildOptions(DIMS)
    assert build_or_reuse(onnx, plan, opts, builder=builder, platform=H100) is True
    assert plan.read_bytes() == b"plan:onnx bytes v1" and read_key(plan)["onnx_sha256"]
    assert build_or_reuse(onnx, plan, opts, builder=builder, platform=H100) is False  # skipped
    assert builder.builds == 1
    assert build_or_reuse(onnx, plan, opts, builder=builder, platform=L4) is True  # another GPU
    assert build_or_reuse(onnx, plan, BuildOptions(DIMS, fp16=False), builder=builder, platform=L4) is True
    onnx.write_bytes(b"onnx bytes v2")  # a new export
    assert build_or_reuse(onnx, plan, BuildOptions(DIMS, fp16=False), builder=builder, platform=L4) is True
    assert plan.read_bytes() == b"plan:onnx bytes v2"
    assert build_or_reuse(onnx, plan, BuildOptions(DIMS, fp16=False), builder=builder, platform=L4, force=True) is True
    assert builder.builds == 5


def test_an_interrupted_build_leaves_no_key_so_the_next_run_rebuilds(tmp_path, onnx):
    plan = tmp_path / "model.plan"
    build_or_reuse(onnx, plan, BuildOptions(DIMS), builder=FakeBuilder(), platform=H100)
    onnx.write_bytes(b"onnx bytes v2")
    with pytest.raises(EngineBuildError):
        build_or_reuse(onnx, plan, BuildOptions(DIMS), builder=FakeBuilder(fail=True), platform=H100)
    assert not key_path(plan).exists()  # the old plan stays, but is no longer trusted
    onnx.write_bytes(b"onnx bytes v1")  # even reverting to the old ONNX rebuilds
    again = FakeBuilder()
    assert build_or_reuse(onnx, plan, BuildOptions(DIMS), builder=again, platform=H100) is True and again.builds == 1


def test_timing_cache_is_kept_for_the_same_platform_and_discarded_for_another(tmp_path, onnx):
    plan, cache = tmp_path / "model.plan", tmp_path / "timing.cache"
    builder = FakeBuilder()
    build_or_reuse(onnx, plan, BuildOptions(DIMS), builder=builder, platform=H100, timing_cache=cache)
    assert read_key(cache) == timing_cache_key(H100, "fake")
    seen: list[bytes | None] = []
    original = builder.build

    def spy(onnx_path, plan_path, options, *, timing_cache=None, device_id=0):
        seen.append(timing_cache.read_bytes() if timing_cache.exists() else None)
        original(onnx_path, plan_path, options, timing_cache=timing_cache, device_id=device_id)

    builder.build = spy
    build_or_reuse(onnx, plan, BuildOptions(DIMS, fp16=False), builder=builder, platform=H100, timing_cache=cache)
    build_or_reuse(onnx, plan, BuildOptions(DIMS, fp16=False), builder=builder, platform=L4, timing_cache=cache)
    assert seen == [b"cache 1", None]  # reused on the H100, dropped before building for the L4
    assert read_key(cache) == timing_cache_key(L4, "fake")


def test_build_or_reuse_explains_a_missing_onnx(tmp_path):
    with pytest.raises(ConfigError, match="make model"):
        build_or_reuse(
            tmp_path / "missing.onnx", tmp_path / "model.plan", BuildOptions(DIMS), builder=FakeBuilder(), platform=H100
        )


# ------------------------------------------------------------------------------ platform queries
class FakeLibcuda:
    """The five driver calls query_gpu makes, with ctypes-style out-parameters."""

    def __init__(self, name: bytes = b"NVIDIA H100 80GB HBM3", cc=(9, 0), count: int = 1, fail_init: int = 0):
        self.name, self.cc, self.count, self.fail_init = name, cc, count, fail_init

    def cuInit(self, flags):
        return self.fail_init

    def cuDeviceGetCount(self, out):
        out._obj.value = self.count
        return 0

    def cuDeviceGet(self, out, ordinal):
        out._obj.value = ordinal
        return 0

    def cuDeviceGetName(self, buf, size, dev):
        ctypes.memmove(buf, self.name + b"\0", len(self.name) + 1)
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        out._obj.value = {75: self.cc[0], 76: self.cc[1]}[attr]
        return 0


def test_query_gpu_reads_name_and_compute_capability_from_the_driver(monkeypatch):
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: FakeLibcuda())
    assert trt_builders.query_gpu(0) == ("NVIDIA H100 80GB HBM3", "9.0")
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: FakeLibcuda(count=1))
    with pytest.raises(RuntimeUnavailable, match="GPU 1 does not exist: 1 visible"):
        trt_builders.query_gpu(1)
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: FakeLibcuda(fail_init=100))
    with pytest.raises(RuntimeUnavailable, match="cuInit failed with CUresult 100"):
        trt_builders.query_gpu(0)
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: None)
    with pytest.raises(RuntimeUnavailable, match="no NVIDIA driver"):
        trt_builders.query_gpu(0)


@pytest.mark.parametrize(
    "number, text",
    [
        (101100, "10.11.0"),
        (100300, "10.3.0"),
        (101303, "10.13.3"),
        (110100, "11.1.0"),
        (8601, "8.6.1"),
        (8402, "8.4.2"),
    ],
)
def test_decode_tensorrt_version(number, text):
    assert decode_tensorrt_version(number) == text


def test_libnvinfer_version_calls_get_infer_lib_version(monkeypatch):
    lib = types.SimpleNamespace(getInferLibVersion=types.SimpleNamespace())
    lib.getInferLibVersion = type("Fn", (), {"__call__": lambda self: 101100})()
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: lib)
    assert trt_builders.libnvinfer_version() == "10.11.0"
    monkeypatch.setattr(trt_builders, "_load_library", lambda names: None)
    with pytest.raises(RuntimeUnavailable, match="libnvinfer"):
        trt_builders.libnvinfer_version()
    with pytest.raises(ValueError):
        decode_tensorrt_version(0)


def test_instances_loading_together_build_the_engine_once(tmp_path, onnx):
    """Two instances of one model load in parallel: the second waits for the first's build and reuses it."""
    builder, plan, opts = SlowBuilder(), tmp_path / "model.gpu0.plan", BuildOptions(DIMS)
    results: list[bool] = []

    def load() -> None:
        results.append(build_or_reuse(onnx, plan, opts, builder=builder, platform=H100))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True] and builder.builds == 1
