"""Tensors across the Python-backend boundary.

Numeric tensors cross through DLPack (``Tensor.from_dlpack`` / ``from_dlpack``, the protocol's
``__dlpack__``), which works whatever numpy the stub runs with and keeps GPU tensors on the GPU;
BYTES tensors need numpy's object arrays (numpy < 2 in Triton 2.51's stub: DLPack cannot carry them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..cuda import import_cupy
from ..errors import RequestError
from .pb import pb_utils

_NUMPY_MAJOR = int(np.__version__.split(".")[0])


def input_array(request: Any, name: str) -> Any:
    """A request's numeric input as a numpy array (CPU tensor) or CuPy array (GPU tensor)."""
    return as_array(input_tensor(request, name))


def input_tensor(request: Any, name: str) -> Any:
    """A request's input tensor ``name`` as the Python backend hands it over; :class:`RequestError` if it has none."""
    tensor = pb_utils().get_input_tensor_by_name(request, name)
    if tensor is None:
        raise RequestError(f"request has no input named {name!r}")
    return tensor


def as_array(tensor: Any) -> Any:
    """A numeric input tensor as a numpy array (CPU tensor) or CuPy array (GPU tensor), through DLPack: no copy.

    A GPU tensor's capsule (``to_dlpack``) goes to CuPy as it is. Handed the tensor instead, CuPy 13 would first
    call its ``__dlpack__`` with DLPack 1.0's keywords, which the backend's binding (``stream`` only) refuses with
    a TypeError, call it again, and set the device and back around both; the backend has no pending work on an
    input's memory (its ``__dlpack__`` ignores the stream), so the capsule is the same tensor without those calls.
    """
    if tensor.is_cpu():
        return np.from_dlpack(tensor)
    return import_cupy().from_dlpack(tensor.to_dlpack())


def bytes_input(request: Any, name: str) -> list[bytes]:
    """A request's BYTES input as a list of its elements (any shape, flattened)."""
    tensor = pb_utils().get_input_tensor_by_name(request, name)
    if tensor is None:
        raise RequestError(f"request has no input named {name!r}")
    arr = tensor.as_numpy()
    if arr.dtype != np.object_:
        raise RequestError(f"input {name!r} must be BYTES (TYPE_STRING), got {arr.dtype}")
    return [bytes(x) for x in arr.reshape(-1)]


def requested_outputs(request: Any, default: Sequence[str] = ()) -> frozenset[str]:
    """The output names ``request`` asked for (Triton fills in every output when a client names none)."""
    names = getattr(request, "requested_output_names", None)
    return frozenset(names() if names is not None else default)


def output_tensor(name: str, array: Any) -> Any:
    """Wrap a numpy or CuPy array as an output tensor.

    GPU (CuPy) arrays always go through DLPack and stay on the GPU; the caller must have
    synchronized the stream that produced them. Host arrays use ``pb_utils.Tensor`` under
    numpy 1.x; under numpy 2, whose arrays that constructor corrupts in Triton <= 24.x stubs,
    they go through DLPack too. (DLPack is not used for host arrays under numpy 1.x because the
    backend renames a consumed capsule ``used_dlpack``, which numpy's capsule destructor reports
    on stderr for every tensor.)
    """
    pb = pb_utils()
    if isinstance(array, np.ndarray):
        array = np.ascontiguousarray(array)
        if _NUMPY_MAJOR < 2:
            return pb.Tensor(name, array)
        return pb.Tensor.from_dlpack(name, array)
    # A CuPy array whose producing stream the caller has already synchronized (the executors
    # do, once per batch): hand over a bare capsule from the DLPack protocol with stream=-1 ("no
    # synchronization": the array API's value for a consumer that has ordered the work itself),
    # which the backend takes as is, zero copy. Passing the array would make the backend call
    # `__dlpack__(stream=<its stream>)` and synchronize that stream for every single output
    # tensor; `toDlpack()` is deprecated (CuPy warns on every call).
    return pb.Tensor.from_dlpack(name, array.__dlpack__(stream=-1))


def bytes_tensor(name: str, rows: Sequence[Sequence[str]] | np.ndarray) -> Any:
    """A BYTES output tensor of rows of strings, or of an object array of bytes (needs numpy < 2 in the stub:
    DLPack cannot carry BYTES)."""
    if isinstance(rows, np.ndarray):
        return pb_utils().Tensor(name, rows)
    return pb_utils().Tensor(name, np.array([[s.encode() for s in row] for row in rows], dtype=np.object_))


def named_tensors(outputs: Mapping[str, Any]) -> list[Any]:
    """Output tensors of ``{name: array, or rows of strings (a list of lists) or an object array of bytes for a
    BYTES output}``."""
    return [bytes_tensor(name, rows) if is_bytes(rows) else output_tensor(name, rows) for name, rows in outputs.items()]


def is_bytes(rows: Any) -> bool:
    """Whether :func:`named_tensors` makes a BYTES tensor of ``rows`` (a list of lists, or an object array)."""
    return isinstance(rows, list) or (isinstance(rows, np.ndarray) and rows.dtype == np.object_)


def placement(array: Any) -> str:
    """ "CPU" for a numpy array, "GPU" for a CuPy one (for logs that prove zero-copy handoff)."""
    return "CPU" if isinstance(array, np.ndarray) else "GPU"


def concat(arrays: Sequence[Any]) -> Any:
    """Concatenate numpy or CuPy arrays along the batch axis (no copy for a single array)."""
    if len(arrays) == 1:
        return arrays[0]
    if any(type(a).__module__.startswith("cupy") for a in arrays):
        cupy = import_cupy()
        return cupy.concatenate([cupy.asarray(a) for a in arrays])
    return np.concatenate(arrays)


def to_numpy(array: Any) -> np.ndarray:
    """A host copy of a CuPy array; numpy arrays pass through."""
    return array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else np.asarray(array)
