"""The per-image error contract between the server and its clients: one definition, both sides import it.

A request carries several images; when one of them is refused, the server fails the request and
names the image in the error message, so that a client can answer that image with the error and
send the request's other images again without it. The message is the wire form::

    image 3 of 8 [decode]: cannot decode the JPEG data: truncated

``3`` is the image's position in its request (1-based, as a person counts), ``8`` the request's
number of images, ``decode`` a machine-readable reason (:data:`REASONS`: the reasons the custom
metrics count refusals by), then the human message. It stays readable in a plain Triton error and
in logs, and :func:`parse` reads it back from anywhere in an error text (a client library or an
ensemble may put words in front of it).

This module imports nothing but the standard library, and ``tritonprep/__init__.py`` imports nothing,
so a client-only install (``pip install 'tritonprep[client]'``) reads it without numpy or the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: why an image or request was refused (the ``reason`` label of ``tritonprep_rejected_total``):
#: not a decodable image, a format the model does not allow, over a configured limit, otherwise
#: invalid input, or a failure of the server itself
REASONS = ("decode", "format", "limit", "invalid", "internal")

_WIRE = re.compile(r"image (\d+) of (\d+) \[(" + "|".join(REASONS) + r")\]: ")


@dataclass(frozen=True)
class ImageFailure:
    """Image ``index`` (0-based) of a request of ``count`` images was refused for ``reason``."""

    index: int
    count: int
    reason: str
    message: str

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"image index {self.index} is outside a request of {self.count} images")
        if self.reason not in REASONS:
            raise ValueError(f"unknown refusal reason {self.reason!r}; one of {', '.join(REASONS)}")

    def __str__(self) -> str:
        """The wire form: ``image <index + 1> of <count> [<reason>]: <message>``."""
        return f"image {self.index + 1} of {self.count} [{self.reason}]: {self.message}"


def parse(text: str) -> ImageFailure | None:
    """The :class:`ImageFailure` an error text carries (anywhere in it), or None if it names no image."""
    match = _WIRE.search(text)
    if match is None:
        return None
    number, count = int(match.group(1)), int(match.group(2))
    if not 1 <= number <= count:
        return None
    return ImageFailure(number - 1, count, match.group(3), text[match.end() :])
