"""Exceptions of the tritonprep client: each message names the cause in one line."""

from __future__ import annotations


class ClientError(Exception):
    """Base class of every client-side error."""


class ServerUnavailable(ClientError):
    """The Triton server cannot be reached (not running, wrong URL or port, network)."""


class InferenceFailed(ClientError):
    """The server answered with an error for this request (for example a rejected image)."""
