#!/usr/bin/env python3
"""Diagnose nvImageCodec behaviour on the GPU machine: which backends can be created, whether a
batch decodes the same pixels as single-image calls, and whether repeated identical batches are
bit-identical (a race shows up as run-to-run differences). Prints a short table."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_images  # noqa: E402


def main() -> int:
    import cupy as cp
    from nvidia import nvimgcodec as nv

    stream = cp.cuda.Stream(non_blocking=True)
    params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB)
    pool = bench_images.make_jpegs(500, 375, 24, seed=3)
    rng = np.random.default_rng(0)
    src = Image.fromarray(bench_images.photos()[0])
    for _ in range(8):
        buf = io.BytesIO()
        src.resize((int(rng.integers(200, 1200)), int(rng.integers(200, 1200)))).save(buf, "JPEG", quality=90)
        pool.append(buf.getvalue())
    pillow = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")).astype(np.int16) for b in pool]

    kinds = {"HW": ["HW_GPU_ONLY"], "CUDA": ["GPU_ONLY"], "HYBRID": ["HYBRID_CPU_GPU"], "CPU": ["CPU_ONLY"],
             "HW+CUDA+HYBRID": ["HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU"], "HW+HYBRID": ["HW_GPU_ONLY", "HYBRID_CPU_GPU"]}
    for label, names in kinds.items():
        for fancy in ("", ":fancy_upsampling=1"):
            try:
                dec = nv.Decoder(device_id=0, backends=[nv.Backend(getattr(nv.BackendKind, n)) for n in names], options=fancy)
            except RuntimeError as e:
                print(f"{label:16s} fancy={bool(fancy)!s:5s} create FAILED: {e}")
                continue

            def decode(batch):
                imgs = dec.decode([nv.CodeStream(b) for b in batch], params=params, cuda_stream=stream.ptr)
                stream.synchronize()
                return [None if im is None else (cp.asarray(im).get() if im.buffer_kind == nv.ImageBufferKind.STRIDED_DEVICE
                                                 else np.asarray(im.cpu())) for im in imgs]

            single = [decode([b])[0] for b in pool]
            batch = decode(pool)
            nones = sum(x is None for x in batch)
            diff_single_batch = max((int(np.abs(a.astype(np.int16) - b).max()) for a, b in zip(single, batch)
                                     if a is not None and b is not None), default=-1)
            vs_pillow = [np.abs(b.astype(np.int16) - p) for b, p in zip(batch, pillow) if b is not None]
            mean_p = float(np.mean([d.mean() for d in vs_pillow])) if vs_pillow else -1
            max_p = max((int(d.max()) for d in vs_pillow), default=-1)
            repeat_mismatch = 0
            for _ in range(20):
                idx = rng.choice(len(pool), size=int(rng.integers(8, 32)))
                again = decode([pool[i] for i in idx])
                junk = cp.random.random((4, 1 << 20), dtype=cp.float32)
                del junk
                repeat_mismatch += sum(int(not np.array_equal(a, batch[i])) for a, i in zip(again, idx)
                                       if a is not None and batch[i] is not None)
            print(f"{label:16s} fancy={bool(fancy)!s:5s} None={nones:2d}/{len(pool)} single-vs-batch max={diff_single_batch:3d} "
                  f"vs Pillow mean={mean_p:.3f} max={max_p:3d} random-batch mismatches={repeat_mismatch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
