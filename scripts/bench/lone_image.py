"""One image at a time through ``classify_fused``'s job in one process, without Triton: the c=1 floor, step by step.

The job is built as the shipped GPU config of ``classify_fused`` builds it (its preprocess parameters, its
network's runtime options: buckets, FP16 NHWC, CUDA graphs; no memory budget), on one stream. Each way of
ordering it (``path``) runs ``--calls`` calls of one JPEG each (the files of ``--images`` in turn), with each idle gap
between calls (``--gaps-ms``: 0 is back to back; a few ms is c=1 as a server sees it, the process asleep between
requests):

* ``waits``: the executor waits for its GPU work, ONNX Runtime for the network's (its own end-of-run sync), then
  top-k copies its k scores to the host: one wait per step, how ``classify_fused`` ran before it waited once;
* ``one_wait``: the executor leaves its work on the stream, the network and top-k follow on it, and top-k's copy to
  the host is the only wait (how ``classify_fused`` runs now);
* ``executor``: the preprocessing alone (decode and kernels, synchronized);
* ``network_b1``: the network alone at batch 1 on a GPU tensor already there (synchronized).

One JSON row per (path, gap): p50, p90 and mean milliseconds of a call and of its steps' host time
(``preprocess``, ``network``, ``top_k``; under ``one_wait`` the network's and top-k's GPU work is waited for in top-k).

``--profile FILE`` adds where a call's host time goes: cProfile over ``--calls`` calls of each path at the first gap,
its top functions by own time (text).

    python -m scripts.bench.lone_image --images DIR --out FILE [--gaps-ms 0,3] [--gap-modes sleep,spin] [--calls 300]
        [--profile FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("lone_image")

WARMUP_CALLS = 20
PATHS = ("waits", "one_wait", "executor", "network_b1")


def build_job() -> tuple[Any, Any, Any]:
    """``(executor, runtime, top_k)`` of the shipped ``classify_fused`` GPU config, the runtime on the executor's
    stream (as the model builds them, less the memory budget)."""
    from scripts.bench.gpu_time import REPOSITORY, shipped_parameters
    from tritonprep.classifier.postprocess import TopK
    from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.memory import PARAMETER
    from tritonprep.pipeline.fused import DEFAULT_NETWORK, PIXELS, shares_stream, split_parameters
    from tritonprep.spec import PreprocessConfig

    prep, net = split_parameters(shipped_parameters("classify_fused"))
    prep.pop(PARAMETER, None)
    for key in ("labels", PARAMETER):
        net.pop(key, None)
    network = REPOSITORY / net.pop("model", DEFAULT_NETWORK)
    config = PreprocessConfig.from_parameters(prep, [PIXELS])
    executor = GpuExecutor(config, 0)
    options = RuntimeOptions.from_parameters({**net, "runtime": "onnxruntime"}, 256)  # the shipped GPU runtime
    runtime = load_runtime(
        network, config.spec(PIXELS).output_shape, options=options, device_id=0, use_gpu=True, max_batch=256,
        stream=executor.stream,
    )  # fmt: skip
    if not shares_stream(runtime, executor):
        raise RuntimeError(f"the network runs on {runtime.name}, not on the executor's stream: nothing to compare")
    log.info("job: %s; network %s (%s), buckets %s", executor.describe(), network.name, runtime.name,
             options.batch_buckets)  # fmt: skip
    return executor, runtime, TopK(5)


def call_for(path: str, executor: Any, runtime: Any, top_k: Any, ready: Any) -> Callable[[bytes], dict[str, float]]:
    """One call of ``path`` on one encoded image: its steps' host seconds."""
    from tritonprep.pipeline.fused import PIXELS

    def waits(data: bytes) -> dict[str, float]:
        t0 = time.perf_counter()
        pixels = executor.run([data]).outputs[PIXELS]
        t1 = time.perf_counter()
        options, runtime.run_options = runtime.run_options, None  # ORT's own end-of-run sync, as before
        try:
            logits = runtime.infer_many([pixels])
        finally:
            runtime.run_options = options
        t2 = time.perf_counter()
        top_k(logits)
        return {"preprocess": t1 - t0, "network": t2 - t1, "top_k": time.perf_counter() - t2}

    def one_wait(data: bytes) -> dict[str, float]:
        marks: dict[str, float] = {}

        def then(logits: Any) -> Any:
            marks["launched"] = time.perf_counter()
            return top_k(logits)

        t0 = time.perf_counter()
        pixels = executor.run([data], synchronize=False).outputs[PIXELS]
        t1 = time.perf_counter()
        runtime.infer_many([pixels], then=then)
        t2 = marks["launched"]
        return {"preprocess": t1 - t0, "network": t2 - t1, "top_k": time.perf_counter() - t2}

    def alone(data: bytes) -> dict[str, float]:
        t0 = time.perf_counter()
        executor.run([data])
        return {"preprocess": time.perf_counter() - t0}

    def network_b1(data: bytes) -> dict[str, float]:
        t0 = time.perf_counter()
        runtime.infer_many([ready])
        return {"network": time.perf_counter() - t0}

    return {"waits": waits, "one_wait": one_wait, "executor": alone, "network_b1": network_b1}[path]


