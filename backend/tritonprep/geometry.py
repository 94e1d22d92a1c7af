"""Resize/crop/letterbox arithmetic, shared by the CPU and GPU executors.

Every resize rule reduces to the same plan: resize the whole source image to
``resized_w x resized_h``, then read the output window whose top-left corner sits at
``(offset_x, offset_y)`` in the resized image. A positive offset crops, a negative one
pads (letterbox); output pixels that fall outside the resized image take ``pad_value``.

``shorter_side_crop`` follows torchvision's ``Resize(int)`` + ``CenterCrop`` exactly, the
preprocessing most classifiers were trained with; ``letterbox`` keeps the aspect ratio
and centres the image with Ultralytics' LetterBox arithmetic (the detectors' preprocessing);
``stretch`` resizes to the output size.

:func:`window_transform` turns a plan into what a client needs to map output coordinates back
to the original image (the ``<OUTPUT>_SCALE`` and ``<OUTPUT>_PADDING`` provenance outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .errors import LimitExceeded
from .spec import OutputSpec

#: the largest resized side a plan may have: the GPU kernel addresses the resized image with int32
MAX_RESIZED_SIDE = 2**31 - 1


@dataclass(frozen=True)
class ResizePlan:
    """How one source image maps onto the output window."""

    src_w: int
    src_h: int
    resized_w: int
    resized_h: int
    offset_x: int
    offset_y: int


def plan_resize(spec: OutputSpec, src_w: int, src_h: int) -> ResizePlan:
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
        # Ultralytics' LetterBox (auto=False, scaleup=True, center=True): r = min(new / old), the
        # resized size round(old * r) (Python's round: half to even), the border split as
        # top = round(dh / 2 - 0.1), bottom = round(dh / 2 + 0.1). At least 1 pixel, where
        # Ultralytics would fail on an image thinner than 1 / r pixels.
        r = min(out_h / src_h, out_w / src_w)
        rw = min(out_w, max(1, round(src_w * r)))
        rh = min(out_h, max(1, round(src_h * r)))
        left, top = round((out_w - rw) / 2 - 0.1), round((out_h - rh) / 2 - 0.1)
        return ResizePlan(src_w, src_h, rw, rh, -left, -top)
    return ResizePlan(src_w, src_h, out_w, out_h, 0, 0)


def check_resizable(spec: OutputSpec, width: int, height: int) -> None:
    """Raise :class:`LimitExceeded` if resizing a ``width x height`` image (either orientation) under ``spec``
    makes a side longer than ``MAX_RESIZED_SIDE``: only ``shorter_side_crop`` of an image thinner than about
    1 : 8,000,000 can, which ``max_pixels`` allows (1 x 16,800,000)."""
    if spec.resize != "shorter_side_crop" or min(width, height) < 1:
        return
    longest = int(spec.resize_shorter * max(width, height) / min(width, height))
    if longest > MAX_RESIZED_SIDE:
        raise LimitExceeded(
            f"image is {width}x{height}: resizing its shorter side to {spec.resize_shorter} makes the other "
            f"{longest} pixels, over the {MAX_RESIZED_SIDE} a resize can address"
        )


def window_only(spec: OutputSpec, plan: ResizePlan, max_pixels: int) -> bool:
    """Whether to resize only the output window: it lies inside the resized image and the full resize would be
    larger than ``max_pixels`` (the model's limit; a pathological aspect ratio, say 1x20000, makes it gigapixels)."""
    inside = (
        plan.offset_x >= 0
        and plan.offset_y >= 0
        and plan.offset_x + spec.output_width <= plan.resized_w
        and plan.offset_y + spec.output_height <= plan.resized_h
    )
    return inside and plan.resized_w * plan.resized_h > max_pixels


class WindowTransform(NamedTuple):
    """How an output image relates to the original: ``x_original = (x_output - left) / scale_x``."""

    scale_x: float  # resized width / original width
    scale_y: float  # resized height / original height
    left: int  # border columns on the left of the output (negative: columns cropped away)
    top: int  # border rows above (negative: rows cropped away)
    right: int  # border columns on the right (negative: cropped)
    bottom: int  # border rows below (negative: cropped)


def window_transform(spec: OutputSpec, src_w: int, src_h: int) -> WindowTransform:
    """The scale and borders of a ``src_w x src_h`` image's output under ``spec`` (pixel-edge coordinates:
    the resize maps the original's extent [0, src_w] onto [0, resized_w], as Pillow and OpenCV do)."""
    plan = plan_resize(spec, src_w, src_h)
    left, top = -plan.offset_x, -plan.offset_y
    return WindowTransform(
        plan.resized_w / src_w,
        plan.resized_h / src_h,
        left,
        top,
        spec.output_width - plan.resized_w - left,
        spec.output_height - plan.resized_h - top,
    )
