"""The ``tritonprep`` command line.

``tritonprep classify PATH...`` sends the images (files, or every image in a folder) to the
``classify`` ensemble and prints each one's top-k ImageNet classes; ``--json`` prints one JSON
object per image instead. ``tritonprep embed PATH...`` sends them to the ``embed`` ensemble and
prints or saves each one's embedding (``--json``, or ``--npy OUT`` for one float32 array).
Images travel up to ``--batch-size`` per request; ``--verbose`` adds how each image was decoded
and transformed (the provenance outputs). ``tritonprep serve`` runs the embedded Triton server
(needs the ``server`` extra). A failure that concerns one image is reported for that image and
the others still get their answers; the exit code is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import ClientError, ServerUnavailable

IMAGE_SUFFIXES = frozenset((".jpg", ".jpeg", ".jpe", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"))


#: the embedder's network input in analyze (its provenance is left out of classify --verbose)
EMBEDDER_INPUT = "EMBED_PIXELS"


class UsageError(ClientError):
    """Bad command-line input: reported in one line, exit code 2."""


def expand_paths(paths: Sequence[str]) -> list[tuple[str, Path | None, str | None]]:
    """Turn arguments into ``(display name, path or None, error or None)``, folders expanded."""
    items: list[tuple[str, Path | None, str | None]] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                items.append((arg, None, "folder holds no image files (.jpg .png .webp .bmp .gif .tiff)"))
            items.extend((str(f), f, None) for f in files)
        elif p.is_file():
            items.append((arg, p, None))
        elif p.exists():
            items.append((arg, None, "not a regular file"))
        else:
            items.append((arg, None, "no such file or directory"))
    return items


class Progress:
    """A one-line progress bar on a terminal's stderr; silent otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.enabled = total > 1 and stream.isatty()

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            width = 30
            filled = width * self.done // self.total
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


def _provenance_text(prov: Any) -> str:
    """One line: how the image was decoded and how each network input was cut from it."""
    parts = [f"decoded by {prov.decoder}, {prov.width}x{prov.height}"]
    for name, (sx, sy, left, top, right, bottom) in prov.transforms.items():
        parts.append(f"{name} scale {sx:.4f} x {sy:.4f}, padding l{left} t{top} r{right} b{bottom}")
    return "; ".join(parts)


def _print_text(name: str, predictions: list, out: TextIO) -> None:
    out.write(f"{name}\n")
    for rank, p in enumerate(predictions, 1):
        out.write(f"  {rank}. {p.label:<30} (class {p.index:>3})  {p.score:7.2%}\n")


