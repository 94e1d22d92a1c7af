#!/usr/bin/env python3
"""Build the classifier's TensorRT engine (model.plan) from the exported ONNX, or skip it when up to date.

The engine is rebuilt when the ONNX file, the TensorRT version, the GPU model, the build
options or the builder changed (a key is stored beside the plan), and skipped otherwise.
Builds with TensorRT's Python API where the ``tensorrt`` package imports, else with
``trtexec`` (on PATH or at /usr/src/tensorrt/bin/trtexec, as in NVIDIA's tritonserver
images). The container's engine-build step runs it (docker/prepare-classifier); it works the
same on any machine with a GPU and TensorRT.

Prints one line saying whether it built or skipped. Exit codes: 0 built or up to date,
1 the build failed, 2 usage error (bad arguments, ONNX missing), 3 TensorRT or the GPU is
not available here.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
DEFAULT_ONNX = Path(__file__).resolve().parent.parent / "model_repository" / "classifier" / "1" / "model.onnx"

log = logging.getLogger("build_engine")

try:
    from tritonprep.classifier.builders import BUILDER_CHOICES, find_builder, query_gpu
    from tritonprep.classifier.engines import BuildOptions, EngineBuildError, Platform, build_or_reuse, network_input
    from tritonprep.errors import ConfigError, RuntimeUnavailable
except ImportError as _e:  # run from a checkout without the package installed
    sys.stderr.write(
        f"build_engine: error: the tritonprep package is not importable ({_e}); "
        "run `make setup` and use .venv/bin/python, or pip install .\n"
    )
    sys.exit(EXIT_UNAVAILABLE)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def dims(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated positive dims, e.g. ``3,224,224``."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 3,224,224, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"dims must be positive, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The command line of scripts/build_engine.py."""
    defaults = BuildOptions  # the class: its fields' defaults
    p = argparse.ArgumentParser(
        prog="build_engine",
        description="Build the classifier's TensorRT engine from the exported ONNX, or skip the build when the "
        "existing engine matches the ONNX, TensorRT version, GPU model and options.",
        epilog=f"Exit codes: {EXIT_OK} built or up to date, {EXIT_FAILED} build failed, {EXIT_USAGE} usage error, "
        f"{EXIT_UNAVAILABLE} TensorRT or the GPU not available here.",
    )
    p.add_argument(
        "--onnx", type=Path, default=DEFAULT_ONNX, help="exported model, written by `make model` (default: %(default)s)"
    )
    p.add_argument("--output", type=Path, help="engine to write (default: model.plan beside the ONNX)")
    p.add_argument(
        "--fp16",
        action=argparse.BooleanOptionalAction,
        default=defaults.fp16,
        help="allow FP16 kernels; inputs and outputs stay FP32 (default: on)",
    )
    p.add_argument(
        "--min-batch",
        type=positive_int,
        default=defaults.min_batch,
        help="smallest batch of the profile (default: %(default)s)",
    )
    p.add_argument(
        "--opt-batch",
        type=positive_int,
        help=f"batch TensorRT tunes for (default: {defaults.opt_batch}, or --max-batch when smaller)",
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=defaults.max_batch,
        help="largest batch, at least the max_batch_size of the tensorrt_plan config (default: %(default)s)",
    )
    p.add_argument(
        "--workspace-mib",
        type=positive_int,
        default=defaults.workspace_mib,
        help="builder workspace limit (default: %(default)s)",
    )
    p.add_argument("--input-name", help="network input (default: the classifier config's, see --config)")
    p.add_argument(
        "--input-dims",
        type=dims,
        metavar="C,H,W",
        help="network input without the batch axis (default: the classifier config's, see --config)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="classifier config that declares the input (default: configs/tensorrt.pbtxt of the ONNX's model folder)",
    )
    p.add_argument(
        "--timing-cache",
        type=Path,
        help="timing cache file to reuse and update (discarded when made for another GPU or TensorRT)",
    )
    p.add_argument(
        "--builder",
        choices=BUILDER_CHOICES,
        default="auto",
        help="auto (default): the TensorRT Python API if installed, else trtexec",
    )
    p.add_argument(
        "--trtexec", type=Path, help="trtexec executable (default: on PATH, else /usr/src/tensorrt/bin/trtexec)"
    )
    p.add_argument(
        "--device",
        type=int,
        default=0,
        help="CUDA device to build on, default 0 (trtexec only; the Python API: CUDA_VISIBLE_DEVICES)",
    )
    p.add_argument("--force", action="store_true", help="rebuild even when the engine is up to date")
    p.add_argument("-v", "--verbose", action="store_true", help="log the builder's command and progress")
    return p


def options_from_args(args: argparse.Namespace) -> BuildOptions:
    """Build options from parsed arguments (raises ConfigError when they are inconsistent).

    The input's name and dims default to the classifier config beside the ONNX (``configs/tensorrt.pbtxt``
    of its model folder), the config Triton serves the engine with.
    """
    name, dims = args.input_name, args.input_dims
    if not (name and dims):
        name, dims = network_input(args.config or args.onnx.parent.parent / "configs" / "tensorrt.pbtxt")
    opt_batch = args.opt_batch if args.opt_batch is not None else min(BuildOptions.opt_batch, args.max_batch)
    return BuildOptions(
        fp16=args.fp16,
        min_batch=args.min_batch,
        opt_batch=opt_batch,
        max_batch=args.max_batch,
        workspace_mib=args.workspace_mib,
        input_name=args.input_name or name,
        input_dims=args.input_dims or dims,
    )


def describe(platform: Platform, options: BuildOptions) -> str:
    """One line about what the engine is for."""
    precision = "fp16" if options.fp16 else "fp32"
    return (
        f"{platform.gpu_name} (sm {platform.compute_capability}), TensorRT {platform.tensorrt_version}, "
        f"{precision}, batch {options.min_batch}/{options.opt_batch}/{options.max_batch}"
    )


def run(args: argparse.Namespace) -> str:
    """Build or skip; return the line to print. Raises tritonprep errors."""
    onnx = args.onnx
    if not onnx.is_file():
        raise ConfigError(f"{onnx} does not exist: run `make model` first (it exports EfficientNet-Lite0 to ONNX)")
    options = options_from_args(args)
    output = args.output or onnx.with_name("model.plan")
    builder = find_builder(args.builder, args.trtexec)
    if builder.name == "tensorrt-python" and args.device != 0:
        raise ConfigError("--device needs --builder trtexec; with the Python API pick the GPU by CUDA_VISIBLE_DEVICES")
    platform = Platform(builder.tensorrt_version(), *query_gpu(args.device))
    start = time.monotonic()
    built = build_or_reuse(
        onnx,
        output,
        options,
        builder=builder,
        platform=platform,
        timing_cache=args.timing_cache,
        device_id=args.device,
        force=args.force,
    )
    if built:
        return f"built {output} with {builder.name} in {time.monotonic() - start:.0f} s: {describe(platform, options)}"
    return f"up to date, skipped the build: {output} ({describe(platform, options)})"


def fail(error: Exception, code: int) -> int:
    """Report ``error`` as one line on stderr; return ``code``."""
    sys.stderr.write(f"build_engine: error: {error}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s build_engine: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        sys.stdout.write(run(args) + "\n")
    except EngineBuildError as e:  # before RuntimeUnavailable, its base class
        return fail(e, EXIT_FAILED)
    except ConfigError as e:
        return fail(e, EXIT_USAGE)
    except RuntimeUnavailable as e:
        return fail(e, EXIT_UNAVAILABLE)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
