"""The classifier alone, in one process, and the pipelines a user could build instead.

    python -m scripts.bench.classifier_bench ort  --out ort.json     # ONNX Runtime CUDA EP variants
    python -m scripts.bench.classifier_bench dali --out dali.json --images DIR   # DALI -> the same ORT runtime
        [--dali-best '{"batch": 128, "threads": 4, "hw_decoder_load": 0.9, "prefetch": 1}']
    python -m scripts.bench.classifier_bench memory --out mem.json  # GPU memory by batch buckets

``ort`` runs tritonprep's :class:`~tritonprep.classifier.ort_cuda.OrtCudaRuntime` in each configuration
(FP32/FP16, NCHW/NHWC, with and without CUDA graphs) at batch 1, 8, 64 and 256 with the input
already on the GPU: latency (median of repeated calls, each synchronized) and images/s. ``dali`` is
the pipeline a user would hand-roll: DALI's mixed decode + resize + crop + normalize feeding the same
runtime in one process, in the configuration ``--dali-best`` names (``best`` of ``scripts.bench.dali_bench``'s
JSON) or else in three fixed ones. The network ceiling in PyTorch is
``scripts/bench/torch_ceiling.py`` (it needs the GPU machine's own torch). One JSON row per line.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("classifier_bench")

ONNX = Path(__file__).resolve().parents[2] / "model_repository" / "classifier" / "1" / "model.onnx"
DIMS = (3, 224, 224)
BATCHES = (1, 8, 64, 256)
#: (label, precision, nhwc, cuda_graphs)
VARIANTS = [
    ("FP32 NCHW", "fp32", False, False),
    ("FP32 NCHW, CUDA graphs", "fp32", False, True),
    ("FP16 NHWC", "fp16", True, False),
    ("FP16 NHWC, CUDA graphs", "fp16", True, True),
]


def timed(fn: Any, seconds: float, min_reps: int = 20) -> list[float]:
    """Wall-clock seconds of repeated ``fn()`` calls (each synchronizes) after a warm-up."""
    for _ in range(3):
        fn()
    times: list[float] = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(times) < min_reps:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def ort_rows(seconds: float) -> list[dict[str, Any]]:
    import cupy as cp

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.runtimes import model_file

    rows = []
    rng = np.random.default_rng(0)
    for label, precision, nhwc, graphs in VARIANTS:
        t0 = time.perf_counter()
        rt = OrtCudaRuntime(model_file(ONNX, precision), DIMS, buckets=BATCHES, nhwc=nhwc, cuda_graphs=graphs)
        load_s = time.perf_counter() - t0
        for b in BATCHES:
            x = cp.asarray(rng.standard_normal((b, *DIMS), dtype=np.float32))
            times = timed(lambda x=x, rt=rt: rt.infer(x), seconds)
            med = statistics.median(times)
            rows.append(
                {
                    "kind": "classifier",
                    "config": f"onnxruntime-gpu CUDA EP, {label}",
                    "batch": b,
                    "latency_ms": round(med * 1e3, 3),
                    "images_per_s": round(b / med),
                    "load_s": round(load_s, 1),
                }
            )
            log.info("%-40s b%-4d %7.3f ms  %8.0f img/s", label, b, med * 1e3, b / med)
        del rt
    return rows


#: (label, batch buckets, cuDNN max workspace) of the memory rows
MEMORY_VARIANTS = [
    ("buckets 1..256, max workspace", (1, 2, 4, 8, 16, 32, 64, 128, 256), True),
    ("buckets 1..64, max workspace", (1, 2, 4, 8, 16, 32, 64), True),
    ("buckets 1..64, small workspace", (1, 2, 4, 8, 16, 32, 64), False),
    ("buckets 1,8,32,64, small workspace", (1, 8, 32, 64), False),
]


def _process_gpu_mib(pid: int) -> int:
    """GPU memory of process ``pid`` as nvidia-smi reports it (MiB); -1 if it cannot tell."""
    import subprocess

    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1])
    return -1


def _memory_row(label: str, buckets: tuple[int, ...], workspace: bool, seconds: float) -> dict[str, Any]:
    import os

    import cupy as cp

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.runtimes import model_file

    cp.cuda.Device(0).use()
    free0, _ = cp.cuda.runtime.memGetInfo()
    rt = OrtCudaRuntime(model_file(ONNX, "fp16"), DIMS, buckets=buckets, nhwc=True, conv_max_workspace=workspace)
    x = cp.asarray(np.random.default_rng(0).standard_normal((64, *DIMS), dtype=np.float32))
    med = statistics.median(timed(lambda: rt.infer(x), seconds))
    free1, _ = cp.cuda.runtime.memGetInfo()
    return {
        "kind": "classifier_memory",
        "config": f"onnxruntime-gpu FP16 NHWC graphs, {label}",
        "batch": 64,
        "images_per_s": round(64 / med),
        "latency_ms": round(med * 1e3, 3),
        "device_mib_used_by_runtime": round((free0 - free1) / 2**20),
        "process_gpu_mib": _process_gpu_mib(os.getpid()),
    }


def memory_rows(seconds: float) -> list[dict[str, Any]]:
    """GPU memory of one classifier instance's runtime by bucket set and cuDNN workspace, each in a fresh process."""
    from scripts.bench.decode_grid import isolated

    rows = []
    for label, buckets, workspace in MEMORY_VARIANTS:
        row = isolated(_memory_row, label, buckets, workspace, seconds)
        log.info("%s", row)
        rows.append(row)
    return rows


