"""The preprocessing spec: one typed, validated description of what ``preprocess`` does.

The spec is read once from the ``parameters`` of the preprocess model's ``config.pbtxt``
(Triton hands them to the Python backend as JSON) and drives both executors, the CuPy one
on the GPU and the NumPy/Pillow one on the CPU, so that they cannot disagree on what to do.

Every parameter is one row of :data:`PARAMETERS`: its name in ``config.pbtxt``, the field it
sets, how its string is read and what it means. Reading only converts text (an integer, a
list of numbers, a lower- or upper-cased word); every rule about values (choices, ranges,
fields that must agree) is checked once, when the frozen dataclass is built, whether it is
built from a config or in code. ``python -m tritonprep.spec`` prints the table.

Output values are ``(pixel - mean) / std`` computed in float32 and then cast to ``dtype``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError

RESIZE_MODES = ("shorter_side_crop", "letterbox", "stretch")
INTERPOLATIONS = ("bilinear", "bicubic")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("FP32", "FP16")
EXECUTORS = ("auto", "gpu", "cpu")
GPU_DECODERS = ("nvimgcodec", "pillow")
KNOWN_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")

#: Triton data_type string and numpy dtype of each output dtype
TRITON_DTYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16"}
NUMPY_DTYPES = {"FP32": np.dtype(np.float32), "FP16": np.dtype(np.float16)}


# ---------------------------------------------------------------------- readers: text -> value
def _int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"parameter {name!r} must be an integer, got {text!r}") from None


def _ints(count: int) -> Callable[[str, str], tuple[int, ...]]:
    def read(name: str, text: str) -> tuple[int, ...]:
        values = tuple(_int(name, v) for v in text.split(","))
        if len(values) != count:
            raise ConfigError(f"parameter {name!r} must be {count} comma-separated integers, got {text!r}")
        return values

    return read


def _floats(count: int) -> Callable[[str, str], tuple[float, ...]]:
    """``count`` numbers; one number stands for all ``count``."""

    def read(name: str, text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ConfigError(f"parameter {name!r} must be {count} comma-separated numbers, got {text!r}") from None
        if len(values) == 1:
            values = values * count
        if len(values) != count:
            raise ConfigError(f"parameter {name!r} must have 1 or {count} values, got {len(values)} ({text!r})")
        return values

    return read


def _float(name: str, text: str) -> float:
    return _floats(1)(name, text)[0]


def _lower(_name: str, text: str) -> str:
    return text.strip().lower()


def _upper(_name: str, text: str) -> str:
    return text.strip().upper()


def _bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"parameter {name!r} must be true or false, got {text!r}")
    return value == "true"


def _upper_list(_name: str, text: str) -> tuple[str, ...]:
    return tuple(v.strip().upper() for v in text.split(",") if v.strip())


@dataclass(frozen=True)
class Parameter:
    """One ``config.pbtxt`` parameter: which field(s) it sets and how its text is read."""

    name: str
    #: the field(s) it sets; ``limits.X`` is a field of :class:`Limits`; a tuple spreads a tuple value
    target: str | tuple[str, ...]
    read: Callable[[str, str], Any]
    default: str
    help: str


#: every parameter of the preprocess model, in the order the docs list them
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("output_size", ("output_height", "output_width"), _ints(2), "224,224", "output height,width"),
    Parameter(
        "resize",
        "resize",
        _lower,
        "shorter_side_crop",
        "shorter_side_crop (torchvision Resize(n) + CenterCrop), letterbox, stretch",
    ),
    Parameter("resize_shorter", "resize_shorter", _int, "256", "shorter side after resize, before the center crop"),
    Parameter("interpolation", "interpolation", _lower, "bilinear", "Pillow's antialiased bilinear or bicubic"),
    Parameter(
        "mean", "mean", _floats(3), "127,127,127", "per channel, on the 0..255 scale: out = (pixel - mean) / std"
    ),
    Parameter("std", "std", _floats(3), "128,128,128", "per channel, on the 0..255 scale"),
    Parameter("pad_value", "pad_value", _int, "0", "letterbox border (0..255, normalized like pixels)"),
    Parameter("channel_order", "channel_order", _upper, "RGB", "RGB or BGR"),
    Parameter("layout", "layout", _upper, "NCHW", "NCHW or NHWC"),
    Parameter("dtype", "dtype", _upper, "FP32", "FP32 or FP16"),
    Parameter("executor", "executor", _lower, "auto", "auto (GPU on a GPU instance), gpu, cpu"),
    Parameter("cpu_threads", "cpu_threads", _int, "0", "CPU decode/resize threads (0: one per core, at most 8)"),
    Parameter(
        "gpu_decoder",
        "gpu_decoder",
        _lower,
        "nvimgcodec",
        "GPU executor: nvimgcodec (decode on the GPU) or pillow (decode on the CPU, then upload)",
    ),
    Parameter(
        "hw_decoder",
        "hw_decoder",
        _bool,
        "true",
        "try the GPU's hardware JPEG decoder first (then nvJPEG CUDA, then Pillow)",
    ),
    Parameter(
        "hw_decoder_share",
        "hw_decoder_share",
        _float,
        "1.0",
        "share of JPEGs for the hardware decoder; the rest go to nvJPEG CUDA concurrently "
        "(chosen per image by a hash of its bytes: deterministic)",
    ),
    Parameter(
        "hw_decoders",
        "hw_decoders",
        _int,
        "1",
        "hardware decoder objects per instance; a call's JPEGs are split among them and decoded at once",
    ),
    Parameter("hw_decoder_threads", "hw_decoder_threads", _int, "1", "host threads of each hardware decoder"),
    Parameter("cuda_decoder_threads", "cuda_decoder_threads", _int, "2", "host threads of the nvJPEG CUDA decoder"),
    Parameter(
        "hw_decoder_prealloc",
        ("hw_prealloc_width", "hw_prealloc_height", "hw_prealloc_batch"),
        _ints(3),
        "1024,768,64",
        "width,height,batch the hardware decoders preallocate buffers for",
    ),
    Parameter(
        "fancy_upsampling",
        "fancy_upsampling",
        _bool,
        "true",
        "JPEG chroma upsampling like libjpeg-turbo's default (GPU decoder option)",
    ),
    Parameter("max_encoded_bytes", "limits.max_encoded_bytes", _int, "20000000", "largest accepted encoded image"),
    Parameter("max_pixels", "limits.max_pixels", _int, "16800000", "largest accepted decoded image (width*height)"),
    Parameter("max_images_per_request", "limits.max_images_per_request", _int, "64", "most images in one request"),
    Parameter("max_progressive_scans", "limits.max_progressive_scans", _int, "100", "most scans of a progressive JPEG"),
    Parameter(
        "allowed_formats",
        "limits.allowed_formats",
        _upper_list,
        "JPEG,PNG,WEBP,BMP,GIF,TIFF",
        "formats Pillow may open",
    ),
)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


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


@dataclass(frozen=True)
class PreprocessSpec:
    """What the preprocess model produces from one decoded RGB image."""

    output_height: int = 224
    output_width: int = 224
    resize: str = "shorter_side_crop"
    resize_shorter: int = 256
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = (127.0, 127.0, 127.0)
    std: tuple[float, float, float] = (128.0, 128.0, 128.0)
    pad_value: int = 0
    channel_order: str = "RGB"
    layout: str = "NCHW"
    dtype: str = "FP32"
    executor: str = "auto"
    cpu_threads: int = 0
    gpu_decoder: str = "nvimgcodec"
    hw_decoder: bool = True
    hw_decoder_share: float = 1.0
    hw_decoders: int = 1
    hw_decoder_threads: int = 1
    cuda_decoder_threads: int = 2
    hw_prealloc_width: int = 1024
    hw_prealloc_height: int = 768
    hw_prealloc_batch: int = 64
    fancy_upsampling: bool = True
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if not (1 <= self.output_height <= 8192 and 1 <= self.output_width <= 8192):
            raise ConfigError(f"output_size must be between 1 and 8192, got {self.output_height}x{self.output_width}")
        for name, choices in (
            ("resize", RESIZE_MODES),
            ("interpolation", INTERPOLATIONS),
            ("channel_order", CHANNEL_ORDERS),
            ("layout", LAYOUTS),
            ("dtype", DTYPES),
            ("executor", EXECUTORS),
            ("gpu_decoder", GPU_DECODERS),
        ):
            _check_choice(name, getattr(self, name), choices)
        if self.resize == "shorter_side_crop" and self.resize_shorter < max(self.output_height, self.output_width):
            raise ConfigError(
                f"resize_shorter ({self.resize_shorter}) must be >= the output size "
                f"({self.output_height}x{self.output_width}) so that the center crop fits"
            )
        if self.resize_shorter < 1:
            raise ConfigError(f"resize_shorter must be >= 1, got {self.resize_shorter}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ConfigError("mean and std must have 3 values each")
        if any(s == 0 for s in self.std):
            raise ConfigError(f"std values must be non-zero, got {self.std}")
        if not 0 <= self.pad_value <= 255:
            raise ConfigError(f"pad_value must be in 0..255, got {self.pad_value}")
        if self.cpu_threads < 0:
            raise ConfigError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        if not 0.0 < self.hw_decoder_share <= 1.0:
            raise ConfigError(f"hw_decoder_share must be in (0, 1], got {self.hw_decoder_share}")
        if not 1 <= self.hw_decoders <= 8:
            raise ConfigError(f"hw_decoders must be 1..8 (nvImageCodec decoders are heavy), got {self.hw_decoders}")
        for name in ("hw_decoder_threads", "cuda_decoder_threads"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"{name} must be >= 0 (0: nvImageCodec's default, cores - 1), got {getattr(self, name)}"
                )
        if min(self.hw_prealloc_width, self.hw_prealloc_height, self.hw_prealloc_batch) < 1:
            raise ConfigError("hw_decoder_prealloc must be three positive integers: width,height,batch")

    # ------------------------------------------------------------------ derived values
    @property
    def output_shape(self) -> tuple[int, int, int]:
        """Shape of one output image, without the batch dimension."""
        if self.layout == "NCHW":
            return (3, self.output_height, self.output_width)
        return (self.output_height, self.output_width, 3)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy (and CuPy) dtype of the output."""
        return NUMPY_DTYPES[self.dtype]

    @property
    def triton_dtype(self) -> str:
        """The output's ``data_type`` in ``config.pbtxt``."""
        return TRITON_DTYPES[self.dtype]

    @property
    def scale(self) -> tuple[float, float, float]:
        """Per-channel multiplier: ``out = pixel * scale + bias`` (RGB order)."""
        return tuple(1.0 / s for s in self.std)  # type: ignore[return-value]

    @property
    def bias(self) -> tuple[float, float, float]:
        """Per-channel offset: ``out = pixel * scale + bias`` (RGB order)."""
        return tuple(-m / s for m, s in zip(self.mean, self.std))  # type: ignore[return-value]

    @property
    def resolved_cpu_threads(self) -> int:
        """Worker threads of the CPU executor."""
        return self.cpu_threads or max(1, min(8, os.cpu_count() or 1))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> PreprocessSpec:
        """Build a spec from plain ``{name: value}`` strings; unknown names are an error."""
        table = {p.name: p for p in PARAMETERS}
        unknown = sorted(set(params) - set(table))
        if unknown:
            raise ConfigError(f"unknown preprocess parameter(s) {unknown}; known: {sorted(table)}")
        spec_kw: dict[str, Any] = {}
        limits_kw: dict[str, Any] = {}
        for name, text in params.items():
            p = table[name]
            value = p.read(name, text)
            targets = p.target if isinstance(p.target, tuple) else (p.target,)
            values = value if isinstance(p.target, tuple) else (value,)
            for target, v in zip(targets, values):
                if target.startswith("limits."):
                    limits_kw[target.split(".", 1)[1]] = v
                else:
                    spec_kw[target] = v
        return cls(**spec_kw, limits=Limits(**limits_kw))

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any], output_name: str = "PIXELS") -> PreprocessSpec:
        """Build a spec from Triton's JSON model config and check it against the output tensor."""
        raw = model_config.get("parameters", {}) or {}
        params = {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in raw.items()}
        spec = cls.from_parameters(params)
        spec.check_output_config(model_config, output_name)
        return spec

    def check_output_config(self, model_config: Mapping[str, Any], output_name: str) -> None:
        """Raise :class:`ConfigError` unless the output tensor's dims and type match the spec."""
        outputs = {o["name"]: o for o in model_config.get("output", [])}
        if output_name not in outputs:
            raise ConfigError(f"model config has no output named {output_name!r} (outputs: {sorted(outputs)})")
        out = outputs[output_name]
        dims = tuple(int(d) for d in out.get("dims", []))
        if dims != self.output_shape:
            raise ConfigError(
                f"output {output_name!r} has dims {list(dims)} but the parameters describe "
                f"{list(self.output_shape)} ({self.layout}, {self.output_height}x{self.output_width}); make them agree"
            )
        if out.get("data_type") != self.triton_dtype:
            raise ConfigError(
                f"output {output_name!r} has data_type {out.get('data_type')} but parameter dtype is "
                f"{self.dtype} ({self.triton_dtype}); make them agree"
            )
        max_batch = int(model_config.get("max_batch_size", 0))
        if max_batch < 1:
            raise ConfigError("the preprocess model needs max_batch_size >= 1 (images travel along the batch dim)")


def parameter_table() -> str:
    """The parameters as a Markdown table (name, default, meaning), as the README shows them."""
    rows = ["| parameter | default | meaning |", "|---|---|---|"]
    rows += [f"| `{p.name}` | `{p.default}` | {p.help} |" for p in PARAMETERS]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(parameter_table() + "\n")
