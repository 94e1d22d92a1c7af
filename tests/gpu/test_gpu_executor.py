"""The GPU executor (nvImageCodec + kernel) against the CPU executor, on encoded real photos."""

from __future__ import annotations

import gc
import io
import weakref

import numpy as np
import pytest
from PIL import Image

from tritonprep.errors import DecodeError, LimitExceeded
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.spec import DecoderOptions, Limits, OutputSpec, PreprocessConfig
from tritonprep_testkit.compare import agreement
from tritonprep_testkit.photos import encode

RAW = OutputSpec(mean=(0, 0, 0), std=(1, 1, 1))


@pytest.fixture(scope="module")
def gpu_executor(cp, nvimgcodec):
    from tritonprep.executors.gpu import GpuExecutor

    ex = GpuExecutor(RAW, 0)
    yield ex
    ex.close()


def test_gpu_and_cpu_executors_agree_on_real_photos(gpu_executor, photos):
    images = [encode(a, "JPEG", quality=90) for a in photos.values()] + [encode(photos["coffee"], "PNG")]
    g = gpu_executor.run(images)
    c = CpuExecutor(RAW).run(images)
    assert not g.errors and not c.errors
    assert (
        g.decoded_by.get("cpu_fallback") == 1 and g.decoded_by.get("gpu_hw", 0) + g.decoded_by.get("gpu_cuda", 0) == 4
    )
    gpu_out = g.output.get()
    for i, name in enumerate([*photos, "coffee.png"]):
        within, worst = agreement(gpu_out[i], c.output[i])
        # hardware decoder: within 1 level of libjpeg-turbo; PNG: Pillow on both sides
        assert within >= (0.999 if name.endswith(".png") or "gpu_hw" in g.decoded_by else 0.97), (name, within, worst)
        assert np.abs(gpu_out[i] - c.output[i]).mean() < 1.0, name


def test_bad_images_fail_alone(gpu_executor, jpegs):
    images = [jpegs["chelsea"], b"\xff\xd8\xff\xe0garbage", jpegs["coffee"][:500], b"", jpegs["rocket"]]
    res = gpu_executor.run(images)
    assert set(res.errors) == {1, 2, 3}
    assert all(isinstance(e, DecodeError) for e in res.errors.values())
    ok = CpuExecutor(RAW).run([jpegs["chelsea"], jpegs["rocket"]]).output
    out = res.output.get()
    assert agreement(out[0], ok[0])[0] > 0.97 and agreement(out[4], ok[1])[0] > 0.97


def test_limits_apply_before_gpu_decode(cp, nvimgcodec, jpegs):
    from tritonprep.executors.gpu import GpuExecutor

    with GpuExecutor(PreprocessConfig.single(limits=Limits(max_pixels=200_000)), 0) as ex:
        res = ex.run([jpegs["chelsea"], jpegs["astronaut"]])
    assert list(res.errors) == [1] and isinstance(res.errors[1], LimitExceeded)


def test_a_closed_executor_with_refused_images_goes_without_the_garbage_collector(cp, nvimgcodec, jpegs):
    """A refused image's error kept its traceback, whose frame held the executor in a reference cycle: the closed
    executor then went whenever the cyclic collector ran, which crashed the process inside a later executor's
    ``close`` on the H100 (a segmentation fault). Reference counting alone must free it."""
    from tritonprep.executors.gpu import GpuExecutor

    gc.disable()
    try:
        with GpuExecutor(PreprocessConfig.single(limits=Limits(max_pixels=200_000)), 0) as ex:
            res = ex.run([jpegs["chelsea"], jpegs["astronaut"], b"not an image"])
        assert sorted(res.errors) == [1, 2] and all(e.__traceback__ is None for e in res.errors.values())
        gone = weakref.ref(ex)
        del ex, res
        assert gone() is None
    finally:
        gc.enable()


STRETCH = OutputSpec(resize="stretch", output_height=300, output_width=300, mean=(0, 0, 0), std=(1, 1, 1))


@pytest.fixture(scope="module")
def stretch_executor(cp, nvimgcodec):
    from tritonprep.executors.gpu import GpuExecutor

    with GpuExecutor(STRETCH, 0) as ex:
        yield ex


