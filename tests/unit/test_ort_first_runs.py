"""ONNX Runtime's warm-up beside ``classify_fused``'s preprocessing warm-up (tritonprep.classifier.ort_cuda): the
buckets' first runs are inside ONNX Runtime (which lets go of the GIL) before the other warm-up, which may hold
the GIL for seconds, begins; the sessions here are fakes that sleep as a GPU run would (no GPU on this machine)."""

from __future__ import annotations

import time

import pytest

from tritonprep.classifier import ort_cuda


class Session:
    """A bucket's session: a run sleeps without the GIL, as ONNX Runtime's does while the GPU works."""

    def __init__(self, seconds: float, log: list[tuple[str, float]], name: str) -> None:
        self.seconds, self.log, self.name = seconds, log, name

    def run_with_iobinding(self, binding: object, options: object = None) -> None:
        self.log.append((self.name, time.perf_counter()))
        time.sleep(self.seconds)


class Stream:
    def synchronize(self) -> None:
        pass


def runtime(log: list[tuple[str, float]], meanwhile: object) -> ort_cuda.OrtCudaRuntime:
    rt = ort_cuda.OrtCudaRuntime.__new__(ort_cuda.OrtCudaRuntime)  # the warm-up alone: no ONNX Runtime here
    rt._buckets = [ort_cuda._Bucket(size, Session(0.2, log, f"b{size}"), None, None, None) for size in (8, 64)]
    rt.session_caps_mb = [0, 0]
    rt.cuda_graphs = False
    rt.stream = Stream()
    rt.timings = {}
    rt._meanwhile = meanwhile
    return rt


def test_the_first_run_is_inside_onnx_runtime_before_the_other_warm_up_takes_the_gil():
    log: list[tuple[str, float]] = []

    def warm_up() -> None:  # holds the GIL throughout, as the decoders' first call may
        log.append(("meanwhile", time.perf_counter()))
        sum(range(20_000_000))  # one C call: no switch to the other thread until it returns

    rt = runtime(log, warm_up)
    rt._warm_up()
    names = [name for name, _ in log]
    assert names.index("b8") < names.index("meanwhile"), log
    assert {"first_run_b8", "first_run_b64", "measure"} <= set(rt.timings)
    assert rt.plan.measured


def test_an_error_of_the_first_runs_does_not_leave_the_warm_up_waiting():
    def broken(binding: object, options: object = None) -> None:
        raise RuntimeError("no GPU")

    done: list[str] = []
    rt = runtime([], lambda: done.append("meanwhile"))
    rt._buckets[0].session.run_with_iobinding = broken
    with pytest.raises(RuntimeError, match="no GPU"):
        rt._warm_up()
    assert done == ["meanwhile"]  # it ran, and the error came up once the first runs were over


def test_without_tensorrt_the_other_warm_up_is_left_to_overlap_onnx_runtime(monkeypatch, tmp_path):
    """``runtime: auto`` tries TensorRT first; where its package is missing (the embedded mode's usual case) the
    caller's warm-up must not run before it gives up, or ONNX Runtime's first runs no longer overlap it."""
    from tritonprep.classifier import runtimes

    calls: list[str] = []
    handed: list[object] = []

    class FakeOrtCuda:
        def __init__(self, *args: object, meanwhile: object = None, **kwargs: object) -> None:
            handed.append(meanwhile)

    monkeypatch.setattr(runtimes, "OrtCudaRuntime", FakeOrtCuda)
    monkeypatch.setattr(runtimes, "cuda_provider_available", lambda ort: True)
    monkeypatch.setattr(runtimes, "model_file", lambda path, precision, dims: path)
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"")
    runtimes.load_runtime(onnx, (3, 224, 224), use_gpu=True, meanwhile=lambda: calls.append("warm-up"))
    assert calls == [] and len(handed) == 1  # not run yet: handed over to ONNX Runtime, which overlaps it
    handed[0]()
    handed[0]()
    assert calls == ["warm-up"]  # once, however often the chain calls it
