"""Responses: a success carrying tensors, and errors that belong to one request.

What a client sent wrong is ``INVALID_ARG``, anything else ``INTERNAL``. A request refused because
of one of its images says which one in the per-image contract (:mod:`tritonprep.image_errors`:
``image 3 of 8 [decode]: ...``), which the client reads back to send the other images again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ImageError, InputError
from ..image_errors import ImageFailure
from .pb import pb_utils


class ImageRejected(InputError):
    """Image ``index`` (0-based) of a request of ``count`` images was refused: the request fails, naming it.

    Its message is the contract's wire form (:class:`~tritonprep.image_errors.ImageFailure`); it keeps
    the image error's reason and message, not the error itself (nor its traceback).
    """

    def __init__(self, error: ImageError, index: int, count: int) -> None:
        self.failure = ImageFailure(index, count, error.reason, str(error))
        self.reason = error.reason
        super().__init__(str(self.failure))


def error_response(message: str, *, invalid_argument: bool = True) -> Any:
    """An error response (INVALID_ARG for bad input, INTERNAL otherwise)."""
    pb = pb_utils()
    code = pb.TritonError.INVALID_ARG if invalid_argument else pb.TritonError.INTERNAL
    return pb.InferenceResponse(error=pb.TritonError(message, code))


def error_response_for(error: BaseException) -> Any:
    """The response for ``error``: INVALID_ARG for what the client sent, INTERNAL for the rest."""
    if isinstance(error, InputError):
        return error_response(str(error))
    return error_response(f"internal error: {type(error).__name__}: {error}", invalid_argument=False)


def response(tensors: Sequence[Any]) -> Any:
    """A successful response carrying ``tensors``."""
    return pb_utils().InferenceResponse(output_tensors=list(tensors))
