"""The CPU path end to end: ``classify`` and ``classify_fused`` through the embedded server on a machine's CPU.

Issue 37's last goal is "nothing slower on the CPU path". perf_analyzer needs glibc 2.38, so this drives the server
with :func:`scripts.bench.decode_once.loadgen` (Python gRPC clients) at each point ``BATCHxCONCURRENCY`` of
``--points`` (``1x1``: one image at a time; ``8x2``: two clients of 8 images), a warm-up of 3 s first. Each
point prints one JSON line: images/s, and the mean milliseconds of a request (clients x images / images/s).

To weigh two commits, run it from this checkout with the other's packages first on the path, alternating, e.g.
``git worktree add /tmp/base BASE`` (with the ONNX files copied into its ``model_repository``), then
``PYTHONPATH=/tmp/base/backend:/tmp/base/testkit:/tmp/base/client python -m scripts.bench.cpu_path --label base``:
the server, its stubs and the repository (the test kit's) are the other commit's; the load is this one's.

    python -m scripts.bench.cpu_path [--points 1x1,8x2] [--models classify,classify_fused] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from scripts.bench.decode_once import loadgen

log = logging.getLogger("cpu_path")


def parse_points(text: str) -> list[tuple[int, int]]:
    """``"1x1,8x2"`` -> ``[(1, 1), (8, 2)]`` (images per request, concurrency)."""
    points = []
    for part in text.split(","):
        batch, _, conc = part.strip().partition("x")
        if not (batch.isdigit() and conc.isdigit()) or int(batch) < 1 or int(conc) < 1:
            raise argparse.ArgumentTypeError(f"a point is BATCHxCONCURRENCY, e.g. 8x2; got {part!r}")
        points.append((int(batch), int(conc)))
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=parse_points, default=parse_points("1x1,8x2"))
    parser.add_argument("--models", default="classify,classify_fused")
    parser.add_argument("--seconds", type=float, default=15.0, help="per point (default: %(default)s)")
    parser.add_argument("--label", default="", help="a name for the rows (the commit measured)")
    parser.add_argument("--out", type=Path, help="also append the rows here (JSON lines)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import tritonprep
    from tritonprep.launcher.process import EmbeddedServer
    from tritonprep_testkit import photos
    from tritonprep_testkit.servers import MODEL_REPOSITORY, local_options

    log.info("tritonprep from %s, repository %s", Path(tritonprep.__file__).parent, MODEL_REPOSITORY)
    images = photos.make_jpegs(*photos.SIZES["500x375"], 64, seed=42)
    rows = []
    with EmbeddedServer(local_options(MODEL_REPOSITORY), Path("/tmp") / "cpu_path-tritonserver.log") as server:
        for model in args.models.split(","):
            for batch, conc in args.points:
                loadgen(server, images, batch, conc, 3.0, (model,))  # warm-up
                figures = loadgen(server, images, batch, conc, args.seconds, (model,))
                row = {
                    "label": args.label,
                    "model": model,
                    "images_per_request": batch,
                    "concurrency": conc,
                    "images_per_s": round(figures["images_per_s"], 2),
                    "request_ms": round(1000 * batch * conc / figures["images_per_s"], 2),
                }
                sys.stdout.write(json.dumps(row) + "\n")
                rows.append(row)
    if args.out:
        with args.out.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
