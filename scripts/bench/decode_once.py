#!/usr/bin/env python3
"""Decode once, serve two models: the `analyze` ensemble against `classify` + `embed` as two ensembles.

A client that needs an image's classes and its embedding can send it once to `analyze` (one
decode, two network inputs from one preprocess execute, then the classifier and the embedder)
or twice, to `classify` and to `embed` (two decodes). Both ways run on the same server, over the
same images, at the same images per request and concurrency:

* ``analyze`` alone, at concurrency C;
* ``classify`` and ``embed`` at the same time, each at concurrency C (a client with C images in
  flight, each sent to both): an image is done when both have answered, so the pair's rate is the
  lower of the two concurrent rates.

The saving is ``analyze / pair - 1``. With perf_analyzer (the harness: ``python -m
scripts.bench.harness --phase analyze``) each stream is a perf_analyzer process; without it
(``python -m scripts.bench.decode_once``, e.g. on a machine whose glibc is too old for the
perf-analyzer wheel) a Python gRPC load generator against the embedded server on this machine's
executor does the same, with the pair sent concurrently per image.

    python -m scripts.bench.decode_once --seconds 20 --concurrency 4 --batch 1,8
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

log = logging.getLogger("decode_once")

#: the extra models of the comparison, beside preprocess, classifier, postprocess and classify
MODELS = ("embedder", "embed", "analyze")
#: (images per request, concurrency) of the perf_analyzer comparison
GRID = {"quick": [(1, 16), (8, 16)], "full": [(1, 16), (1, 64), (8, 16), (8, 64)]}


def open_queues(model_dir: Path, size: int = 4096) -> None:
    """Raise ``max_queue_size`` in every config of a copied model (``config.pbtxt`` and ``configs/*.pbtxt``,
    whichever the server picks): a benchmark measures capacity, and the deployed bound would reject."""
    for cfg in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))]:
        if cfg.is_file():
            cfg.write_text(re.sub(r"max_queue_size: \d+", f"max_queue_size: {size}", cfg.read_text()))


def add_models(repo: Path, source: Path) -> None:
    """Copy the embedder and the embed and analyze ensembles into a benchmark repository (queues opened up
    like the harness's: capacity, not overload protection, is measured)."""
    for model in MODELS:
        shutil.copytree(source / model, repo / model, ignore=shutil.ignore_patterns("ort-trt-cache", "__pycache__"))
        open_queues(repo / model)


def compare(
    sweep: Callable[[str, int, int, Path], list[Any]], grid: list[tuple[int, int]], out: Path, size: str
) -> tuple[list[dict], list[str]]:
    """Measure each grid point with ``sweep(model, images_per_request, concurrency, out_dir)`` (perf_analyzer
    through ``scripts.perf_sweep``, one row); return the rows (as the harness's dicts) and the summary lines."""
    rows: list[dict] = []
    lines: list[str] = []
    for batch, conc in grid:
        [a] = sweep("analyze", batch, conc, out / "perf-analyze") or [None]
        with ThreadPoolExecutor(2) as pool:  # the two ensembles at the same time, as one client would send them
            fc = pool.submit(sweep, "classify", batch, conc, out / "perf-pair-classify")
            fe = pool.submit(sweep, "embed", batch, conc, out / "perf-pair-embed")
            [c] = fc.result() or [None]
            [e] = fe.result() or [None]
        for label, r in (
            ("analyze: one decode, two specs", a),
            ("classify, beside embed", c),
            ("embed, beside classify", e),
        ):
            if r is not None:
                rows.append({"kind": "decode_once", "config": label, "size": size, **asdict(r)})
        if a is None or c is None or e is None:
            lines.append(f"- {batch} img/request, concurrency {conc}: a measurement failed (see harness.log)")
            continue
        pair = min(c.images_per_s, e.images_per_s)
        lines.append(
            f"- {batch} img/request, concurrency {conc}: `analyze` **{a.images_per_s:,.0f} img/s** vs `classify` + "
            f"`embed` **{pair:,.0f} img/s** (classify {c.images_per_s:,.0f}, embed {e.images_per_s:,.0f} at the same "
            f"time): **{a.images_per_s / pair - 1:+.0%}**; p50 {a.p50_ms:.1f} vs {max(c.p50_ms, e.p50_ms):.1f} ms"
        )
        lines.append(f"  - analyze per model: {a.composing}")
        lines.append(f"  - classify: {c.composing}; embed: {e.composing}")
    return rows, lines


# ---------------------------------------------------------------------- without perf_analyzer
def _preprocess_stats(url: str, headers: dict[str, str]) -> tuple[int, int]:
    """(images preprocessed, nanoseconds preprocess spent executing) so far: the batch statistics count each
    execute() once, where the per-request ones charge every request of a batch the whole batch's time."""
    request = urllib.request.Request(f"{url}/v2/models/preprocess/stats", headers=headers)
    with urllib.request.urlopen(request) as r:
        s = json.loads(r.read())["model_stats"][0]
    busy = sum(int(b["compute_infer"]["ns"]) for b in s.get("batch_stats", []))
    return int(s["inference_count"]), busy


def loadgen(server: Any, images: list[bytes], batch: int, conc: int, seconds: float, models: tuple[str, ...]) -> dict:
    """``conc`` client threads for ``seconds``: each sends a group of ``batch`` images to every model of
    ``models`` at once and waits for all; returns images/s (images that got every answer) and what
    preprocess spent per image."""
    import tritonclient.grpc as grpcclient

    from tritonprep_client import image_input

    done = [0] * conc
    errors: list[str] = []
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        c = grpcclient.InferenceServerClient(server.options.grpc_url)
        i = k * batch
        try:
            while time.monotonic() < stop:
                group = [images[(i + j) % len(images)] for j in range(batch)]
                i += conc * batch
                results: list[Any] = []
                ready = threading.Semaphore(0)

                def finished(result: Any, error: Any, results: list[Any] = results, ready: Any = ready) -> None:
                    results.append(error)
                    ready.release()

                for model in models:  # a 60 s server-side timeout: measure capacity, not the deployed 2 s queue bound
                    c.async_infer(
                        model,
                        [image_input(group, grpcclient)],
                        callback=finished,
                        timeout=60_000_000,
                        client_timeout=90,
                    )
                for _ in models:
                    ready.acquire()
                if any(e is not None for e in results):
                    errors.extend(str(e) for e in results if e is not None)
                    return
                done[k] += batch
        finally:
            c.close()

    before = _preprocess_stats(server.options.http_url, server.admin_headers)
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    after = _preprocess_stats(server.options.http_url, server.admin_headers)
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    decoded = after[0] - before[0]
    return {
        "models": "+".join(models),
        "images_per_request": batch,
        "concurrency": conc,
        "images_per_s": sum(done) / elapsed,
        "preprocess_images_per_image": decoded / max(1, sum(done)),
        "preprocess_ms_per_image": (after[1] - before[1]) / 1e6 / max(1, decoded),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads (default: %(default)s)")
    parser.add_argument("--batch", default="1,8", help="images per request, comma list (default: %(default)s)")
    parser.add_argument("--size", default="500x375", help="JPEG size (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    from tritonprep.launcher.process import EmbeddedServer
    from tritonprep_testkit import photos
    from tritonprep_testkit.servers import MODEL_REPOSITORY, local_options

    images = photos.make_jpegs(*photos.SIZES[args.size], 64, seed=42)
    figures: list[dict] = []
    log_path = Path("/tmp") / "decode_once-tritonserver.log"
    with EmbeddedServer(local_options(MODEL_REPOSITORY), log_path) as server:
        for batch in (int(b) for b in args.batch.split(",")):
            loadgen(server, images, batch, args.concurrency, 3.0, ("analyze",))  # warm-up
            a = loadgen(server, images, batch, args.concurrency, args.seconds, ("analyze",))
            p = loadgen(server, images, batch, args.concurrency, args.seconds, ("classify", "embed"))
            figures += [a, p]
            sys.stdout.write(
                f"{batch} img/request, {args.concurrency} clients, {args.size} JPEGs: analyze "
                f"{a['images_per_s']:.1f} img/s ({a['preprocess_images_per_image']:.2f} preprocess images per image, "
                f"{a['preprocess_ms_per_image']:.2f} ms each) vs classify + embed {p['images_per_s']:.1f} img/s "
                f"({p['preprocess_images_per_image']:.2f}, {p['preprocess_ms_per_image']:.2f} ms): "
                f"{a['images_per_s'] / p['images_per_s'] - 1:+.0%}\n"
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
