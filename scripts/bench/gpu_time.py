"""Where the GPU's time goes: the shipped preprocessing and the network in one process, without Triton.

One JSON row per part and configuration (``--out``):

* ``kernels``: CUDA's activity records (CUPTI, through the PyTorch profiler of ``--torch-site``, the GPU
  machine's own torch) of ``--runs`` calls of the GPU executor (the shipped ``preprocess`` spec of PIXELS,
  ``--batch`` images a call) and of as many runs of the network (the classifier, FP16 NHWC, CUDA graphs,
  batch 64). Per image: the GPU time of each kernel (by name), of copies and memsets, their sum, and the
  time at least one of them was running (the union of their intervals), against the wall time. Each
  kernel's estimated occupancy and blocks per SM, as CUPTI reports them, weighted by its time.
* ``decode``: the same for the hardware decoder alone (nvImageCodec, the shipped decoder options), once per
  ``--color-specs`` (``SRGB``, as shipped, and e.g. ``SYCC``: the engines' YCbCr without the conversion kernel to
  RGB), with the layout of the images it gave (shape, strides, sample format).
* ``overlap``: the network on the main thread and the preprocessing on K threads (an executor each), each
  alone and then together for ``--seconds``; and ``pipeline``: the K preprocessing threads feeding the
  network through a queue, the whole job in one process. Under one CUDA context the kernels of the two
  stages share the SMs as MPS clients' do, without Triton, IPC or process switches: what the GPU allows.

    python -m scripts.bench.gpu_time --images DIR --out FILE [--threads 1,2] [--seconds 5] [--torch-site DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import queue
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("gpu_time")

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
ONNX = REPOSITORY / "classifier" / "1" / "model.onnx"
NETWORK_BATCH = 64
#: nvImageCodec's colour specs the ``decode`` part may ask for (``nvimgcodec.ColorSpec`` names)
COLOR_SPECS = ("SRGB", "SYCC", "GRAY")
#: the trace's categories of GPU work
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def shipped_config(model: str) -> Any:
    """A model's GPU config (what a GPU server serves), as Triton's ``ModelConfig``."""
    from tritonprep.launcher.served import read_models

    return next(mf.config for mf in read_models(REPOSITORY, "gpu") if mf.model == model)


def shipped_parameters(model: str = "preprocess") -> dict[str, str]:
    """The ``parameters`` of a model's GPU config, as Triton hands them to the model."""
    return {key: value.string_value for key, value in shipped_config(model).parameters.items()}


def pixels_config() -> Any:
    """The shipped ``preprocess`` GPU config, PIXELS only (its EMBED_PIXELS output's parameters left out)."""
    from tritonprep.spec import PreprocessConfig

    params = {k: v for k, v in shipped_parameters().items() if not k.startswith("EMBED_PIXELS.")}
    return PreprocessConfig.from_parameters(params)


def make_executor() -> Any:
    """The GPU executor of the shipped ``preprocess`` GPU config, PIXELS only."""
    from tritonprep.executors.gpu import GpuExecutor

    return GpuExecutor(pixels_config(), 0)


def network_dims() -> tuple[int, ...]:
    """The classifier's input as its shipped GPU config declares it (FP16 channel-last: what PIXELS is)."""
    return tuple(int(d) for d in shipped_config("classifier").input[0].dims)


