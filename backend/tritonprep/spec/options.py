"""The model-wide options: how images are decoded (:class:`DecoderOptions`) and the bounds on input (:class:`Limits`).

Every image is decoded once for all of a model's image outputs, so these are set once per model, never
per output; :class:`~tritonprep.spec.config.PreprocessConfig` holds them beside the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..parameters import check_choice

EXECUTORS = ("auto", "gpu", "cpu")
GPU_DECODERS = ("nvimgcodec", "pillow")
#: nvImageCodec's backends the CUDA stage may use (its BackendKind names, lower-case)
CUDA_DECODER_BACKENDS = ("gpu_only", "hybrid_cpu_gpu")
KNOWN_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF", "JPEG2000")
#: the formats nvImageCodec's GPU decoders may take (nvJPEG, nvJPEG2000, nvTIFF); Pillow decodes the others
GPU_FORMATS = ("JPEG", "JPEG2000", "TIFF")


@dataclass(frozen=True)
class DecoderOptions:
    """How the GPU executor decodes; the nvImageCodec decoder (:mod:`tritonprep.decode.nvimgcodec`) takes it whole.

    Hardware decoder objects and the nvJPEG CUDA decoder each decode on a CUDA stream of their own,
    joined to the instance's stream by CUDA events.
    """

    #: nvimgcodec: decode on the GPU (Pillow takes what it cannot); pillow: decode on the CPU, then upload
    gpu_decoder: str = "nvimgcodec"
    #: try the GPU's hardware JPEG decoder first (then nvJPEG CUDA, then Pillow)
    hw_decoder: bool = True
    #: share of JPEGs for the hardware decoder; the rest go to nvJPEG CUDA concurrently (hash of the bytes)
    hw_decoder_share: float = 1.0
    #: share of a large call's JPEGs that Pillow decodes on the instance's CPU threads while the GPU decoders take the
    #: rest (tritonprep.decode.split); 0: the GPU decoders take every JPEG
    cpu_decoder_share: float = 0.0
    #: hardware decoder objects; a call's JPEGs are split among them and decoded at once
    hw_decoders: int = 1
    #: host threads of each hardware decoder, and of the nvJPEG CUDA decoder (0: nvImageCodec's default)
    hw_decoder_threads: int = 1
    cuda_decoder_threads: int = 2
    #: the CUDA stage's nvImageCodec backends: gpu_only (nvJPEG on the GPU, nvJPEG2000, nvTIFF), hybrid_cpu_gpu (a
    #: JPEG's Huffman decoding on the host threads, the rest on the GPU)
    cuda_decoder_backends: tuple[str, ...] = CUDA_DECODER_BACKENDS
    #: (width, height, batch) the hardware decoders preallocate buffers for
    hw_decoder_prealloc: tuple[int, int, int] = (1024, 768, 64)
    #: JPEG chroma upsampling like libjpeg-turbo's default
    fancy_upsampling: bool = True
    #: the formats the GPU decoders take (the plain cases of each: tritonprep.decode.headers); Pillow the rest
    gpu_formats: tuple[str, ...] = GPU_FORMATS

    def __post_init__(self) -> None:
        check_choice("gpu_decoder", self.gpu_decoder, GPU_DECODERS)
        if not 0.0 < self.hw_decoder_share <= 1.0:
            raise ConfigError(f"hw_decoder_share must be in (0, 1], got {self.hw_decoder_share}")
        if not (self.cpu_decoder_share == 0 or 0.001 <= self.cpu_decoder_share < 1.0):
            raise ConfigError(f"cpu_decoder_share must be 0 or in [0.001, 1), got {self.cpu_decoder_share}")
        if not 1 <= self.hw_decoders <= 8:
            raise ConfigError(f"hw_decoders must be 1..8 (nvImageCodec decoders are heavy), got {self.hw_decoders}")
        for name in ("hw_decoder_threads", "cuda_decoder_threads"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"{name} must be >= 0 (0: nvImageCodec's default, cores - 1), got {getattr(self, name)}"
                )
        backends = self.cuda_decoder_backends
        if not backends or len(set(backends)) != len(backends) or set(backends) - set(CUDA_DECODER_BACKENDS):
            raise ConfigError(
                f"cuda_decoder_backends must be one or both of {', '.join(CUDA_DECODER_BACKENDS)}; got {backends}"
            )
        if len(self.hw_decoder_prealloc) != 3 or min(self.hw_decoder_prealloc) < 1:
            raise ConfigError("hw_decoder_prealloc must be three positive integers: width,height,batch")
        if any(f not in GPU_FORMATS for f in self.gpu_formats):
            raise ConfigError(f"gpu_formats must be a subset of {', '.join(GPU_FORMATS)}; got {self.gpu_formats}")


@dataclass(frozen=True)
class Limits:
    """Bounds on untrusted input, each checked before the expensive work it guards."""

    max_encoded_bytes: int = 20_000_000
    max_pixels: int = 16_800_000
    max_images_per_request: int = 64
    max_progressive_scans: int = 100
    allowed_formats: tuple[str, ...] = KNOWN_FORMATS

    def __post_init__(self) -> None:
        for f in ("max_encoded_bytes", "max_pixels", "max_images_per_request", "max_progressive_scans"):
            if getattr(self, f) < 1:
                raise ConfigError(f"limit {f} must be >= 1, got {getattr(self, f)}")
        unknown = [f for f in self.allowed_formats if f not in KNOWN_FORMATS]
        if unknown or not self.allowed_formats:
            raise ConfigError(
                f"allowed_formats must be a non-empty subset of {', '.join(KNOWN_FORMATS)}; got {self.allowed_formats}"
            )
