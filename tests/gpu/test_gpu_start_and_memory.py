"""Issue 25 on the GPU, in this process: the ONNX Runtime options, arena caps and start-up cache of the
network runtime, its release; the embedder in FP16 (and as served: FP16 channel-last, its 64 bucket fused); the
preprocess pool cap; JPEG 2000 and TIFF decoded by nvImageCodec as Pillow decodes them; the top-k on the GPU; the
decoders' ordered release."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tritonprep_testkit.photos import encode
from tritonprep_testkit.servers import EMBEDDER_ONNX, ONNX

DIMS = (3, 224, 224)


@pytest.fixture(scope="module")
def ort_gpu(cp):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime build has no CUDA EP (install tritonprep[gpu-cu13])")
    if not ONNX.is_file() or not EMBEDDER_ONNX.is_file():
        pytest.fail("the exported networks are missing: run `make model`")
    return ort


@pytest.fixture(scope="module")
def batch(photos):
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.spec import OutputSpec

    return CpuExecutor(OutputSpec()).run([encode(a, "JPEG", quality=90) for a in photos.values()]).output


@pytest.fixture(scope="module")
def embedder_reference(photos):
    """The photos as EMBED_PIXELS on the CPU (FP32 NCHW) and the FP32 embedder's vectors of them (ONNX Runtime, CPU)."""
    from tritonprep.classifier.runtimes import OrtCpuRuntime
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.spec import OutputSpec

    x = (
        CpuExecutor(OutputSpec(resize_shorter=224, interpolation="bicubic"))
        .run([encode(a, "JPEG", quality=90) for a in photos.values()])
        .output
    )
    return x, OrtCpuRuntime(EMBEDDER_ONNX).infer(x)


def _runtime(onnx, dims=DIMS, **kw):
    """``onnx``'s network on the GPU at fp16 for an input of ``dims``: the file a GPU config of those dims runs."""
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.network_files import model_file

    return OrtCudaRuntime(model_file(onnx, "fp16", dims), dims, device_id=0, nhwc=True, **kw)


