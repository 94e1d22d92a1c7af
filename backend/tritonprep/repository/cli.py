"""``tritonprep model add``: add a network of your own to a model repository, in one command.

The ``tritonprep`` command hands ``model ...`` here. Exit codes: 0 added; 2 nothing written, with one line
per problem (the ONNX file against the preprocessing, the labels against the classes, a name in use, a bad
``--set``); 1 the files could not be written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..errors import ConfigError
from .checks import SETTABLE, Plan, Request, plan
from .errors import ModelAddError
from .network import KINDS
from .paths import DEFAULT_REPOSITORY
from .write import Written, add

DESCRIPTION = (
    "Add a network of your own (an ONNX file) to a model repository, beside the networks it serves: its model "
    "(CPU, GPU and container configs), an image output of preprocess with its preprocessing, and the ensemble "
    "clients call by NAME (tritonprep classify|embed --model NAME). Everything is checked first; on a problem "
    "nothing is written. The guide: docs/your-network.md."
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``tritonprep model``."""
    parser = argparse.ArgumentParser(prog="tritonprep model", description="Manage the networks of a model repository.")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = sub.add_parser("add", help="add a network (an ONNX file) to a model repository", description=DESCRIPTION)
    a.add_argument("name", metavar="NAME", help="what clients call it: lowercase letters, digits, _ and -")
    a.add_argument("--onnx", metavar="FILE", type=Path, required=True, help="the exported network (FP32 input)")
    a.add_argument(
        "--labels",
        metavar="FILE|imagenet",
        help="a classifier's class names: a file of one name per line, in class order, or imagenet (the 1000 "
        "ImageNet-1k names); without it a class's label is its index",
    )
    a.add_argument(
        "--kind",
        choices=KINDS,
        default="classifier",
        help="classifier (top-k classes) or embedder (a unit vector per image) (default: %(default)s)",
    )
    a.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="predictions per image the server returns, at most the classes (default: 5, or the classes if fewer); "
        "a client asks for K or fewer",
    )
    a.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"the network's preprocessing, over the defaults of docs/configuration.md: {', '.join(SETTABLE)} "
        "(repeat it, e.g. --set output_size=240,240 --set resize_shorter=274)",
    )
    a.add_argument(
        "--repository",
        metavar="DIR",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="the model repository to add to; a new folder starts as a copy of the shipped one (default: %(default)s)",
    )
    return parser


def describe(done: Written, chosen: Plan) -> str:
    """What was added, where, and the commands that use it."""
    net, spec = chosen.network, chosen.network.spec
    source = f" (a copy of {done.copied_from})" if done.copied_from else ""
    if net.classifier:
        labels = net.labels and (chosen.labels_file and str(chosen.labels_file) or net.labels) or "the class index"
        answers = f"the top {net.top_k} of {net.width} classes out (labels: {labels})"
        use = "classify"
    else:
        answers = f"a {net.width}-d unit vector out"
        use = "embed"
    resize = {
        "shorter_side_crop": f"shorter side {spec.resize_shorter}, center crop",
        "letterbox": f"letterbox (pad {spec.pad_value})",
        "stretch": "stretch",
    }[spec.resize]
    mean, std = (",".join(f"{v:g}" for v in t) for t in (spec.mean, spec.std))
    rows = [
        (net.name, f"the ensemble clients call: IMAGE in, {answers}"),
        (
            net.network_model,
            f"the network (1/model.onnx{', model.fp16.onnx' if net.fp16 else ''}): CPU and GPU configs"
            + (", the container's tensorrt and onnxruntime" if net.classifier else ""),
        ),
        *([(net.postprocess_model, "the container's top-k step")] if net.classifier else []),
        (
            "preprocess",
            f"+ {net.pixels} {list(spec.output_shape)} {spec.dtype}: {resize}, {spec.interpolation}, mean {mean}, "
            f"std {std}, {spec.channel_order}",
        ),
    ]
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"added {net.name} to {done.repository} in {done.seconds:.1f} s{source}:"]
    lines += [f"  {name:<{width}}{what}" for name, what in rows]
    lines += [
        f"serve:  tritonprep serve --model-repository {done.repository}",
        f"use:    tritonprep {use} photo.jpg --model {net.name}",
    ]
    return "\n".join(lines) + "\n"


def run(argv: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run ``tritonprep model`` with ``argv``; return the exit code (problems are one line each on ``err``)."""
    args = build_parser().parse_args(list(argv))
    request = Request(
        name=args.name,
        onnx=args.onnx,
        repository=args.repository,
        kind=args.kind,
        labels=args.labels,
        top_k=args.top_k,
        sets=tuple(args.sets),
    )
    try:
        chosen = plan(request)
        done = add(chosen)
    except ModelAddError as e:
        err.writelines(f"tritonprep: error: {problem}\n" for problem in e.problems)
        return 2
    except ConfigError as e:
        err.write(f"tritonprep: error: {e}\n")
        return 2
    except OSError as e:
        err.write(f"tritonprep: error: cannot write into {args.repository}: {e}; nothing was added\n")
        return 1
    out.write(describe(done, chosen))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``tritonprep model`` as a command."""
    logging.basicConfig(level=logging.WARNING, format="tritonprep: %(message)s")
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
