"""Exceptions of the tritonprep client: each message names the cause in one line."""

from __future__ import annotations

from tritonprep.image_errors import ImageFailure, parse


class ClientError(Exception):
    """Base class of every client-side error."""


class ServerUnavailable(ClientError):
    """The Triton server cannot be reached (not running, wrong URL or port, network), or went away and did
    not come back within the client's retries."""


class WrongProtocol(ServerUnavailable):
    """The address answers in another protocol than the client speaks (HTTP sent to a gRPC port, say)."""


class InferenceFailed(ClientError):
    """The server answered with an error for this request (for example a rejected image).

    ``image`` says which image the server refused, when it named one (the per-image error contract,
    :class:`tritonprep.image_errors.ImageFailure`: its index in the request, the request's number of
    images, the reason and the message); ``reason`` is its reason (``decode``, ``format``, ``limit``,
    ``invalid``, ``internal``), or None.
    """

    def __init__(self, message: str, image: ImageFailure | None = None) -> None:
        super().__init__(message)
        self.image = image

    @property
    def reason(self) -> str | None:
        """Why the server refused the image, or None when it named no image."""
        return self.image.reason if self.image is not None else None

    @classmethod
    def from_server(cls, message: str) -> InferenceFailed:
        """The failure a server's error message describes, with the image it names, if any."""
        return cls(message, parse(message))
