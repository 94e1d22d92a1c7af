"""Resize plans: torchvision's Resize+CenterCrop, letterbox, stretch."""

from __future__ import annotations

import pytest

from tritonprep.errors import LimitExceeded
from tritonprep.geometry import MAX_RESIZED_SIDE, ResizePlan, check_resizable, plan_resize
from tritonprep.spec import OutputSpec

CROP = OutputSpec()
LETTERBOX = OutputSpec(resize="letterbox", output_height=640, output_width=640)


@pytest.mark.parametrize(
    ("w", "h", "plan"),
    [
        # landscape 500x375: 256 * 500/375 = 341.33 -> 341; left = round(58.5) = 58 (banker's), top = 16
        (500, 375, ResizePlan(500, 375, 341, 256, 58, 16)),
        (375, 500, ResizePlan(375, 500, 256, 341, 16, 58)),
        (451, 300, ResizePlan(451, 300, 384, 256, 80, 16)),  # chelsea: 256*451/300 = 384.85 -> 384
        (256, 256, ResizePlan(256, 256, 256, 256, 16, 16)),
        (1, 20000, ResizePlan(1, 20000, 256, 5120000, 16, 2559888)),
        (3840, 2160, ResizePlan(3840, 2160, 455, 256, 116, 16)),  # 455.1 -> 455, (455-224)/2 = 115.5 -> 116
    ],
)
def test_shorter_side_crop_matches_torchvision(w, h, plan):
    assert plan_resize(CROP, w, h) == plan


@pytest.mark.parametrize(
    ("w", "h", "plan"),
    [
        (1280, 720, ResizePlan(1280, 720, 640, 360, 0, -140)),
        (720, 1280, ResizePlan(720, 1280, 360, 640, -140, 0)),
        (100, 100, ResizePlan(100, 100, 640, 640, 0, 0)),  # upscaled to fill
        (1, 20000, ResizePlan(1, 20000, 1, 640, -319, 0)),
    ],
)
def test_letterbox_centres_and_pads(w, h, plan):
    assert plan_resize(LETTERBOX, w, h) == plan


def test_stretch_ignores_aspect_ratio():
    spec = OutputSpec(resize="stretch", output_height=100, output_width=300)
    assert plan_resize(spec, 640, 480) == ResizePlan(640, 480, 300, 100, 0, 0)


def test_a_resize_past_int32_is_refused_in_either_orientation():
    check_resizable(CROP, 1, 8_000_000)  # 2.048e9 rows: fits
    for w, h in ((1, 9_000_000), (9_000_000, 1)):
        with pytest.raises(LimitExceeded, match="makes the other 2304000000 pixels"):
            check_resizable(CROP, w, h)
    check_resizable(LETTERBOX, 1, 16_800_000)  # letterbox and stretch never exceed the output size
    assert plan_resize(CROP, 1, 8_000_000).resized_h <= MAX_RESIZED_SIDE
