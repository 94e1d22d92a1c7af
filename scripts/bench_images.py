#!/usr/bin/env python3
"""Benchmark image sets made from real photos (scikit-image's samples; no download).

Each image is a random crop of a real photo with the target aspect ratio, resized to the
target size with Lanczos, randomly mirrored, and saved as a quality-90 JPEG with 4:2:0
chroma subsampling (what cameras and ImageNet use), so every file has distinct bytes.

    python scripts/bench_images.py --size 500x375 --count 256 --out .cache/images/500x375

Importable: ``make_jpegs(width, height, count, seed)`` returns the encoded bytes.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image

log = logging.getLogger("bench_images")

SIZES = {"500x375": (500, 375), "1280x720": (1280, 720), "1920x1080": (1920, 1080), "3840x2160": (3840, 2160)}


def photos() -> list[np.ndarray]:
    """scikit-image's colour photographs as RGB uint8 arrays.

    Where scikit-image is not installed (the GPU machine's isolated venv), the same photos are
    read from the PNG files in ``$TRITONPREP_PHOTOS`` (written by ``--export-photos DIR``).
    """
    try:
        from skimage import data
    except ImportError:
        folder = os.environ.get("TRITONPREP_PHOTOS")
        if not folder:
            raise
        return [np.asarray(Image.open(p).convert("RGB")) for p in sorted(Path(folder).glob("*.png"))]

    out = []
    for name in ("chelsea", "coffee", "astronaut", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
                 "motorcycle_left", "motorcycle_right"):
        loader = getattr(data, name, None)
        if loader is None:
            continue
        try:
            arr = np.asarray(loader())
        except (OSError, ValueError, ImportError) as e:  # a sample that needs an optional download
            log.debug("skipping %s: %s", name, e)
            continue
        if arr.ndim == 3 and arr.shape[2] >= 3:
            out.append(np.ascontiguousarray(arr[..., :3]))
    if not out:
        raise RuntimeError("no scikit-image sample photos available")
    return out


def make_jpegs(width: int, height: int, count: int, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``count`` distinct JPEGs of ``width`` x ``height`` cut from real photos."""
    rng = np.random.default_rng(seed)
    sources = [Image.fromarray(a) for a in photos()]
    target = width / height
    out = []
    for i in range(count):
        src = sources[i % len(sources)]
        w, h = src.size
        cw, ch = (w, int(w / target)) if w / h < target else (int(h * target), h)
        scale = rng.uniform(0.7, 1.0)
        cw, ch = max(16, int(cw * scale)), max(16, int(ch * scale))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = src.crop((x0, y0, x0 + cw, y0 + ch)).resize((width, height), Image.Resampling.LANCZOS)
        if rng.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality, subsampling="4:2:0")
        out.append(buf.getvalue())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="500x375")
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--export-photos", action="store_true", help="write the source photos as PNGs into --out instead")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.export_photos:
        from skimage import data

        args.out.mkdir(parents=True, exist_ok=True)
        for name in ("chelsea", "coffee", "astronaut", "rocket", "hubble_deep_field", "immunohistochemistry", "retina"):
            Image.fromarray(np.asarray(getattr(data, name)())[..., :3]).save(args.out / f"{name}.png")
        log.info("wrote the source photos to %s", args.out)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    blobs = make_jpegs(*SIZES[args.size], args.count, args.seed)
    for i, blob in enumerate(blobs):
        (args.out / f"{args.size}-{i:04d}.jpg").write_bytes(blob)
    log.info("wrote %d JPEGs of %s to %s (mean %.1f KB)", len(blobs), args.size, args.out,
             sum(map(len, blobs)) / len(blobs) / 1e3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
