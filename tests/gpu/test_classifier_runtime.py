"""The classifier on ONNX Runtime's CUDA EP: buckets, padding, parity with the CPU, inputs where they live."""

from __future__ import annotations

import numpy as np
import pytest

from tritonprep.classifier.postprocess import softmax
from tritonprep_testkit.servers import ONNX

DIMS = (3, 224, 224)


@pytest.fixture(scope="module")
def ort_gpu(cp):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime build has no CUDA EP (install tritonprep[gpu-cu13])")
    if not ONNX.is_file():
        pytest.fail(f"{ONNX} is missing: run `make model`")
    return ort


@pytest.fixture(scope="module")
def batch(photos):
    """The test photos preprocessed by the CPU executor, as the classifier receives them."""
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.spec import OutputSpec
    from tritonprep_testkit.photos import encode

    images = [encode(a, "JPEG", quality=90) for a in photos.values()]
    return CpuExecutor(OutputSpec()).run(images).output


@pytest.fixture(scope="module")
def cpu_probs(batch):
    from tritonprep.classifier.runtimes import OrtCpuRuntime

    return softmax(OrtCpuRuntime(ONNX).infer(batch))


def upload(cp, array):
    """``array`` on the GPU, complete: CuPy copies on this thread's stream, which the runtime's own stream does not
    wait for (its parts must be complete)."""
    out = cp.asarray(array)
    cp.cuda.get_current_stream().synchronize()
    return out


@pytest.fixture(scope="module", params=["fp32-nchw", "fp16-nhwc-graphs"])
def runtime(request, ort_gpu):
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.network_files import model_file

    precision, layout = request.param.split("-")[:2]
    rt = OrtCudaRuntime(
        model_file(ONNX, precision),
        DIMS,
        device_id=0,
        buckets=(1, 2, 4, 8, 16),
        nhwc=layout == "nhwc",
        cuda_graphs=request.param.endswith("graphs"),
    )
    return rt


def test_gpu_classifier_matches_the_cpu_provider(cp, runtime, batch, cpu_probs):
    got = runtime.infer(upload(cp, batch))
    assert isinstance(got, cp.ndarray) and got.shape == (len(batch), 1000)
    probs = softmax(got.get())
    assert (probs.argmax(axis=1) == cpu_probs.argmax(axis=1)).all()
    assert np.abs(probs - cpu_probs).max() <= 0.01


def test_padding_to_the_bucket_does_not_change_the_rows(cp, runtime, batch):
    """3 images run padded in a larger bucket (or in smaller ones), 4 in the 4-bucket, 1 in the 1-bucket: same rows."""
    x = upload(cp, batch)
    three = runtime.infer(x[:3]).get()
    four = runtime.infer(x[:4]).get()
    one = runtime.infer(x[:1]).get()
    assert runtime.chunks_for(1) == [1] and runtime.chunks_for(4) == [4]  # an exact bucket is never beaten
    np.testing.assert_allclose(three, four[:3], rtol=0, atol=1e-3)
    # another bucket may choose other kernels: equal within the parity bound
    np.testing.assert_allclose(softmax(one), softmax(four[:1]), rtol=0, atol=0.01)


def test_parts_are_copied_in_where_they_live(cp, runtime, batch):
    """Requests arrive as separate tensors (GPU or host): no concatenation needed, same answers."""
    x = upload(cp, batch)
    whole = runtime.infer(x).get()
    parts = runtime.infer_many([x[:1], batch[1:3], x[3:]]).get()
    np.testing.assert_allclose(parts, whole, rtol=0, atol=1e-3)
    assert runtime.infer_many([]).shape == (0, 1000)


def test_then_runs_behind_the_network_before_its_one_wait(cp, runtime, batch):
    """``infer_many(then=top_k)``, as the classifier and classify_fused call it: the top-k of the logits, the same
    as computed after the call, with host arrays back."""
    from tritonprep.classifier.postprocess import TopK

    top_k = TopK(5)
    x = upload(cp, batch)
    scores, ids = runtime.infer_many([x[:1], batch[1:]], then=top_k)
    want_scores, want_ids = top_k(runtime.infer(x))
    assert isinstance(scores, np.ndarray) and scores.shape == (len(batch), 5)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)
    assert runtime.infer_many([], then=top_k)[0].shape == (0, 5)
    # enqueued: the copy into pinned memory is not waited for by the top-k, only by the runtime's one synchronize
    scores, ids = runtime.infer_many([x[:1], batch[1:]], then=top_k.enqueued)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)
    assert top_k.outputs(scores, ids)["SCORES"].flags.c_contiguous


