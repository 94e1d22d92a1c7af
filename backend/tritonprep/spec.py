"""The preprocessing spec: one typed, validated description of what ``preprocess`` does.

The spec is read once from the ``parameters`` of the preprocess model's ``config.pbtxt``
(Triton hands them to the Python backend as JSON) and drives both executors, the CuPy one
on the GPU and the NumPy/Pillow one on the CPU, so that they cannot disagree on what to do.

Every parameter is one row of :data:`PARAMETERS`: its name in ``config.pbtxt``, the field it
sets, how its string is read and what it means. Reading only converts text (an integer, a
list of numbers, a lower- or upper-cased word); every rule about values (choices, ranges,
fields that must agree) is checked once, when the frozen dataclass is built, whether it is
built from a config or in code. ``python -m tritonprep.spec`` prints the table.

**Several outputs from one decode.** The model may declare several image outputs in its
``config.pbtxt``; each gets its own :class:`PreprocessSpec`. An unprefixed parameter sets every
output; ``<OUTPUT>.<parameter>`` overrides it for that output only (``EMBED_PIXELS.resize_shorter``).
Only the rows marked ``output`` in :data:`PARAMETERS` may be prefixed: decoding, the executor and
the input limits are shared, because every image is decoded once for all outputs
(:class:`PreprocessConfig`). A ``preset`` (:data:`PRESETS`) fills in a known model family's
preprocessing (``ultralytics``: Ultralytics' LetterBox); explicit parameters override it.

**Provenance outputs** (:data:`PROVENANCE`), optional, computed only when a request asks for them:
``ORIGINAL_SIZE`` and ``DECODER`` per image, and ``<OUTPUT>_SCALE`` / ``<OUTPUT>_PADDING`` per image
and image output (see :func:`tritonprep.geometry.window_transform`).

Output values are ``(pixel - mean) / std`` computed in float32 and then cast to ``dtype``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError
from .memory import instance_budget_mb

RESIZE_MODES = ("shorter_side_crop", "letterbox", "stretch")
#: bilinear and bicubic are Pillow's antialiased filters; cv2_linear is OpenCV's INTER_LINEAR (no antialiasing)
INTERPOLATIONS = ("bilinear", "bicubic", "cv2_linear")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("FP32", "FP16")
EXECUTORS = ("auto", "gpu", "cpu")
GPU_DECODERS = ("nvimgcodec", "pillow")
#: where the hardware (and CUDA) decoder objects decode: each on a CUDA stream of its own, or on the instance's
HW_DECODER_STREAMS = ("own", "caller")
KNOWN_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF", "JPEG2000")

#: where a parameter applies: to each image output (may be prefixed) or to the model (shared by all outputs)
OUTPUT, SHARED = "output", "shared"

#: presets: parameter values of a model family, applied before the explicit parameters of their scope
PRESETS: dict[str, dict[str, str]] = {
    "none": {},
    # Ultralytics' LetterBox as their predictors use it for exported YOLO models (auto=False, scaleup=True,
    # center=True): the ratio min(out/in), the resized size and the borders rounded as LetterBox rounds them,
    # cv2.resize INTER_LINEAR, border 114, RGB, pixel / 255
    "ultralytics": {
        "output_size": "640,640",
        "resize": "letterbox",
        "interpolation": "cv2_linear",
        "pad_value": "114",
        "mean": "0,0,0",
        "std": "255,255,255",
        "channel_order": "RGB",
    },
}

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
    #: OUTPUT: may be set per image output as ``<OUTPUT>.<name>``; SHARED: one value for the model
    scope: str = SHARED


#: every parameter of the preprocess model, in the order the docs list them
PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "preset",
        (),
        _lower,
        "none",
        "none, or ultralytics: Ultralytics' LetterBox (640x640, letterbox, cv2_linear, pad 114, RGB, /255); "
        "explicit parameters override it",
        OUTPUT,
    ),
    Parameter("output_size", ("output_height", "output_width"), _ints(2), "224,224", "output height,width", OUTPUT),
    Parameter(
        "resize",
        "resize",
        _lower,
        "shorter_side_crop",
        "shorter_side_crop (torchvision Resize(n) + CenterCrop), letterbox (Ultralytics' rounding), stretch",
        OUTPUT,
    ),
    Parameter(
        "resize_shorter", "resize_shorter", _int, "256", "shorter side after resize, before the center crop", OUTPUT
    ),
    Parameter(
        "interpolation",
        "interpolation",
        _lower,
        "bilinear",
        "bilinear, bicubic (Pillow's antialiased filters) or cv2_linear (OpenCV's INTER_LINEAR, no antialiasing)",
        OUTPUT,
    ),
    Parameter(
        "mean",
        "mean",
        _floats(3),
        "127,127,127",
        "per channel, on the 0..255 scale: out = (pixel - mean) / std",
        OUTPUT,
    ),
    Parameter("std", "std", _floats(3), "128,128,128", "per channel, on the 0..255 scale", OUTPUT),
    Parameter("pad_value", "pad_value", _int, "0", "letterbox border (0..255, normalized like pixels)", OUTPUT),
    Parameter("channel_order", "channel_order", _upper, "RGB", "RGB or BGR", OUTPUT),
    Parameter("layout", "layout", _upper, "NCHW", "NCHW or NHWC", OUTPUT),
    Parameter("dtype", "dtype", _upper, "FP32", "FP32 or FP16", OUTPUT),
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
    Parameter(
        "hw_decoder_streams",
        "hw_decoder_streams",
        _lower,
        "own",
        "own: each decoder object decodes on a CUDA stream of its own (several decode at once), joined to the "
        "instance's stream by events; caller: all decode on the instance's stream",
    ),
    Parameter("cuda_decoder_threads", "cuda_decoder_threads", _int, "2", "host threads of the nvJPEG CUDA decoder"),
    Parameter(
        "hw_decoder_prealloc",
        ("hw_prealloc_width", "hw_prealloc_height", "hw_prealloc_batch"),
        _ints(3),
        "1024,768,64",
        "width,height,batch the hardware decoders preallocate buffers for",
    ),
    Parameter(
        "gpu_memory_mb",
        "gpu_memory_mb",
        lambda _name, text: text.strip(),
        "",
        "GPU instances: the most GPU memory one instance may hold, its CUDA context included, MiB (empty: no cap); "
        "caps its CuPy pool and the decoded images it keeps (tritonprep.memory)",
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
        "JPEG,PNG,WEBP,BMP,GIF,TIFF,JPEG2000",
        "formats the server opens (JPEG2000: J2K codestreams and JP2 files)",
    ),
)


@dataclass(frozen=True)
class ProvenanceOutput:
    """An optional per-image output that says how an image was decoded and transformed."""

    data_type: str
    dims: tuple[int, ...]
    help: str


#: the provenance outputs by name; ``_SCALE`` and ``_PADDING`` are suffixes of an image output's name
PROVENANCE: dict[str, ProvenanceOutput] = {
    "ORIGINAL_SIZE": ProvenanceOutput(
        "TYPE_INT32", (2,), "width, height of the decoded image (upright: EXIF orientation applied)"
    ),
    "DECODER": ProvenanceOutput("TYPE_STRING", (1,), "how it was decoded: gpu_hw, gpu_cuda, cpu_fallback or cpu"),
    "_SCALE": ProvenanceOutput(
        "TYPE_FP32", (2,), "x, y: resized / original size; output pixel x maps to original (x - left) / scale_x"
    ),
    "_PADDING": ProvenanceOutput(
        "TYPE_INT32", (4,), "left, top, right, bottom border in output pixels (negative: cropped away)"
    ),
}
PROVENANCE_SUFFIXES = ("_SCALE", "_PADDING")


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
    hw_decoder_streams: str = "own"
    cuda_decoder_threads: int = 2
    hw_prealloc_width: int = 1024
    hw_prealloc_height: int = 768
    hw_prealloc_batch: int = 64
    fancy_upsampling: bool = True
    gpu_memory_mb: str = ""
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
            ("hw_decoder_streams", HW_DECODER_STREAMS),
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
        if self.gpu_memory_mb:
            instance_budget_mb(self.gpu_memory_mb)  # a malformed budget fails the load, not the first GPU use

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
        """Build a spec from plain unprefixed ``{name: value}`` strings (a ``preset`` first, then the
        others); unknown names are an error."""
        unknown = sorted(set(params) - set(_TABLE))
        if unknown:
            raise ConfigError(f"unknown preprocess parameter(s) {unknown}; known: {sorted(_TABLE)}")
        return cls._build(_with_preset(params))

    @classmethod
    def _build(cls, values: Mapping[str, str]) -> PreprocessSpec:
        """Read each value with its row of :data:`PARAMETERS` and build the (validated) spec."""
        spec_kw: dict[str, Any] = {}
        limits_kw: dict[str, Any] = {}
        for name, text in values.items():
            p = _TABLE[name]
            value = p.read(name, text)
            targets = p.target if isinstance(p.target, tuple) else (p.target,)
            values_ = value if isinstance(p.target, tuple) else (value,)
            for target, v in zip(targets, values_):
                if target.startswith("limits."):
                    limits_kw[target.split(".", 1)[1]] = v
                else:
                    spec_kw[target] = v
        return cls(**spec_kw, limits=Limits(**limits_kw))

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any], output_name: str = "PIXELS") -> PreprocessSpec:
        """The spec of image output ``output_name`` of Triton's JSON model config (checked like the whole config)."""
        specs = PreprocessConfig.from_model_config(model_config).specs
        if output_name not in specs:
            raise ConfigError(f"model config has no output named {output_name!r} (image outputs: {sorted(specs)})")
        return specs[output_name]

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