def test_an_image_too_thin_to_resize_is_refused_before_decoding(gpu_executor, photos):
    thin = encode(np.zeros((9_000_000, 1, 3), np.uint8), "PNG")
    res = gpu_executor.run([encode(photos["rocket"], "PNG"), thin])
    assert list(res.errors) == [1] and isinstance(res.errors[1], LimitExceeded)
    cpu = CpuExecutor(OutputSpec()).run([encode(photos["rocket"], "PNG"), thin])
    assert str(cpu.errors[1]) == str(res.errors[1])


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_on_the_gpu(stretch_executor, photos, orientation):
    """All 8 EXIF orientations, on a 300x200 picture: the GPU path turns it upright like Pillow."""
    arr = photos["rocket"][:200, :300]
    im = Image.fromarray(arr)
    exif = im.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=95, exif=exif)
    data = buf.getvalue()
    g = stretch_executor.run([data]).output.get()[0]
    c = CpuExecutor(STRETCH).run([data]).output[0]
    assert agreement(g, c)[0] > 0.97 and np.abs(g - c).mean() < 1.0
    # and the orientation really changed the picture (against orientation 1)
    if orientation != 1:
        plain = io.BytesIO()
        im.save(plain, "JPEG", quality=95)
        upright = CpuExecutor(STRETCH).run([plain.getvalue()]).output[0]
        assert np.abs(g - upright).mean() > 5


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grayscale_and_cmyk_jpegs(gpu_executor, photos, mode):
    data = (
        encode(np.asarray(Image.fromarray(photos["astronaut"]).convert(mode)), "JPEG", quality=95)
        if mode == "L"
        else None
    )
    if mode == "CMYK":
        buf = io.BytesIO()
        Image.fromarray(photos["astronaut"]).convert("CMYK").save(buf, "JPEG", quality=95)
        data = buf.getvalue()
    g = gpu_executor.run([data])
    c = CpuExecutor(RAW).run([data])
    assert not g.errors
    assert np.abs(g.output.get()[0] - c.output[0]).mean() < 1.0


def test_progressive_jpeg(gpu_executor, photos):
    data = encode(photos["coffee"], "JPEG", quality=90, progressive=True)
    g, c = gpu_executor.run([data]), CpuExecutor(RAW).run([data])
    assert not g.errors and np.abs(g.output.get()[0] - c.output[0]).mean() < 1.0


def test_stream_ordering_stress(cp, nvimgcodec, photos):
    """Many back-to-back batches with recycled memory: every output must equal the first run's.
    A decode that wrote before earlier work on the stream finished (or a buffer released too
    early) shows up as a changed pixel."""
    from tritonprep.executors.gpu import GpuExecutor

    rng = np.random.default_rng(3)
    src = Image.fromarray(photos["chelsea"])
    pool = [
        encode(np.asarray(src.resize((int(rng.integers(200, 1200)), int(rng.integers(200, 1200))))), "JPEG", quality=90)
        for _ in range(24)
    ]
    mismatches = 0
    with GpuExecutor(RAW, 0) as ex:
        reference = {i: ex.run([pool[i]]).output.get()[0] for i in range(len(pool))}
        for _ in range(60):
            idx = rng.choice(len(pool), size=int(rng.integers(8, 48)))
            out = ex.run([pool[i] for i in idx]).output
            junk = cp.random.random((4, 1 << 20), dtype=cp.float32)  # churn the memory pool between batches
            del junk
            got = out.get()
            mismatches += sum(int(not np.array_equal(got[k], reference[i])) for k, i in enumerate(idx))
    assert mismatches == 0


def test_unsynchronized_runs_read_on_the_executor_stream_equal_synchronized_ones(cp, nvimgcodec, photos):
    """``run(synchronize=False)`` as classify_fused calls it: the next step reads the batch on the executor's stream
    without waiting. PNGs go through the pinned upload buffer that every call reuses: a call that rewrote it before
    the last call's copy had run, or a decoded image released too early, shows up as a changed pixel."""
    from tritonprep.executors.gpu import GpuExecutor

    rng = np.random.default_rng(5)
    pool = [encode(a, "JPEG", quality=90) for a in photos.values()] + [encode(a, "PNG") for a in photos.values()]
    batches = [[pool[i] for i in rng.choice(len(pool), size=int(rng.integers(1, 12)))] for _ in range(40)]
    with GpuExecutor(RAW, 0) as ex:
        reference = [ex.run(batch).output.get() for batch in batches]
        copies = []
        for batch in batches:
            result = ex.run(batch, synchronize=False)
            assert not result.errors
            with ex.stream:  # what the network's input copy does, on the same stream
                copies.append(result.output.copy())
        ex.stream.synchronize()
        for got, want in zip(copies, reference):
            np.testing.assert_array_equal(got.get(), want)


