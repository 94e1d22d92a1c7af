"""Engine builds without TensorRT: cache keys, atomic writes, both builders against fakes, scripts/build_engine.py.

TensorRT cannot be installed here, so the builders run against stand-ins: a fake ``tensorrt``
module that records the Python-API calls, a fake ``trtexec`` (a shell script that writes the
engine file it is asked for), and fake ``libcuda``/``libnvinfer`` objects. The script itself
runs for real, as a user runs it, for the paths that need no GPU.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from tritonprep.classifier import builders as trt_builders
from tritonprep.classifier import engines as trt_engine
from tritonprep.classifier.builders import (
    INSTALL_HINT,
    PythonBuilder,
    TrtexecBuilder,
    decode_tensorrt_version,
    find_builder,
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

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_engine.py"
CLASSIFIER = ROOT / "model_repository" / "classifier"
DIMS = (3, 224, 224)  # EfficientNet-Lite0's input, as the classifier configs declare it
H100 = Platform("10.11.0", "NVIDIA H100 80GB HBM3", "9.0")
L4 = Platform("10.11.0", "NVIDIA L4", "8.9")


def load_script() -> types.ModuleType:
    loader = importlib.machinery.SourceFileLoader("build_engine_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture
def onnx(tmp_path: Path) -> Path:
    """An ONNX file in a classifier model folder, beside the configs that declare its input."""
    path = tmp_path / "classifier" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"onnx bytes v1")
    (path.parent.parent / "configs").mkdir()
    shutil.copy(CLASSIFIER / "configs" / "tensorrt.pbtxt", path.parent.parent / "configs")
    return path


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No tensorrt module, no trtexec on PATH or at NVIDIA's default path."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import raises ImportError
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(trt_builders, "TRTEXEC_DEFAULT", tmp_path / "no" / "trtexec")


class FakeBuilder:
    """Writes a plan whose bytes name the ONNX content; counts builds; can fail on demand."""

    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.builds = 0
        self.fail = fail

    def tensorrt_version(self) -> str:
        return "10.11.0"

    def build(self, onnx_path, plan_path, options, *, timing_cache=None, device_id=0):
        self.builds += 1
        if self.fail:
            raise EngineBuildError("boom")
        write_atomically(plan_path, b"plan:" + onnx_path.read_bytes())
        if timing_cache is not None:
            write_atomically(timing_cache, b"cache %d" % self.builds)


class SlowBuilder(FakeBuilder):
    """A build that takes a while, long enough for a second instance to start its own."""

    def build(self, onnx_path, plan_path, options, *, timing_cache=None, device_id=0):
        time.sleep(0.3)
        super().build(onnx_path, plan_path, options, timing_cache=timing_cache, device_id=device_id)


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


# ------------------------------------------------------------------------------ trtexec
FAKE_TRTEXEC = """#!/bin/sh
# stands in for trtexec: records its arguments, writes the engine it is asked for
printf '%s\\n' "$@" > "${0%/*}/args.txt"  # shell built-ins only: the tests may empty PATH
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v101100]"
for arg in "$@"; do
  case "$arg" in --saveEngine=*) out="${arg#--saveEngine=}" ;; esac
