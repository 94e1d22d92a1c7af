"""What the ONNX exports share (`scripts.export_classifier`, `scripts.export_embedder`,
`scripts.export_efficientnet_lite`).

The photos they check the export on, the up-to-date test, the export itself run once through
ONNX Runtime, a classifier's checks (against PyTorch, the sample photos' classes, its FP16 variant),
the record written beside the ONNX file, and the command line. Not a command of
its own: the export scripts import it (they run in the export venv, which has torch).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("onnx_export")

#: normalisation of the networks' input: (pixel - 127) / 128, the TF EfficientNet-Lite convention
MEAN, STD = 127.0, 128.0
#: the ImageNet classes of the first two sample photos (chelsea: a cat; coffee: an espresso)
CATS, ESPRESSO = (281, 282, 285), 967


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_path(output: Path) -> Path:
    """The JSON record beside an exported ONNX file (``model.onnx.json``)."""
    return output.with_name(output.name + ".json")


def sample_photos(short_side: int, resample: str, crop: int = 224) -> np.ndarray:
    """Two real photos (skimage's cat and espresso) as a normalized NCHW FP32 batch.

    Each is resized so its shorter side is ``short_side`` (``resample``: "bilinear" or "bicubic",
    Pillow's filters), center-cropped to ``crop`` and normalized like the preprocess model's output.
    """
    from PIL import Image
    from skimage import data

    filt = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}[resample]
    batch = []
    for arr in (data.chelsea(), data.coffee()):
        im = Image.fromarray(arr)
        s = short_side / min(im.size)
        im = im.resize((int(im.width * s), int(im.height * s)), filt)
        left, top = (im.width - crop) // 2, (im.height - crop) // 2
        pixels = np.asarray(im.crop((left, top, left + crop, top + crop)), np.float32)
        batch.append(((pixels - MEAN) / STD).transpose(2, 0, 1))
    return np.stack(batch)


def up_to_date(output: Path, source: dict[str, Any], *also: Path) -> bool:
    """True when ``output`` (and every file in ``also``) exists and its record names the same ``source``."""
    record = record_path(output)
    if not (output.is_file() and record.is_file() and all(p.is_file() for p in also)):
        return False
    return json.loads(record.read_text()).get("source") == source


def export_and_run(model: Any, x: np.ndarray, onnx_path: Path, output_name: str, opset: int) -> np.ndarray:
    """Export ``model`` (dynamic batch axis, input ``input``) to ``onnx_path``; return ORT's output on ``x``."""
    import onnxruntime as ort
    import torch

    torch.onnx.export(
        model,
        (torch.from_numpy(x),),
        str(onnx_path),
        input_names=["input"],
        output_names=[output_name],
        dynamic_axes={"input": {0: "batch"}, output_name: {0: "batch"}},
        opset_version=opset,
        dynamo=False,
    )
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run([output_name], {"input": x})[0]


def checked_classifier_export(model: Any, x: np.ndarray, onnx_path: Path, opset: int) -> tuple[np.ndarray, float]:
    """Export an ImageNet classifier (output ``logits``) to ``onnx_path`` and run it on ``x``, the sample photos:
    its logits and the largest logit difference from PyTorch's. SystemExit where ONNX Runtime and PyTorch
    disagree, or where the first two photos are not a cat and an espresso."""
    import torch

    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = export_and_run(model, x, onnx_path, "logits", opset)
    diff = float(np.abs(got - expected).max())
    top1 = got.argmax(axis=1).tolist()
    log.info("ONNX Runtime vs PyTorch: max |logit diff| = %.2e, top-1 = %s", diff, top1)
    if diff > 1e-3 or top1 != expected.argmax(axis=1).tolist():
        raise SystemExit(f"exported model disagrees with PyTorch (max diff {diff}); not installed")
    if top1[0] not in CATS or top1[1] != ESPRESSO:
        raise SystemExit(f"sanity check failed: chelsea/coffee classified as {top1}, expected a cat and espresso")
    return got, diff


def classifier_fp16(fp32_path: Path, fp16_file: Path, x: np.ndarray, fp32_logits: np.ndarray) -> float:
    """Write a classifier's FP16 variant (FP32 input and output) and check it against the FP32 model on ``x``.

    Returns the largest difference of softmax probabilities; raises SystemExit if the top-1 differs or a
    probability moves by more than 0.01.
    """
    got = convert_fp16(fp32_path, fp16_file, x, "logits")

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    diff = float(np.abs(softmax(got) - softmax(fp32_logits)).max())
    log.info("FP16 variant vs FP32: max |prob diff| = %.2e, top-1 = %s", diff, got.argmax(axis=1).tolist())
    if got.argmax(axis=1).tolist() != fp32_logits.argmax(axis=1).tolist() or diff > 0.01:
        raise SystemExit(f"the FP16 variant disagrees with FP32 (max prob diff {diff}); not installed")
    return diff


def fp16_path(output: Path) -> Path:
    """The FP16 variant beside an exported ONNX file (``model.fp16.onnx``), which the GPU runtimes run by default."""
    return output.with_name(output.name.removesuffix(".onnx") + ".fp16.onnx")


def convert_fp16(fp32_path: Path, fp16_file: Path, x: np.ndarray, output_name: str) -> np.ndarray:
    """Write the FP16 variant of ``fp32_path`` (FP16 weights and math, FP32 input and output: ONNX Runtime's
    float16 converter) to ``fp16_file``; return ONNX Runtime's output of it on ``x`` (the caller checks it)."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True)
    onnx.save(model, str(fp16_file))
    session = ort.InferenceSession(str(fp16_file), providers=["CPUExecutionProvider"])
    return session.run([output_name], {"input": x})[0]


def write_record(output: Path, source: dict[str, Any], **figures: float) -> None:
    """Write the record beside ``output``: what it was made from, its hash and the checks' figures."""
    record = {"source": source, "onnx_sha256": sha256(output), **figures}
    record_path(output).write_text(json.dumps(record, indent=2))


def main(doc: str, default_output: Path, export: Callable[[Path, int], None], argv: list[str] | None = None) -> int:
    """The export scripts' command line: ``[--output PATH] [--opset N] [--force]``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=default_output, help="ONNX file to write (default: %(default)s)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="export even if the output is up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.force:
        record_path(args.output).unlink(missing_ok=True)
    export(args.output, args.opset)
    return 0