def images_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``tritonprep classify`` or ``tritonprep embed``; return the exit code."""
    try:
        import numpy as np

        from .client import ClassifyClient
    except ImportError as e:
        raise UsageError(f"the client needs tritonclient: pip install 'tritonprep[client]' ({e})") from None

    classify = args.command == "classify"
    if classify and args.top_k < 1:
        raise UsageError("--top-k must be at least 1")
    if not 1 <= args.batch_size <= 64:
        raise UsageError("--batch-size must be between 1 and 64 (the server's max_images_per_request)")
    items = expand_paths(args.paths)
    failed = 0

    def report_error(name: str, message: str) -> None:
        nonlocal failed
        failed += 1
        if args.json:
            out.write(json.dumps({"file": name, "error": message}) + "\n")
        else:
            err.write(f"tritonprep: error: {name}: {message}\n")

    readable: list[tuple[str, bytes]] = []
    for name, path, problem in items:
        if problem is not None:
            report_error(name, problem)
            continue
        try:
            readable.append((name, path.read_bytes()))  # type: ignore[union-attr]
        except OSError as e:
            report_error(name, f"cannot read: {e.strerror or e}")
    rows: list[Any] = []
    model = args.model
    if classify and args.verbose and model == "classify":
        model = "analyze"  # classify carries no provenance outputs (they would cost every request); analyze does
    if readable:
        with ClassifyClient(
            args.url, args.protocol, model=model, timeout_s=args.timeout, concurrency=args.concurrency
        ) as client:
            client.check_server()
            if classify:
                available = client.max_top_k()
                if args.top_k > available:
                    raise UsageError(f"--top-k {args.top_k}: the server returns at most {available} classes per image")
            names = client.output_names(predictions=classify, embedding=not classify, provenance=args.verbose)
            if model != args.model:  # classify through analyze: the classifier's input, not the embedder's
                names = [n for n in names if not n.startswith(EMBEDDER_INPUT)]
            progress = Progress(len(readable), err)
            results: dict[int, Any] = {}
            data = [d for _, d in readable]
            top_k = args.top_k if classify else None
            for i, result in client.infer_each(data, names, top_k=top_k, batch_size=args.batch_size):
                results[i] = result
                progress.step()
            progress.clear()
            for i, (name, _) in enumerate(readable):
                result = results[i]
                if isinstance(result, ClientError):
                    if isinstance(result, ServerUnavailable):
                        raise result
                    report_error(name, str(result))
                    continue
                record: dict[str, Any] = {"file": name}
                if classify:
                    record["predictions"] = [p.as_dict() for p in result.predictions]
                elif args.npy:
                    record["row"] = len(rows)
                    rows.append(result.embedding)
                else:
                    record["embedding"] = [round(float(v), 6) for v in result.embedding]
                if result.provenance is not None:
                    record["provenance"] = result.provenance.as_dict()
                if args.json:
                    out.write(json.dumps(record) + "\n")
                    continue
                if classify:
                    _print_text(name, result.predictions, out)
                elif args.npy:
                    out.write(f"{name}  row {record['row']}\n")
                else:
                    e = result.embedding
                    head = " ".join(f"{v:+.4f}" for v in e[:4])
                    out.write(f"{name}  {len(e)}-d, norm {float(np.linalg.norm(e)):.4f}: [{head} ...]\n")
                if result.provenance is not None:
                    out.write(f"  {_provenance_text(result.provenance)}\n")
    if not classify and args.npy:
        np.save(args.npy, np.stack(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32))
    out.flush()
    return 1 if failed else 0


def _common_arguments(c: argparse.ArgumentParser, model: str) -> None:
    c.add_argument("paths", nargs="+", metavar="PATH", help="image files and/or folders of images")
    c.add_argument(
        "--url",
        help="server address: host:port, grpc://host:port or http://host:port "
        "(default: localhost:8001 for gRPC, localhost:8000 for HTTP)",
    )
    c.add_argument("--protocol", choices=("grpc", "http"), help="default: grpc, or the URL's scheme")
    c.add_argument("--json", action="store_true", help="one JSON object per image on stdout")
    c.add_argument("--model", default=model, help="ensemble to call (default: %(default)s)")
    c.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="images per request, 1..64 (default: %(default)s); a bad image still fails only itself",
    )
    c.add_argument("--concurrency", type=int, default=8, help="requests in flight (default: %(default)s)")
    c.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default: %(default)s)")
    c.add_argument(
        "--verbose",
        action="store_true",
        help="also show how each image was decoded and transformed (size, decoder, scale, padding); "
        "classify then calls the analyze ensemble, which carries them",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tritonprep``."""
    parser = argparse.ArgumentParser(
        prog="tritonprep", description="Classify and embed images with a Triton server running tritonprep."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("classify", help="classify image files or folders", description=__doc__.split("\n\n")[1])
    _common_arguments(c, "classify")
    c.add_argument("--top-k", type=int, default=5, help="classes to show per image (default: %(default)s)")
    e = sub.add_parser(
        "embed", help="embed image files or folders (1280-d unit vectors)", description=__doc__.split("\n\n")[1]
    )
    _common_arguments(e, "embed")
    e.add_argument(
        "--npy", metavar="OUT", type=Path, help="save the embeddings as one float32 array [n, 1280] (rows in order)"
    )
    sub.add_parser(
        "serve", help="run the embedded Triton server (needs tritonprep[server]); see `tritonprep serve --help`"
    )
    return parser


def run(argv: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the CLI with ``argv``; return the exit code (errors are one line on ``err``)."""
    argv = list(argv)
    if argv[:1] == ["serve"]:  # everything after `serve` belongs to the server's own parser
        try:
            from tritonprep.launcher.cli import main as serve_main
        except ImportError as e:
            err.write(f"tritonprep: error: the server is not installed here: pip install 'tritonprep[server]' ({e})\n")
            return 2
        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return images_command(args, out, err)
    except UsageError as e:
        err.write(f"tritonprep: error: {e}\n")
        return 2
    except ClientError as e:
        err.write(f"tritonprep: error: {e}\n")
        return 1


def main() -> int:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="tritonprep: %(message)s")
    try:
        return run(sys.argv[1:])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