done
if [ -n "${FAKE_TRTEXEC_FAIL:-}" ]; then echo "[E] Error[4]: ITensor::getDimensions: oops" >&2; exit 1; fi
if [ -z "${FAKE_TRTEXEC_EMPTY:-}" ]; then printf 'serialized engine' > "$out"; fi
"""


@pytest.fixture
def fake_trtexec(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir()
    exe.write_text(FAKE_TRTEXEC)
    exe.chmod(0o755)
    return exe


def test_trtexec_command_has_nvidias_flags_for_a_dynamic_batch_fp16_build(tmp_path):
    cmd = TrtexecBuilder(Path("/usr/src/tensorrt/bin/trtexec")).command(
        Path("/m/model.onnx"),
        Path("/e/model.plan"),
        BuildOptions(DIMS),
        timing_cache=Path("/e/timing.cache"),
        device_id=1,
    )
    assert cmd == [
        "/usr/src/tensorrt/bin/trtexec",
        "--onnx=/m/model.onnx",
        "--saveEngine=/e/model.plan",
        "--minShapes=input:1x3x224x224",
        "--optShapes=input:64x3x224x224",
        "--maxShapes=input:256x3x224x224",
        "--memPoolSize=workspace:4096",
        "--device=1",
        "--skipInference",
        "--fp16",
        "--timingCacheFile=/e/timing.cache",
    ]
    small = BuildOptions(DIMS, fp16=False, opt_batch=8, max_batch=8)
    fp32 = TrtexecBuilder(Path("trtexec")).command(Path("m.onnx"), Path("p.plan"), small)
    assert "--fp16" not in fp32 and "--maxShapes=input:8x3x224x224" in fp32
    assert not any(a.startswith("--timingCacheFile") for a in fp32)


def test_trtexec_build_writes_the_plan_atomically(tmp_path, onnx, fake_trtexec):
    plan = tmp_path / "engines" / "model.plan"
    TrtexecBuilder(fake_trtexec).build(onnx, plan, BuildOptions(DIMS))
    assert plan.read_bytes() == b"serialized engine" and stat.S_IMODE(plan.stat().st_mode) == 0o644
    assert [p.name for p in plan.parent.iterdir()] == ["model.plan"]
    args = (fake_trtexec.parent / "args.txt").read_text().splitlines()
    assert f"--onnx={onnx}" in args and args[1].startswith(f"--saveEngine={plan.parent}/.model.plan.")


@pytest.mark.parametrize(
    "env, message", [("FAKE_TRTEXEC_FAIL", "exit code 1:.*getDimensions: oops"), ("FAKE_TRTEXEC_EMPTY", "exit code 0")]
)
def test_trtexec_failure_keeps_the_old_plan_and_reports_the_log_tail(
    tmp_path, onnx, fake_trtexec, monkeypatch, env, message
):
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"old engine")
    monkeypatch.setenv(env, "1")
    with pytest.raises(EngineBuildError, match=f"(?s){message}"):
        TrtexecBuilder(fake_trtexec).build(onnx, plan, BuildOptions(DIMS))
    assert plan.read_bytes() == b"old engine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "bin",
        "classifier",
        "model.plan",
    ]


# ------------------------------------------------------------------------------ builder choice
def test_without_tensorrt_or_trtexec_the_install_hint_is_raised(no_tensorrt):
    with pytest.raises(RuntimeUnavailable) as e:
        find_builder()
    assert str(e.value) == INSTALL_HINT
    with pytest.raises(RuntimeUnavailable, match="TensorRT is not available here"):
        find_builder("python")
    with pytest.raises(RuntimeUnavailable, match="pass --trtexec PATH"):
        find_builder("trtexec")


def test_trtexec_is_found_on_path_or_given_explicitly(no_tensorrt, fake_trtexec, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(fake_trtexec.parent))
    found = find_builder()
    assert isinstance(found, TrtexecBuilder) and found.executable == fake_trtexec
    assert find_builder("trtexec", fake_trtexec).executable == fake_trtexec
    not_exec = tmp_path / "trtexec.txt"
    not_exec.write_text("")
    with pytest.raises(ConfigError, match="not an executable"):
        find_builder("auto", not_exec)
    with pytest.raises(ConfigError, match="builder must be one of"):
        find_builder("onnxruntime")


# ------------------------------------------------------------------------------ Python API (fake tensorrt)
def make_fake_tensorrt(
    *, input_name="input", input_shape=(-1, 3, 224, 224), parse_ok=True, build_ok=True, fp16_flag=True
) -> types.ModuleType:
    """A stand-in for TensorRT 10's Python API, recording what the builder asks of it."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.11.0.33"
    calls: dict[str, object] = {"flags": [], "shapes": [], "pool": None, "cache_blob": None, "ignore_mismatch": None}
    trt.calls = calls

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    class Tensor:
        name, shape = input_name, input_shape

    class Network:
        num_inputs = 1

        def get_input(self, i):
            return Tensor()

    class Parser:
        num_errors = 0 if parse_ok else 1

        def __init__(self, network, logger):
            pass

        def parse_from_file(self, path):
            calls["parsed"] = path
            return parse_ok

        def get_error(self, i):
            return "In node 12 (Conv): unsupported"

    class Cache:
        def __init__(self, blob):
            self.blob = blob

        def serialize(self):
            return b"timing:" + self.blob

    class Profile:
        def set_shape(self, name, lo, opt, hi):
            calls["shapes"].append((name, lo, opt, hi))

    class Config:
        def set_memory_pool_limit(self, pool, size):
            calls["pool"] = (pool, size)

        def set_flag(self, flag):
            calls["flags"].append(flag)

        def add_optimization_profile(self, profile):
            calls["profiles"] = 1

        def create_timing_cache(self, blob):
            calls["cache_blob"] = blob
            return Cache(blob)

        def set_timing_cache(self, cache, ignore_mismatch):
            self.cache, calls["ignore_mismatch"] = cache, ignore_mismatch
            return True

        def get_timing_cache(self):
            return self.cache

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            calls["network_flags"] = flags
            return Network()

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile()

        def build_serialized_network(self, network, config):
            return b"python engine" if build_ok else None

    trt.Logger, trt.Builder, trt.OnnxParser = Logger, Builder, Parser
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="WORKSPACE")
    trt.BuilderFlag = types.SimpleNamespace(**({"FP16": "FP16"} if fp16_flag else {}))
    return trt


