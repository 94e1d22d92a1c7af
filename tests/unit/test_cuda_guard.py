"""The sticky-CUDA-error guard of every GPU path, fed what CuPy and ONNX Runtime really raise (no GPU needed).

CuPy raises ``CUDARuntimeError`` / ``CUDADriverError`` with a ``status`` and a message that starts with the
error's name; ONNX Runtime's CUDA provider raises its own ``Fail`` / ``RuntimeException`` whose message holds
``CUDA failure <status>: <description>`` (onnxruntime/core/providers/cuda/cuda_call.cc). The fakes below have
the same class names, attributes and messages.
"""

from __future__ import annotations

import os

import pytest

from tritonprep.cuda import STICKY_CUDA_ERRORS, cuda_fault_guard, import_cupy, sticky_error, sticky_status
from tritonprep.errors import ConfigError, InstanceFailed, RuntimeUnavailable


class CUDARuntimeError(RuntimeError):
    """Like ``cupy_backends.cuda.api.runtime.CUDARuntimeError``."""

    def __init__(self, status: int, name: str, text: str) -> None:
        self.status = status
        super().__init__(f"{name}: {text}")


class CUDADriverError(RuntimeError):
    """Like ``cupy_backends.cuda.api.driver.CUDADriverError``."""

    def __init__(self, status: int, name: str, text: str) -> None:
        self.status = status
        super().__init__(f"{name}: {text}")


class Fail(Exception):
    """Like ``onnxruntime.capi.onnxruntime_pybind11_state.Fail``."""


def ort_failure(status: int, text: str, lib: str = "CUDA") -> Fail:
    return Fail(
        f"[ONNXRuntimeError] : 1 : FAIL : {lib} failure {status}: {text} ; GPU=0 ; hostname=gpu-host ; "
        "file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_execution_provider.cc ; line=446 ; "
        "expr=cudaStreamSynchronize(static_cast<cudaStream_t>(GetComputeStream())); "
    )