def make_network() -> Any:
    """The classifier as the shipped GPU config runs it (its network file for that input, FP16, NHWC inside, CUDA
    graphs), one bucket of :data:`NETWORK_BATCH`."""
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.network_files import model_file

    dims = network_dims()
    return OrtCudaRuntime(model_file(ONNX, "fp16", dims), dims, buckets=(NETWORK_BATCH,), nhwc=True, cuda_graphs=True)


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize_trace(events: list[dict[str, Any]], images: int, wall_s: float) -> dict[str, Any]:
    """Per-image GPU time by kernel, copies and memsets; the union of their intervals; occupancy by kernel."""
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0.0])  # us, count, occ*us, blocks/SM*us
    spans: list[tuple[float, float]] = []
    by_category: dict[str, float] = defaultdict(float)
    for e in events:
        cat = e.get("cat", "")
        if cat not in GPU_CATEGORIES or e.get("ph") != "X":
            continue
        dur = float(e.get("dur", 0.0))
        spans.append((float(e["ts"]), float(e["ts"]) + dur))
        by_category[cat] += dur
        key = e["name"] if cat == "kernel" else cat
        args = e.get("args", {})
        row = by_name[key[:120]]
        row[0] += dur
        row[1] += 1
        row[2] += dur * float(args.get("est. achieved occupancy %", 0) or 0)
        row[3] += dur * float(args.get("blocks per SM", 0) or 0)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    return {
        "images": images,
        "wall_us_per_image": round(wall_s * 1e6 / images, 2),
        "gpu_busy_us_per_image": round(union_us(spans) / images, 2),
        "sum_us_per_image": {k: round(v / images, 2) for k, v in by_category.items()},
        "by_name": [
            {
                "name": name,
                "us_per_image": round(r[0] / images, 3),
                "calls": r[1],
                "occupancy_pct": round(r[2] / r[0], 1) if r[0] else 0.0,
                "blocks_per_sm": round(r[3] / r[0], 2) if r[0] else 0.0,
            }
            for name, r in top[:25]
        ],
    }


def traced(fn: Callable[[], None], runs: int) -> tuple[list[dict[str, Any]], float]:
    """The trace events of ``runs`` calls of ``fn`` (after one untraced call), and their wall time."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        wall = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = Path(f.name)
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text()).get("traceEvents", [])
    path.unlink()
    return events, wall


def kernels(torch_site: str, batches: list[list[bytes]], runs: int) -> list[dict[str, Any]]:
    """The ``kernels`` rows: the executor's and the network's GPU work, traced."""
    import cupy as cp  # before torch's site is on the path: CuPy imports a SciPy it finds (torch's needs numpy 2)

    if torch_site and torch_site not in sys.path:
        sys.path.append(torch_site)  # after this venv's own packages: its numpy and CuPy stay the ones in use

    rows = []
    ex = make_executor()
    cycle = itertools.cycle(batches)
    events, wall = traced(lambda: ex.run(next(cycle)), runs)
    rows.append({"part": "kernels", "stage": "preprocess", **summarize_trace(events, runs * len(batches[0]), wall)})
    ex.close()
    rt = make_network()
    x = cp.random.standard_normal((NETWORK_BATCH, *rt.input_dims), dtype=cp.float32).astype(cp.float16)
    events, wall = traced(lambda: rt.infer(x), runs)
    rows.append({"part": "kernels", "stage": "network", **summarize_trace(events, runs * NETWORK_BATCH, wall)})
    rt.close()
    return rows


def decode_kernels(torch_site: str, batches: list[list[bytes]], runs: int, specs: list[str]) -> list[dict[str, Any]]:
    """The ``decode`` rows: the hardware decoder's GPU work per image, traced, for each colour spec."""
    import cupy as cp

    if torch_site and torch_site not in sys.path:
        sys.path.append(torch_site)
    from tritonprep.decode.nvimgcodec import decoder_options, import_nvimgcodec, make_decoder

    nv = import_nvimgcodec()
    options = pixels_config().decoding
    decoder = make_decoder(nv, 0, (nv.BackendKind.HW_GPU_ONLY,), decoder_options(options)[1],
                            options.hw_decoder_threads)  # fmt: skip
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for spec in specs:
        decode_params = nv.DecodeParams(apply_exif_orientation=True, color_spec=getattr(nv.ColorSpec, spec),
                                        allow_any_depth=False)  # fmt: skip
        cycle = itertools.cycle(batches)
        found: dict[str, Any] = {}

        def call(params: Any = decode_params, found: dict[str, Any] = found, cycle: Any = cycle) -> None:
            images = decoder.decode([nv.CodeStream(b) for b in next(cycle)], params=params, cuda_stream=stream.ptr)
            stream.synchronize()
            first = next((img for img in images if img is not None), None)
            if first is not None and not found:
                cai = first.__cuda_array_interface__
                found.update(shape=list(cai["shape"]), strides=cai.get("strides"), typestr=cai["typestr"],
                             sample_format=str(getattr(first, "sample_format", "")),
                             color_spec=str(getattr(first, "color_spec", "")),
                             decoded=sum(img is not None for img in images))  # fmt: skip

        try:
            events, wall = traced(call, runs)
        except RuntimeError as e:  # a spec this decoder refuses
            rows.append({"part": "decode", "color_spec": spec, "error": str(e)[:300]})
            continue
        rows.append({"part": "decode", "color_spec": spec, "output": found,
                     **summarize_trace(events, runs * len(batches[0]), wall)})  # fmt: skip
    return rows


