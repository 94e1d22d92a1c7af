"""The preprocessing spec: one typed, validated description of what ``preprocess`` does.

The spec is read once from the ``parameters`` of the preprocess model's ``config.pbtxt``
(Triton hands them to the Python backend as JSON) and drives both executors, the CuPy one
on the GPU and the NumPy/Pillow one on the CPU, so that they cannot disagree on what to do.

Parameter reference (all values are strings, as Triton requires)::

    output_size      "224,224"            height,width of the output image
    resize           "shorter_side_crop"  | "letterbox" | "stretch"
    resize_shorter   "256"                shorter side after resize (shorter_side_crop only)
    interpolation    "bilinear"           | "bicubic"  (Pillow's antialiased filters)
    mean             "127,127,127"        per channel, on the 0..255 pixel scale
    std              "128,128,128"        per channel, on the 0..255 pixel scale
    pad_value        "0"                  pixel value (0..255) of letterbox borders
    channel_order    "RGB"                | "BGR"
    layout           "NCHW"               | "NHWC"
    dtype            "FP32"               | "FP16"
    executor         "auto"               | "gpu" | "cpu"
    cpu_threads      "0"                  CPU executor decode/resize threads (0: one per core, max 8)
    gpu_decoder      "nvimgcodec"         | "pillow"  (GPU executor: decode on the GPU, or on the CPU then upload)
    hw_decoder       "true"               try the GPU's hardware JPEG decoder first (then nvJPEG CUDA, then Pillow)
    hw_decoder_share "1.0"                share of JPEGs given to the hardware decoder, the rest decoded by nvJPEG CUDA
                                          concurrently (chosen per image by a hash of its bytes: deterministic)
    fancy_upsampling "true"               JPEG chroma upsampling like libjpeg-turbo's default (GPU decoder option)
    max_encoded_bytes       "20000000"    largest accepted encoded image
    max_pixels              "16800000"    largest accepted decoded image (width*height)
    max_images_per_request  "64"          most images in one request
    max_progressive_scans   "100"         most scans of a progressive JPEG
    allowed_formats  "JPEG,PNG,WEBP,BMP,GIF,TIFF"

Output values are ``(pixel - mean) / std`` computed in float32 and then cast to ``dtype``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import ConfigError

RESIZE_MODES = ("shorter_side_crop", "letterbox", "stretch")
INTERPOLATIONS = ("bilinear", "bicubic")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("FP32", "FP16")
EXECUTORS = ("auto", "gpu", "cpu")
GPU_DECODERS = ("nvimgcodec", "pillow")
KNOWN_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")

#: Triton data_type string of each output dtype
TRITON_DTYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16"}


def _floats(name: str, text: str, count: int) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"parameter {name!r} must be {count} comma-separated numbers, got {text!r}") from None
    if len(values) == 1:
        values = values * count
    if len(values) != count:
        raise ConfigError(f"parameter {name!r} must have 1 or {count} values, got {len(values)} ({text!r})")
    return values


def _int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"parameter {name!r} must be an integer, got {text!r}") from None
    if value < minimum:
        raise ConfigError(f"parameter {name!r} must be >= {minimum}, got {value}")
    return value


def _choice(name: str, text: str, choices: tuple[str, ...], *, upper: bool = False) -> str:
    value = text.strip().upper() if upper else text.strip().lower()
    if value not in choices:
        raise ConfigError(f"parameter {name!r} must be one of {', '.join(choices)}; got {text!r}")
    return value


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
    fancy_upsampling: bool = True
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if not (1 <= self.output_height <= 8192 and 1 <= self.output_width <= 8192):
            raise ConfigError(f"output_size must be between 1 and 8192, got {self.output_height}x{self.output_width}")
        if self.resize not in RESIZE_MODES:
            raise ConfigError(f"resize must be one of {RESIZE_MODES}, got {self.resize!r}")
        if self.resize == "shorter_side_crop" and self.resize_shorter < max(self.output_height, self.output_width):
            raise ConfigError(
                f"resize_shorter ({self.resize_shorter}) must be >= the output size "
                f"({self.output_height}x{self.output_width}) so that the center crop fits"
            )
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ConfigError("mean and std must have 3 values each")
        if any(s == 0 for s in self.std):
            raise ConfigError(f"std values must be non-zero, got {self.std}")
        if not 0 <= self.pad_value <= 255:
            raise ConfigError(f"pad_value must be in 0..255, got {self.pad_value}")
        for name, choices in (("channel_order", CHANNEL_ORDERS), ("layout", LAYOUTS), ("dtype", DTYPES)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.cpu_threads < 0:
            raise ConfigError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        if not 0.0 < self.hw_decoder_share <= 1.0:
            raise ConfigError(f"hw_decoder_share must be in (0, 1], got {self.hw_decoder_share}")
        if self.gpu_decoder not in GPU_DECODERS:
            raise ConfigError(f"gpu_decoder must be one of {GPU_DECODERS}, got {self.gpu_decoder!r}")

    # ------------------------------------------------------------------ derived values
    @property
    def output_shape(self) -> tuple[int, int, int]:
        """Shape of one output image, without the batch dimension."""
        if self.layout == "NCHW":
            return (3, self.output_height, self.output_width)
        return (self.output_height, self.output_width, 3)

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
        known = {f.name for f in fields(cls)} | {f.name for f in fields(Limits)} | {"output_size"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"unknown preprocess parameter(s) {unknown}; known: {sorted(known)}")
        kw: dict[str, Any] = {}
        if "output_size" in params:
            h, w = (int(v) for v in _floats("output_size", params["output_size"], 2))
            kw["output_height"], kw["output_width"] = h, w
        if "resize" in params:
            kw["resize"] = _choice("resize", params["resize"], RESIZE_MODES)
        if "resize_shorter" in params:
            kw["resize_shorter"] = _int("resize_shorter", params["resize_shorter"], 1)
        if "interpolation" in params:
            kw["interpolation"] = _choice("interpolation", params["interpolation"], INTERPOLATIONS)
        for name in ("mean", "std"):
            if name in params:
                kw[name] = _floats(name, params[name], 3)
        if "pad_value" in params:
            kw["pad_value"] = _int("pad_value", params["pad_value"])
        for name, choices in (("channel_order", CHANNEL_ORDERS), ("layout", LAYOUTS), ("dtype", DTYPES)):
            if name in params:
                kw[name] = _choice(name, params[name], choices, upper=True)
        if "executor" in params:
            kw["executor"] = _choice("executor", params["executor"], EXECUTORS)
        if "cpu_threads" in params:
            kw["cpu_threads"] = _int("cpu_threads", params["cpu_threads"])
        if "gpu_decoder" in params:
            kw["gpu_decoder"] = _choice("gpu_decoder", params["gpu_decoder"], GPU_DECODERS)
        if "hw_decoder_share" in params:
            kw["hw_decoder_share"] = _floats("hw_decoder_share", params["hw_decoder_share"], 1)[0]
        for name in ("hw_decoder", "fancy_upsampling"):
            if name in params:
                kw[name] = _choice(name, params[name], ("true", "false")) == "true"
        lim: dict[str, Any] = {}
        for name in ("max_encoded_bytes", "max_pixels", "max_images_per_request", "max_progressive_scans"):
            if name in params:
                lim[name] = _int(name, params[name], 1)
        if "allowed_formats" in params:
            lim["allowed_formats"] = tuple(
                _choice("allowed_formats", v, KNOWN_FORMATS, upper=True) for v in params["allowed_formats"].split(",")
            )
        return cls(**kw, limits=Limits(**lim))

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
        if out.get("data_type") != TRITON_DTYPES[self.dtype]:
            raise ConfigError(
                f"output {output_name!r} has data_type {out.get('data_type')} but parameter dtype is "
                f"{self.dtype} ({TRITON_DTYPES[self.dtype]}); make them agree"
            )
        max_batch = int(model_config.get("max_batch_size", 0))
        if max_batch < 1:
            raise ConfigError("the preprocess model needs max_batch_size >= 1 (images travel along the batch dim)")
