#!/usr/bin/env python3
"""NVIDIA DALI's decode (mixed) + resize + crop + normalize pipeline on the same JPEGs: the peer
users would pick instead of tritonprep. Sweeps batch size and CPU threads and reports the best,
as one JSON object on stdout.

The pipeline matches the preprocess spec: resize the shorter side to 256 with antialiased
linear interpolation, center-crop 224x224, (pixel - 127) / 128, RGB, CHW, float32.

    python -m scripts.bench.dali_bench --images DIR [--batch 64,128,256] [--threads 4,8] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def build(jpegs: list[np.ndarray], batch: int, threads: int, hw_load: float):  # -> nvidia.dali.Pipeline
    from nvidia.dali import fn, pipeline_def, types

    state = {"i": 0}

    def source():
        i = state["i"]
        state["i"] = (i + batch) % len(jpegs)
        return [jpegs[(i + k) % len(jpegs)] for k in range(batch)]

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, prefetch_queue_depth=2)
    def pipe():
        data = fn.external_source(source=source, batch=True, dtype=types.UINT8, no_copy=False)
        images = fn.decoders.image(data, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load)
        images = fn.resize(images, resize_shorter=256, antialias=True, interp_type=types.INTERP_LINEAR)
        return fn.crop_mirror_normalize(
            images, crop=(224, 224), mean=[127.0] * 3, std=[128.0] * 3, dtype=types.FLOAT, output_layout="CHW"
        )

    p = pipe()
    p.build()
    return p


def measure(p, batch: int, seconds: float) -> float:
    for _ in range(5):
        p.run()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        out = p.run()
        n += batch
    out[0].as_tensor()  # the last batch is complete
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, required=True)
    parser.add_argument("--batch", default="64,128,256")
    parser.add_argument("--threads", default="4,8")
    parser.add_argument("--hw-load", default="0.65,0.9")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    import nvidia.dali

    jpegs = [np.frombuffer(p.read_bytes(), dtype=np.uint8) for p in sorted(args.images.glob("*.jpg"))]
    results = []
    for b in (int(x) for x in args.batch.split(",")):
        for t in (int(x) for x in args.threads.split(",")):
            for hw in (float(x) for x in args.hw_load.split(",")):
                p = build(jpegs, b, t, hw)
                results.append(
                    {"batch": b, "threads": t, "hw_decoder_load": hw, "images_per_s": measure(p, b, args.seconds)}
                )
                del p
    best = max(results, key=lambda r: r["images_per_s"])
    sys.stdout.write(json.dumps({"dali_version": nvidia.dali.__version__, "best": best, "all": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