_TABLE: dict[str, Parameter] = {p.name: p for p in PARAMETERS}

#: the spec fields every output of one model shares: one decode per image serves all outputs
SHARED_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        t.split(".")[0]
        for p in PARAMETERS
        if p.scope == SHARED
        for t in (p.target if isinstance(p.target, tuple) else (p.target,))
    )
)


def _with_preset(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` with its ``preset`` expanded: the preset's values, overridden by the explicit ones."""
    preset = _lower("preset", params.get("preset", "none"))
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    return {**PRESETS[preset], **{k: v for k, v in params.items() if k != "preset"}}


def provenance_of(name: str) -> tuple[str, str | None]:
    """``(kind, image output)`` of a provenance output name: ``("DECODER", None)``, ``("_SCALE", "PIXELS")``
    for ``PIXELS_SCALE``; ``("", None)`` for a name that is not one."""
    if name in PROVENANCE:
        return name, None
    for suffix in PROVENANCE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return suffix, name[: -len(suffix)]
    return "", None


@dataclass(frozen=True)
class PreprocessConfig:
    """Everything one preprocess model produces: its image outputs, each with its own spec, from one
    decode per image, and the provenance outputs it offers (computed only when requested)."""

    #: (output name, spec) of each image output, in config order
    outputs: tuple[tuple[str, PreprocessSpec], ...]
    #: names of the provenance outputs the model declares (see :data:`PROVENANCE`)
    provenance: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.outputs:
            raise ConfigError("the preprocess model declares no image output; add one (e.g. PIXELS) to config.pbtxt")
        names = [n for n, _ in self.outputs]
        if len(set(names)) != len(names):
            raise ConfigError(f"image output names must be unique, got {names}")
        first_name, first = self.outputs[0]
        for name, spec in self.outputs[1:]:
            for f in SHARED_FIELDS:
                if getattr(spec, f) != getattr(first, f):
                    raise ConfigError(
                        f"output {name!r} has {f}={getattr(spec, f)!r} but {first_name!r} has {getattr(first, f)!r}; "
                        "decoding, the executor and the limits are shared by all outputs (one decode per image)"
                    )
        for p in self.provenance:
            kind, image = provenance_of(p)
            if not kind or (image is not None and image not in names):
                raise ConfigError(
                    f"{p!r} is not a provenance output of this model: use ORIGINAL_SIZE, DECODER or "
                    f"<image output>_SCALE / _PADDING with an image output of {names}"
                )

    @property
    def specs(self) -> dict[str, PreprocessSpec]:
        """``{image output name: spec}``."""
        return dict(self.outputs)

    @property
    def shared(self) -> PreprocessSpec:
        """A spec holding the settings all outputs share (decoding, executor, limits): the first one."""
        return self.outputs[0][1]

    @classmethod
    def single(cls, spec: PreprocessSpec, name: str = "PIXELS") -> PreprocessConfig:
        """A model with one image output and no provenance outputs."""
        return cls(((name, spec),))

    @classmethod
    def from_parameters(
        cls, params: Mapping[str, str], image_outputs: Sequence[str], provenance: Sequence[str] = ()
    ) -> PreprocessConfig:
        """Build the spec of each image output from unprefixed and ``<OUTPUT>.``-prefixed parameters.

        For output ``X`` the layers are, later ones winning: the table defaults, the unprefixed
        ``preset``, the unprefixed parameters, ``X.preset``, the ``X.`` parameters.
        """
        common: dict[str, str] = {}
        own: dict[str, dict[str, str]] = {name: {} for name in image_outputs}
        for key, text in params.items():
            output, _, name = key.rpartition(".")
            if name not in _TABLE:
                raise ConfigError(f"unknown preprocess parameter {key!r}; known: {sorted(_TABLE)}")
            if not output:
                common[name] = text
            elif _TABLE[name].scope != OUTPUT:
                raise ConfigError(
                    f"parameter {key!r}: {name} is shared by all outputs (each image is decoded once for all of "
                    f"them); set it without the {output + '.'!r} prefix"
                )
            elif output not in own:
                raise ConfigError(
                    f"parameter {key!r} names {output!r}, which is not an image output of this model "
                    f"(image outputs: {list(image_outputs)})"
                )
            else:
                own[output][name] = text
        base = _with_preset(common)
        outputs = []
        for name in image_outputs:
            try:
                outputs.append((name, PreprocessSpec._build({**base, **_with_preset(own[name])})))
            except ConfigError as e:
                raise ConfigError(f"output {name!r}: {e}") from None
        return cls(tuple(outputs), tuple(provenance))

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any]) -> PreprocessConfig:
        """Build the config from Triton's JSON model config; every output must agree with its parameters."""
        raw = model_config.get("parameters", {}) or {}
        params = {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in raw.items()}
        declared = [o["name"] for o in model_config.get("output", [])]
        image_outputs, provenance = [], []
        for n in declared:
            kind, image = provenance_of(n)
            if not kind:
                image_outputs.append(n)
            elif image is None or image in declared:
                provenance.append(n)
            else:
                raise ConfigError(
                    f"output {n!r} ends in {kind}, which names the provenance of image output {image!r}, "
                    f"but the config declares no output {image!r}; rename it or declare {image!r}"
                )
        config = cls.from_parameters(params, image_outputs, provenance)
        for name, spec in config.outputs:
            spec.check_output_config(model_config, name)
        outputs = {o["name"]: o for o in model_config.get("output", [])}
        for name in provenance:
            want = PROVENANCE[provenance_of(name)[0]]
            got = outputs[name]
            dims = tuple(int(d) for d in got.get("dims", []))
            if (got.get("data_type"), dims) != (want.data_type, want.dims):
                raise ConfigError(
                    f"provenance output {name!r} must be {want.data_type} with dims {list(want.dims)} "
                    f"({want.help}); the config has {got.get('data_type')} {list(dims)}"
                )
        if int(model_config.get("max_batch_size", 0)) < 1:
            raise ConfigError("the preprocess model needs max_batch_size >= 1 (images travel along the batch dim)")
        return config


def parameter_table() -> str:
    """The parameters as a Markdown table (name, scope, default, meaning), as the README shows them."""
    rows = ["| parameter | per output | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{p.name}` | {'yes' if p.scope == OUTPUT else 'no'} | `{p.default}` | {p.help} |" for p in PARAMETERS]
    return "\n".join(rows)


def provenance_table() -> str:
    """The provenance outputs as a Markdown table, as the README shows them."""
    rows = ["| output | data_type, dims | per image |", "|---|---|---|"]
    rows += [
        f"| `{'<OUTPUT>' + n if n.startswith('_') else n}` | `{p.data_type}` `{list(p.dims)}` | {p.help} |"
        for n, p in PROVENANCE.items()
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(parameter_table() + "\n\n" + provenance_table() + "\n")
