"""What the ONNX exports share (`scripts.export_classifier`, `scripts.export_embedder`,
`scripts.export_efficientnet_lite`).

The photos they check the export on, the up-to-date test, the export itself run once through
ONNX Runtime, a classifier's checks (against PyTorch, the sample photos' classes, its FP16 variant),
the FP16 variant with a channel-last FP16 input (:func:`nhwc_fp16_input`), the record written beside the
ONNX file, and the command line. Not a command of
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

from tritonprep.network_files import TO_NCHW

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


class NotConvertible(ValueError):
    """The network's input is not what :func:`nhwc_fp16_input` reads (one NCHW input cast to FP16 by one node)."""


def nhwc_fp16_input(model: Any) -> Any:
    """``model`` (an ``onnx.ModelProto`` with one NCHW input, FP32 cast to FP16 in the graph: the FP16 variant)
    changed in place to take that input FP16 channel-last: the cast becomes a transpose to NCHW under the same output
    name, which ONNX Runtime's NHWC layout cancels against its own transpose. A preprocessing that writes FP16 NHWC
    then feeds the network without a cast or a transpose (an H100 at batch 64: 25.2k against 22.8k img/s fed FP16
    NCHW, reports/2026-11-27-gpu-stage20)."""
    from onnx import TensorProto, helper

    graph = model.graph
    if len(graph.input) != 1:
        raise NotConvertible(f"{len(graph.input)} graph inputs; expected one")
    inp = graph.input[0]
    dims = inp.type.tensor_type.shape.dim
    if len(dims) != 4 or dims[1].dim_value not in (1, 3):
        raise NotConvertible(f"input {inp.name!r} is not NCHW with 1 or 3 channels")
    casts = [n for n in graph.node if n.op_type == "Cast" and list(n.input) == [inp.name]]
    readers = [n for n in graph.node if inp.name in n.input]
    if len(casts) != 1 or len(readers) != 1:
        raise NotConvertible(f"input {inp.name!r} is not read by one Cast alone (FP16 export with FP32 I/O)")
    cast = casts[0]
    if helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) != TensorProto.FLOAT16:
        raise NotConvertible(f"the input's cast {cast.name!r} is not to FP16")
    batch, channels, height, width = (d.dim_param or d.dim_value or None for d in dims)  # names of dynamic axes kept
    transpose = helper.make_node(
        "Transpose", [inp.name], list(cast.output), name="input_nhwc_to_nchw", perm=list(TO_NCHW)
    )
    graph.node.remove(cast)
    graph.node.insert(0, transpose)  # first: the FP16 converter appended the cast after its readers
    graph.input.remove(inp)
    graph.input.append(helper.make_tensor_value_info(inp.name, TensorProto.FLOAT16, [batch, height, width, channels]))
    return model


def write_nhwc(fp16_file: Path, nhwc_file: Path, x: np.ndarray) -> float:
    """Write the channel-last FP16 variant of ``fp16_file`` and check it against it on ``x`` (FP16 pixels, so the
    original's cast is exact; ONNX Runtime's CPU provider). Returns the largest difference of their outputs; raises
    SystemExit above 1e-3."""
    import onnx
    import onnxruntime as ort

    model = nhwc_fp16_input(onnx.load(str(fp16_file)))
    onnx.checker.check_model(model)
    onnx.save(model, str(nhwc_file))
    pixels = x.astype(np.float16)
    cpu = ["CPUExecutionProvider"]
    (want,) = ort.InferenceSession(str(fp16_file), providers=cpu).run(None, {"input": pixels.astype(np.float32)})
    nhwc = np.ascontiguousarray(pixels.transpose(0, 2, 3, 1))
    (got,) = ort.InferenceSession(str(nhwc_file), providers=cpu).run(None, {"input": nhwc})
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    log.info("channel-last FP16 variant vs FP16: max |output diff| = %.2e", diff)
    if diff > 1e-3:
        raise SystemExit(f"the channel-last FP16 variant disagrees with the FP16 one (max diff {diff}); not installed")
    return diff


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