class _Loop(threading.Thread):
    """Calls ``step()`` (which returns the images it did) until stopped; counts images done inside the window."""

    def __init__(self, step: Callable[[], int]) -> None:
        super().__init__(daemon=True)
        self.step, self.stop, self.go = step, threading.Event(), threading.Event()
        self.window: tuple[float, float] = (0.0, 0.0)
        self.images = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.step()  # warm
            self.go.wait()
            while not self.stop.is_set():
                n = self.step()
                t = time.perf_counter()
                if self.window[0] <= t <= self.window[1]:
                    self.images += n
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e


def _window(
    seconds: float, loops: list[_Loop], main_step: Callable[[], int] | None, halt: threading.Event | None = None
) -> int:
    """Run the loops (and ``main_step`` on this thread) for ``seconds`` after 1 s of settling; the images
    ``main_step`` finished inside the window. ``halt`` is set before the loops are joined (unblocks producers)."""
    start = time.perf_counter() + 1.0
    for lp in loops:
        lp.window = (start, start + seconds)
        lp.go.set()
    main_images = 0
    while time.perf_counter() < start + seconds:
        if main_step is None:
            time.sleep(0.05)
            continue
        n = main_step()
        if start <= time.perf_counter() <= start + seconds:
            main_images += n
    for lp in loops:
        lp.stop.set()
    if halt is not None:
        halt.set()
    for lp in loops:
        lp.join()
        if lp.error is not None:
            raise lp.error
    return main_images


def overlap(batches: list[list[bytes]], threads: list[int], seconds: float) -> list[dict[str, Any]]:
    """The ``overlap`` and ``pipeline`` rows, for each count of preprocessing threads."""
    import cupy as cp

    rt = make_network()  # on this thread: its CUDA graphs were captured here
    executors = [make_executor() for _ in range(max(threads))]
    x = cp.random.standard_normal((NETWORK_BATCH, *rt.input_dims), dtype=cp.float32).astype(cp.float16)

    def network_step() -> int:
        rt.infer(x)
        return NETWORK_BATCH

    def prep_call(j: int) -> Callable[[], Any]:
        start = j * 7 % len(batches)  # the executors start at different batches
        ex, cycle = executors[j], itertools.cycle(batches[start:] + batches[:start])
        return lambda: ex.run(next(cycle)).outputs["PIXELS"]

    def started(steps: list[Callable[[], int]]) -> list[_Loop]:
        loops = [_Loop(s) for s in steps]
        for lp in loops:
            lp.start()
        return loops

    rows = []
    try:
        _window(seconds, [], network_step)
        n = _window(seconds, [], network_step)
        rows.append({"part": "overlap", "threads": 0, "network_img_s": round(n / seconds)})
        for k in threads:
            calls = [prep_call(j) for j in range(k)]
            loops = started([lambda c=c: len(c()) for c in calls])
            _window(seconds, loops, None)
            alone = sum(lp.images for lp in loops) / seconds
            loops = started([lambda c=c: len(c()) for c in calls])
            n = _window(seconds, loops, network_step)
            rows.append({"part": "overlap", "threads": k, "prep_alone_img_s": round(alone),
                         "network_img_s": round(n / seconds),
                         "prep_img_s": round(sum(lp.images for lp in loops) / seconds)})  # fmt: skip
            rows.append({"part": "pipeline", "threads": k, **_pipeline(rt, calls, seconds)})
            log.info("%s", rows[-2:])
    finally:
        for ex in executors:
            ex.close()
        rt.close()
    return rows