#: (batch, threads, hw_decoder_load, prefetch) of the DALI + ORT rows when no sweep result is given (prefetch 2,
#: DALI's default, as these rows always had: the next batch is decoded while the network runs)
DALI_DEFAULTS = ((64, 4, 0.9, 2), (128, 4, 0.9, 2), (128, 4, 0.65, 2))


def infer_into(rt: Any, n: int, fill: Any) -> Any:
    """Logits of ``n`` images that ``fill(buffer, stream)`` writes into an OrtCudaRuntime's bound input buffer
    itself: for a producer that copies stream-ordered on its own (DALI's ``copy_to_external``). ``buffer`` is the
    bucket's input rows ``[:n]``, ``stream`` the runtime's stream the network runs on."""
    bucket = rt._bucket(n)  # the runtime's own buffers: what its infer() copies a batch into
    with rt.device, rt.stream:
        fill(bucket.x[:n], rt.stream)
        bucket.session.run_with_iobinding(bucket.binding)
        out = bucket.y[:n].copy()
    rt.stream.synchronize()
    return out


def dali_rows(folder: Path, seconds: float, best: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """DALI decode + resize(shorter 256, antialias) + crop 224 + normalize -> OrtCudaRuntime, one process; in the
    configuration ``best`` (a row of :mod:`scripts.bench.dali_bench`'s sweep) if given."""
    import nvidia.dali

    from scripts.bench.dali_bench import build
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.runtimes import model_file

    jpegs = [np.frombuffer(p.read_bytes(), dtype=np.uint8) for p in sorted(folder.glob("*.jpg"))]
    rows = []
    configs = (
        [(int(best["batch"]), int(best["threads"]), float(best["hw_decoder_load"]), int(best.get("prefetch", 1)))]
        if best
        else DALI_DEFAULTS
    )
    for batch, threads, hw_load, prefetch in configs:
        p = build(jpegs, batch, threads, hw_load, prefetch)  # the same pipeline as DALI's rows in the harness
        rt = OrtCudaRuntime(model_file(ONNX, "fp16"), DIMS, buckets=(batch,), nhwc=True, cuda_graphs=True)

        def step(p: Any = p, rt: Any = rt, batch: int = batch) -> None:
            (out,) = p.run()
            infer_into(
                rt,
                batch,
                lambda buf, stream: out.as_tensor().copy_to_external(
                    buf.data.ptr, cuda_stream=stream.ptr, non_blocking=True
                ),
            )

        times = timed(step, seconds, min_reps=10)
        rate = batch * len(times) / sum(times)
        rows.append(
            {
                "kind": "dali+ort",
                "config": f"DALI {nvidia.dali.__version__} (batch {batch}, {threads} threads, "
                f"hw_decoder_load {hw_load}, prefetch {prefetch}) -> onnxruntime-gpu FP16 NHWC graphs, one process",
                "batch": batch,
                "images_per_s": round(rate),
            }
        )
        log.info("DALI+ORT batch %d hw %.2f: %.0f img/s", batch, hw_load, rate)
        del p, rt
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["ort", "dali", "memory"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--images", type=Path, help="dali: folder of JPEGs")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument(
        "--dali-best",
        type=json.loads,
        help="dali: JSON of dali_bench's best row (batch, threads, hw_decoder_load, prefetch)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.what == "memory":
        rows = memory_rows(args.seconds)
    else:
        rows = ort_rows(args.seconds) if args.what == "ort" else dali_rows(args.images, args.seconds, args.dali_best)
    args.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