def _cosines(got, want):
    """Each row's cosine with the same row of ``want``."""
    return np.sum(got * want, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def test_sessions_carry_the_ep_options_the_caps_and_no_lookup_warning(ort_gpu, cp, batch, capfd, tmp_path, monkeypatch):
    """The built-in CUDA EP gets every provider option (the cuDNN ones, the stream, CUDA graphs, NHWC and each
    bucket's arena cap), honours the stream (every bucket captured as a CUDA graph: a registered plugin EP
    ignored it and every capture failed), and no 'No registered plugin EP device found' line is logged."""
    from tritonprep.classifier.ort_options import CudaEpOptions

    monkeypatch.setenv("TRITONPREP_CACHE_DIR", str(tmp_path))
    rt = _runtime(ONNX, buckets=(1, 8), ep_options=CudaEpOptions(), gpu_memory_mb=1400)
    try:
        assert rt.session_caps_mb[0] < rt.session_caps_mb[1] and all(rt.session_caps_mb)
        assert rt.cuda_graphs and "+graphs" in rt.name, rt.name
        for bucket, cap in zip(rt._buckets, rt.session_caps_mb):
            options = bucket.session.get_provider_options()["CUDAExecutionProvider"]
            assert options["cudnn_conv_algo_search"] == "HEURISTIC"
            assert options["cudnn_conv_use_max_workspace"] == "0"
            assert options["enable_cuda_graph"] == "1" and options["prefer_nhwc"] == "1"
            assert int(options["gpu_mem_limit"]) == cap << 20
            assert int(options["user_compute_stream"]) == rt.stream.ptr and options["device_id"] == "0"
        logits = rt.infer(cp.asarray(batch))
        assert logits.shape == (len(batch), 1000)
        phases = {"imports", "cuda_context", "session_b1", "first_run_b1", "capture_b1", "capture_b8", "measure"}
        assert phases <= set(rt.timings), rt.timings
        assert rt.plan.measured and rt.timings["capture_b8"] < rt.timings["first_run_b8"], rt.timings
    finally:
        rt.close()
    assert "No registered plugin EP device found" not in capfd.readouterr().err


def test_optimized_models_are_kept_and_give_the_same_logits(ort_gpu, cp, batch, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", str(tmp_path))
    first = _runtime(ONNX, buckets=(1, 8))
    try:
        want = cp.asnumpy(first.infer(cp.asarray(batch)))
        kept = sorted((tmp_path / "onnxruntime").glob("*.onnx"))
        assert len(kept) == 2, kept  # one optimized model per bucket
    finally:
        first.close()
    second = _runtime(ONNX, buckets=(1, 8))  # loads them, graph optimizations off
    try:
        got = cp.asnumpy(second.infer(cp.asarray(batch)))
    finally:
        second.close()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)
    assert (got.argmax(1) == want.argmax(1)).all()
    (kept[0]).write_bytes(b"not a model")  # a broken entry is not fatal: that bucket is optimized at every start
    third = _runtime(ONNX, buckets=(1, 8))
    third.close()
    assert not kept[0].exists() and kept[0].with_suffix(".refused").exists() and kept[1].exists()


def test_close_gives_the_memory_back_and_is_idempotent(ort_gpu, cp, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", "off")
    cp.get_default_memory_pool().free_all_blocks()
    free_before, _ = cp.cuda.runtime.memGetInfo()
    rt = _runtime(ONNX, buckets=(1, 8, 32, 64))
    free_loaded, _ = cp.cuda.runtime.memGetInfo()
    rt.close()
    rt.close()
    free_after, _ = cp.cuda.runtime.memGetInfo()
    held = free_before - free_loaded
    assert held > 0 and free_after - free_loaded > 0.8 * held, (free_before, free_loaded, free_after)


def test_a_budget_too_small_for_the_buckets_fails_the_load_naming_the_least_that_works(ort_gpu):
    from tritonprep.errors import ConfigError

    with pytest.raises(ConfigError, match="gpu_memory_mb=700"):
        _runtime(ONNX, buckets=(1, 8, 32, 64), gpu_memory_mb=700)


def test_the_fp16_embedder_points_where_the_fp32_one_does(ort_gpu, cp, embedder_reference):
    x, want = embedder_reference
    rt = _runtime(EMBEDDER_ONNX, buckets=(1, 8, 32, 64))
    try:
        got = cp.asnumpy(rt.infer(cp.asarray(x))).astype(np.float32)
    finally:
        rt.close()
    cosine = _cosines(got, want)
    assert cosine.min() >= 0.999, cosine


def test_the_served_embedder_takes_fp16_channel_last_and_points_where_the_fp32_one_does(
    ort_gpu, cp, embedder_reference
):
    """What the embedder's GPU config serves: model.fp16.nhwc.onnx fed FP16 NHWC pixels, its 64 bucket fused."""
    from tritonprep.classifier.ort_options import CudaEpOptions
    from tritonprep.network_files import model_file

    x, want = embedder_reference
    dims = (224, 224, 3)
    assert model_file(EMBEDDER_ONNX, "fp16", dims).name == "model.fp16.nhwc.onnx"
    rt = _runtime(EMBEDDER_ONNX, dims, buckets=(8, 64), ep_options=CudaEpOptions(fuse_conv_bias=(64,)))
    try:
        pixels = cp.asarray(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(np.float16))
        got = cp.asnumpy(rt.infer(pixels)).astype(np.float32)
        assert got.shape == (len(x), 1280)
    finally:
        rt.close()
    cosine = _cosines(got, want)
    assert cosine.min() >= 0.999, cosine


def test_the_top_k_on_the_gpu_is_the_top_k_on_the_host(cp):
    from tritonprep.classifier.postprocess import TopK

    rng = np.random.default_rng(3)
    logits = rng.standard_normal((64, 1000)).astype(np.float32) * 4
    top = TopK(5)
    scores, ids = top(cp.asarray(logits))
    want_scores, want_ids = top(logits)
    assert scores.dtype == np.float32 and ids.dtype == np.int32 and isinstance(ids, np.ndarray)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ preprocessing
@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("jp2-lossless", {"fmt": "JPEG2000"}),
        ("j2k-lossless", {"fmt": "JPEG2000", "no_jp2": True}),
        ("j2k-lossy", {"fmt": "JPEG2000", "no_jp2": True, "quality_mode": "rates", "quality_layers": [20]}),
        ("tiff-raw", {"fmt": "TIFF"}),
        ("tiff-lzw", {"fmt": "TIFF", "compression": "tiff_lzw"}),
        ("tiff-deflate", {"fmt": "TIFF", "compression": "tiff_adobe_deflate"}),
    ],
)
def test_jpeg2000_and_tiff_decode_on_the_gpu_as_pillow_does(cp, nvimgcodec, photos, name, kw):
    """nvImageCodec's nvJPEG2000 and nvTIFF decoders (their wheels installed) decode these on the GPU, and the
    GPU executor's pixels agree with the CPU executor's (Pillow) within one level (lossless: the same pixels)."""
    import importlib.util

    from tritonprep.decode.headers import header_info
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import OutputSpec

    fmt = kw.pop("fmt")
    data = [encode(photos["chelsea"], fmt, **kw), encode(photos["coffee"], fmt, **kw)]
    spec = OutputSpec()
    want = CpuExecutor(spec).run(data).output
    with GpuExecutor(spec) as gpu:
        result = gpu.run(data)
        got = cp.asnumpy(result.output)
    wheel = "nvidia.nvjpeg2k" if fmt == "JPEG2000" else "nvidia.nvtiff"
    on_gpu = header_info(data[0], fmt).gpu  # deflate TIFF: Pillow (nvTIFF needs nvCOMP for it)
    if importlib.util.find_spec(wheel) is not None:
        assert result.decoded_by == ({"gpu_cuda": 2} if on_gpu else {"cpu_fallback": 2}), (name, result.decoded_by)
    assert not result.errors
    tol = 1.001 / 128 if "lossy" not in name else 2.001 / 128
    assert (np.abs(got - want) <= tol).mean() >= 0.999, (name, np.abs(got - want).max())


