"""The sticky-CUDA-error guard on every GPU path, for real: a kernel writes through a wild pointer (a real
cudaErrorIllegalAddress, which poisons the process's CUDA context for good), then the path's next call
must raise InstanceFailed naming the CUDA error, never fail quietly or with another error.

Each case runs in a process of its own: a poisoned context cannot be used again, by this test process
either. ``tests/gpu/test_gpu_faults.py`` does the same for the preprocess model through a real server.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tritonprep_testkit.servers import ONNX

#: run in a fresh process: build the path, check that it works, poison the context, call it again
SCRIPT = r"""
import sys

import numpy as np

from tritonprep.errors import InstanceFailed
from tritonprep.kernels import launch

target, onnx = sys.argv[1], sys.argv[2]
if target == "executor":
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import PreprocessConfig
    from tritonprep_testkit.photos import make_jpegs

    images = make_jpegs(500, 375, 4, seed=1)
    runtime = GpuExecutor(PreprocessConfig.single(), 0)
    stream, call = runtime.stream, lambda: runtime.run(images)
elif target == "fused":  # classify_fused's job: the executor's work left on the stream the network runs on
    from pathlib import Path

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.postprocess import TopK
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import PreprocessConfig
    from tritonprep_testkit.photos import make_jpegs

    images = make_jpegs(500, 375, 2, seed=1)
    executor = GpuExecutor(PreprocessConfig.single(), 0)
    runtime = OrtCudaRuntime(Path(onnx), (3, 224, 224), buckets=(1, 2), stream=executor.stream)
    stream = executor.stream

    def call(poison=False):
        pixels = executor.run(images, synchronize=False).output
        if poison:  # behind the unawaited preprocessing: the network's step meets the error first
            launch.illegal_write(stream)
        return runtime.infer_many([pixels], then=TopK(5))
elif target == "embedder":
    import cupy as cp

    from tritonprep.classifier.embedding import as_embeddings

    features = cp.ones((2, 1280), cp.float32)
    stream, call = cp.cuda.get_current_stream(), lambda: as_embeddings(features, np.dtype(np.float16))
else:
    from pathlib import Path

    x = np.zeros((2, 3, 224, 224), np.float32)
    if target == "onnxruntime":
        from tritonprep.classifier.ort_cuda import OrtCudaRuntime

        runtime = OrtCudaRuntime(Path(onnx), (3, 224, 224), buckets=(1, 2))
        stream = runtime.stream
    else:
        from tritonprep.classifier.tensorrt import TensorRTRuntime

        runtime = TensorRTRuntime(Path(onnx), (3, 224, 224), 0, max_batch=2)
        stream = runtime._stream
    call = lambda: runtime.infer(x)  # noqa: E731
call()  # works before the fault
if target == "fused":
    poisoned_call = lambda: call(poison=True)  # noqa: E731
else:
    launch.illegal_write(stream)
    poisoned_call = call
try:
    poisoned_call()
except InstanceFailed as e:
    print(f"INSTANCE-FAILED {e}", flush=True)
    sys.exit(0)
print("NO INSTANCE-FAILED", flush=True)
sys.exit(1)
"""


def poison_and_call(target: str, timeout_s: float = 240) -> str:
    """Run the script for ``target``; it must print INSTANCE-FAILED and then exit by itself (a poisoned process
    whose teardown waits on the GPU hangs: then its stacks, where py-spy is installed, are in the failure)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, target, str(ONNX)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        spy = shutil.which("py-spy")
        stacks = (
            subprocess.run([spy, "dump", "--native", "--pid", str(proc.pid)], capture_output=True, text=True).stdout
            if spy
            else "(py-spy is not installed)"
        )
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{target}: still running after {timeout_s:.0f} s\n{out}\n{err[-2000:]}\n{stacks[-6000:]}")
    assert proc.returncode == 0, f"{target}: exit {proc.returncode}\n{out}\n{err[-4000:]}"
    return out


@pytest.fixture
def cuda_ep(cp):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("ONNX Runtime's CUDA EP is not installed")


def test_the_gpu_executor_fails_its_instance_after_an_illegal_address(cp, nvimgcodec):
    out = poison_and_call("executor")
    assert "CUDA error cudaErrorIllegalAddress on GPU 0 in the GPU executor" in out, out


def test_onnx_runtimes_cuda_network_fails_its_instance_after_an_illegal_address(cuda_ep):
    out = poison_and_call("onnxruntime")
    assert "CUDA error cudaErrorIllegalAddress on GPU 0 in the network (ONNX Runtime CUDA)" in out, out


def test_the_tensorrt_network_fails_its_instance_after_an_illegal_address(cp):
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip("the tensorrt package is not installed (the embedded mode's TensorRT runtime needs it)")
    out = poison_and_call("tensorrt")
    assert "CUDA error cudaErrorIllegalAddress on GPU 0 in the network (TensorRT)" in out, out


def test_the_embedders_cast_fails_its_instance_after_an_illegal_address(cp):
    out = poison_and_call("embedder")
    assert "CUDA error cudaErrorIllegalAddress on GPU 0 in the embedder" in out, out


def test_classify_fused_fails_its_instance_when_the_fault_surfaces_in_its_network_step(cuda_ep, nvimgcodec):
    """The executor's work is not waited for before the network (one wait per execute): a sticky error behind it
    surfaces in the network's step, whose guard must still turn it into InstanceFailed."""
    out = poison_and_call("fused")
    assert (
        "CUDA error cudaErrorIllegalAddress on GPU 0 in the network (ONNX Runtime CUDA) or the work before it on its "
        "shared stream (the preprocessing)" in out
    ), out
