"""An ONNX file's signature (its inputs and outputs: names, shapes, element types), read with ONNX Runtime.

ONNX Runtime is the network runtime the server installs (``tritonprep[server,cpu]`` or a ``gpu-*`` extra), so
reading a file with it also proves that the runtime loads it. Graph optimizations are off: only the
signature is wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..classifier.ort_cuda import import_onnxruntime
from ..errors import RuntimeUnavailable
from .errors import ModelAddError

#: an axis: its size, or its symbolic name (a dynamic axis), or None (unnamed dynamic axis)
Axis = Union[int, str, None]
#: ONNX Runtime's element types as Triton and tritonprep name them
FLOAT = "tensor(float)"
ELEMENT_NAMES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
    "tensor(string)": "string",
}


@dataclass(frozen=True)
class Tensor:
    """One input or output of an ONNX graph."""

    name: str
    shape: tuple[Axis, ...]
    #: ONNX Runtime's type string, e.g. ``tensor(float)``
    type: str

    @property
    def element(self) -> str:
        """The element type in words (``float32``)."""
        return ELEMENT_NAMES.get(self.type, self.type)

    @property
    def shape_text(self) -> str:
        """The shape as the messages show it: ``[batch, 3, 224, 224]``."""
        return "[" + ", ".join("?" if a is None else str(a) for a in self.shape) + "]"

    def fixed(self, axis: int) -> int | None:
        """The size of ``axis`` where the graph fixes it, else None."""
        value = self.shape[axis]
        return value if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True)
class Signature:
    """An ONNX graph's inputs and outputs, in graph order."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


def _load_errors(ort: object) -> tuple[type[BaseException], ...]:
    """The exceptions ONNX Runtime raises for a file it cannot load (its pybind classes derive from Exception)."""
    state = getattr(getattr(ort, "capi", None), "onnxruntime_pybind11_state", None)
    names = ("Fail", "InvalidArgument", "NoSuchFile", "InvalidProtobuf", "InvalidGraph", "NotImplemented")
    found = tuple(c for c in (getattr(state, n, None) for n in names) if isinstance(c, type))
    return (*found, RuntimeError, OSError)


def read_signature(path: Path) -> Signature:
    """The signature of the ONNX file at ``path``; :class:`ModelAddError` with one line when it cannot be read."""
    if not path.is_file():
        raise ModelAddError([f"--onnx {path}: no such file"])
    try:
        ort = import_onnxruntime()
    except RuntimeUnavailable as e:
        raise ModelAddError([f"reading {path} needs ONNX Runtime: {e}"]) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except _load_errors(ort) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        problem = f"--onnx {path}: ONNX Runtime cannot load it ({first}); is it an exported ONNX model?"
        raise ModelAddError([problem]) from None
    return Signature(
        tuple(Tensor(t.name, tuple(t.shape), t.type) for t in session.get_inputs()),
        tuple(Tensor(t.name, tuple(t.shape), t.type) for t in session.get_outputs()),
    )