def test_a_decoder_stage_used_twice_in_one_call_never_reuses_its_own_buffers(cp, nvimgcodec, photos):
    """hw_decoder_share < 1 with progressive JPEGs: the CUDA stage decodes its share beside the hardware,
    then again the hardware's leftovers (progressive), in one call. Its output images are pooled across
    calls; the second use must not decode into buffers the first filled (every image equal to its
    decode in a batch of its own)."""
    from tritonprep.executors.gpu import GpuExecutor

    rng = np.random.default_rng(7)
    src = Image.fromarray(photos["astronaut"])
    pool = [
        encode(
            np.asarray(src.resize((int(rng.integers(300, 700)), int(rng.integers(300, 700))))),
            "JPEG",
            quality=90,
            progressive=bool(k % 3 == 0),
        )
        for k in range(36)
    ]
    spec = PreprocessConfig.single(RAW, decoding=DecoderOptions(hw_decoder_share=0.5))
    with GpuExecutor(spec, 0) as ex:
        # each image decoded on its own stage (the split is by the image's bytes: two copies go the same way)
        alone = {i: ex.run([pool[i], pool[i]]).output.get()[0] for i in range(len(pool))}
        for _ in range(3):
            got = ex.run(pool).output.get()
            assert [i for i in range(len(pool)) if not np.array_equal(got[i], alone[i])] == []


@pytest.mark.parametrize("backends", [("gpu_only", "hybrid_cpu_gpu"), ("hybrid_cpu_gpu",)])
def test_hardware_and_cuda_decoders_split_deterministically(cp, nvimgcodec, photos, backends):
    """hw_decoder_share < 1: both decoders work at once, each image always goes to the same one; the CUDA stage with
    its default backends or with the hybrid one alone (Huffman decoding on its host threads)."""
    from tritonprep.executors.gpu import GpuExecutor

    rng = np.random.default_rng(5)
    src = Image.fromarray(photos["coffee"])
    pool = [
        encode(np.asarray(src.resize((int(rng.integers(300, 900)), int(rng.integers(300, 900))))), "JPEG", quality=90)
        for _ in range(32)
    ]
    spec = PreprocessConfig.single(RAW, decoding=DecoderOptions(hw_decoder_share=0.5, cuda_decoder_backends=backends))
    with GpuExecutor(spec, 0) as ex:
        first = ex.run(pool)
        assert first.decoded_by.get("gpu_hw", 0) > 0 and first.decoded_by.get("gpu_cuda", 0) > 0, first.decoded_by
        again = ex.run(pool[::-1])
    np.testing.assert_array_equal(first.output.get(), again.output.get()[::-1])
    ref = CpuExecutor(RAW).run(pool).output
    assert np.abs(first.output.get() - ref).mean() < 0.5