def test_python_builder_builds_an_fp16_engine_with_one_batch_profile(tmp_path, onnx, monkeypatch):
    trt = make_fake_tensorrt()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    builder = find_builder()
    assert isinstance(builder, PythonBuilder) and builder.tensorrt_version() == "10.11.0.33"
    plan, cache = tmp_path / "model.plan", tmp_path / "timing.cache"
    cache.write_bytes(b"old")
    builder.build(onnx, plan, BuildOptions(DIMS), timing_cache=cache)
    assert plan.read_bytes() == b"python engine" and cache.read_bytes() == b"timing:old"
    assert trt.calls["parsed"] == str(onnx) and trt.calls["network_flags"] == 0
    assert trt.calls["flags"] == ["FP16"] and trt.calls["pool"] == ("WORKSPACE", 4096 << 20)
    assert trt.calls["shapes"] == [("input", (1, 3, 224, 224), (64, 3, 224, 224), (256, 3, 224, 224))]
    assert trt.calls["ignore_mismatch"] is False
    builder.build(onnx, plan, BuildOptions(DIMS, fp16=False))
    assert trt.calls["flags"] == ["FP16"]  # no flag the second time


@pytest.mark.parametrize(
    "fake, options, error, match",
    [
        ({"parse_ok": False}, {}, EngineBuildError, "could not parse.*In node 12"),
        ({"build_ok": False}, {}, EngineBuildError, "failed to build"),
        ({"fp16_flag": False}, {}, EngineBuildError, "no FP16 builder flag"),
        ({"input_name": "images"}, {}, ConfigError, "takes 'images'"),
        ({"input_shape": (-1, 3, 256, 256)}, {}, ConfigError, r"\[-1, 3, 256, 256\]"),
        ({"input_shape": (8, 3, 224, 224)}, {}, ConfigError, "fixed batch size 8"),
    ],
    ids=["parse-error", "build-error", "no-fp16-flag", "input-name", "input-dims", "fixed-batch"],
)
def test_python_builder_errors_say_what_went_wrong(tmp_path, onnx, monkeypatch, fake, options, error, match):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt(**fake))
    plan = tmp_path / "model.plan"
    with pytest.raises(error, match=match):
        PythonBuilder().build(onnx, plan, BuildOptions(**{"input_dims": DIMS, **options}))
    assert not plan.exists()


# ------------------------------------------------------------------------------ scripts/build_engine.py
def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_script_is_executable_and_documents_its_options():
    assert os.access(SCRIPT, os.X_OK)
    r = run_script("--help")
    assert r.returncode == 0
    for flag in (
        "--onnx",
        "--output",
        "--fp16",
        "--no-fp16",
        "--min-batch",
        "--opt-batch",
        "--max-batch",
        "--timing-cache",
        "--force",
        "--builder",
        "--trtexec",
        "Exit codes",
    ):
        assert flag in r.stdout, flag


