"""What one image output is: its size, resize rule, interpolation, normalization, channel order, layout, dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..parameters import check_choice
from .table import read_output

RESIZE_MODES = ("shorter_side_crop", "letterbox", "stretch")
#: bilinear and bicubic are Pillow's antialiased filters; cv2_linear is OpenCV's INTER_LINEAR (no antialiasing)
INTERPOLATIONS = ("bilinear", "bicubic", "cv2_linear")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("FP32", "FP16")
#: Triton data_type string and numpy dtype of each output dtype
TRITON_DTYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16"}
NUMPY_DTYPES = {"FP32": np.dtype(np.float32), "FP16": np.dtype(np.float16)}


@dataclass(frozen=True)
class OutputSpec:
    """What the preprocess model makes of one decoded, upright RGB image for one image output.

    Output values are ``(pixel - mean) / std`` computed in float32 and then cast to ``dtype``.
    """

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

    def __post_init__(self) -> None:
        if not (1 <= self.output_height <= 8192 and 1 <= self.output_width <= 8192):
            raise ConfigError(f"output_size must be between 1 and 8192, got {self.output_height}x{self.output_width}")
        for name, choices in (
            ("resize", RESIZE_MODES),
            ("interpolation", INTERPOLATIONS),
            ("channel_order", CHANNEL_ORDERS),
            ("layout", LAYOUTS),
            ("dtype", DTYPES),
        ):
            check_choice(name, getattr(self, name), choices)
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

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> OutputSpec:
        """An output spec from unprefixed per-output parameters (``preset`` first, then the others), e.g.
        ``{"preset": "ultralytics", "output_size": "320,320"}``; a model-wide or unknown name is an error."""
        return cls(**read_output(params))

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
