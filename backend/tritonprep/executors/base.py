"""What an executor is and what it returns.

An executor takes the images of a whole ``execute()`` call (all requests together) and fills
one output batch with a slot per image, in input order. An image that fails leaves its slot
unspecified and is reported in :attr:`BatchResult.errors`; the Triton layer then fails the
request that carried it and slices the others out of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ImageError


@dataclass
class BatchResult:
    """One slot per input image; ``errors`` maps the index of each failed image to its error."""

    output: Any  # numpy.ndarray or cupy.ndarray of shape (n,) + spec.output_shape
    errors: dict[int, ImageError] = field(default_factory=dict)
    #: how each image was decoded, for metrics: {"cpu": n, "gpu_hw": n, "gpu_cuda": n, "cpu_fallback": n}
    decoded_by: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of the phases of this call: "decode_s" (all decoding), "total_s"
    timings: dict[str, float] = field(default_factory=dict)


class Executor(Protocol):
    """What the preprocess model needs from an executor."""

    #: "cpu" or "gpu"
    name: str

    def describe(self) -> str:
        """One line for the log: where it runs, how it decodes and resizes."""
        ...

    def run(self, images: Sequence[bytes]) -> BatchResult:
        """Preprocess ``images`` into one batch; a bad image is reported in the result, never raised."""
        ...

    def close(self) -> None:
        """Release threads and device memory."""
        ...
