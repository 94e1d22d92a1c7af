"""The classifier alone, in one process, and the pipelines a user could build instead.

    python -m scripts.bench.classifier_bench ort  --out ort.json     # ONNX Runtime CUDA EP variants
        [--fuse-conv-bias 0,1] [--nhwc-input model_repository/classifier/1/model.fp16.nhwc.onnx]
    python -m scripts.bench.classifier_bench dali --out dali.json --images DIR   # DALI -> the same ORT runtime
        [--dali-best '{"batch": 128, "threads": 4, "hw_decoder_load": 0.9, "prefetch": 1}']
    python -m scripts.bench.classifier_bench memory --out mem.json  # GPU memory and start time by option
        [--buckets "1,2,4,8,16,32,64,128,256;1,8,32,64"] [--conv-algo-search heuristic,exhaustive]
        [--max-workspace 0,1] [--arena same_as_requested,next_power_of_two] [--gpu-memory-mb 2200]
        [--layout nhwc,nchw] [--graphs 1,0] [--fuse-conv-bias 0,1] [--cache off|cold-warm]
        [--network classifier|embedder]

``ort`` runs tritonprep's :class:`~tritonprep.classifier.ort_cuda.OrtCudaRuntime` in each configuration
(FP32/FP16, NCHW/NHWC, with and without CUDA graphs) at batch 1, 8, 64 and 256 with the input
already on the GPU: latency (median of repeated calls, each synchronized) and images/s. ``dali`` is
the pipeline a user would hand-roll: DALI's mixed decode + resize + crop + normalize feeding the same
runtime in one process, in the configuration ``--dali-best`` names (``best`` of ``scripts.bench.dali_bench``'s
JSON) or else in three fixed ones. The network ceiling in PyTorch is
``scripts/bench/torch_ceiling.py`` (it needs the GPU machine's own torch). One JSON row per line.

``memory`` loads one instance's network as its GPU config serves it (FP16 NHWC pixels into
``model.fp16.nhwc.onnx``, CUDA graphs) in a fresh process for each
combination of the ONNX Runtime CUDA EP options that decide memory and start time
(:mod:`tritonprep.classifier.ort_options`; comma lists, every combination of them): the batch bucket
sets (``;``-separated), ``cudnn_conv_algo_search``, ``cudnn_conv_use_max_workspace``,
``arena_extend_strategy`` and ``fuse_conv_bias``, optionally under a ``gpu_memory_mb`` budget; each row has the
load time and its phases (``timings``: sessions and graph captures per bucket), the device memory the runtime
took, the process's GPU memory (nvidia-smi) and b64 images/s. ``--cache cold-warm`` loads each
combination twice, the second time from the optimized models the first kept (the start-up cache,
:mod:`tritonprep.cache`), so the rows show what the cache saves. ``ort`` takes the same option flags
(the first value of each).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
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


def ort_rows(seconds: float, eps: Sequence[Any] = (None,), nhwc_input: Path | None = None) -> list[dict[str, Any]]:
    """Every variant of :data:`VARIANTS` with the first CUDA EP options of ``eps``; the FP16 NHWC ones again with
    each of the others (e.g. ``fuse_conv_bias`` on); with ``nhwc_input`` (``make model``'s ``model.fp16.nhwc.onnx``:
    FP16 NHWC in, what the GPU config serves), with each of ``eps``, the FP16 NHWC CUDA-graph variant on it fed FP16
    NHWC pixels, and beside it the FP16 network fed FP16 NCHW pixels, as the server fed it before (the runtime casts
    them into its FP32 input)."""
    import cupy as cp

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.network_files import model_file

    rows = []
    rng = np.random.default_rng(0)
    # (label, network file, nhwc, cuda graphs, input dims, input dtype), the EP options' index, the EP options
    runs = [((label, model_file(ONNX, precision), nhwc, graphs, DIMS, np.float32), k, ep)
            for k, ep in enumerate(eps) for label, precision, nhwc, graphs in VARIANTS if k == 0 or nhwc]  # fmt: skip
    if nhwc_input is not None:
        nhwc_dims = (DIMS[1], DIMS[2], DIMS[0])
        for k, ep in enumerate(eps):
            runs += [(("FP16 NHWC, CUDA graphs, fed FP16 NCHW pixels", model_file(ONNX, "fp16"), True, True, DIMS,
                       np.float16), k, ep),
                     (("FP16 NHWC, CUDA graphs, FP16 NHWC input", nhwc_input, True, True, nhwc_dims, np.float16), k,
                      ep)]  # fmt: skip
    for (label, network, nhwc, graphs, dims, dtype), k, ep in runs:
        if ep is not None and k > 0:
            label = f"{label}, {ep.describe()}"
        t0 = time.perf_counter()
        rt = OrtCudaRuntime(network, dims, buckets=BATCHES, nhwc=nhwc, cuda_graphs=graphs, ep_options=ep)
        load_s = time.perf_counter() - t0
        for b in BATCHES:
            x = cp.asarray(rng.standard_normal((b, *dims), dtype=np.float32).astype(dtype))
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
                    "ep_options": rt.ep_options.describe(),
                }
            )
            log.info("%-40s b%-4d %7.3f ms  %8.0f img/s", label, b, med * 1e3, b / med)
        rt.close()
        del rt
    return rows


#: the networks the memory mode can load (the exported ONNX files of ``make model``)
NETWORKS = {
    "classifier": ONNX,
    "embedder": Path(__file__).resolve().parents[2] / "model_repository" / "embedder" / "1" / "model.onnx",
}
DEFAULT_BUCKET_SETS = "1,2,4,8,16,32,64,128,256;1,8,32,64"


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


def _memory_row(
    network: str, buckets: tuple[int, ...], ep: dict[str, Any], budget: int | None, cache_dir: str, seconds: float
) -> dict[str, Any]:
    """One instance's network loaded with ``ep`` (CudaEpOptions' fields) in this (fresh) process: its load time and
    phases, its device memory, its b64 throughput."""
    import os

    os.environ["TRITONPREP_CACHE_DIR"] = cache_dir  # "off", or a folder shared by a cold and a warm load
    if not os.environ.get("CUDA_CACHE_PATH"):  # the driver's compiled code (fused convolutions) follows that choice
        driver = {"CUDA_CACHE_DISABLE": "1"} if cache_dir == "off" else {"CUDA_CACHE_PATH": f"{cache_dir}/cuda"}
        os.environ.update(driver)
    import cupy as cp

    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.classifier.ort_options import CudaEpOptions
    from tritonprep.network_files import model_file

    warm = cache_dir != "off" and any(Path(cache_dir).rglob("*.onnx"))  # kept by a cold load before this one
    cp.cuda.Device(0).use()
    free0, _ = cp.cuda.runtime.memGetInfo()
    ep = dict(ep)
    layout, graphs = ep.pop("layout", "nhwc"), ep.pop("cuda_graphs", True)
    options = CudaEpOptions(**ep)
    # what the GPU configs serve: FP16 NHWC pixels into model.fp16.nhwc.onnx (the NCHW layout: FP32 NCHW into the
    # FP16 file, as the runtime casts it)
    dims = (DIMS[1], DIMS[2], DIMS[0]) if layout == "nhwc" else DIMS
    network_file = model_file(NETWORKS[network], "fp16", dims)
    t0 = time.perf_counter()
    rt = OrtCudaRuntime(
        network_file,
        dims,
        buckets=buckets,
        nhwc=layout == "nhwc",
        cuda_graphs=graphs,
        ep_options=options,
        gpu_memory_mb=budget,
    )
    load_s = time.perf_counter() - t0
    pixels = np.random.default_rng(0).standard_normal((64, *dims), dtype=np.float32)
    x = cp.asarray(pixels.astype(np.float16) if layout == "nhwc" else pixels)
    med = statistics.median(timed(lambda: rt.infer(x), seconds))
    free1, _ = cp.cuda.runtime.memGetInfo()
    row = {
        "kind": f"{network}_memory",
        "network_file": network_file.name,
        "config": f"onnxruntime-gpu FP16 {layout.upper()}{' graphs' if graphs else ''}, buckets "
        f"{','.join(map(str, buckets))}, {options.describe()}",
        "buckets": list(buckets),
        "layout": layout,
        "cuda_graphs": graphs,
        **{k: v for k, v in ep.items()},
        "gpu_memory_mb": budget,
        "arena_caps_mb": rt.session_caps_mb,
        "cache": "off" if cache_dir == "off" else ("warm" if warm else "cold"),
        "load_s": round(load_s, 2),
        "timings": {k: round(v, 3) for k, v in rt.timings.items()},
        "batch": 64,
        "images_per_s": round(64 / med),
        "latency_ms": round(med * 1e3, 3),
        "device_mib_used_by_runtime": round((free0 - free1) / 2**20),
        "process_gpu_mib": _process_gpu_mib(os.getpid()),
    }
    rt.close()
    return row


def option_grid(args: argparse.Namespace) -> list[tuple[tuple[int, ...], dict[str, Any]]]:
    """Every combination of the bucket sets and ONNX Runtime options the command line names."""
    bucket_sets = [tuple(int(b) for b in part.split(",") if b.strip()) for part in args.buckets.split(";") if part]
    return [
        (
            buckets,
            {
                "conv_algo_search": algo,
                "conv_max_workspace": ws,
                "arena_extend_strategy": arena,
                "layout": layout,
                "cuda_graphs": graphs,
                "fuse_conv_bias": fuse,
            },
        )
        for buckets, algo, ws, arena, layout, graphs, fuse in itertools.product(
            bucket_sets,
            args.conv_algo_search,
            args.max_workspace,
            args.arena,
            args.layout,
            args.graphs,
            args.fuse_conv_bias,
        )
    ]


def memory_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """GPU memory and start time of one instance's network for every combination of the options, each load in a
    fresh process (with ``--cache cold-warm``, twice: without, then with the optimized models the first kept)."""
    import tempfile

    from scripts.bench.decode_grid import isolated

    rows = []
    for buckets, ep in option_grid(args):
        with tempfile.TemporaryDirectory(prefix="tritonprep-cache-") as folder:
            for cache_dir in ["off"] if args.cache == "off" else [folder, folder]:
                row = isolated(
                    _memory_row, args.network, buckets, ep, args.gpu_memory_mb, cache_dir, args.seconds, timeout=900
                )
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


def copy_dali_into(tensor: Any, buf: Any, stream: Any) -> None:
    """DALI's GPU ``tensor`` (FP32 CHW, complete: DALI's ``run()`` returns finished outputs) into the CuPy array
    ``buf`` (the runtime's FP32 NCHW input rows), ordered on ``stream``: read in place through DALI's CUDA array
    interface and copied by CuPy (DALI's own ``copy_to_external`` onto the runtime's stream failed on the H100 with
    cudaErrorInvalidValue at stages 15 and 16, with FP32 and with FP16 output). A shape that does not fit is an
    error here, before anything is copied."""
    check_fits(tuple(tensor.shape()), tuple(buf.shape))
    import cupy

    src = cupy.asarray(tensor)
    with stream:
        buf[...] = src


def check_fits(shape: tuple[int, ...], into: tuple[int, ...]) -> None:
    """ValueError unless DALI's output ``shape`` is the runtime's input buffer's, ``into``."""
    if shape != into:
        raise ValueError(f"DALI's output {shape} does not fit the runtime's input buffer {into}")


def dali_rows(folder: Path, seconds: float, best: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """DALI decode + resize(shorter 256, antialias) + crop 224 + normalize -> OrtCudaRuntime, one process; in the
    configuration ``best`` (a row of :mod:`scripts.bench.dali_bench`'s sweep) if given."""
    import nvidia.dali

    from scripts.bench.dali_bench import build
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.network_files import model_file

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
                lambda buf, stream: copy_dali_into(out.as_tensor(), buf, stream),
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

    def words(text: str) -> list[str]:
        return [w.strip().lower() for w in text.split(",") if w.strip()]

    parser.add_argument("--network", choices=sorted(NETWORKS), default="classifier", help="memory: which network")
    parser.add_argument(
        "--buckets", default=DEFAULT_BUCKET_SETS, help="memory: bucket sets, ';'-separated (default: %(default)s)"
    )
    parser.add_argument(
        "--conv-algo-search",
        type=words,
        default=["heuristic"],
        help="cudnn_conv_algo_search values, comma list of heuristic, exhaustive, default (default: heuristic)",
    )
    parser.add_argument(
        "--max-workspace",
        type=lambda t: [w == "1" or w == "true" for w in words(t)],
        default=[False],
        help="cudnn_conv_use_max_workspace values, comma list of 0 and 1 (default: 0)",
    )
    parser.add_argument(
        "--arena",
        type=words,
        default=["same_as_requested"],
        help="arena_extend_strategy values, comma list of same_as_requested, next_power_of_two",
    )
    parser.add_argument("--layout", type=words, default=["nhwc"], help="memory: comma list of nhwc, nchw")
    parser.add_argument(
        "--graphs",
        type=lambda t: [w == "1" or w == "true" for w in words(t)],
        default=[True],
        help="memory: CUDA graphs, comma list of 1 and 0 (default: 1)",
    )

    def switches(text: str) -> list[bool]:
        values = words(text)
        if set(values) - {"0", "1", "true", "false"}:
            raise argparse.ArgumentTypeError(f"expected a comma list of 0, 1, true, false; got {text!r}")
        return [v in ("1", "true") for v in values]

    parser.add_argument(
        "--fuse-conv-bias",
        type=switches,
        default=[False],
        help="fuse_conv_bias values, comma list of 0 and 1 (default: 0); ort: the FP16 NHWC variants again with each "
        "value after the first",
    )
    parser.add_argument("--gpu-memory-mb", type=int, help="memory: an instance budget spread over the arenas")
    parser.add_argument(
        "--nhwc-input",
        type=Path,
        help="ort: the FP16 NHWC-input network (make model's model.fp16.nhwc.onnx), measured beside the others",
    )
    parser.add_argument(
        "--cache",
        choices=["off", "cold-warm"],
        default="off",
        help="memory: without the start-up cache, or each load twice: cold, then from the optimized models it kept",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.what == "memory":
        rows = memory_rows(args)
    elif args.what == "ort":
        from tritonprep.classifier.ort_options import CudaEpOptions

        eps = [
            CudaEpOptions(args.conv_algo_search[0], args.max_workspace[0], args.arena[0], fuse)
            for fuse in args.fuse_conv_bias
        ]
        rows = ort_rows(args.seconds, eps, args.nhwc_input)
    else:
        rows = dali_rows(args.images, args.seconds, args.dali_best)
    args.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
