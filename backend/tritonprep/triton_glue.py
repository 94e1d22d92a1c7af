"""Glue between Triton's Python backend (``triton_python_backend_utils``) and the library.

Owns the request/response contract of the models in ``model_repository/``:

* images arrive as a BYTES tensor of shape ``[n, 1]`` per request (``n`` images of any
  sizes, no padding); all requests of an ``execute()`` call are preprocessed as one batch;
* numeric tensors cross the boundary through DLPack (``Tensor.from_dlpack`` /
  ``from_dlpack``), which works whatever numpy the stub runs with, and keeps GPU tensors
  on the GPU;
* every request gets exactly one response; an error that concerns one request's data
  becomes that request's error response and nothing else fails. :class:`PreprocessModel`
  holds that line on every path: an unexpected exception of the executor is retried request
  by request (only the request that still fails gets an error), an error while building one
  response fails only that response, and nothing is raised out of ``execute``;
* an instance that hits an unrecoverable error takes itself out of service
  (:func:`fail_instance`): its stub exits and the launcher's supervisor restarts the server.

``triton_python_backend_utils`` exists only inside the Python backend stub, so it is
imported lazily by the functions that need it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ImageError, InstanceFailed, LimitExceeded, PreprocessError

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


def _request_response(output: Any, errors: Mapping[int, PreprocessError], start: int, stop: int,
                      output_name: str) -> Any:
    """The response of one request whose images are ``[start, stop)`` of ``output``."""
    bad = next((i for i in range(start, stop) if i in errors), None)
    if bad is not None:
        error = errors[bad]
        return error_response(f"image {bad - start + 1} of {stop - start}: {error}",
                              invalid_argument=isinstance(error, ImageError))
    if stop == start:
        return error_response("request carries no image")
    return _pb().InferenceResponse(output_tensors=[output_tensor(output_name, output[start:stop])])


def detach_errors(errors: Mapping[int, BaseException]) -> None:
    """Drop the tracebacks and chained exceptions of per-image errors.

    An error returned from inside an ``except`` block keeps its traceback, whose frames keep
    their locals: the encoded bytes, decoded pictures and (in a worker) a view of the whole
    output batch, in a reference cycle (error -> traceback -> frame -> error) that only the
    cyclic garbage collector frees, rarely, since a few large arrays do not count towards
    its thresholds. The soak measured 220 MB of growth in 16,000 batches from this; the
    message is all a response needs.
    """
    for error in errors.values():
        error.__traceback__ = None
        error.__context__ = None
        error.__cause__ = None


def image_responses(batch: ImageBatch, output: Any, errors: Mapping[int, PreprocessError],
                    output_name: str) -> list[Any]:
    """One response per request: its slice of ``output``, or the error of its first bad image.

    A failure while building one request's response (an output the backend refuses) fails
    that request alone.
    """
    responses = []
    for r, (start, stop) in enumerate(batch.spans):
        if r in batch.request_errors:
            responses.append(error_response(str(batch.request_errors[r])))
            continue
        responses.append(_guarded_response(output, errors, start, stop, output_name, r, len(batch.spans)))
    return responses


def _guarded_response(output: Any, errors: Mapping[int, PreprocessError], start: int, stop: int, output_name: str,
                      r: int, n: int) -> Any:
    """:func:`_request_response` for request ``r`` of ``n``; a failure while building it fails this request alone."""
    try:
        return _request_response(output, errors, start, stop, output_name)
    except Exception as e:  # noqa: BLE001 - isolation boundary: this request fails, the others go on
        log.exception("building the response of request %d of %d failed", r + 1, n)
        return error_response(f"internal error building the response: {type(e).__name__}: {e}", invalid_argument=False)


# ---------------------------------------------------------------------- instance health
_failure: str | None = None
_failure_lock = threading.Lock()
#: exit status of a stub taken out of service by fail_instance (EX_SOFTWARE)
FAILED_INSTANCE_EXIT_CODE = 70


def fail_instance(reason: str, *, delay_s: float = 0.5) -> None:
    """Take this model instance out of service after an unrecoverable error.

    For errors after which the process cannot be trusted (a CUDA illegal address or other
    sticky CUDA error poisons the context for good): from now on every ``execute`` of this
    instance answers all its requests with an error naming ``reason``, and after ``delay_s``
    (time for the responses of the current call to leave) the stub process exits with
    status 70. Triton 2.51 does not restart a dead stub and keeps reporting the model ready,
    so the embedded launcher's supervisor (:mod:`tritonprep.supervise`) watches the stub
    processes and restarts ``tritonserver``. Executors either call this or raise
    :class:`~tritonprep.errors.InstanceFailed`, which :class:`PreprocessModel` turns into this call.
    """
    global _failure
    with _failure_lock:
        if _failure is not None:
            return
        _failure = reason
    log.error("model instance out of service: %s; its stub exits in %.1f s and the server restarts", reason, delay_s)
    threading.Thread(target=_exit_after, args=(delay_s,), name="tritonprep-fail-instance", daemon=True).start()


def instance_failure() -> str | None:
    """The reason given to :func:`fail_instance`, or None while the instance is healthy."""
    return _failure


def _exit_after(delay_s: float) -> None:
    time.sleep(delay_s)
    for handler in logging.getLogger("tritonprep").handlers:
        handler.flush()
    os._exit(FAILED_INSTANCE_EXIT_CODE)


# ---------------------------------------------------------------------- heap trimming
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None on another C library."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    """Hands freed heap memory back to the OS at most once per ``interval_s``.

    glibc keeps what a large batch freed (decoded pictures, output buffers) in its arenas,
    so a stub's resident memory sits at the high-water mark of the largest batch it ever
    ran and swings by 50-200 MB with the image mix, which hides real leaks and wastes
    memory. ``malloc_trim(0)`` after a batch costs about 1 ms; measured on the CPU executor
    over 8,000 mixed batches: 240-300 MB without it, a steady 88 MB with it.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._trim = _malloc_trim()
        self._last = 0.0

    def maybe_trim(self) -> None:
        """Trim if the last trim is older than the interval."""
        now = time.monotonic()
        if self._trim is not None and now - self._last >= self.interval_s:
            self._last = now
            self._trim(0)


