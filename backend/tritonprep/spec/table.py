"""The preprocess model's parameters: one table (:data:`PARAMETERS`), its presets, and reading it.

Each row's target says where its value goes: ``output.<field>`` (an :class:`~.outputs.OutputSpec` field:
the row may be set per image output, as ``<OUTPUT>.<name>``), ``decoding.<field>``
(:class:`~.options.DecoderOptions`), ``limits.<field>`` (:class:`~.options.Limits`) or ``model.<field>``
(:class:`~.config.PreprocessConfig` itself); the last three are model-wide. ``preset`` sets no field: it
is expanded into the per-output parameters it stands for, before the explicit ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..parameters import (
    Parameter,
    markdown_table,
    read_bool,
    read_float,
    read_floats,
    read_int,
    read_ints,
    read_lower,
    read_lower_list,
    read_upper,
    read_upper_list,
)

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

#: every parameter of the preprocess model, in the order the docs list them
PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "preset",
        (),
        read_lower,
        "none",
        "none, or ultralytics: Ultralytics' LetterBox (640x640, letterbox, cv2_linear, pad 114, RGB, /255); "
        "explicit parameters override it",
    ),
    Parameter(
        "output_size", ("output.output_height", "output.output_width"), read_ints(2), "224,224", "output height,width"
    ),
    Parameter(
        "resize",
        "output.resize",
        read_lower,
        "shorter_side_crop",
        "shorter_side_crop (torchvision Resize(n) + CenterCrop), letterbox (Ultralytics' rounding), stretch",
    ),
    Parameter(
        "resize_shorter", "output.resize_shorter", read_int, "256", "shorter side after resize, before the center crop"
    ),
    Parameter(
        "interpolation",
        "output.interpolation",
        read_lower,
        "bilinear",
        "bilinear, bicubic (Pillow's antialiased filters) or cv2_linear (OpenCV's INTER_LINEAR, no antialiasing)",
    ),
    Parameter(
        "mean",
        "output.mean",
        read_floats(3),
        "127,127,127",
        "per channel, on the 0..255 scale: out = (pixel - mean) / std",
    ),
    Parameter("std", "output.std", read_floats(3), "128,128,128", "per channel, on the 0..255 scale"),
    Parameter("pad_value", "output.pad_value", read_int, "0", "letterbox border (0..255, normalized like pixels)"),
    Parameter("channel_order", "output.channel_order", read_upper, "RGB", "RGB or BGR"),
    Parameter("layout", "output.layout", read_upper, "NCHW", "NCHW or NHWC"),
    Parameter("dtype", "output.dtype", read_upper, "FP32", "FP32 or FP16"),
    Parameter("executor", "model.executor", read_lower, "auto", "auto (GPU on a GPU instance), gpu, cpu"),
    Parameter(
        "cpu_threads", "model.cpu_threads", read_int, "0", "CPU decode/resize threads (0: one per core, at most 8)"
    ),
    Parameter(
        "gpu_decoder",
        "decoding.gpu_decoder",
        read_lower,
        "nvimgcodec",
        "GPU executor: nvimgcodec (decode on the GPU) or pillow (decode on the CPU, then upload)",
    ),
    Parameter(
        "hw_decoder",
        "decoding.hw_decoder",
        read_bool,
        "true",
        "try the GPU's hardware JPEG decoder first (then nvJPEG CUDA, then Pillow)",
    ),
    Parameter(
        "hw_decoder_share",
        "decoding.hw_decoder_share",
        read_float,
        "1.0",
        "share of JPEGs for the hardware decoder; the rest go to nvJPEG CUDA concurrently "
        "(chosen per image by a hash of its bytes: deterministic)",
    ),
    Parameter(
        "cpu_decoder_share",
        "decoding.cpu_decoder_share",
        read_float,
        "0.0",
        "GPU executor: share of the JPEGs that Pillow decodes on the instance's CPU threads while the GPU decoders "
        "take the rest, in calls that give the GPU decoders 8 JPEGs or more (chosen per image by a hash of its bytes)",
    ),
    Parameter(
        "hw_decoders",
        "decoding.hw_decoders",
        read_int,
        "1",
        "hardware decoder objects per instance; a call's JPEGs are split among them and decoded at once",
    ),
    Parameter(
        "hw_decoder_threads", "decoding.hw_decoder_threads", read_int, "1", "host threads of each hardware decoder"
    ),
    Parameter(
        "cuda_decoder_threads",
        "decoding.cuda_decoder_threads",
        read_int,
        "2",
        "host threads of the nvJPEG CUDA decoder",
    ),
    Parameter(
        "cuda_decoder_backends",
        "decoding.cuda_decoder_backends",
        read_lower_list,
        "gpu_only,hybrid_cpu_gpu",
        "nvImageCodec backends of the CUDA stage: gpu_only (nvJPEG on the GPU, nvJPEG2000, nvTIFF), hybrid_cpu_gpu "
        "(a JPEG's Huffman decoding on the host threads, the rest on the GPU)",
    ),
    Parameter(
        "hw_decoder_prealloc",
        "decoding.hw_decoder_prealloc",
        read_ints(3),
        "1024,768,64",
        "width,height,batch the hardware decoders preallocate buffers for",
    ),
    Parameter(
        "fancy_upsampling",
        "decoding.fancy_upsampling",
        read_bool,
        "true",
        "JPEG chroma upsampling like libjpeg-turbo's default (GPU decoder option)",
    ),
    Parameter(
        "gpu_formats",
        "decoding.gpu_formats",
        read_upper_list,
        "JPEG,JPEG2000,TIFF",
        "GPU executor: the formats nvImageCodec's GPU decoders take (JPEG: nvJPEG; JPEG2000: nvJPEG2000; TIFF: "
        "nvTIFF), each in the plain cases they decode as Pillow does; Pillow decodes the others",
    ),
    Parameter(
        "gpu_memory_mb",
        "model.gpu_memory_mb",
        lambda _name, text: text.strip(),
        "",
        "GPU instances: the most GPU memory one instance may hold, its CUDA context included, MiB (empty: no cap); "
        "caps its CuPy pool and the decoded images it keeps (tritonprep.memory)",
    ),
    Parameter(
        "mps_active_thread_percentage",
        "model.mps_active_thread_percentage",
        read_int,
        "0",
        "GPU instances under MPS: the share of the GPU's SMs the instance's process may use, percent "
        "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for its CUDA context and the processes it starts; 0: none of its own, the "
        "server's environment decides); in classify_fused it limits the network too (one process)",
    ),
    Parameter(
        "mps_client_priority",
        "model.mps_client_priority",
        read_int,
        "0",
        "GPU instances under MPS: the scheduling priority of the instance's process, 0 normal or 1 below normal "
        "(CUDA_MPS_CLIENT_PRIORITY for its CUDA context; below normal lets normal clients' kernels, the network's, "
        "take the SMs first); in classify_fused it lowers the network too (one process)",
    ),
    Parameter("max_encoded_bytes", "limits.max_encoded_bytes", read_int, "20000000", "largest accepted encoded image"),
    Parameter("max_pixels", "limits.max_pixels", read_int, "16800000", "largest accepted decoded image (width*height)"),
    Parameter("max_images_per_request", "limits.max_images_per_request", read_int, "64", "most images in one request"),
    Parameter(
        "max_progressive_scans", "limits.max_progressive_scans", read_int, "100", "most scans of a progressive JPEG"
    ),
    Parameter(
        "allowed_formats",
        "limits.allowed_formats",
        read_upper_list,
        "JPEG,PNG,WEBP,BMP,GIF,TIFF,JPEG2000",
        "formats the server opens (JPEG2000: J2K codestreams and JP2 files)",
    ),
)

#: parameters that no longer exist: ``{name: (the value a config may still give, what to do instead)}``
RETIRED: dict[str, tuple[str, str]] = {
    "hw_decoder_streams": (
        "own",
        "every decoder object now decodes on a CUDA stream of its own, joined to the instance's stream by events "
        "(what 'own' did); delete the parameter from config.pbtxt",
    ),
}

TABLE: dict[str, Parameter] = {p.name: p for p in PARAMETERS}
#: the parameters that may be set per image output (``<OUTPUT>.<name>``): those of OutputSpec fields, and preset
PER_OUTPUT: frozenset[str] = frozenset(
    p.name for p in PARAMETERS if p.name == "preset" or all(t.startswith("output.") for t in p.targets)
)


def check_retired(key: str, text: str) -> bool:
    """True if ``key`` (``name`` or ``<OUTPUT>.name``) is a retired parameter set to its one accepted value, which
    is then ignored; :class:`ConfigError` saying what to do for another value; False for any other parameter."""
    name = key.rpartition(".")[2]
    if name not in RETIRED:
        return False
    accepted, advice = RETIRED[name]
    if text.strip().lower() != accepted:
        raise ConfigError(f"parameter {key!r} = {text!r} is no longer supported: {advice}")
    return True


def with_preset(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` with its ``preset`` expanded: the preset's values, overridden by the explicit ones."""
    preset = read_lower("preset", params.get("preset", "none"))
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    return {**PRESETS[preset], **{k: v for k, v in params.items() if k != "preset"}}