def _pipeline(rt: Any, calls: list[Callable[[], Any]], seconds: float) -> dict[str, Any]:
    """The preprocessing threads put their outputs on a queue; this thread runs the network on them, 64 images at
    a time (``infer_many``, as the classifier runs an execute's requests): images/s through the network."""
    q: queue.Queue = queue.Queue(maxsize=2 * len(calls))
    halt = threading.Event()

    def produce(call: Callable[[], Any]) -> int:
        out = call()
        while not halt.is_set():
            try:
                q.put(out, timeout=0.1)
                break
            except queue.Full:
                continue
        return len(out)

    loops = [_Loop(lambda c=c: produce(c)) for c in calls]
    for lp in loops:
        lp.start()

    def consume() -> int:
        parts, n = [], 0
        while n < NETWORK_BATCH:
            parts.append(q.get(timeout=30))  # a producer that failed is reported after the window
            n += len(parts[-1])
        rt.infer_many(parts)
        return n

    try:
        n = _window(seconds, loops, consume, halt)
    finally:
        halt.set()
    return {"network_img_s": round(n / seconds), "prep_img_s": round(sum(lp.images for lp in loops) / seconds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, required=True, help="folder of *.jpg files")
    parser.add_argument("--out", type=Path, required=True, help="JSON rows, one per line")
    parser.add_argument("--batch", type=int, default=64, help="images per preprocessing call")
    parser.add_argument("--threads", default="1,2", help="preprocessing threads (an executor each), comma list")
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement window")
    parser.add_argument("--runs", type=int, default=20, help="kernels: traced calls of each stage")
    parser.add_argument("--parts", default="kernels,overlap", help="comma list of kernels, overlap, decode")
    parser.add_argument("--color-specs", default="SRGB,SYCC", help="decode: nvImageCodec ColorSpec names, comma list")
    parser.add_argument("--torch-site", default="", help="kernels: site-packages of a CUDA PyTorch (its profiler)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    images = [p.read_bytes() for p in sorted(args.images.glob("*.jpg"))]
    if not images:
        parser.error(f"no *.jpg files in {args.images}")
    from scripts.bench.dali_bench import make_batches

    batches = make_batches(images, args.batch)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    specs = [c.strip().upper() for c in args.color_specs.split(",") if c.strip()]
    if not set(specs) <= set(COLOR_SPECS):
        parser.error(f"--color-specs: unknown {sorted(set(specs) - set(COLOR_SPECS))}; known: {', '.join(COLOR_SPECS)}")
    rows: list[dict[str, Any]] = []

    def keep(new: list[dict[str, Any]]) -> None:
        """Each part's rows written as soon as it ends: a later part that fails loses nothing measured."""
        rows.extend(new)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        for r in new:
            log.info("%s", json.dumps(r)[:2000])

    from tritonprep.errors import RuntimeUnavailable

    if "overlap" in parts:
        keep(overlap(batches, [int(t) for t in args.threads.split(",")], args.seconds))
    for part, measure in (("kernels", lambda: kernels(args.torch_site, batches, args.runs)),
                          ("decode", lambda: decode_kernels(args.torch_site, batches, args.runs, specs))):  # fmt: skip
        if part not in parts:
            continue
        try:
            keep(measure())
        except ImportError as e:
            log.error("%s: an import failed (%s); the profiler needs a CUDA PyTorch: pass --torch-site", part, e)
        except RuntimeUnavailable as e:
            log.error("%s: %s", part, e)
    if not args.out.exists():
        args.out.write_text("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
