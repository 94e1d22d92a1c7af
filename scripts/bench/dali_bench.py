#!/usr/bin/env python3
"""NVIDIA DALI's decode (mixed) + resize + crop + normalize pipeline on the same JPEGs, in one process: the peer
users would pick instead of tritonprep. Sweeps batch size, CPU threads, hw_decoder_load and prefetch_queue_depth,
each configuration a fresh pipeline, and prints one JSON object on stdout: {dali_version, protocol, best, all}.

The pipeline matches the preprocess spec and the side-by-side that measured DALI 2.4 at 31,797 img/s on an H100:
``fn.external_source`` (JPEG bytes as np.uint8 arrays, batch=True) -> ``fn.decoders.image(device="mixed",
output_type=RGB, hw_decoder_load=L)`` -> ``fn.resize(resize_shorter=256, antialias=True, interp_type=INTERP_LINEAR)``
-> ``fn.crop_mirror_normalize(crop=(224, 224), mean 127, std 128, FLOAT, CHW)``.

Protocol (:func:`measure`): 3 warm-up ``run()`` calls, then N timed ``run()`` calls (default 20); the clock stops
once the last batch's GPU output is complete: ``cudaDeviceSynchronize`` through CuPy after the last ``run()``
(``as_cpu()`` of the last output where CuPy is missing). images/s = batch * N / elapsed; the median ``run()``
time is recorded too. The JPEG batches are precomputed once; the ``source`` callable only returns the next one.

Why the harness's old figure was low (15,980 img/s against 31,797 on the same kind of GPU), from the old code
(``git show 34ba924:scripts/bench/dali_bench.py``, harness ``DALI_CONFIGS``): it measured two configurations only
(batch 128, 4 threads, hw_decoder_load 0.9 and 0.65), with ``prefetch_queue_depth=2`` where the side-by-side used 1,
and it timed a 3 s ``while`` loop whose ``source`` callback built each batch in Python (a list comprehension of
modulo indexing: tens of microseconds, unlikely to matter much by itself). The prefetch depth is likely the larger
factor, the narrow grid another; the device run of this sweep (with ``--prefetch 1,2``) settles it.

    python -m scripts.bench.dali_bench --images DIR [--batch 64,128,256] [--threads 2,4,8]
        [--hw-load 0.65,0.75,0.9,1.0] [--prefetch 1] [--runs 20] [--budget-s 150] [--no-copy] [--rows FILE]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("dali_bench")

#: the side-by-side's configuration (batch, threads, hw_decoder_load, prefetch): measured first, so that the time
#: budget never skips it
REFERENCE = (128, 4, 0.9, 1)
WARMUP_RUNS = 3
#: how many distinct batches are precomputed and cycled through
DISTINCT_BATCHES = 16


def make_batches(items: list[Any], batch: int, count: int = DISTINCT_BATCHES) -> list[list[Any]]:
    """``count`` batches of ``batch`` items cycling through ``items``: batch k starts at item k * (batch + 1)
    modulo the set (k * (batch + 2) where that would repeat a batch), so successive batches differ even when a
    batch is as large as the whole set."""
    n = len(items)
    step = batch + 1 if (batch + 1) % n else batch + 2
    return [[items[(k * step + j) % n] for j in range(batch)] for k in range(count)]


def load_jpegs(folder: Path) -> list[np.ndarray]:
    """The folder's ``*.jpg`` files, each as a (writable, contiguous) 1-D np.uint8 array of its bytes."""
    jpegs = [np.fromfile(p, dtype=np.uint8) for p in sorted(folder.glob("*.jpg"))]
    if not jpegs:
        raise SystemExit(f"no *.jpg files in {folder}")
    return jpegs


