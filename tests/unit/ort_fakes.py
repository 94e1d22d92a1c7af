"""Host fakes shared by the unit tests of the ONNX Runtime CUDA runtime (tritonprep.classifier.ort_cuda), which run
without a GPU: a device and stream that do nothing, bound buffers that are host arrays, and bucket sessions whose
logits are a function of their input rows (:func:`expected`)."""

from __future__ import annotations

import threading

import numpy as np

from tritonprep.classifier import ort_cuda
from tritonprep.classifier.bucket_plan import BucketPlan


class Context:
    """The runtime's device and stream: context managers that do nothing here, a stream that has nothing to wait
    for."""

    id = 0

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        pass


DIMS = (3, 2, 2)
CLASSES = 4


class Buffer(np.ndarray):
    """A bound buffer: a host array with CuPy's ``set`` (a host-to-device copy)."""

    def set(self, array: np.ndarray, stream: object = None) -> None:
        self[...] = array


class Session:
    """A bucket's session: each row's logits are the sums of its input row, times the class number."""

    def __init__(self, x: Buffer, y: Buffer) -> None:
        self.x, self.y, self.runs = x, y, 0

    def run_with_iobinding(self, binding: object, options: object = None) -> None:
        self.runs += 1
        sums = self.x.reshape(len(self.x), -1).sum(axis=1)
        self.y[...] = sums[:, None] * np.arange(1, CLASSES + 1, dtype=np.float32)


def bucket(size: int) -> ort_cuda._Bucket:
    """A bucket of ``size`` rows: its bound buffers and a :class:`Session` over them."""
    x = np.zeros((size, *DIMS), np.float32).view(Buffer)
    y = np.zeros((size, CLASSES), np.float32).view(Buffer)
    return ort_cuda._Bucket(size, Session(x, y), x, y, None)


def runtime(sizes: tuple[int, ...] = (4, 8)) -> ort_cuda.OrtCudaRuntime:
    rt = ort_cuda.OrtCudaRuntime.__new__(ort_cuda.OrtCudaRuntime)  # infer_many alone: no ONNX Runtime here
    rt._cp = np
    rt._buckets = [bucket(size) for size in sizes]
    rt.plan = BucketPlan(list(sizes))
    rt._late = None
    rt.timings = {}
    rt.device = rt.stream = Context()
    rt.fault_source = "the classifier"
    rt.run_options = None
    rt.cuda_graphs = False
    rt._warm_thread = threading.get_ident()
    rt._warned_thread = False
    rt.cross_device_copies = 0
    return rt


def expected(batch: np.ndarray) -> np.ndarray:
    """The logits :class:`Session` gives ``batch``."""
    return batch.reshape(len(batch), -1).sum(axis=1)[:, None] * np.arange(1, CLASSES + 1, dtype=np.float32)