def test_then_reads_one_bucket_run_in_place_and_several_through_a_copy(cp, runtime, batch):
    """One bucket run: ``then`` reads its output buffer, no copy of the logits; several: their concatenation. The
    answers are those of ``infer``, and the next call through the same buffer gets its own rows."""
    seen = []

    def to_host(logits):
        seen.append(logits.data.ptr)
        return logits.get()

    x = upload(cp, batch)
    assert runtime.chunks_for(4) == [4]
    four = runtime.infer_many([x[:4]], then=to_host)
    assert seen[-1] == runtime._bucket(4).y.data.ptr
    np.testing.assert_allclose(four, runtime.infer(x[:4]).get(), rtol=0, atol=1e-3)
    again = runtime.infer_many([x[3:4], x[:3]], then=to_host)  # the same buffer, the rows in another order
    assert seen[-1] == runtime._bucket(4).y.data.ptr
    np.testing.assert_allclose(again, four[[3, 0, 1, 2]], rtol=0, atol=1e-3)
    many = upload(cp, np.concatenate([batch] * 5))
    assert len(runtime.chunks_for(len(many))) > 1
    got = runtime.infer_many([many], then=to_host)
    assert seen[-1] not in {bucket.y.data.ptr for bucket in runtime._buckets}
    np.testing.assert_allclose(got, runtime.infer(many).get(), rtol=0, atol=1e-3)


def test_a_batch_beyond_the_largest_bucket_runs_in_chunks(cp, runtime, batch):
    x = upload(cp, np.concatenate([batch] * 5))  # 20 images, largest bucket 16
    got = runtime.infer(x).get()
    single = runtime.infer(upload(cp, batch)).get()
    np.testing.assert_allclose(got[16:20], single, rtol=0, atol=1e-3)


def test_load_runtime_picks_the_cuda_runtime_on_a_gpu_instance(ort_gpu):
    from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime

    options = RuntimeOptions.from_parameters({"runtime": "onnxruntime", "batch_buckets": "1,2,4"}, 4)
    rt = load_runtime(ONNX, DIMS, options=options, device_id=0, use_gpu=True, max_batch=4)
    assert rt.on_gpu and rt.name.startswith("onnxruntime-cuda")


def wait_for_late_buckets(rt, timeout_s: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while rt._late is not None and not rt._late.ready():
        assert time.monotonic() < deadline, "the late buckets were not made in time"
        time.sleep(0.05)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_a_late_bucket_is_made_while_serving_and_a_lone_image_runs_on_it(cp, ort_gpu, batch, fused, caplog):
    """The shipped classifier's GPU form: buckets 8 at start, 1 made on a thread, captured by the serving thread at
    its next call; a lone image then runs on it with the answer it had padded into the 8. The log says both."""
    import logging

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.ort_options import CudaEpOptions
    from tritonprep.network_files import model_file

    caplog.set_level(logging.INFO, logger="tritonprep.classifier.ort_cuda")
    caplog.set_level(logging.INFO, logger="tritonprep.classifier.late_buckets")
    rt = OrtCudaRuntime(
        model_file(ONNX, "fp16"),
        DIMS,
        device_id=0,
        buckets=(8,),
        late_buckets=(1,),
        nhwc=True,
        cuda_graphs=True,
        ep_options=CudaEpOptions(fuse_conv_bias=(1,) if fused else False),
    )
    try:
        x = upload(cp, batch)
        padded = rt.infer(x[:1]).get()  # the thread is still making bucket 1 (seconds): this runs on the 8
        assert rt._late is not None and rt.chunks_for(1) == [8], "bucket 1 was made before the first call"
        wait_for_late_buckets(rt)
        alone = rt.infer(x[:1]).get()  # adopts it first
        assert rt._late is None and [b.size for b in rt._buckets] == [1, 8] and rt.chunks_for(1) == [1]
        assert {"late_b1", "late_adopt"} <= set(rt.timings)
        assert "batch buckets 8 (one session each, captured while loading; one run 8: " in caplog.text
        assert "ms), late buckets 1 made while serving, cuDNN" in caplog.text
        assert "late bucket(s) 1 added while serving" in caplog.text and "one run 1: " in caplog.text
        assert "classifier on GPU 0: late bucket(s) made 1 in " in caplog.text  # what the harness waits for
        np.testing.assert_allclose(softmax(alone), softmax(padded), rtol=0, atol=0.01)
        np.testing.assert_allclose(rt.infer(x[:1]).get(), alone, rtol=0, atol=1e-3)  # replayed: the same
        four = rt.infer(x).get()  # batches the plan spreads over both buckets
        np.testing.assert_allclose(softmax(four[:1]), softmax(alone), rtol=0, atol=0.01)
    finally:
        rt.close()


def test_closing_while_a_late_bucket_is_made_stops_it(cp, ort_gpu):
    """A stop right after the start: the late bucket's first run (here a fused one, which compiles) is asked to end;
    the close neither crashes nor waits the bucket out."""
    import time

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.ort_options import CudaEpOptions
    from tritonprep.network_files import model_file

    rt = OrtCudaRuntime(
        model_file(ONNX, "fp16"),
        DIMS,
        device_id=0,
        buckets=(8,),
        late_buckets=(2, 4),
        nhwc=True,
        ep_options=CudaEpOptions(fuse_conv_bias=(2, 4)),
    )
    time.sleep(0.5)
    late = rt._late
    assert late is not None and late.running()  # a fused first run compiles for seconds
    t0 = time.perf_counter()
    rt.close()
    assert time.perf_counter() - t0 < 5.0  # the stop's wait is 10 s: the first run ended on terminate
    assert not late.running() and rt._late is None and rt._buckets == []
