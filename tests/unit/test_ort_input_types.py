"""``OrtCudaRuntime``'s input buffers (tritonprep.classifier.ort_cuda) take the network's input type, FP32 or FP16,
and each part is copied in as that type (tritonprep.classifier.rows); any other input type is refused with a
message naming it. Without a GPU: the session, its binding and CuPy are host fakes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.ort_fakes import Context
from tritonprep.classifier import ort_cuda
from tritonprep.classifier.rows import copy_rows
from tritonprep.errors import ConfigError

DIMS = (224, 224, 3)


class Device(np.ndarray):
    """A host array standing in for a CuPy one: its ``data.ptr``, and its ``device``."""

    @property
    def data(self) -> SimpleNamespace:  # type: ignore[override]
        return SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self) -> SimpleNamespace:
        return SimpleNamespace(id=0)

    def set(self, array: np.ndarray, stream: object = None) -> None:
        """CuPy's host-to-device copy, which refuses another dtype or shape."""
        if array.dtype != self.dtype or array.shape != self.shape:
            raise TypeError(f"{self.dtype} {self.shape} array cannot be set to {array.dtype} {array.shape} array")
        self[...] = array


class OnThisGpu:
    """A preprocess output on the runtime's GPU (not a host array): what Triton hands the classifier."""

    device = SimpleNamespace(id=0)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, dtype: type | None = None, copy: bool | None = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)


class FakeCp:
    float32, float16 = np.float32, np.float16

    @staticmethod
    def zeros(shape: tuple[int, ...], dtype: type) -> Device:
        return np.zeros(shape, dtype).view(Device)

    @staticmethod
    def asarray(array: np.ndarray, dtype: type | None = None) -> np.ndarray:
        return np.asarray(array, dtype=dtype)


class Binding:
    def __init__(self) -> None:
        self.inputs: list[tuple] = []

    def bind_input(self, name: str, kind: str, device: int, dtype: type, shape: tuple, ptr: int) -> None:
        self.inputs.append((name, dtype, shape))

    def bind_output(self, *args: object) -> None:
        pass


class Session:
    def __init__(self, input_type: str) -> None:
        self.binding = Binding()
        self.input = SimpleNamespace(name="input", type=input_type, shape=["batch", *DIMS])

    def get_inputs(self) -> list[SimpleNamespace]:
        return [self.input]

    def get_outputs(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(name="logits", shape=["batch", 1000])]

    def io_binding(self) -> Binding:
        return self.binding


def runtime() -> ort_cuda.OrtCudaRuntime:
    rt = ort_cuda.OrtCudaRuntime.__new__(ort_cuda.OrtCudaRuntime)  # _bind alone: no ONNX Runtime here
    rt._cp, rt.stream, rt.input_dims = FakeCp(), Context(), DIMS
    return rt


@pytest.mark.parametrize(("input_type", "dtype"), [("tensor(float)", np.float32), ("tensor(float16)", np.float16)])
def test_the_input_buffer_takes_the_networks_input_type(input_type, dtype):
    session = Session(input_type)
    bucket = runtime()._bind(session, 8, 0)
    assert bucket.x.dtype == dtype and bucket.x.shape == (8, *DIMS) and bucket.y.dtype == np.float32
    assert session.binding.inputs == [("input", dtype, (8, *DIMS))]
    pixels = np.random.default_rng(0).standard_normal((3, *DIMS)).astype(np.float16)
    assert copy_rows(FakeCp(), bucket.x[:2], OnThisGpu(pixels[:2]), None) is False  # the preprocess output
    assert copy_rows(FakeCp(), bucket.x[2:3], pixels[2:].astype(np.float32), None) is False  # a host array
    assert bucket.x.dtype == dtype and np.array_equal(bucket.x[:3], pixels.astype(dtype))


def test_another_input_type_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"tensor\(uint8\); expected one of tensor\(float\), tensor\(float16\)"):
        runtime()._bind(Session("tensor(uint8)"), 8, 0)