def warm(call: Callable[[bytes], dict[str, float]], images: list[bytes]) -> None:
    """:data:`WARMUP_CALLS` untimed calls, the images in turn."""
    for i in range(WARMUP_CALLS):
        call(images[i % len(images)])


def measure(
    call: Callable[[bytes], dict[str, float]], images: list[bytes], calls: int, gap_s: float, spin: bool = False
) -> dict:
    """``calls`` timed calls (after :data:`WARMUP_CALLS`), ``gap_s`` asleep (``spin``: busy on the CPU) before each:
    ms per call and per step."""
    warm(call, images)
    totals: list[float] = []
    steps: dict[str, list[float]] = {}
    for i in range(calls):
        if gap_s and spin:
            end = time.perf_counter() + gap_s
            while time.perf_counter() < end:
                pass
        elif gap_s:
            time.sleep(gap_s)
        t0 = time.perf_counter()
        parts = call(images[i % len(images)])
        totals.append(time.perf_counter() - t0)
        for k, v in parts.items():
            steps.setdefault(k, []).append(v)

    def stats(values: list[float]) -> dict[str, float]:
        ms = sorted(v * 1e3 for v in values)
        return {"p50": round(statistics.median(ms), 3), "p90": round(ms[int(0.9 * (len(ms) - 1))], 3),
                "mean": round(statistics.fmean(ms), 3)}  # fmt: skip

    return {"call_ms": stats(totals), "steps_ms": {k: stats(v) for k, v in steps.items()}}


def profile(calls: dict[str, Callable[[bytes], dict[str, float]]], images: list[bytes], n: int, gap_s: float) -> str:
    """cProfile's top functions by own time over ``n`` calls of each path (``gap_s`` asleep before each)."""
    import cProfile
    import io
    import pstats

    text = io.StringIO()
    for path, call in calls.items():
        warm(call, images)
        prof = cProfile.Profile()
        for i in range(n):
            time.sleep(gap_s)
            prof.enable()
            call(images[i % len(images)])
            prof.disable()
        text.write(f"== {path}: {n} calls, {gap_s * 1e3:g} ms asleep before each (cProfile: times inflated)\n")
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=Path, required=True, help="a folder of JPEGs (one a call, in turn)")
    ap.add_argument("--out", type=Path, required=True, help="JSON rows, one per (path, gap)")
    ap.add_argument("--gaps-ms", default="0,3", help="idle milliseconds before each call (comma list)")
    ap.add_argument("--gap-modes", default="sleep", help="sleep (the thread asleep), spin (busy on the CPU), or both")
    ap.add_argument("--calls", type=int, default=300, help="timed calls per (path, gap)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)}")
    ap.add_argument("--profile", type=Path, help="also write cProfile's top functions per path here (text)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    images = [p.read_bytes() for p in sorted(args.images.glob("*.jp*g"))][:64]
    if not images:
        ap.error(f"no JPEG in {args.images}")
    import cupy as cp
    import numpy as np

    executor, runtime, top_k = build_job()
    try:
        with runtime.device:
            ready = cp.asarray(np.zeros((1, *runtime.input_dims), np.float32))
        rows = []
        gaps = [(float(g), mode) for g in args.gaps_ms.split(",") for mode in args.gap_modes.split(",")]
        for gap, mode in dict.fromkeys((g, m if g else "sleep") for g, m in gaps):
            for path in args.paths.split(","):
                call = call_for(path, executor, runtime, top_k, ready)
                row = {"kind": "lone_image", "path": path, "gap_ms": gap, "gap_mode": mode, "calls": args.calls,
                       **measure(call, images, args.calls, gap / 1e3, spin=mode == "spin")}  # fmt: skip
                rows.append(row)
                steps = ", ".join(f"{k} {v['p50']:.3f}" for k, v in row["steps_ms"].items())
                log.info("%-10s gap %4.1f ms %-5s: p50 %.3f ms, p90 %.3f ms (steps p50: %s)", path, gap, mode,
                         row["call_ms"]["p50"], row["call_ms"]["p90"], steps)  # fmt: skip
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        if args.profile:
            paths = args.paths.split(",")
            calls = {path: call_for(path, executor, runtime, top_k, ready) for path in paths}
            args.profile.write_text(profile(calls, images, args.calls, gaps[0][0] / 1e3))
            log.info("profile: %s", args.profile)
    finally:
        runtime.close()
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
