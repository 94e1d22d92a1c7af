"""Glue between Triton's Python backend (``triton_python_backend_utils``) and the library.

Owns the request/response contract of the models in ``model_repository/``:

* images arrive as a BYTES tensor of shape ``[n, 1]`` per request (``n`` images of any
  sizes, no padding); all requests of an ``execute()`` call are preprocessed as one batch;
* numeric tensors cross the boundary through DLPack (``Tensor.from_dlpack`` /
  ``from_dlpack``), which works whatever numpy the stub runs with, and keeps GPU tensors
  on the GPU;
* every request gets exactly one response; an error that concerns one request's data
  becomes that request's error response and nothing else fails.

``triton_python_backend_utils`` exists only inside the Python backend stub, so it is
imported lazily by the functions that need it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ImageError, LimitExceeded, PreprocessError

log = logging.getLogger(__name__)


def _pb() -> Any:
    import triton_python_backend_utils as pb_utils  # provided by the Python backend stub

    return pb_utils


class TritonLogHandler(logging.Handler):
    """Forwards Python ``logging`` records to Triton's log (``pb_utils.Logger``)."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = _pb().Logger
        msg = self.format(record)
        if record.levelno >= logging.ERROR:
            logger.log_error(msg)
        elif record.levelno >= logging.WARNING:
            logger.log_warn(msg)
        elif record.levelno >= logging.INFO:
            logger.log_info(msg)
        else:
            logger.log_verbose(msg)


def setup_logging(level: int = logging.INFO) -> None:
    """Send the ``tritonprep`` loggers of this stub process to Triton's log (idempotent)."""
    root = logging.getLogger("tritonprep")
    if not any(isinstance(h, TritonLogHandler) for h in root.handlers):
        handler = TritonLogHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(level)
        root.propagate = False


def model_config(args: Mapping[str, str]) -> dict[str, Any]:
    """The model's configuration as a dict (Triton passes it as JSON); also routes logging to Triton."""
    setup_logging()
    return json.loads(args["model_config"])


def parameters(config: Mapping[str, Any]) -> dict[str, str]:
    """The ``parameters`` of a model config as plain ``{key: string_value}``."""
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


@dataclass
class ImageBatch:
    """The images of all requests of one ``execute()`` call, flattened in request order."""

    images: list[bytes] = field(default_factory=list)
    #: (start, stop) of each request's images in ``images``
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: requests rejected before preprocessing (bad shape, too many images)
    request_errors: dict[int, PreprocessError] = field(default_factory=dict)


def gather_images(requests: Sequence[Any], input_name: str, max_images_per_request: int) -> ImageBatch:
    """Collect the encoded images of every request into one :class:`ImageBatch`."""
    pb_utils = _pb()
    batch = ImageBatch()
    for r, request in enumerate(requests):
        start = len(batch.images)
        try:
            tensor = pb_utils.get_input_tensor_by_name(request, input_name)
            if tensor is None:
                raise ImageError(f"request has no input named {input_name!r}")
            arr = tensor.as_numpy()
            if arr.dtype != np.object_:
                raise ImageError(f"input {input_name!r} must be BYTES (TYPE_STRING), got {arr.dtype}")
            items = arr.reshape(-1)
            if len(items) > max_images_per_request:
                raise LimitExceeded(
                    f"request carries {len(items)} images, over the limit max_images_per_request={max_images_per_request}"
                )
            batch.images.extend(bytes(x) for x in items)
        except PreprocessError as e:
            batch.request_errors[r] = e
        batch.spans.append((start, len(batch.images)))
    return batch


def error_response(message: str, *, invalid_argument: bool = True) -> Any:
    """An error response (INVALID_ARG for bad input, INTERNAL otherwise)."""
    pb_utils = _pb()
    code = pb_utils.TritonError.INVALID_ARG if invalid_argument else pb_utils.TritonError.INTERNAL
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


_NUMPY_MAJOR = int(np.__version__.split(".")[0])


def output_tensor(name: str, array: Any) -> Any:
    """Wrap a numpy or CuPy array as an output tensor.

    GPU (CuPy) arrays always go through DLPack and stay on the GPU; the caller must have
    synchronized the stream that produced them. Host arrays use
    ``pb_utils.Tensor`` under numpy 1.x; under numpy 2, whose arrays that constructor
    corrupts in Triton <= 24.x stubs, they go through DLPack too. (DLPack is not used for
    host arrays under numpy 1.x because the backend renames a consumed capsule
    ``used_dlpack``, which numpy's capsule destructor reports on stderr for every tensor.)
    """
    pb_utils = _pb()
    if isinstance(array, np.ndarray):
        array = np.ascontiguousarray(array)
        if _NUMPY_MAJOR < 2:
            return pb_utils.Tensor(name, array)
        return pb_utils.Tensor.from_dlpack(name, array)
    # A CuPy array whose producing stream the caller has already synchronized (the executors
    # do, once per batch): hand over a bare capsule, which the backend takes as is. Passing the
    # array would make the backend run `__dlpack__(stream=...)` and a stream synchronization
    # for every single output tensor.
    return pb_utils.Tensor.from_dlpack(name, array.toDlpack())


def image_responses(batch: ImageBatch, output: Any, errors: Mapping[int, ImageError], output_name: str) -> list[Any]:
    """One response per request: its slice of ``output``, or the error of its first bad image."""
    pb_utils = _pb()
    responses = []
    for r, (start, stop) in enumerate(batch.spans):
        if r in batch.request_errors:
            responses.append(error_response(str(batch.request_errors[r])))
            continue
        bad = next((i for i in range(start, stop) if i in errors), None)
        if bad is not None:
            n = stop - start
            responses.append(error_response(f"image {bad - start + 1} of {n}: {errors[bad]}"))
            continue
        if stop == start:
            responses.append(error_response("request carries no image"))
            continue
        responses.append(pb_utils.InferenceResponse(output_tensors=[output_tensor(output_name, output[start:stop])]))
    return responses


def input_array(request: Any, name: str) -> Any:
    """A request's numeric input as a numpy array (CPU tensor) or CuPy array (GPU tensor)."""
    tensor = _pb().get_input_tensor_by_name(request, name)
    if tensor is None:
        raise PreprocessError(f"request has no input named {name!r}")
    if tensor.is_cpu():
        return np.from_dlpack(tensor)
    import cupy

    return cupy.from_dlpack(tensor)


def placement(array: Any) -> str:
    """"CPU" for a numpy array, "GPU" for a CuPy one (for logs that prove zero-copy handoff)."""
    return "CPU" if isinstance(array, np.ndarray) else "GPU"


def concat(arrays: Sequence[Any]) -> Any:
    """Concatenate numpy or CuPy arrays along the batch axis (no copy for a single array)."""
    if len(arrays) == 1:
        return arrays[0]
    if any(type(a).__module__.startswith("cupy") for a in arrays):
        import cupy

        return cupy.concatenate([cupy.asarray(a) for a in arrays])
    return np.concatenate(arrays)


def to_numpy(array: Any) -> np.ndarray:
    """A host copy of a CuPy array; numpy arrays pass through."""
    return array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else np.asarray(array)


def bytes_tensor(name: str, rows: Sequence[Sequence[str]]) -> Any:
    """A BYTES output tensor of UTF-8 strings (needs numpy < 2 in the stub: DLPack cannot carry BYTES)."""
    return _pb().Tensor(name, np.array([[s.encode() for s in row] for row in rows], dtype=np.object_))


def response(tensors: Sequence[Any]) -> Any:
    """A successful response carrying ``tensors``."""
    return _pb().InferenceResponse(output_tensors=list(tensors))
