"""The ``tritonprep`` command line.

``tritonprep classify PATH...`` sends the images (files, or every image in a folder) to the
``classify`` ensemble and prints each one's top-k ImageNet classes; ``--json`` prints one JSON
object per image instead. ``tritonprep embed PATH...`` sends them to the ``embed`` ensemble and
prints or saves each one's embedding (``--json``, or ``--npy OUT`` for one float32 array).
Images travel up to ``--batch-size`` per request; ``--verbose`` adds how each image was decoded
and transformed (the provenance outputs). ``tritonprep serve`` runs the embedded Triton server
(needs the ``server`` extra); ``tritonprep model add`` adds a network of your own to a model repository. A
failure that concerns one image is reported for that image and the others still get their answers; the exit code
is 1 if anything failed. A request that failed because its server went away or was overloaded is sent again
(``--retries``); the run ends with one line on stderr saying how many were, and why.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .errors import ClientError, ServerUnavailable
from .retry import RetryCounts, RetryPolicy

IMAGE_SUFFIXES = frozenset(
    (".jpg", ".jpeg", ".jpe", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".jp2", ".j2k", ".j2c", ".jpf")
)


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
                items.append((arg, None, "folder holds no image files (.jpg .png .webp .bmp .gif .tiff .jp2)"))
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


class Answers:
    """Writes each file's answer, in order: one JSON object per line (``--json``) or text; an error is
    counted and reported for its file alone. ``embed --npy`` collects the embeddings and saves them."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.classify = args.command == "classify"
        self.json = args.json
        self.npy: Path | None = None if self.classify else args.npy
        self.out, self.err = out, err
        self.failed = 0
        self.rows: list[Any] = []

    def error(self, name: str, message: str) -> None:
        """Report that file ``name`` got no answer, and why."""
        self.failed += 1
        if self.json:
            self.out.write(json.dumps({"file": name, "error": message}) + "\n")
        else:
            self.err.write(f"tritonprep: error: {name}: {message}\n")

    def answer(self, name: str, result: Any) -> None:
        """Write file ``name``'s result (an ``ImageResult``, or the ``ClientError`` it got)."""
        if isinstance(result, ServerUnavailable):
            raise result
        if isinstance(result, ClientError):
            self.error(name, str(result))
            return
        record = self._record(name, result)
        if self.json:
            self.out.write(json.dumps(record) + "\n")
            return
        if self.classify:
            self.out.write(f"{name}\n")
            for rank, p in enumerate(result.predictions, 1):
                self.out.write(f"  {rank}. {p.label:<30} (class {p.index:>3})  {p.score:7.2%}\n")
        elif self.npy is not None:
            self.out.write(f"{name}  row {record['row']}\n")
        else:
            e = result.embedding
            head = " ".join(f"{v:+.4f}" for v in e[:4])
            self.out.write(f"{name}  {len(e)}-d, norm {float(np.linalg.norm(e)):.4f}: [{head} ...]\n")
        if result.provenance is not None:
            self.out.write(f"  {_provenance_text(result.provenance)}\n")

    def _record(self, name: str, result: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"file": name}
        if self.classify:
            record["predictions"] = [p.as_dict() for p in result.predictions]
        elif self.npy is not None:
            record["row"] = len(self.rows)
            self.rows.append(result.embedding)
        else:
            record["embedding"] = [round(float(v), 6) for v in result.embedding]
        if result.provenance is not None:
            record["provenance"] = result.provenance.as_dict()
        return record

    def finish(self) -> int:
        """Save the ``--npy`` file; the exit code (1 if any file failed)."""
        if self.npy is not None:
            np.save(self.npy, np.stack(self.rows).astype(np.float32) if self.rows else np.zeros((0, 0), np.float32))
        self.out.flush()
        return 1 if self.failed else 0


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse option values the server could never satisfy, before anything is read or sent."""
    if args.command == "classify" and args.top_k < 1:
        raise UsageError("--top-k must be at least 1")
    if not 1 <= args.batch_size <= 64:
        raise UsageError("--batch-size must be between 1 and 64 (the server's max_images_per_request)")
    if args.retries < 0:
        raise UsageError("--retries must be 0 (no retries) or more")
    npy = getattr(args, "npy", None)
    if npy is not None:
        folder = npy.parent
        if npy.is_dir():
            raise UsageError(f"--npy {npy}: is a folder; give a file name, such as {npy / 'embeddings.npy'}")
        if not folder.is_dir():
            raise UsageError(f"--npy {npy}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"--npy {npy}: folder {folder} is not writable")


def read_files(items: Sequence[tuple[str, Path | None, str | None]], answers: Answers) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` of every file that can be read; the others are reported as errors."""
    readable: list[tuple[str, bytes]] = []
    for name, path, problem in items:
        if path is None:
            answers.error(name, problem or "not a file")
            continue
        try:
            readable.append((name, path.read_bytes()))
        except OSError as e:
            answers.error(name, f"cannot read: {e.strerror or e}")
    return readable


