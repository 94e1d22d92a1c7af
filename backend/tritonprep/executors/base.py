"""What an executor is and what it returns.

An executor takes the images of a whole ``execute()`` call (all requests together), decodes each
image once and fills one output batch per image output of its :class:`~tritonprep.spec.PreprocessConfig`
(one kernel launch per output on the GPU). ``wanted`` says which images each output needs (a
request that asked only for the embedding input gets no classifier input); the rows of an output
follow that order. An image that fails leaves its rows unspecified and is reported in
:attr:`BatchResult.errors`; the Triton layer then fails the request that carried it and slices
the others out of the batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..errors import ImageError, detach_errors
from ..spec import OutputSpec, PreprocessConfig

#: ``{image output name: indices of the images it is computed for, in row order}``
Wanted = Mapping[str, Sequence[int]]


#: how an image may be decoded (:attr:`ImageInfo.path`, the metrics' ``path`` label)
DECODE_PATHS = ("cpu", "gpu_hw", "gpu_cuda", "cpu_fallback")


class ImageInfo(NamedTuple):
    """How one image was decoded: its upright size and the decoder path (the provenance outputs)."""

    width: int
    height: int
    #: "gpu_hw", "gpu_cuda", "cpu_fallback" (Pillow inside the GPU executor, for what the GPU declined) or "cpu" (the
    #: CPU executor, or the GPU executor's ``cpu_decoder_share``)
    path: str


@dataclass
class BatchResult:
    """One batch per image output; ``errors`` maps the index of each failed image to its error, detached (no
    traceback or chained exception: :func:`~tritonprep.errors.detach_errors`)."""

    #: ``{image output name: numpy.ndarray or cupy.ndarray of shape (len(wanted[name]),) + spec.output_shape}``
    outputs: dict[str, Any]
    errors: dict[int, ImageError] = field(default_factory=dict)
    #: how each image was decoded, for metrics: {"cpu": n, "gpu_hw": n, "gpu_cuda": n, "cpu_fallback": n}
    decoded_by: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of the phases of this call, each from its start: "decode_s" (all decoding), the GPU
    #: executor's "decode_gpu_s" (its GPU decoders) and "launch_s" (its kernels launched), "total_s"
    timings: dict[str, float] = field(default_factory=dict)
    #: size and decoder path of every image that decoded, by index
    images: dict[int, ImageInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        detach_errors(self.errors)  # no frame, batch or executor kept alive by an error (see detach_errors)

    @property
    def output(self) -> Any:
        """The batch of a single-output executor (the first output of several)."""
        return next(iter(self.outputs.values()))


def as_config(spec: OutputSpec | PreprocessConfig) -> PreprocessConfig:
    """A config for an executor built from a single output spec (its one output named ``PIXELS``, the model-wide
    options at their defaults) or a config."""
    return spec if isinstance(spec, PreprocessConfig) else PreprocessConfig.single(spec)


def resolve_wanted(config: PreprocessConfig, n: int, wanted: Wanted | None) -> dict[str, list[int]]:
    """``wanted`` with unknown names refused; ``None`` means every output for every image."""
    if wanted is None:
        return {name: list(range(n)) for name, _ in config.outputs}
    unknown = sorted(set(wanted) - set(config.specs))
    if unknown:
        raise ValueError(f"unknown image output(s) {unknown}; this executor produces {sorted(config.specs)}")
    return {name: list(rows) for name, rows in wanted.items()}


class Executor(Protocol):
    """What the preprocess model needs from an executor."""

    #: "cpu" or "gpu"
    name: str
    config: PreprocessConfig

    def describe(self) -> str:
        """One line for the log: where it runs, how it decodes and resizes."""
        ...

    def run(self, images: Sequence[bytes], wanted: Wanted | None = None, *, synchronize: bool = True) -> BatchResult:
        """Preprocess ``images`` into one batch per wanted output; a bad image is reported in the result, never
        raised. ``synchronize`` False: GPU outputs may still be computing on the executor's ``stream``."""
        ...

    def close(self) -> None:
        """Release threads and device memory."""
        ...
