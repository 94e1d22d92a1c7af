#!/usr/bin/env python3
"""Write perf_analyzer's input data for the ``classify`` ensemble from real images.

perf_analyzer reads a BYTES tensor from JSON as base64 of the serialized elements: each
element is a 4-byte little-endian length followed by its bytes. Every entry here is one
encoded image with shape [1] (the ``IMAGE`` input's dims), so ``perf_analyzer -b N`` sends N
images per request and the entries are used round robin. The compose ``perf`` service reads
the file at docker/perf/input.json.

Usage:
  python3 docker/perf_input_data.py photos/ more.jpg        # your images (files or folders)
  .venv/bin/python docker/perf_input_data.py --samples      # scikit-image's sample photos

Needs only the standard library, except ``--samples`` (Pillow and scikit-image: ``make setup``).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "perf" / "input.json"
INPUT_NAME = "IMAGE"
EXTENSIONS = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
SAMPLES = ("chelsea", "coffee", "astronaut", "rocket", "cat", "hubble_deep_field")


def serialize_bytes_element(data: bytes) -> bytes:
    """One element of a BYTES tensor as Triton serializes it: uint32 little-endian length, then the bytes."""
    return struct.pack("<I", len(data)) + data


def entry(data: bytes) -> dict[str, object]:
    """One perf_analyzer data entry: a single image as ``IMAGE`` with shape [1]."""
    b64 = base64.b64encode(serialize_bytes_element(data)).decode("ascii")
    return {INPUT_NAME: {"content": {"b64": b64}, "shape": [1]}}


def find_images(paths: Iterable[Path]) -> list[Path]:
    """Image files among ``paths``, folders searched recursively, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in EXTENSIONS)
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return found


def sample_images() -> list[bytes]:
    """scikit-image's sample photos as quality-90 JPEGs."""
    try:
        from PIL import Image
        from skimage import data
    except ImportError as e:
        raise RuntimeError(f"--samples needs Pillow and scikit-image (`make setup`, then .venv/bin/python): {e}") from e
    images = []
    for name in SAMPLES:
        arr = getattr(data, name)()
        buf = io.BytesIO()
        Image.fromarray(arr).convert("RGB").save(buf, format="JPEG", quality=90)
        images.append(buf.getvalue())
    return images


def input_data(images: Sequence[bytes]) -> dict[str, object]:
    """The whole JSON document."""
    if not images:
        raise ValueError("no images to write")
    return {"data": [entry(im) for im in images]}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    p = argparse.ArgumentParser(description="Write perf_analyzer input data (JSON) for the classify ensemble.")
    p.add_argument("paths", nargs="*", type=Path, help="image files and/or folders")
    p.add_argument("--samples", action="store_true", help="use scikit-image's sample photos")
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="default: %(default)s")
    p.add_argument("--limit", type=int, default=64, help="at most this many images (default: %(default)s)")
    args = p.parse_args(argv)
    if not args.paths and not args.samples:
        p.error("give image files or folders, or --samples")
    try:
        images = [path.read_bytes() for path in find_images(args.paths)]
        if args.samples:
            images += sample_images()
        doc = input_data(images[: args.limit])
    except (OSError, RuntimeError, ValueError) as e:
        sys.stderr.write(f"perf_input_data: error: {e}\n")
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc))
    sys.stdout.write(f"wrote {len(doc['data'])} images to {args.output}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