ILLEGAL = "an illegal memory access was encountered"


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (CUDARuntimeError(700, "cudaErrorIllegalAddress", ILLEGAL), "cudaErrorIllegalAddress"),
        (CUDADriverError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", ILLEGAL), "cudaErrorIllegalAddress"),
        (CUDARuntimeError(710, "cudaErrorAssert", "device-side assert triggered"), "cudaErrorAssert"),
        (CUDADriverError(719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"), "cudaErrorLaunchFailure"),
        (CUDARuntimeError(716, "cudaErrorMisalignedAddress", "misaligned address"), "cudaErrorMisalignedAddress"),
        (ort_failure(700, ILLEGAL), "cudaErrorIllegalAddress"),
        (ort_failure(719, "unspecified launch failure"), "cudaErrorLaunchFailure"),
        (
            RuntimeError(f"nvImageCodec: decoding failed (cudaErrorIllegalAddress: {ILLEGAL})"),
            "cudaErrorIllegalAddress",
        ),
        (RuntimeError("CUDA_ERROR_HARDWARE_STACK_ERROR: hardware stack error"), "cudaErrorHardwareStackError"),
    ],
)
def test_sticky_errors_are_recognised_by_status_or_text(error, name):
    assert sticky_error(error) == name


@pytest.mark.parametrize(
    "error",
    [
        CUDARuntimeError(2, "cudaErrorMemoryAllocation", "out of memory"),  # retrying later may work
        CUDADriverError(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
        CUDARuntimeError(1, "cudaErrorInvalidValue", "invalid argument"),
        ort_failure(2, "out of memory"),
        ort_failure(13, "CUBLAS_STATUS_EXECUTION_FAILED", lib="CUBLAS"),  # a cuBLAS status, not a CUDA one
        ort_failure(4, "CUDNN_STATUS_INTERNAL_ERROR", lib="CUDNN"),
        ValueError("batch of 300 images is larger than 256"),
        RuntimeError("nvImageCodec: Failed to decode: unsupported JPEG"),
    ],
)
def test_other_errors_are_not_sticky(error):
    assert sticky_error(error) is None


def test_a_status_is_sticky_by_its_number_and_every_sticky_error_has_both_names():
    assert sticky_status(700) == "cudaErrorIllegalAddress" and sticky_status(2) is None
    for status, (runtime, driver) in STICKY_CUDA_ERRORS.items():
        assert runtime.startswith("cudaError") and driver.startswith("CUDA_ERROR_")
        assert sticky_error(CUDARuntimeError(status, runtime, "x")) == runtime
        assert sticky_error(RuntimeError(f"{driver}: x")) == runtime


def test_the_guard_turns_a_sticky_error_into_instance_failed_naming_it():
    with pytest.raises(InstanceFailed) as failed, cuda_fault_guard(1, "the network (TensorRT)"):
        raise CUDARuntimeError(700, "cudaErrorIllegalAddress", ILLEGAL)
    message = str(failed.value)
    assert "CUDA error cudaErrorIllegalAddress on GPU 1 in the network (TensorRT)" in message
    assert ILLEGAL in message and "restarted" in message


def test_a_sticky_error_marks_its_gpu_poisoned_for_the_rest_of_the_process(monkeypatch):
    from tritonprep import cuda

    monkeypatch.setattr(cuda, "_POISONED", set())
    with pytest.raises(ValueError), cuda_fault_guard(3, "x"):  # other errors do not
        raise ValueError("not a CUDA problem")
    assert not cuda.context_poisoned()
    with pytest.raises(InstanceFailed), cuda_fault_guard(3, "the GPU executor"):
        raise CUDARuntimeError(700, "cudaErrorIllegalAddress", ILLEGAL)
    assert cuda.context_poisoned(3) and cuda.context_poisoned() and not cuda.context_poisoned(0)


def test_the_guard_asks_the_probe_when_the_error_does_not_say():
    """TensorRT's failed execute or nvImageCodec's plain RuntimeError: the stream's synchronize tells."""

    def probe() -> None:
        raise CUDARuntimeError(700, "cudaErrorIllegalAddress", ILLEGAL)

    with pytest.raises(InstanceFailed, match=r"cudaErrorIllegalAddress.*after RuntimeError: engine failed"):
        with cuda_fault_guard(0, "the GPU executor", probe=probe):
            raise RuntimeError("engine failed")


def test_the_guard_lets_other_errors_through_unchanged_and_probes_only_after_an_error():
    probes: list[int] = []

    def probe() -> None:
        probes.append(1)
        raise CUDARuntimeError(2, "cudaErrorMemoryAllocation", "out of memory")  # not sticky: says nothing

    error = ValueError("not a CUDA problem")
    with pytest.raises(ValueError) as raised, cuda_fault_guard(0, "the embedder", probe=probe):
        raise error
    assert raised.value is error and probes == [1]
    with cuda_fault_guard(0, "the embedder", probe=probe):
        pass
    assert probes == [1]
    mine = InstanceFailed("already failed")
    with pytest.raises(InstanceFailed) as raised, cuda_fault_guard(0, "x", probe=probe):
        raise mine
    assert raised.value is mine and probes == [1]


def test_cupy_missing_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # import raises ImportError
    with pytest.raises(RuntimeUnavailable, match=r"CuPy is not installed .*tritonprep\[gpu-cu13\]"):
        import_cupy()


def test_an_mps_share_and_priority_are_set_for_the_next_context_and_zero_leaves_the_environment(monkeypatch):
    from tritonprep.cuda import MPS_PRIORITY_ENV, MPS_THREADS_ENV, context_sm_count, set_mps_client
    from tritonprep.spec import PreprocessConfig

    monkeypatch.setenv(MPS_THREADS_ENV, "75")  # the server's own
    monkeypatch.delenv(MPS_PRIORITY_ENV, raising=False)
    set_mps_client(0, 0)
    assert os.environ[MPS_THREADS_ENV] == "75"
    assert MPS_PRIORITY_ENV not in os.environ  # the driver's default (normal)
    set_mps_client(40, 1)
    assert os.environ[MPS_THREADS_ENV] == "40"
    assert os.environ[MPS_PRIORITY_ENV] == "1"
    assert context_sm_count() is None  # no current CUDA context here: the driver does not say
    assert PreprocessConfig.from_parameters({"mps_active_thread_percentage": "40"}).mps_active_thread_percentage == 40
    with pytest.raises(ConfigError, match="mps_active_thread_percentage must be 1..100"):
        PreprocessConfig.from_parameters({"mps_active_thread_percentage": "101"})
    assert PreprocessConfig.from_parameters({"mps_client_priority": "1"}).mps_client_priority == 1
    assert PreprocessConfig.from_parameters({}).mps_client_priority == 0
    with pytest.raises(ConfigError, match=r"mps_client_priority must be 0 \(normal\) or 1 \(below normal\), got 2"):
        PreprocessConfig.from_parameters({"mps_client_priority": "2"})


def test_a_network_models_mps_parameters_are_read_and_checked_as_preprocess_does():
    from tritonprep.parameters import mps_client_parameters

    assert mps_client_parameters({}) == (0, 0)
    assert mps_client_parameters({"mps_client_priority": "1", "batch_buckets": "8,64"}) == (0, 1)
    assert mps_client_parameters({"mps_active_thread_percentage": " 60 "}) == (60, 0)
    with pytest.raises(ConfigError, match=r"^mps_client_priority must be 0 \(normal\) or 1 \(below normal\), got 2$"):
        mps_client_parameters({"mps_client_priority": "2"})
    with pytest.raises(ConfigError, match=r"^mps_active_thread_percentage must be 1..100 \(or 0: no limit\), got -1$"):
        mps_client_parameters({"mps_active_thread_percentage": "-1"})
    for text in ("low", "\u00b2"):  # a word; a character isdigit() takes and int() does not
        with pytest.raises(ConfigError, match="parameter 'mps_client_priority' must be an integer"):
            mps_client_parameters({"mps_client_priority": text})


def test_a_sticky_error_at_teardown_marks_its_gpu_poisoned_and_another_does_not(monkeypatch):
    from tritonprep import cuda

    monkeypatch.setattr(cuda, "_POISONED", set())
    assert not cuda.note_if_sticky(RuntimeError("out of memory"), 3) and not cuda.context_poisoned(3)
    assert cuda.note_if_sticky(RuntimeError("cudaErrorIllegalAddress: an illegal memory access"), 3)
    assert cuda.context_poisoned(3) and not cuda.context_poisoned(0)
