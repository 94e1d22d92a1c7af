"""The FP16 classifier with an FP16 NHWC input: what a preprocessing that writes NHWC FP16 would feed it.

The exported FP16 network (``model.fp16.onnx``) takes FP32 NCHW, casts it to FP16 first, and ONNX Runtime's
NHWC layout (``prefer_nhwc``) then transposes it: two passes over every input before the first convolution,
besides the runtime's own copy of the preprocess output (FP16) into its FP32 input buffer. This variant takes
``[batch, 224, 224, 3]`` FP16 and transposes it to NCHW in the graph, where ONNX Runtime's transpose optimizer can
cancel it against its own. The outputs are those of the original on the same pixels: checked here with ONNX
Runtime's CPU provider on random inputs (FP16 pixels, so the original's cast is exact).

Runs in the export venv (``make model`` builds it; it has ``onnx``)::

    .venv-export/bin/python -m scripts.export_nhwc_input [--input model_repository/classifier/1/model.fp16.onnx]
        [--output .cache/networks/classifier/model.fp16.nhwc.onnx]

``python -m scripts.bench.classifier_bench ort --nhwc-input FILE`` measures it on a GPU beside the others.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("export_nhwc_input")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = ROOT / "model_repository" / "classifier" / "1" / "model.fp16.onnx"
DEFAULT_OUTPUT = ROOT / ".cache" / "networks" / "classifier" / "model.fp16.nhwc.onnx"
#: NHWC to NCHW
TO_NCHW = [0, 3, 1, 2]


class NotConvertible(ValueError):
    """The network's input is not what this conversion reads (one NCHW input cast to FP16 by its first node)."""


def nhwc_fp16_input(model: object) -> object:
    """``model`` (an ``onnx.ModelProto`` with one NCHW input, FP32 cast to FP16 in the graph) changed in place to take
    that input FP16 NHWC: the cast becomes a transpose to NCHW under the same output name."""
    from onnx import TensorProto, helper

    graph = model.graph
    if len(graph.input) != 1:
        raise NotConvertible(f"{len(graph.input)} graph inputs; expected one")
    inp = graph.input[0]
    dims = inp.type.tensor_type.shape.dim
    if len(dims) != 4 or dims[1].dim_value not in (1, 3):
        raise NotConvertible(f"input {inp.name!r} is not NCHW with 1 or 3 channels")
    casts = [i for i, n in enumerate(graph.node) if n.op_type == "Cast" and list(n.input) == [inp.name]]
    readers = [n for n in graph.node if inp.name in n.input]
    if len(casts) != 1 or len(readers) != 1:
        raise NotConvertible(f"input {inp.name!r} is not read by one Cast alone (FP16 export with FP32 I/O)")
    cast = graph.node[casts[0]]
    if helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) != TensorProto.FLOAT16:
        raise NotConvertible(f"the input's cast {cast.name!r} is not to FP16")
    batch = dims[0].dim_param or dims[0].dim_value
    channels, height, width = (d.dim_value for d in dims[1:])
    transpose = helper.make_node("Transpose", [inp.name], list(cast.output), name="input_nhwc_to_nchw", perm=TO_NCHW)
    graph.node.remove(cast)
    graph.node.insert(0, transpose)  # first: the FP16 converter appended the cast after its readers
    new = helper.make_tensor_value_info(inp.name, TensorProto.FLOAT16, [batch, height, width, channels])
    graph.input.remove(inp)
    graph.input.append(new)
    return model


def max_abs_diff(original: Path, variant: Path, batch: int = 4, seed: int = 0) -> float:
    """The largest difference between the two networks' outputs on the same random FP16 pixels (CPU provider)."""
    import onnxruntime as ort

    x = np.random.default_rng(seed).standard_normal((batch, 3, 224, 224)).astype(np.float16)
    cpu = ["CPUExecutionProvider"]
    a = ort.InferenceSession(str(original), providers=cpu)
    b = ort.InferenceSession(str(variant), providers=cpu)
    (ya,) = a.run(None, {a.get_inputs()[0].name: x.astype(np.float32)})
    (yb,) = b.run(None, {b.get_inputs()[0].name: np.ascontiguousarray(x.transpose(0, 2, 3, 1))})
    return float(np.max(np.abs(ya.astype(np.float64) - yb.astype(np.float64))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="the FP16 network (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the variant (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import onnx

    if not args.input.is_file():
        log.error("%s is missing: run `make model` first", args.input)
        return 2
    try:
        model = nhwc_fp16_input(onnx.load(str(args.input)))
    except NotConvertible as e:
        log.error("%s: %s", args.input, e)
        return 2
    onnx.checker.check_model(model)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.output))
    diff = max_abs_diff(args.input, args.output)
    log.info("wrote %s; largest output difference against %s on the same pixels: %g", args.output, args.input, diff)
    if diff > 1e-3:
        log.error("the variant's outputs differ from the original's by %g", diff)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
