"""``OrtCudaRuntime.infer_many``'s logits (tritonprep.classifier.ort_cuda), without a GPU: ``then`` reads one bucket
run's output buffer in place, and a batch run in several chunks, or returned without ``then``, is a copy. The
sessions, buffers and stream here are host fakes of ONNX Runtime's and CuPy's (no GPU on this machine)."""

from __future__ import annotations

import numpy as np

from tests.unit.ort_fakes import CLASSES, DIMS, expected, runtime


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