@pytest.mark.skipif(trt_builders.TRTEXEC_DEFAULT.exists(), reason="this machine has trtexec")
def test_script_without_tensorrt_fails_with_the_install_hint_and_exit_code_3(onnx, tmp_path):
    env = {"PATH": str(tmp_path / "empty-bin"), "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    r = run_script("--onnx", str(onnx), env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip() == f"build_engine: error: {INSTALL_HINT}"
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-batch", "0"], "--max-batch: must be >= 1"),
        (["--min-batch", "8", "--opt-batch", "4"], "1 <= min <= opt <= max, got 8/4/256"),
        (["--input-dims", "3,x,224"], "comma-separated integers"),
        (["--builder", "onnxruntime"], "invalid choice"),
        (["--max-batch", "32", "--opt-batch", "64"], "got 1/64/32"),
        (["--onnx", "/nonexistent/model.onnx"], "make model"),
    ],
)
def test_script_usage_errors_exit_2(args, message):
    r = run_script(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_script_builds_then_skips_with_trtexec(tmp_path, onnx, fake_trtexec, monkeypatch, capsys, no_tensorrt):
    script = load_script()
    monkeypatch.setattr(script, "query_gpu", lambda device: ("NVIDIA L4", "8.9"))
    monkeypatch.setattr(trt_builders, "libnvinfer_version", lambda: "10.13.3")
    plan, cache = tmp_path / "out" / "model.plan", tmp_path / "out" / "timing.cache"
    argv = [
        "--onnx",
        str(onnx),
        "--output",
        str(plan),
        "--trtexec",
        str(fake_trtexec),
        "--timing-cache",
        str(cache),
        "--opt-batch",
        "32",
    ]
    assert script.main(argv) == 0
    first = capsys.readouterr().out
    assert (
        first.startswith(f"built {plan} with trtexec in ")
        and "NVIDIA L4 (sm 8.9), TensorRT 10.13.3, fp16, batch 1/32/256" in first
    )
    assert json.loads(key_path(plan).read_text())["opt_batch"] == 32
    args = (fake_trtexec.parent / "args.txt").read_text().splitlines()
    assert f"--timingCacheFile={cache}" in args and "--optShapes=input:32x3x224x224" in args
    assert script.main(argv) == 0
    assert capsys.readouterr().out.startswith(f"up to date, skipped the build: {plan} (NVIDIA L4")
    assert script.main([*argv, "--no-fp16"]) == 0
    assert capsys.readouterr().out.startswith("built ")
    assert "--fp16" not in (fake_trtexec.parent / "args.txt").read_text().splitlines()


def test_script_reports_a_failed_build_with_exit_code_1(tmp_path, onnx, fake_trtexec, monkeypatch, capsys, no_tensorrt):
    script = load_script()
    monkeypatch.setattr(script, "query_gpu", lambda device: ("NVIDIA L4", "8.9"))
    monkeypatch.setattr(trt_builders, "libnvinfer_version", lambda: "10.13.3")
    monkeypatch.setenv("FAKE_TRTEXEC_FAIL", "1")
    assert script.main(["--onnx", str(onnx), "--trtexec", str(fake_trtexec)]) == 1
    assert "build_engine: error: trtexec failed with exit code 1" in capsys.readouterr().err


def test_script_refuses_device_with_the_python_api(onnx, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt())
    assert load_script().main(["--onnx", str(onnx), "--device", "1"]) == 2
    assert "CUDA_VISIBLE_DEVICES" in capsys.readouterr().err


def test_script_opt_batch_follows_a_smaller_max_batch():
    script = load_script()
    opts = script.options_from_args(script.build_parser().parse_args(["--max-batch", "16"]))
    assert (opts.min_batch, opts.opt_batch, opts.max_batch) == (1, 16, 16)
    opts = script.options_from_args(script.build_parser().parse_args(["--no-fp16", "--input-dims", "3,256,256"]))
    assert (opts.fp16, opts.opt_batch, opts.input_dims) == (False, 64, (3, 256, 256))


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
