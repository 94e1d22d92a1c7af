"""The engine builders and scripts/build_engine.py without TensorRT: the ``trtexec`` command and its failures
(against a fake ``trtexec``, a shell script that writes the engine it is asked for), the choice of builder,
the Python-API builder (against a fake ``tensorrt`` module that records its calls), and the script run as a
user runs it for the paths that need no GPU."""

from __future__ import annotations

import json
import os
import stat
import sys
import types
from pathlib import Path

import pytest

from tests.unit.engine_fakes import (
    DIMS,
    SCRIPT,
    load_script,
    run_script,
)
from tritonprep.classifier import builders as trt_builders
from tritonprep.classifier.builders import (
    INSTALL_HINT,
    PythonBuilder,
    TrtexecBuilder,
    find_builder,
)
from tritonprep.classifier.engines import (
    BuildOptions,
    EngineBuildError,
    key_path,
)
from tritonprep.errors import ConfigError, RuntimeUnavailable


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