def test_pillow_decodes_its_share_beside_the_gpu_decoders(cp, nvimgcodec, photos):
    """cpu_decoder_share: Pillow decodes a share of a large call's JPEGs while the GPU decoders take the rest. Each
    image of a large call always goes the same way, a call of fewer than CPU_SHARE_MIN_IMAGES stays on the GPU, and
    Pillow's images equal the CPU executor's up to the kernel's rounding."""
    from tritonprep.decode.split import CPU_SHARE_MIN_IMAGES
    from tritonprep.executors.gpu import GpuExecutor

    rng = np.random.default_rng(11)
    src = Image.fromarray(photos["coffee"])
    pool = [
        encode(np.asarray(src.resize((int(rng.integers(300, 900)), int(rng.integers(300, 900))))), "JPEG", quality=90)
        for _ in range(32)
    ]
    spec = PreprocessConfig.single(RAW, decoding=DecoderOptions(cpu_decoder_share=0.4))
    with GpuExecutor(spec, 0) as ex:
        first = ex.run(pool)
        again = ex.run(pool[::-1])
        small = ex.run(pool[: CPU_SHARE_MIN_IMAGES - 1])
    on_gpu = first.decoded_by.get("gpu_hw", 0) + first.decoded_by.get("gpu_cuda", 0)
    assert first.decoded_by.get("cpu", 0) > 0 and on_gpu > 0 and "cpu_fallback" not in first.decoded_by
    assert sum(first.decoded_by.values()) == len(pool)  # each image decoded once
    assert "cpu" not in small.decoded_by and not first.errors
    np.testing.assert_array_equal(first.output.get(), again.output.get()[::-1])
    ref = CpuExecutor(RAW).run(pool).output
    got = first.output.get()
    shared = [i for i, info in first.images.items() if info.path == "cpu"]
    assert len(shared) == first.decoded_by["cpu"]
    for i in shared:
        assert agreement(got[i], ref[i])[0] >= 0.999, i
    assert np.abs(got - ref).mean() < 0.5


def test_gpu_kernels_without_nvimgcodec_decode_on_the_cpu(cp, photos, jpegs):
    """gpu_decoder=pillow (what an instance gets without nvImageCodec): Pillow decodes, the GPU
    kernel preprocesses, and the result equals the CPU executor's up to the kernel's rounding."""
    from tritonprep.executors.gpu import GpuExecutor

    spec = PreprocessConfig.single(RAW, decoding=DecoderOptions(gpu_decoder="pillow"))
    images = [jpegs["chelsea"], encode(photos["coffee"], "PNG")]
    with GpuExecutor(spec, 0) as ex:
        res = ex.run(images)
    assert ex.decoder is None and res.decoded_by == {"cpu_fallback": 2}
    ref = CpuExecutor(RAW).run(images).output
    for g, c in zip(res.output.get(), ref):
        assert agreement(g, c)[0] >= 0.999


def test_describe_names_the_decoder_in_use(gpu_executor, cp):
    """The instance's log line names the decoder that really runs (it once always said Pillow)."""
    from tritonprep.executors.gpu import GpuExecutor

    assert "decoder nvImageCodec" in gpu_executor.describe() and "GPU executor on device 0" in gpu_executor.describe()
    with GpuExecutor(PreprocessConfig.single(decoding=DecoderOptions(gpu_decoder="pillow")), 0) as pillow:
        assert "decoder Pillow (CPU) + upload" in pillow.describe()


def test_decoders_on_their_own_streams_give_the_pixels_of_one_decoder(cp, nvimgcodec):
    """2 hardware decoders (each on its own CUDA stream, joined to the executor's stream by events) give
    exactly the pixels of one decoder, in two calls in a row: the second decodes into the first's
    released buffers, so a decode that overtook the previous kernel, or a kernel that read before its
    decode finished, changes a pixel."""
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep_testkit.photos import make_jpegs

    images = make_jpegs(500, 375, 24, seed=11) + make_jpegs(640, 480, 16, seed=12) + make_jpegs(375, 500, 8, seed=13)
    one = PreprocessConfig.single(RAW, decoding=DecoderOptions(hw_decoders=1))
    two = PreprocessConfig.single(RAW, decoding=DecoderOptions(hw_decoders=2))
    with GpuExecutor(one, 0) as ex:
        if ex.decoder is None or not ex.decoder.hw:
            pytest.skip("no nvImageCodec hardware decoder on this GPU")
        ref = ex.run(images)
        expected = ref.output.get()
    assert not ref.errors and ref.decoded_by == {"gpu_hw": len(images)}, ref.decoded_by
    with GpuExecutor(two, 0) as ex:
        assert "gpu_hw x2" in ex.describe() and "own streams" in ex.describe(), ex.describe()
        for attempt in range(2):
            res = ex.run(images)
            assert not res.errors and res.decoded_by == ref.decoded_by, (attempt, res.decoded_by)
            got = res.output.get()
            assert got.shape == expected.shape
            assert float(np.abs(got - expected).max()) == 0.0, attempt