# ---------------------------------------------------------------------- the preprocess model
@dataclass
class _RequestResult:
    """The outcome for one request when a batch had to be retried request by request."""

    output: Any = None
    errors: dict[int, PreprocessError] = field(default_factory=dict)
    failure: PreprocessError | None = None


class PreprocessModel:
    """Everything a ``preprocess`` model instance does; its model.py only forwards to it.

    ``execute`` returns exactly one response per request on every path and never raises.
    """

    def __init__(self, args: Mapping[str, str], input_name: str = "IMAGE", output_name: str = "PIXELS") -> None:
        from . import faults
        from .executor import create_executor
        from .metrics import PreprocessMetrics
        from .profiling import PhaseTimer
        from .spec import PreprocessSpec

        config = model_config(args)
        self.input_name, self.output_name = input_name, output_name
        self.spec = PreprocessSpec.from_model_config(config, output_name=output_name)
        executor = create_executor(self.spec, args["model_instance_kind"], int(args["model_instance_device_id"]))
        self.executor = faults.FaultyExecutor(executor) if faults.enabled() else executor
        self.metrics = PreprocessMetrics(args.get("model_name", config.get("name", "preprocess")),
                                         args["model_instance_name"])
        self.trimmer = HeapTrimmer()
        self.timer = PhaseTimer(args["model_instance_name"])  # logs phase times with TRITONPREP_PROFILE=1
        decoder = getattr(executor, "decoder_description", None) or getattr(getattr(executor, "decoder", None),
                                                                          "description", None)
        log.info("preprocess instance %s (%s, device %s): %s executor, decoder %s; limits %s",
                 args["model_instance_name"], args["model_instance_kind"], args["model_instance_device_id"],
                 executor.name, decoder or "Pillow", self.spec.limits)

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        self.metrics.executing(len(requests))
        try:
            return self._execute_isolated(requests)
        finally:
            self.metrics.executing(0)
            self.trimmer.maybe_trim()

    def _execute_isolated(self, requests: Sequence[Any]) -> list[Any]:
        n = len(requests)
        failure = instance_failure()
        if failure is None:
            try:
                responses = self._execute(requests)
                if len(responses) == n:
                    return responses
                log.error("internal error: %d responses for %d requests", len(responses), n)
                failure = "internal error: wrong number of responses"
            except InstanceFailed as e:
                fail_instance(str(e))
                failure = str(e)
            except Exception as e:  # noqa: BLE001 - isolation boundary: never raise out of execute
                log.exception("preprocess failed for a batch of %d requests", n)
                failure = f"internal error: {type(e).__name__}: {e}"
        self.metrics.record_rejections({"internal": n})
        if instance_failure() is not None:
            message = f"preprocess instance is out of service ({instance_failure()}); the server is restarting it"
        else:
            message = f"preprocess failed: {failure}"
        return [error_response(message, invalid_argument=False) for _ in range(n)]

    def _execute(self, requests: Sequence[Any]) -> list[Any]:
        t0 = time.perf_counter()
        batch = gather_images(requests, self.input_name, self.spec.limits.max_images_per_request)
        t1 = time.perf_counter()
        rejected = Counter(e.reason if isinstance(e, ImageError) else "invalid" for e in batch.request_errors.values())
        try:
            result = self.executor.run(batch.images)
            t2 = time.perf_counter()
        except InstanceFailed:
            raise
        except Exception as e:  # noqa: BLE001 - an executor bug or device error: isolate it request by request
            log.warning("executor failed on %d images from %d requests (%s: %s); retrying each request alone",
                        len(batch.images), len(requests), type(e).__name__, e)
            return self._retry_per_request(batch, rejected)
        detach_errors(result.errors)
        detach_errors(batch.request_errors)
        rejected.update(e.reason for e in result.errors.values())
        self.metrics.record_batch(result.decoded_by, result.timings)
        self.metrics.record_rejections(rejected)
        t3 = time.perf_counter()
        responses = image_responses(batch, result.output, result.errors, self.output_name)
        self.timer.record(len(requests), len(batch.images), gather=t1 - t0, run=t2 - t1, metrics=t3 - t2,
                          respond=time.perf_counter() - t3, **result.timings)
        return responses

    def _retry_per_request(self, batch: ImageBatch, rejected: Counter) -> list[Any]:
        results: list[_RequestResult] = []
        for r, (start, stop) in enumerate(batch.spans):
            if r in batch.request_errors or start == stop:
                results.append(_RequestResult())
                continue
            try:
                res = self.executor.run(batch.images[start:stop])
            except InstanceFailed:
                raise
            except ImageError as e:
                detach_errors({0: e})
                results.append(_RequestResult(failure=e))
                rejected[e.reason] += 1
                continue
            except Exception as e:  # noqa: BLE001 - this request alone fails
                log.error("request %d of %d fails alone (%s: %s)", r + 1, len(batch.spans), type(e).__name__, e)
                results.append(_RequestResult(failure=PreprocessError(f"internal error: {type(e).__name__}: {e}")))
                rejected["internal"] += 1
                continue
            detach_errors(res.errors)
            rejected.update(e.reason for e in res.errors.values())
            self.metrics.record_batch(res.decoded_by, res.timings)
            results.append(_RequestResult(res.output, dict(res.errors)))
        self.metrics.record_rejections(rejected)
        responses = []
        for r, ((start, stop), res) in enumerate(zip(batch.spans, results)):
            if r in batch.request_errors:
                responses.append(error_response(str(batch.request_errors[r])))
            elif res.failure is not None:
                responses.append(error_response(str(res.failure), invalid_argument=isinstance(res.failure, ImageError)))
            else:
                responses.append(_guarded_response(res.output, res.errors, 0, stop - start, self.output_name,
                                                   r, len(batch.spans)))
        return responses

    def close(self) -> None:
        """Send the last metrics; release the executor's threads and device memory."""
        self.metrics.close()
        self.executor.close()


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
