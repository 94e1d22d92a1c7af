"""What the engine-build tests share (tests/unit/test_build_engine.py, test_build_engine_builders.py): the
paths, two platforms, the script loaded as a module, builders that stand in for TensorRT, a fake
``trtexec`` and the script run as a user runs it. Their fixtures (``onnx``, ``no_tensorrt``,
``fake_trtexec``) are in conftest.py."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import time
import types
from pathlib import Path

from tritonprep.classifier.engines import (
    EngineBuildError,
    Platform,
    write_atomically,
)

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