def build(
    jpegs: list[np.ndarray], batch: int, threads: int, hw_load: float, prefetch: int = 1, no_copy: bool = False
):  # -> nvidia.dali.Pipeline
    """A built pipeline fed by a callable ``source`` that returns precomputed batches of ``jpegs`` in turn.

    The callable (rather than ``feed_input``) is the cheaper way here: DALI calls it once per iteration, including
    the ``prefetch`` iterations it schedules ahead on the first ``run()``, and all it does is ``next()`` on a cycle
    of lists built once. ``no_copy=True`` lets DALI read the arrays in place instead of copying them each batch
    (they stay alive and unmodified for the pipeline's life). The output is FP32 CHW: tritonprep's ``PIXELS`` for
    the ONNX network, and what the ONNX Runtime runtime's input buffers hold (FP32 NCHW, whatever precision and
    layout the network runs in).
    """
    from nvidia.dali import fn, pipeline_def, types

    batches = itertools.cycle(make_batches(jpegs, batch))

    def source() -> list[np.ndarray]:
        return next(batches)

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, prefetch_queue_depth=prefetch)
    def pipe():
        data = fn.external_source(source=source, batch=True, dtype=types.UINT8, ndim=1, no_copy=no_copy)
        images = fn.decoders.image(data, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load)
        images = fn.resize(images, resize_shorter=256, antialias=True, interp_type=types.INTERP_LINEAR)
        return fn.crop_mirror_normalize(
            images, crop=(224, 224), mean=[127.0] * 3, std=[128.0] * 3, dtype=types.FLOAT, output_layout="CHW"
        )

    p = pipe()
    p.build()
    return p


def completion() -> tuple[str, Callable[[Any], None]]:
    """How :func:`measure` makes the last batch complete before it stops the clock: a device-wide
    ``cudaDeviceSynchronize`` through CuPy (DALI's ``run()`` without a stream already returns host-synchronous
    outputs with its dynamic executor, so this is a guard that costs next to nothing at prefetch 1; at prefetch 2
    it also waits for the iteration DALI prefetched, which is fair: the same sync runs before the clock starts);
    without CuPy, a copy of the last output to the host (``as_cpu()``, which waits for it but adds the copy)."""
    try:
        import cupy

        def sync(outputs: Any) -> None:
            cupy.cuda.runtime.deviceSynchronize()

        return "cupy.cuda.runtime.deviceSynchronize() after the last run()", sync
    except ImportError:

        def host_copy(outputs: Any) -> None:
            if outputs is not None:
                outputs[0].as_cpu()

        return "outputs[0].as_cpu() of the last run() (no CuPy)", host_copy


def measure(p: Any, batch: int, runs: int = 20, sync: Callable[[Any], None] | None = None) -> dict[str, float]:
    """3 warm-up ``run()`` calls, then ``runs`` timed ones; the clock stops once the last output is complete."""
    if sync is None:
        sync = completion()[1]
    out = None
    for _ in range(WARMUP_RUNS):
        out = p.run()
    sync(out)  # the warm-ups' work stays out of the timed window
    times = []
    t0 = time.perf_counter()
    for _ in range(runs):
        t = time.perf_counter()
        out = p.run()
        times.append(time.perf_counter() - t)
    sync(out)
    elapsed = time.perf_counter() - t0
    return {
        "images_per_s": round(batch * runs / elapsed, 1),
        "median_run_ms": round(statistics.median(times) * 1e3, 3),
        "elapsed_s": round(elapsed, 4),
    }