def read_parts(values: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Each value read by its row, grouped by target: ``{"output": {field: value}, "limits": {...}, ...}``."""
    parts: dict[str, dict[str, Any]] = {"output": {}, "model": {}, "decoding": {}, "limits": {}}
    for name, text in values.items():
        for target, value in TABLE[name].values(text):
            part, _, field_name = target.partition(".")
            parts[part][field_name] = value
    return parts


def check_known(names: Mapping[str, str] | set[str]) -> None:
    """Raise :class:`ConfigError` for a name that is no parameter of the table."""
    unknown = sorted(set(names) - set(TABLE))
    if unknown:
        raise ConfigError(f"unknown preprocess parameter(s) {unknown}; known: {sorted(TABLE)}")


def read_output(params: Mapping[str, str]) -> dict[str, Any]:
    """The OutputSpec fields of unprefixed per-output parameters (``preset`` expanded first)."""
    check_known(params)
    shared = sorted(set(params) - PER_OUTPUT)
    if shared:
        raise ConfigError(
            f"{shared} are model-wide parameters, not those of one image output; "
            "PreprocessConfig.from_parameters reads them"
        )
    return read_parts(with_preset(params))["output"]


def _text(value: Any) -> str:
    """A field's value as a parameter's text: ``224,224``, ``127``, ``58.395``, ``bilinear``."""
    if isinstance(value, (tuple, list)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def output_parameters(spec: Any) -> dict[str, str]:
    """The per-output parameters (all but ``preset``) that describe ``spec`` (an OutputSpec), as their text: what
    a config writes so that an output has exactly that preprocessing. ``OutputSpec.from_parameters`` reads them
    back to an equal spec."""
    out = {}
    for p in PARAMETERS:
        if p.name in PER_OUTPUT and p.targets:
            values = [getattr(spec, target.partition(".")[2]) for target in p.targets]
            out[p.name] = _text(values[0] if len(values) == 1 else values)
    return out


def parameter_table() -> str:
    """The parameters as a Markdown table (name, per output, default, meaning), as the docs show them."""
    return markdown_table(
        ("parameter", "per output", "default", "meaning"),
        ((f"`{p.name}`", "yes" if p.name in PER_OUTPUT else "no", f"`{p.default}`", p.help) for p in PARAMETERS),
    )
