"""``cpu_decoder_share`` without a GPU: the parameter's reading and bounds, and which JPEGs of a call the GPU executor
gives Pillow (a share of a call of at least CPU_SHARE_MIN_IMAGES JPEGs, each chosen by its own bytes). The decoding
itself, beside the GPU decoders, is tested on the GPU (tests/gpu/test_gpu_executor.py)."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import pytest

from tritonprep.errors import ConfigError
from tritonprep.executors import gpu
from tritonprep.spec import DecoderOptions, PreprocessConfig
from tritonprep.spec.options import CPU_SHARE_MIN_IMAGES


def chooser(share: float) -> gpu.GpuExecutor:
    """A GpuExecutor with nothing but its config: enough for its choice of Pillow's share."""
    ex = gpu.GpuExecutor.__new__(gpu.GpuExecutor)
    ex.config = SimpleNamespace(decoding=DecoderOptions(cpu_decoder_share=share))
    return ex


def jpegs(n: int) -> tuple[list[bytes], dict[int, SimpleNamespace]]:
    """``n`` distinct byte strings with JPEG headers (the choice reads only the format and the bytes' tail)."""
    images = [b"\xff\xd8" + i.to_bytes(4, "big") * 80 + b"\xff\xd9" for i in range(n)]
    return images, {i: SimpleNamespace(format="JPEG") for i in range(n)}


def test_the_parameter_is_read_and_bounded() -> None:
    assert PreprocessConfig.from_parameters({}).decoding.cpu_decoder_share == 0.0
    assert PreprocessConfig.from_parameters({"cpu_decoder_share": "0.15"}).decoding.cpu_decoder_share == 0.15
    for bad in ("1", "1.5", "-0.1"):
        with pytest.raises(ConfigError, match="cpu_decoder_share must be in"):
            PreprocessConfig.from_parameters({"cpu_decoder_share": bad})
    with pytest.raises(ConfigError, match="cpu_decoder_share"):
        PreprocessConfig.from_parameters({"cpu_decoder_share": "some"})


def test_the_share_goes_by_each_images_bytes() -> None:
    """About the share of a large call goes to Pillow; each image by a hash of its bytes, whatever the call around it
    (the same image always takes the same decoder, so its output does not depend on its neighbours)."""
    images, headers = jpegs(400)
    chosen = chooser(0.25)._cpu_share(images, headers, list(range(400)))
    assert 0.18 < len(chosen) / 400 < 0.32, len(chosen)
    assert chosen == [i for i in range(400) if zlib.crc32(images[i][-256:]) % 1000 >= 750]
    reordered = list(reversed(images))
    again = chooser(0.25)._cpu_share(reordered, headers, list(range(400)))
    assert sorted(images[i] for i in chosen) == sorted(reordered[i] for i in again)


def test_no_share_below_the_smallest_call_or_at_zero() -> None:
    """A lone image, or any call of fewer than CPU_SHARE_MIN_IMAGES JPEGs, waits on the GPU decoders alone; a share
    of 0 gives Pillow nothing; only JPEGs are shared (the GPU's JPEG 2000 and TIFF stay there)."""
    images, headers = jpegs(400)
    small = list(range(CPU_SHARE_MIN_IMAGES - 1))
    assert chooser(0.9)._cpu_share(images, headers, small) == []
    assert chooser(0.0)._cpu_share(images, headers, list(range(400))) == []
    assert chooser(0.9)._cpu_share(images, headers, list(range(CPU_SHARE_MIN_IMAGES))) != []
    headers = {i: SimpleNamespace(format="JPEG" if i % 2 else "JPEG2000") for i in range(400)}
    chosen = chooser(0.9)._cpu_share(images, headers, list(range(400)))
    assert chosen and all(i % 2 for i in chosen)