def test_a_batch_over_the_pool_cap_fails_its_requests_not_the_instance(cp, nvimgcodec, photos):
    """gpu_memory_mb caps the CuPy pool; a batch that does not fit raises ResourceExhausted (the model retries
    it request by request), and the executor goes on serving what fits, the retry's request included."""
    from tritonprep.errors import ResourceExhausted
    from tritonprep.executors.gpu import GpuExecutor, pool_limit_mb
    from tritonprep.spec import DecoderOptions, PreprocessConfig

    decoding = DecoderOptions(gpu_decoder="pillow", hw_decoder=False)  # Pillow + one upload
    spec = PreprocessConfig.single(decoding=decoding, gpu_memory_mb="600")
    assert pool_limit_mb(spec) == 600 - 512
    big = encode(np.zeros((3000, 3000, 3), np.uint8), "PNG")  # 27 MB decoded each
    with GpuExecutor(spec) as gpu:
        assert cp.get_default_memory_pool().get_limit() == 88 << 20
        with pytest.raises(ResourceExhausted, match="gpu_memory_mb") as failed:
            gpu.run([big] * 8)
        # the model holds the error while it retries request by request: the failed attempt's arrays are gone
        assert not gpu.run([big]).errors, failed.value
        assert not gpu.run([encode(photos["chelsea"], "JPEG")]).errors
    cp.get_default_memory_pool().set_limit(size=0)


def test_decode_failures_are_logged_counted_not_per_image(cp, nvimgcodec, jpegs, caplog):
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import OutputSpec

    bad = jpegs["coffee"][:3000]
    with caplog.at_level(logging.INFO, logger="tritonprep"), GpuExecutor(OutputSpec()) as gpu:
        for _ in range(5):
            result = gpu.run([bad] * 4 + [jpegs["chelsea"]])
            assert sorted(result.errors) == [0, 1, 2, 3]
    lines = [r.getMessage() for r in caplog.records if "image(s) decode" in r.getMessage()]
    assert 1 <= len(lines) <= 2, lines  # the first right away, the rest counted into the flush at close
    assert sum(int(line.split(": ")[1].split()[0]) for line in lines) == 20


def test_closed_decoders_release_in_order_and_refuse_work(cp, nvimgcodec, jpegs):
    from tritonprep.decode import nvimgcodec as module
    from tritonprep.errors import RuntimeUnavailable
    from tritonprep.spec import DecoderOptions

    stream = cp.cuda.Stream(non_blocking=True)
    decoder = module.GpuDecoder(0, stream, DecoderOptions(hw_decoders=2))
    images = decoder.decode([jpegs["chelsea"]] * 4, [True] * 4)
    assert all(img is not None for img in images)
    assert decoder in set(module._OPEN)
    del images
    decoder.close()
    decoder.close()
    assert decoder not in set(module._OPEN) and decoder.cuda is None and not decoder.hw
    with pytest.raises(RuntimeUnavailable, match="closed"):
        decoder.decode([jpegs["chelsea"]])
    stream.synchronize()
