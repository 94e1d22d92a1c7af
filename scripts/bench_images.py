"""Benchmark image sets made from real photos (scikit-image's samples; no download).

Each image is a random crop of a real photo with the target aspect ratio, resized to the
target size with Lanczos, randomly mirrored, and saved as a quality-90 JPEG with 4:2:0
chroma subsampling (what cameras and ImageNet use), so every file has distinct bytes.

    python -m scripts.bench_images --size 500x375 --count 256 --out .cache/images/500x375
    python -m scripts.bench_images --export-photos --out .photos   # for machines without scikit-image
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tritonprep_testkit.photos import SIZES, export_photos, make_jpegs

log = logging.getLogger("bench_images")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="500x375")
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--export-photos", action="store_true", help="write the source photos as PNGs into --out instead"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.export_photos:
        export_photos(args.out)
        log.info("wrote the source photos to %s", args.out)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    blobs = make_jpegs(*SIZES[args.size], args.count, args.seed)
    for i, blob in enumerate(blobs):
        (args.out / f"{args.size}-{i:04d}.jpg").write_bytes(blob)
    log.info(
        "wrote %d JPEGs of %s to %s (mean %.1f KB)",
        len(blobs),
        args.size,
        args.out,
        sum(map(len, blobs)) / len(blobs) / 1e3,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