def _output_names(client: Any, args: argparse.Namespace) -> list[str]:
    """The outputs to ask ``client``'s model for, checked against what it offers."""
    classify = args.command == "classify"
    if classify:
        available = client.max_top_k()
        if args.top_k > available:
            raise UsageError(
                f"--top-k {args.top_k}: model {client.model!r} returns at most {available} classes per image; raise "
                f"the limit with `tritonprep model add NAME --onnx FILE --top-k {args.top_k}` for a network you add, "
                "or the dims of SCORES, CLASS_IDS and LABELS in its configs (docs/your-network.md#top-k)"
            )
    names = client.output_names(predictions=classify, embedding=not classify, provenance=args.verbose)
    if client.model != args.model:  # classify through analyze: the classifier's input, not the embedder's
        names = [n for n in names if not n.startswith(EMBEDDER_INPUT)]
    return names


def client_class() -> Any:
    """:class:`~tritonprep_client.client.ClassifyClient`, or what to install to have it."""
    try:
        from .client import ClassifyClient
    except ImportError as e:
        raise UsageError(f"the client needs tritonclient: pip install 'tritonprep[client]' ({e})") from None
    return ClassifyClient


def send(
    client_cls: Any, args: argparse.Namespace, images: Sequence[bytes], err: TextIO
) -> tuple[dict[int, Any], RetryCounts]:
    """Every image's result (an ``ImageResult`` or its ``ClientError``), by index, with a progress bar on ``err``;
    and what the client sent again, by cause."""
    model = args.model
    if args.command == "classify" and args.verbose and model == "classify":
        model = "analyze"  # classify carries no provenance outputs (they would cost every request); analyze does
    with client_cls(
        args.url,
        args.protocol,
        model=model,
        timeout_s=args.timeout,
        concurrency=args.concurrency,
        retry=args.retries,
    ) as c:
        c.check_server()
        names = _output_names(c, args)
        top_k = args.top_k if args.command == "classify" else None
        progress = Progress(len(images), err)
        results: dict[int, Any] = {}
        for i, result in c.infer_each(images, names, top_k=top_k, batch_size=args.batch_size):
            results[i] = result
            progress.step()
        progress.clear()
    return results, c.retries


def images_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``tritonprep classify`` or ``tritonprep embed``; return the exit code."""
    client_cls = client_class()
    check_arguments(args)
    answers = Answers(args, out, err)
    readable = read_files(expand_paths(args.paths), answers)
    if readable:
        results, retries = send(client_cls, args, [data for _, data in readable], err)
        for i, (name, _) in enumerate(readable):
            answers.answer(name, results[i])
        if retries.total:
            err.write(f"tritonprep: retried {retries.total} request(s): {retries}\n")
    return answers.finish()


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
        "--retries",
        type=int,
        default=RetryPolicy().retries,
        metavar="N",
        help="send a request again up to N times when its server went away or was overloaded, with a growing "
        f"wait, for at most {RetryPolicy().max_time_s:.0f} s (default: %(default)s; 0: never)",
    )
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
    sub.add_parser(
        "model",
        help="add a network of your own to a model repository (needs tritonprep[server]); "
        "see `tritonprep model add --help`",
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
    if argv[:1] == ["model"]:  # everything after `model` belongs to tritonprep.repository's parser
        try:
            from tritonprep.repository.cli import run as model_run
        except ImportError as e:
            err.write(f"tritonprep: error: adding a network needs the server: pip install 'tritonprep[server]' ({e})\n")
            return 2
        return model_run(argv[1:], out, err)
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
