"""Resize/crop/letterbox arithmetic, shared by the CPU and GPU executors.

Every resize rule reduces to the same plan: resize the whole source image to
``resized_w x resized_h``, then read the output window whose top-left corner sits at
``(offset_x, offset_y)`` in the resized image. A positive offset crops, a negative one
pads (letterbox); output pixels that fall outside the resized image take ``pad_value``.

``shorter_side_crop`` follows torchvision's ``Resize(int)`` + ``CenterCrop`` exactly, the
preprocessing most classifiers were trained with; ``letterbox`` keeps the aspect ratio
and centres the image (YOLO style); ``stretch`` resizes to the output size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import PreprocessSpec


@dataclass(frozen=True)
class ResizePlan:
    """How one source image maps onto the output window."""

    src_w: int
    src_h: int
    resized_w: int
    resized_h: int
    offset_x: int
    offset_y: int


def plan_resize(spec: PreprocessSpec, src_w: int, src_h: int) -> ResizePlan:
    """Return the resize plan of a ``src_w x src_h`` image under ``spec``."""
    out_h, out_w = spec.output_height, spec.output_width
    if spec.resize == "shorter_side_crop":
        short = spec.resize_shorter
        if src_w <= src_h:
            rw, rh = short, max(1, int(short * src_h / src_w))
        else:
            rw, rh = max(1, int(short * src_w / src_h)), short
        # torchvision CenterCrop: int(round((size - crop) / 2.0))
        return ResizePlan(src_w, src_h, rw, rh, int(round((rw - out_w) / 2.0)), int(round((rh - out_h) / 2.0)))
    if spec.resize == "letterbox":
        r = min(out_w / src_w, out_h / src_h)
        rw = min(out_w, max(1, int(round(src_w * r))))
        rh = min(out_h, max(1, int(round(src_h * r))))
        return ResizePlan(src_w, src_h, rw, rh, -((out_w - rw) // 2), -((out_h - rh) // 2))
    return ResizePlan(src_w, src_h, out_w, out_h, 0, 0)