def sweep(
    jpegs: list[np.ndarray],
    configs: list[tuple[int, int, float, int]],
    runs: int,
    budget_s: float,
    no_copy: bool,
    rows_file: Path | None = None,
) -> list[dict[str, Any]]:
    """Each configuration in a fresh pipeline, deleted before the next; a failure is recorded and the sweep goes
    on; once ``budget_s`` has passed, the remaining configurations are recorded as skipped."""
    _, sync = completion()
    results: list[dict[str, Any]] = []
    t_start = time.monotonic()
    for i, (b, t, hw, pf) in enumerate(configs, 1):
        row: dict[str, Any] = {"batch": b, "threads": t, "hw_decoder_load": hw, "prefetch": pf}
        if time.monotonic() - t_start > budget_s:
            row["skipped"] = f"time budget of {budget_s:g} s spent"
        else:
            p = None
            try:
                t_build = time.perf_counter()
                p = build(jpegs, b, t, hw, pf, no_copy=no_copy)
                row["build_s"] = round(time.perf_counter() - t_build, 2)
                row.update(measure(p, b, runs, sync))
            except Exception as e:  # noqa: BLE001 - recorded; the sweep goes on
                row["error"] = f"{type(e).__name__}: {e}"[:400]
            finally:
                del p
                gc.collect()
        results.append(row)
        log.info(
            "config %d/%d batch %d threads %d hw %.2f prefetch %d: %s",
            i,
            len(configs),
            b,
            t,
            hw,
            pf,
            f"{row['images_per_s']:,.0f} img/s, median run {row['median_run_ms']:.2f} ms"
            if "images_per_s" in row
            else row.get("error") or row.get("skipped"),
        )
        if rows_file is not None:
            with open(rows_file, "a") as f:
                f.write(json.dumps(row) + "\n")
    return results


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, required=True, help="folder of *.jpg files")
    parser.add_argument("--batch", default="64,128,256")
    parser.add_argument("--threads", default="2,4,8")
    parser.add_argument("--hw-load", default="0.65,0.75,0.9,1.0")
    parser.add_argument("--prefetch", default="1", help="prefetch_queue_depth values, e.g. 1,2")
    parser.add_argument("--runs", type=int, default=20, help="timed run() calls per configuration")
    parser.add_argument(
        "--budget-s", type=float, default=150.0, help="no configuration starts after this many seconds of sweep"
    )
    parser.add_argument("--no-copy", action="store_true", help="external_source(no_copy=True)")
    parser.add_argument("--rows", type=Path, help="also append each configuration's row here as it finishes")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    import nvidia.dali

    jpegs = load_jpegs(args.images)
    configs = list(
        itertools.product(_ints(args.batch), _ints(args.threads), _floats(args.hw_load), _ints(args.prefetch))
    )
    configs.sort(key=lambda c: c != REFERENCE)  # stable: the reference first, the rest in grid order
    completion_text, _ = completion()
    protocol = {
        "pipeline": "external_source(uint8 JPEG bytes, batch=True) -> decoders.image(mixed, RGB, hw_decoder_load) "
        "-> resize(resize_shorter=256, antialias, INTERP_LINEAR) -> crop_mirror_normalize(224x224, mean 127, "
        "std 128, FLOAT, CHW)",
        "feed": f"callable source returning precomputed batches ({DISTINCT_BATCHES} distinct, cycled), "
        f"no_copy={args.no_copy}",
        "warmup_runs": WARMUP_RUNS,
        "timed_runs": args.runs,
        "completion": completion_text,
        "images": len(jpegs),
        "image_bytes_mean": round(float(np.mean([j.nbytes for j in jpegs]))),
        "configs": len(configs),
        "budget_s": args.budget_s,
    }
    log.info("DALI %s, %d JPEGs, %d configurations", nvidia.dali.__version__, len(jpegs), len(configs))
    if args.rows is not None:
        args.rows.write_text(json.dumps({"header": True, "dali_version": nvidia.dali.__version__, "protocol": protocol})
                             + "\n")  # fmt: skip
    t_sweep = time.monotonic()
    results = sweep(jpegs, configs, args.runs, args.budget_s, args.no_copy, args.rows)
    protocol["sweep_s"] = round(time.monotonic() - t_sweep, 1)
    ok = [r for r in results if "images_per_s" in r]
    best = max(ok, key=lambda r: r["images_per_s"]) if ok else None
    if best:
        log.info("best: %s", best)
    result = {"dali_version": nvidia.dali.__version__, "protocol": protocol, "best": best, "all": results}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
