"""The network files beside ``model.onnx`` and the one a GPU runtime runs for a config (standard library only: the
classifier's runtimes, the launcher's preflight and ``tritonprep model add`` read the same rules).

``make model`` writes, for the classifier and the embedder, the FP16 variant ``model.fp16.onnx`` (FP32 input, FP16
weights and math) and ``model.fp16.nhwc.onnx``: the same taking FP16 channel-last input, which their GPU configs'
``[224, 224, 3]`` input runs (:func:`model_file`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the FP16 variant of ``model.onnx`` that ``make model`` writes beside it
FP16_SUFFIX = ".fp16.onnx"
#: its variant with a channel-last FP16 input (``make model``): what a GPU config declaring ``[H, W, C]`` runs
NHWC_FP16_SUFFIX = ".fp16.nhwc.onnx"
#: channel-last rows to the NCHW that ``model.onnx`` takes
TO_NCHW = (0, 3, 1, 2)


def channels_last(dims: Sequence[Any]) -> bool:
    """Whether a network input's dims (without the batch axis) are an image's height, width and channels (1 or 3)."""
    sizes = [int(d) if isinstance(d, int) or str(d).isdigit() else None for d in dims]
    return len(sizes) == 3 and sizes[-1] in (1, 3) and sizes[0] not in (1, 3)


def fp16_variant(onnx_path: Path) -> Path:
    """The FP16 variant beside ``onnx_path`` (``model.fp16.onnx``: FP32 input, FP16 weights and math), whether or not
    it exists."""
    return onnx_path.with_name(onnx_path.name.removesuffix(".onnx") + FP16_SUFFIX)


def nhwc_variant(onnx_path: Path) -> Path:
    """The FP16 variant taking FP16 channel-last input beside ``onnx_path`` (``make model``'s ``model.fp16.nhwc.onnx``
    for the classifier and the embedder), whether or not it exists."""
    return onnx_path.with_name(onnx_path.name.removesuffix(".onnx") + NHWC_FP16_SUFFIX)


def runs_nhwc_variant(onnx_path: Path, precision: str, input_dims: Sequence[int]) -> bool:
    """Whether a GPU runtime runs :func:`nhwc_variant`: FP16, a channel-last config, and the variant beside."""
    return precision == "fp16" and channels_last(input_dims) and nhwc_variant(onnx_path).is_file()


def model_file(onnx_path: Path, precision: str, input_dims: Sequence[int] = ()) -> Path:
    """The ONNX file a GPU runtime runs for ``precision`` and the config's ``input_dims``: ``model.onnx``, its FP16
    variant beside it, or for a channel-last input (``[224, 224, 3]``: the classifier's and the embedder's GPU configs,
    so that the preprocessing writes what the network reads) the FP16 variant taking FP16 NHWC where it is there
    (``model.fp16.nhwc.onnx``; a network whose own input is channel-last runs as it is).

    Without an FP16 variant the network runs in FP32, with a log line saying so (a network exported
    without one still loads).
    """
    if runs_nhwc_variant(onnx_path, precision, input_dims):
        return nhwc_variant(onnx_path)
    if precision == "fp32":
        return onnx_path
    fp16 = fp16_variant(onnx_path)
    if not fp16.is_file():
        log.warning(
            "%s has no FP16 variant (%s); running FP32 (`make model` writes it for the shipped networks)",
            onnx_path,
            fp16.name,
        )
        return onnx_path
    return fp16
