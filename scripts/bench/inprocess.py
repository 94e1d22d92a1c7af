"""tritonprep's GPU executor in one process, like for like with DALI's in-process figure (scripts.bench.dali_bench).

The same JPEG files and the same protocol: per configuration, 3 warm-up calls, then 20 timed calls of batch B
(``GpuExecutor.run`` synchronizes its own stream, so each call's output is complete when it returns); images/s =
K * B * 20 / (last executor's end - first executor's start). K executors (each
``GpuExecutor(PreprocessConfig.single(), 0)``, the spec's defaults) run each on its own Python thread and start
together at a barrier; the executors are built once, at most 4 (nvImageCodec decoders must be few and
long-lived), and the first K serve each K.
One JSON row per line: {"kind": "executor_inprocess", "config", "batch", "executors", "images_per_s", ...}.

    python -m scripts.bench.inprocess --images DIR --out FILE [--batch 64,128,256] [--executors 1,2,4] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scripts.bench.dali_bench import WARMUP_RUNS, make_batches

log = logging.getLogger("inprocess")

MAX_EXECUTORS = 4


def _worker(
    ex: Any, batches: list[list[bytes]], first: int, runs: int, barrier: threading.Barrier, out: dict[int, Any], k: int
) -> None:
    """Warm up ``ex``, wait for the others, then time ``runs`` calls; ``out[k]`` = (start, end, call times, errors)."""
    try:
        n = len(batches)
        for i in range(WARMUP_RUNS):
            ex.run(batches[(first + i) % n])
        barrier.wait()
        start = time.perf_counter()
        times, errors = [], 0
        for i in range(runs):
            t = time.perf_counter()
            res = ex.run(batches[(first + WARMUP_RUNS + i) % n])
            times.append(time.perf_counter() - t)
            errors += len(res.errors)
            del res
        out[k] = (start, time.perf_counter(), times, errors)
    except BaseException as e:  # noqa: BLE001 - reported by the caller; the other threads must not wait forever
        out[k] = e
        barrier.abort()


def measure(executors: list[Any], batches: list[list[bytes]], batch: int, runs: int) -> dict[str, Any]:
    """The executors at once, each on its own thread; images/s over the span from the first start to the last end."""
    k_count = len(executors)
    barrier = threading.Barrier(k_count, timeout=300)
    out: dict[int, Any] = {}
    threads = [
        threading.Thread(target=_worker, args=(ex, batches, k * (len(batches) // k_count), runs, barrier, out, k))
        for k, ex in enumerate(executors)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failures = [v for v in out.values() if isinstance(v, BaseException)]
    if failures:
        raise failures[0]
    if len(out) != k_count:
        raise RuntimeError("a worker did not report")
    span = max(v[1] for v in out.values()) - min(v[0] for v in out.values())
    times = [t for v in out.values() for t in v[2]]
    return {
        "images_per_s": round(k_count * batch * runs / span, 1),
        "median_call_ms": round(statistics.median(times) * 1e3, 3),
        "elapsed_s": round(span, 4),
        "image_errors": sum(v[3] for v in out.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, required=True, help="folder of *.jpg files")
    parser.add_argument("--out", type=Path, required=True, help="JSON rows, one per line")
    parser.add_argument("--batch", default="64,128,256")
    parser.add_argument("--executors", default="1,2,4", help=f"executor counts, at most {MAX_EXECUTORS}")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per executor and configuration")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    counts = [int(x) for x in args.executors.split(",") if x.strip()]
    if not counts or min(counts) < 1 or max(counts) > MAX_EXECUTORS:
        parser.error(f"--executors: counts between 1 and {MAX_EXECUTORS}")
    images = [p.read_bytes() for p in sorted(args.images.glob("*.jpg"))]
    if not images:
        parser.error(f"no *.jpg files in {args.images}")

    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import PreprocessConfig

    spec = PreprocessConfig.single()
    args.out.write_text("")
    executors: list[Any] = []
    try:
        t0 = time.perf_counter()
        for _ in range(max(counts)):
            executors.append(GpuExecutor(spec, 0))
        log.info("%d executors built in %.1f s: %s", len(executors), time.perf_counter() - t0, executors[0].describe())
        for k in counts:
            for b in (int(x) for x in args.batch.split(",") if x.strip()):
                row: dict[str, Any] = {
                    "kind": "executor_inprocess",
                    "config": f"tritonprep GpuExecutor (spec defaults, hw_decoders {spec.decoding.hw_decoders}) "
                    f"x{k}, one Python thread each, one process, batch {b}",
                    "batch": b,
                    "executors": k,
                }
                try:
                    row.update(measure(executors[:k], make_batches(images, b), b, args.runs))
                    log.info(
                        "%d executor(s) batch %d: %.0f img/s, median call %.2f ms",
                        k,
                        b,
                        row["images_per_s"],
                        row["median_call_ms"],
                    )
                except Exception as e:  # noqa: BLE001 - recorded; the next configuration runs
                    row["error"] = f"{type(e).__name__}: {e}"[:400]
                    log.error("%d executor(s) batch %d failed: %s", k, b, row["error"])
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    finally:
        for ex in executors:
            ex.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
