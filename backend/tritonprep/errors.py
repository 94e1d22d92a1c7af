"""Exception hierarchy of the tritonprep server-side library.

Every error a user can cause or fix derives from :class:`PreprocessError`. Errors in what a
client sent (:class:`InputError`: a malformed request, or one bad image, :class:`ImageError`
and its subclasses) become an ``INVALID_ARG`` response for that request only; the other
requests of the batch are unaffected. Errors in configuration or environment
(:class:`ConfigError`, :class:`RuntimeUnavailable`) stop a model from loading, with a message
that says what to change. :func:`detach_errors` drops the tracebacks and chained errors of caught
per-image and per-request errors, so that they keep no frames alive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PreprocessError(Exception):
    """Base class of every tritonprep server-side error."""


class ConfigError(PreprocessError):
    """A model configuration (``config.pbtxt`` parameters, tensor dims) is invalid."""


class RuntimeUnavailable(PreprocessError):
    """A requested inference runtime or device is not installed or not usable here."""


class InputError(PreprocessError):
    """What a client sent is wrong; fails only its own request, with ``INVALID_ARG``."""

    #: short machine-readable reason, used for metrics labels
    reason = "invalid"


class RequestError(InputError):
    """The request itself is malformed: a missing input, a wrong data type or shape."""


class ImageError(InputError):
    """One input image cannot be turned into a tensor; fails only its own request."""


class DecodeError(ImageError):
    """The bytes are not a decodable image (empty, truncated, corrupt, unknown format)."""

    reason = "decode"


class UnsupportedFormat(ImageError):
    """The image format is recognised but not in the model's list of allowed formats."""

    reason = "format"


class LimitExceeded(ImageError):
    """The image is larger than a configured limit (bytes, pixels, scans, image count)."""

    reason = "limit"


class ResourceExhausted(PreprocessError):
    """A batch needs more memory than the instance may hold (its ``gpu_memory_mb``); the instance stays
    healthy: the batch is retried request by request, and a request that alone does not fit fails."""


class InstanceFailed(PreprocessError):
    """A model instance hit an unrecoverable error (e.g. a CUDA illegal address) and must be restarted.

    Raised by an executor or a network runtime (a sticky CUDA error becomes this in
    :func:`tritonprep.cuda.cuda_fault_guard`); the Triton layer answers every request of the call with an error
    and takes the instance out of service (:func:`tritonprep.triton.health.fail_instance`).
    """


class InferenceError(PreprocessError):
    """A network runtime failed on a batch, for a reason that is neither the client's input nor a broken
    instance (which is :class:`InstanceFailed`); the batch is retried request by request, and a request that
    still fails gets this message."""


class ServerError(PreprocessError):
    """The embedded Triton server could not be started, or stopped unexpectedly."""


class StartRefused(ServerError):
    """The embedded server was not started: something the user must fix first (a port in use, no model repository,
    no network runtime, an option that cannot be served). ``tritonprep serve`` says it in one line and exits 2."""


def detach_errors(errors: Mapping[Any, BaseException]) -> None:
    """Drop the tracebacks and chained exceptions of per-image or per-request errors, keeping their messages.

    An error kept after its ``except`` block keeps its traceback, whose frames (and their callers'
    frames) keep their locals: encoded bytes, decoded images, output batches, the executor itself,
    often in a reference cycle (error -> traceback -> frame -> error) that only the cyclic garbage
    collector frees, late and at any moment (the soak's memory growth, 90f69c0; a closed GPU executor's
    crash, the stage 24 report). Executors return their errors detached
    (:class:`~tritonprep.executors.base.BatchResult`).
    """
    for error in errors.values():
        error.__traceback__ = None
        error.__context__ = None
        error.__cause__ = None
