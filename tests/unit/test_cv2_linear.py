"""OpenCV's INTER_LINEAR (``cv2_linear``) and Ultralytics' LetterBox, against OpenCV itself."""

from __future__ import annotations

import numpy as np
import pytest

from tritonprep.executors.cpu import CpuExecutor
from tritonprep.executors.opencv import linear_window
from tritonprep.geometry import ResizePlan, plan_resize, window_transform
from tritonprep.spec import OutputSpec
from tritonprep_testkit.compare import letterbox_sizes, ultralytics_letterbox
from tritonprep_testkit.photos import encode

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is in the test extra")

YOLO = OutputSpec.from_parameters({"preset": "ultralytics"})


def test_numpy_twin_is_bit_exact_with_opencv(photos):
    """linear_window (the arithmetic the GPU kernel follows) against cv2.resize on real photos."""
    rng = np.random.default_rng(11)
    for arr in photos.values():
        h, w = arr.shape[:2]
        targets = [(640, 427), (224, 224), (w * 2, h * 2), (w // 2, h // 2), (1, 7), (w, h + 1), (3, h)]
        targets += [(int(rng.integers(2, 1500)), int(rng.integers(2, 1500))) for _ in range(6)]
        for rw, rh in targets:
            want = cv2.resize(arr, (rw, rh), interpolation=cv2.INTER_LINEAR)
            got = linear_window(arr, ResizePlan(w, h, rw, rh, 0, 0), rw, rh)
            np.testing.assert_array_equal(got, want, err_msg=f"{w}x{h} -> {rw}x{rh}")


def test_numpy_window_equals_the_window_of_the_full_resize(photos):
    arr = photos["coffee"]
    full = cv2.resize(arr, (900, 700), interpolation=cv2.INTER_LINEAR)
    got = linear_window(arr, ResizePlan(600, 400, 900, 700, 123, 77), 224, 300)
    np.testing.assert_array_equal(got, full[77 : 77 + 300, 123 : 123 + 224])


def test_ultralytics_preset_equals_letterbox_on_the_cpu(photos):
    """The preset's output is Ultralytics' LetterBox (OpenCV resize, 114 borders, their rounding), RGB / 255."""
    ex = CpuExecutor(YOLO)
    for arr in letterbox_sizes(photos):
        want, r, (left, top) = ultralytics_letterbox(arr)
        res = ex.run([encode(arr, "PNG")])
        assert not res.errors
        got = res.output[0].transpose(1, 2, 0) * 255.0
        np.testing.assert_allclose(got, want.astype(np.float32), atol=1e-3, err_msg=str(arr.shape))
        t = window_transform(YOLO, arr.shape[1], arr.shape[0])
        assert (t.left, t.top) == (left, top)
        # the scale maps boxes back: Ultralytics' own gain r differs from the exact one by under half a pixel
        assert abs(t.scale_x * arr.shape[1] - r * arr.shape[1]) <= 0.5 and abs(t.scale_y - r) * arr.shape[0] <= 0.5


def test_letterbox_geometry_matches_ultralytics_rounding_on_many_sizes():
    rng = np.random.default_rng(5)
    for _ in range(2000):
        w, h = int(rng.integers(1, 4000)), int(rng.integers(1, 4000))
        out_h, out_w = int(rng.choice([320, 480, 640])), int(rng.choice([320, 640, 800]))
        spec = OutputSpec(resize="letterbox", output_height=out_h, output_width=out_w)
        plan = plan_resize(spec, w, h)
        r = min(out_h / h, out_w / w)
        unpad = max(1, round(w * r)), max(1, round(h * r))
        assert (plan.resized_w, plan.resized_h) == unpad
        assert (-plan.offset_x, -plan.offset_y) == (
            round((out_w - unpad[0]) / 2 - 0.1),
            round((out_h - unpad[1]) / 2 - 0.1),
        )


def test_boxes_map_back_to_the_original_pixels(photos):
    """A box drawn in the letterboxed image maps back onto the same object in the original."""
    arr = photos["rocket"]  # 640x427
    t = window_transform(YOLO, arr.shape[1], arr.shape[0])
    assert (t.left, t.top, t.right, t.bottom) == (0, 106, 0, 107)  # 213 rows: the extra one below
    x_out, y_out = np.array([0.0, 640.0]), np.array([106.0, 533.0])  # the picture's extent in the output
    np.testing.assert_allclose((x_out - t.left) / t.scale_x, [0, 640])
    np.testing.assert_allclose((y_out - t.top) / t.scale_y, [0, 427])


def test_cv2_linear_with_a_crop_and_a_pathological_aspect_ratio(photos):
    spec = OutputSpec(interpolation="cv2_linear", mean=(0, 0, 0), std=(1, 1, 1))
    ex = CpuExecutor(spec)
    arr = photos["chelsea"]
    plan = plan_resize(spec, arr.shape[1], arr.shape[0])
    full = cv2.resize(arr, (plan.resized_w, plan.resized_h), interpolation=cv2.INTER_LINEAR)
    want = full[plan.offset_y : plan.offset_y + 224, plan.offset_x : plan.offset_x + 224]
    np.testing.assert_array_equal(ex.run([encode(arr, "PNG")]).output[0].transpose(1, 2, 0), want)
    tall = np.resize(photos["rocket"][:, 200:201], (20000, 1, 3))  # 1 x 20000: the full resize would be 4 GB
    res = ex.run([encode(tall, "PNG")])
    assert not res.errors and np.isfinite(res.output).all() and res.output.std() > 1
