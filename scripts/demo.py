#!/usr/bin/env python3
"""The main job in one command (`make demo`): start the embedded Triton server on this
repository's model_repository/, classify and embed real photos with the `tritonprep` CLI over gRPC
and HTTP, then stop the server.

The photos are scikit-image's sample images (a cat, an espresso, an astronaut, a rocket),
written as JPEG and PNG files into .cache/photos/ (no download).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("demo")


def write_photos(folder: Path) -> list[Path]:
    """Encode scikit-image's sample photos into ``folder``."""
    from PIL import Image
    from skimage import data

    folder.mkdir(parents=True, exist_ok=True)
    photos = [
        ("chelsea.jpg", data.chelsea()),
        ("coffee.png", data.coffee()),
        ("astronaut.jpg", data.astronaut()),
        ("rocket.jpg", data.rocket()),
    ]
    paths = []
    for name, arr in photos:
        path = folder / name
        Image.fromarray(arr).save(path, quality=90) if name.endswith(".jpg") else Image.fromarray(arr).save(path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="images or folders to classify (default: sample photos)")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")

    from tritonprep.errors import ServerError
    from tritonprep.launcher.options import ServerOptions
    from tritonprep.launcher.process import EmbeddedServer

    targets = [str(p) for p in args.paths] or [str(REPO / ".cache" / "photos")]
    if not args.paths:
        write_photos(REPO / ".cache" / "photos")
    options = ServerOptions(
        REPO / "model_repository", http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port
    )
    log_path = REPO / ".cache" / "tritonserver.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    cli = Path(sys.executable).with_name("tritonprep")
    log.info("starting tritonserver on %s (log: %s)", options.model_repository, log_path)
    try:
        with EmbeddedServer(options, log_path) as server:
            log.info("ready: %s", ", ".join(n for n, ok in server.model_states().items() if ok))
            log.info("$ tritonprep classify %s --url %s", " ".join(targets), options.grpc_url)
            code = subprocess.call([str(cli), "classify", *targets, "--url", options.grpc_url])
            log.info("$ tritonprep classify %s --url %s --json --top-k 1", " ".join(targets), options.http_url)
            code |= subprocess.call(
                [str(cli), "classify", *targets, "--url", options.http_url, "--json", "--top-k", "1"]
            )
            log.info("$ tritonprep embed %s --url %s --verbose", " ".join(targets), options.grpc_url)
            code |= subprocess.call([str(cli), "embed", *targets, "--url", options.grpc_url, "--verbose"])
    except ServerError as e:
        log.error("%s", e)
        return 1
    log.info("server stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
