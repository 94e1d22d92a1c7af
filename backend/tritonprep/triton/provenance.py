"""Provenance outputs: how each image of a request was decoded and transformed.

Built only for the provenance outputs a request asked for (names and types:
:data:`tritonprep.spec.PROVENANCE`), from what the executor reports per image
(:class:`~tritonprep.executors.ImageInfo`) and the resize arithmetic
(:func:`tritonprep.geometry.window_transform`); host tensors, a few bytes per image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..executors import ImageInfo
from ..geometry import window_transform
from ..spec import PreprocessConfig, provenance_of
from .tensors import named_tensors


def provenance_arrays(
    config: PreprocessConfig, infos: Sequence[ImageInfo], requested: frozenset[str]
) -> dict[str, Any]:
    """``{name: rows}`` of the requested provenance outputs: numpy arrays, or lists of strings for ``DECODER``."""
    arrays: dict[str, Any] = {}
    for name in config.provenance:
        if name not in requested:
            continue
        kind, image = provenance_of(name)
        if kind == "ORIGINAL_SIZE":
            arrays[name] = np.array([[i.width, i.height] for i in infos], np.int32).reshape(-1, 2)
        elif kind == "DECODER":
            arrays[name] = [[i.path] for i in infos]
        else:
            spec = config.specs[image]  # type: ignore[index]
            ts = [window_transform(spec, i.width, i.height) for i in infos]
            if kind == "_SCALE":
                arrays[name] = np.array([[t.scale_x, t.scale_y] for t in ts], np.float32).reshape(-1, 2)
            else:
                arrays[name] = np.array([[t.left, t.top, t.right, t.bottom] for t in ts], np.int32).reshape(-1, 4)
    return arrays


def provenance_tensors(config: PreprocessConfig, infos: Sequence[ImageInfo], requested: frozenset[str]) -> list[Any]:
    """The requested provenance outputs of one request's images as output tensors."""
    return named_tensors(provenance_arrays(config, infos, requested))
