"""Tiny ONNX networks of any signature, written byte by byte (no ``onnx`` package): test inputs for checks that
read an ONNX file's inputs and outputs (``tritonprep model add``), and runnable by ONNX Runtime.

:func:`network` writes a graph ``input -> ReduceMean over every axis but the batch -> Flatten -> MatMul`` with
the input's shape and element type and the output's width as asked (the weights are fixed, so its outputs are
deterministic). The encoder knows the few fields of onnx.proto (proto2) it writes; see its field numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Union

import numpy as np

Axis = Union[int, str]
#: onnx.proto's TensorProto.DataType of the element types used here
ELEMENTS = {"float": 1, "uint8": 2, "int64": 7, "float16": 10}
OPSET, IR_VERSION = 13, 7


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf writes negative numbers
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, element: str, shape: Sequence[Axis]) -> bytes:
    dims = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, ELEMENTS[element]) + _bytes(2, dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], attributes: Sequence[bytes] = ()) -> bytes:
    parts = [*(_bytes(1, i) for i in inputs), *(_bytes(2, o) for o in outputs), _bytes(4, op)]
    return b"".join([*parts, *(_bytes(5, a) for a in attributes)])


def _ints_attribute(name: str, values: Sequence[int]) -> bytes:
    return _bytes(1, name) + b"".join(_int(8, v) for v in values) + _int(20, 7)  # type INTS


def _int_attribute(name: str, value: int) -> bytes:
    return _bytes(1, name) + _int(3, value) + _int(20, 2)  # type INT


def _initializer(name: str, array: np.ndarray) -> bytes:
    element = {np.dtype(np.float32): "float", np.dtype(np.int64): "int64"}[array.dtype]
    dims = b"".join(_int(1, d) for d in array.shape)
    return dims + _int(2, ELEMENTS[element]) + _bytes(8, name) + _bytes(9, array.tobytes())


def network(
    path: Path,
    input_shape: Sequence[Axis] = ("batch", 3, 224, 224),
    width: int = 10,
    *,
    input_element: str = "float",
    output_shape: Sequence[Axis] | None = None,
    output_element: str = "float",
    input_name: str = "input",
    output_name: str = "logits",
    extra_inputs: int = 0,
) -> Path:
    """Write a network taking ``input_shape`` (``input_element``) and answering ``[batch, width]`` (declared as
    ``output_shape`` where given; a rank-3 shape reshapes the ``width`` values) to ``path``."""
    rank = len(input_shape)
    out_shape = list(output_shape) if output_shape is not None else [input_shape[0], width]
    nodes, initializers = [], [_initializer("w", np.linspace(-1, 1, width, dtype=np.float32).reshape(1, width))]
    x = input_name
    if input_element != "float":
        nodes.append(_node("Cast", [x], ["x_float"], [_int_attribute("to", ELEMENTS["float"])]))
        x = "x_float"
    nodes.append(_node("ReduceMean", [x], ["mean"], [_ints_attribute("axes", range(1, rank))]))
    nodes.append(_node("Flatten", ["mean"], ["flat"], [_int_attribute("axis", 1)]))
    features = "flat"
    for i in range(extra_inputs):  # each another input the graph uses: added to the mean
        nodes.append(_node("Add", [features, f"extra{i}"], [f"sum{i}"]))
        features = f"sum{i}"
    y = output_name if len(out_shape) == 2 and output_element == "float" else "y"
    nodes.append(_node("MatMul", [features, "w"], [y]))
    if len(out_shape) != 2:
        initializers.append(_initializer("shape", np.array([-1, *out_shape[1:]], np.int64)))
        nodes.append(_node("Reshape", [y, "shape"], [output_name]))
    elif output_element != "float":
        nodes.append(_node("Cast", [y], [output_name], [_int_attribute("to", ELEMENTS[output_element])]))
    inputs = [_value_info(input_name, input_element, input_shape)]
    inputs += [_value_info(f"extra{i}", "float", [input_shape[0], 1]) for i in range(extra_inputs)]
    graph = b"".join(
        [
            *(_bytes(1, n) for n in nodes),
            _bytes(2, "tritonprep_test"),
            *(_bytes(5, t) for t in initializers),
            *(_bytes(11, v) for v in inputs),
            _bytes(12, _value_info(output_name, output_element, out_shape)),
        ]
    )
    model = _int(1, IR_VERSION) + _bytes(2, "tritonprep_testkit") + _bytes(7, graph) + _bytes(8, _int(2, OPSET))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model)
    return path
