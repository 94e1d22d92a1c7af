"""Every instance's state lives on its own device: nothing lands on GPU 0 by default.

The copy between GPUs itself needs two GPUs (the multi-GPU issue's run); here, on one GPU, a
device id that does not exist must fail loudly, and what an instance creates must be on its device.
"""

from __future__ import annotations

import pytest

from tritonprep.errors import RuntimeUnavailable
from tritonprep.spec import OutputSpec, PreprocessConfig
from tritonprep_testkit.servers import ONNX


def test_an_executor_on_a_missing_gpu_fails_instead_of_using_gpu_0(cp, nvimgcodec):
    from tritonprep.executors.gpu import GpuExecutor

    missing = cp.cuda.runtime.getDeviceCount()
    with pytest.raises(RuntimeUnavailable, match=f"GPU {missing} is not usable"):
        GpuExecutor(OutputSpec(), missing)


def test_the_factory_says_so_when_it_cannot_use_the_instances_gpu(cp, nvimgcodec, caplog):
    from tritonprep.executors import create_executor

    missing = cp.cuda.runtime.getDeviceCount()
    ex = create_executor(OutputSpec(), "GPU", missing)
    assert ex.name == "cpu" and f"GPU executor unavailable on device {missing}" in caplog.text
    with pytest.raises(RuntimeUnavailable):
        create_executor(PreprocessConfig.single(executor="gpu"), "GPU", missing)


def test_the_executors_output_is_on_its_device(cp, nvimgcodec, jpegs):
    from tritonprep.executors.gpu import GpuExecutor

    with GpuExecutor(OutputSpec(), 0) as ex:
        out = ex.run([jpegs["chelsea"]]).output
        assert out.device.id == 0 and ex.device.id == 0


def test_a_classifier_on_a_missing_gpu_fails_loudly(cp):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA EP")
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime

    missing = cp.cuda.runtime.getDeviceCount()
    with pytest.raises(RuntimeUnavailable, match=f"GPU {missing} is not usable"):
        OrtCudaRuntime(ONNX, (3, 224, 224), device_id=missing, buckets=(1,))


def test_rows_copied_from_the_same_gpu_are_not_counted_as_cross_device(cp):
    import numpy as np

    from tritonprep.classifier.rows import copy_rows, device_of

    stream = cp.cuda.Stream(non_blocking=True)
    dst = cp.zeros((2, 3), cp.float32)
    assert copy_rows(cp, dst, cp.ones((2, 3), cp.float32), stream) is False
    assert copy_rows(cp, dst, np.full((2, 3), 2, np.float32), stream) is False
    stream.synchronize()
    assert float(dst.sum()) == 12.0 and device_of(dst) == 0 and device_of(np.zeros(1)) is None
