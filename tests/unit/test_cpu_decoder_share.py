"""``cpu_decoder_share`` without a GPU: the parameter's reading and bounds, which JPEGs of a call go to Pillow (a
share of a call of at least CPU_SHARE_MIN_IMAGES JPEGs, each chosen by its own bytes, apart from the hardware
decoder's share), and the GPU executor's call around it with its GPU parts stood in: every image decoded once, by
the path it reports. Pillow's decoding beside the real GPU decoders is tested on the GPU
(tests/gpu/test_gpu_executor.py)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from tritonprep.decode.failures import FailureLog
from tritonprep.decode.nvimgcodec import DecodedImage
from tritonprep.decode.split import CPU_SHARE_MIN_IMAGES, cpu_bucket, cpu_share, hardware_bucket
from tritonprep.errors import ConfigError
from tritonprep.executors import gpu
from tritonprep.spec import DecoderOptions, OutputSpec, PreprocessConfig


def fake_jpegs(n: int) -> tuple[list[bytes], dict[int, SimpleNamespace]]:
    """``n`` distinct byte strings with JPEG headers (the choice reads only the format and the bytes' tail)."""
    images = [b"\xff\xd8" + i.to_bytes(4, "big") * 80 + b"\xff\xd9" for i in range(n)]
    return images, {i: SimpleNamespace(format="JPEG") for i in range(n)}


def test_the_parameter_is_read_and_bounded() -> None:
    assert PreprocessConfig.from_parameters({}).decoding.cpu_decoder_share == 0.0
    assert PreprocessConfig.from_parameters({"cpu_decoder_share": "0.15"}).decoding.cpu_decoder_share == 0.15
    for bad in ("1", "1.5", "-0.1", "0.0001"):
        with pytest.raises(ConfigError, match="cpu_decoder_share must be 0 or in"):
            PreprocessConfig.from_parameters({"cpu_decoder_share": bad})
    with pytest.raises(ConfigError, match="cpu_decoder_share"):
        PreprocessConfig.from_parameters({"cpu_decoder_share": "some"})


def test_the_share_goes_by_each_images_bytes() -> None:
    """About the share of a large call goes to Pillow; each image by a hash of its bytes, whatever its place in the
    call."""
    images, headers = fake_jpegs(400)
    chosen = cpu_share(images, headers, range(400), 0.25)
    assert 0.18 < len(chosen) / 400 < 0.32, len(chosen)
    assert chosen == [i for i in range(400) if cpu_bucket(images[i]) < 250]
    reordered = list(reversed(images))
    again = cpu_share(reordered, headers, range(400), 0.25)
    assert sorted(images[i] for i in chosen) == sorted(reordered[i] for i in again)


def test_the_two_shares_do_not_skew_each_other() -> None:
    """What Pillow leaves to the GPU splits between the hardware and CUDA decoders as ``hw_decoder_share`` says
    (both shares once read the same digits of one hash: Pillow's share then took the top of the hardware's range)."""
    images, headers = fake_jpegs(4000)
    chosen = set(cpu_share(images, headers, range(4000), 0.3))
    left = [images[i] for i in range(4000) if i not in chosen]
    on_hw = sum(hardware_bucket(d) < 800 for d in left) / len(left)
    assert 0.77 < on_hw < 0.83, on_hw


def test_no_share_below_the_smallest_call_or_at_zero() -> None:
    """A lone image, or any call of fewer than CPU_SHARE_MIN_IMAGES JPEGs, waits on the GPU decoders alone; a share
    of 0 gives Pillow nothing; only JPEGs are shared (the GPU's JPEG 2000 and TIFF stay there)."""
    images, headers = fake_jpegs(400)
    assert cpu_share(images, headers, range(CPU_SHARE_MIN_IMAGES - 1), 0.9) == []
    assert cpu_share(images, headers, range(400), 0.0) == []
    assert cpu_share(images, headers, range(CPU_SHARE_MIN_IMAGES), 0.9) != []
    headers = {i: SimpleNamespace(format="JPEG" if i % 2 else "JPEG2000") for i in range(400)}
    chosen = cpu_share(images, headers, range(400), 0.9)
    assert chosen and all(i % 2 for i in chosen)


class _Context:
    """The executor's device and stream: context managers that have nothing to wait for."""

    id = 0

    def __enter__(self) -> _Context:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None


def executor(share: float, declined: set[int]) -> tuple[gpu.GpuExecutor, list[int]]:
    """A GpuExecutor whose GPU parts are stood in: its GPU decoder "decodes" all it is given but ``declined`` (whose
    bytes it is handed), and records what it got; the upload and the kernels do nothing."""
    ex = gpu.GpuExecutor.__new__(gpu.GpuExecutor)
    ex.config = PreprocessConfig.single(OutputSpec(), decoding=DecoderOptions(cpu_decoder_share=share))
    ex.device = ex.stream = _Context()
    ex.decoder = SimpleNamespace(release=lambda: None)
    ex.failures = FailureLog(gpu.log, "test")
    ex._pool = ThreadPoolExecutor(max_workers=2)
    ex._pending = ex._in_flight_staging = ex._pinned = None
    on_gpu: list[int] = []

    def gpu_decode(data: list[bytes], hardware: list[bool]) -> list[DecodedImage | None]:
        on_gpu.extend(data)
        return [None if d in declined else DecodedImage(1, 8, 8, 24, None, "gpu_hw") for d in data]

    ex._gpu_decode = gpu_decode
    ex._upload = lambda arrays: (SimpleNamespace(data=SimpleNamespace(ptr=0)), [0] * len(arrays))
    ex._launch = lambda wanted, sources: {}
    return ex, on_gpu


def jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (16, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def test_every_image_is_decoded_once_by_the_path_it_reports() -> None:
    """At share 0.5 over 24 JPEGs and a PNG: Pillow's share never reaches the GPU decoder, the GPU decoder's declined
    image and the PNG fall back to Pillow, and each image is counted once, under the path that decoded it."""
    images = [jpeg(k) for k in range(24)]
    png = io.BytesIO()
    Image.new("RGB", (24, 16)).save(png, "PNG")
    images.append(png.getvalue())
    shared = set(cpu_share(images, {i: SimpleNamespace(format="JPEG") for i in range(24)}, range(24), 0.5))
    declined = next(i for i in range(24) if i not in shared)
    ex, on_gpu = executor(0.5, {images[declined]})
    try:
        result = ex._run(images, {"PIXELS": list(range(25))})
    finally:
        ex._pool.shutdown()
    assert 0 < len(shared) < 24 and not result.errors
    assert sorted(on_gpu) == sorted(images[i] for i in range(24) if i not in shared)
    paths = {i: info.path for i, info in result.images.items()}
    assert paths == {
        i: "cpu" if i in shared else "cpu_fallback" if i in (declined, 24) else "gpu_hw" for i in range(25)
    }
    assert result.decoded_by == {"gpu_hw": 23 - len(shared), "cpu": len(shared), "cpu_fallback": 2}
