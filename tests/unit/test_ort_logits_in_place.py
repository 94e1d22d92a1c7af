"""``OrtCudaRuntime.infer_many``'s logits (tritonprep.classifier.ort_cuda), without a GPU: ``then`` reads one bucket
run's output buffer in place, and a batch run in several chunks, or returned without ``then``, is a copy. The
sessions, buffers and stream here are host fakes of ONNX Runtime's and CuPy's (no GPU on this machine)."""

from __future__ import annotations

import threading

import numpy as np

from tests.unit.ort_fakes import Context
from tritonprep.classifier import ort_cuda
from tritonprep.classifier.bucket_plan import BucketPlan

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


def runtime(sizes: tuple[int, ...] = (4, 8)) -> ort_cuda.OrtCudaRuntime:
    rt = ort_cuda.OrtCudaRuntime.__new__(ort_cuda.OrtCudaRuntime)  # infer_many alone: no ONNX Runtime here
    rt._cp = np
    rt._buckets = []
    for size in sizes:
        x = np.zeros((size, *DIMS), np.float32).view(Buffer)
        y = np.zeros((size, CLASSES), np.float32).view(Buffer)
        rt._buckets.append(ort_cuda._Bucket(size, Session(x, y), x, y, None))
    rt.plan = BucketPlan(list(sizes))
    rt.device = rt.stream = Context()
    rt.fault_source = "the classifier"
    rt.run_options = None
    rt.cuda_graphs = False
    rt._warm_thread = threading.get_ident()
    rt._warned_thread = False
    rt.cross_device_copies = 0
    return rt


def expected(batch: np.ndarray) -> np.ndarray:
    return batch.reshape(len(batch), -1).sum(axis=1)[:, None] * np.arange(1, CLASSES + 1, dtype=np.float32)


def test_then_reads_one_bucket_run_in_place():
    rt = runtime()
    batch = np.random.default_rng(0).random((3, *DIMS), dtype=np.float32)
    seen: list[np.ndarray] = []

    def then(logits: np.ndarray) -> np.ndarray:
        seen.append(logits)
        return np.array(logits)  # read within the call, as the top-k's copy to the host is

    got = rt.infer_many([batch[:1], batch[1:]], then=then)
    bucket = rt._buckets[0]
    assert np.shares_memory(seen[0], bucket.y) and seen[0].shape == (3, CLASSES)  # no copy: the bucket's rows
    np.testing.assert_allclose(got, expected(batch), rtol=1e-6)
    again = rt.infer_many([batch[::-1]], then=then)  # the same buffer, the next call's own rows
    np.testing.assert_allclose(again, expected(batch[::-1]), rtol=1e-6)
    np.testing.assert_allclose(got, expected(batch), rtol=1e-6)  # what the first call returned is its own


def test_several_chunks_and_calls_without_then_get_copies():
    rt = runtime()
    batch = np.random.default_rng(1).random((12, *DIMS), dtype=np.float32)
    assert rt.plan.chunks(12) == [8, 4]
    seen: list[np.ndarray] = []
    got = rt.infer_many([batch], then=lambda logits: seen.append(logits) or np.array(logits))
    assert not any(np.shares_memory(seen[0], b.y) for b in rt._buckets)
    np.testing.assert_allclose(got, expected(batch), rtol=1e-6)
    one = rt.infer(batch[:2])  # returned to the caller: never the bucket's buffer, which the next run overwrites
    assert not any(np.shares_memory(one, b.y) for b in rt._buckets)
    rt.infer(batch[2:4])
    np.testing.assert_allclose(one, expected(batch[:2]), rtol=1e-6)
