"""Everything a ``preprocess`` model instance does; its ``model.py`` only forwards to it.

* images arrive as a BYTES tensor of shape ``[n, 1]`` per request (``n`` images of any
  sizes, no padding); all requests of an ``execute()`` call are preprocessed as one batch;
* each image is decoded once; each image output (one spec each, :class:`~tritonprep.spec.PreprocessConfig`)
  is computed only for the requests that asked for it (``requested_output_names``: an ensemble
  step asks for what its ``output_map`` names), in one kernel launch per output; provenance
  outputs (:mod:`.provenance`) likewise only where requested;
* a bad image fails only the request that carried it, naming the image in the per-image error
  contract (:mod:`tritonprep.image_errors`); everything else about answering each request on its
  own (retries, one response per request, a broken instance) is :class:`~.isolation.RequestIsolation`'s.

:class:`PreprocessStage` is the part that takes images: the ``preprocess`` model is that stage
alone (:class:`PreprocessModel`), ``classify_fused`` puts the network behind it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import reports
from ..errors import LimitExceeded, RequestError
from ..executors import ImageInfo, create_executor
from ..spec import PreprocessConfig
from . import faults
from .health import HeapTrimmer, report_loaded
from .isolation import RequestIsolation
from .metrics import PreprocessMetrics
from .pb import model_config
from .profiling import PhaseTimer
from .provenance import provenance_tensors
from .responses import ImageRejected
from .tensors import bytes_input, output_tensor, requested_outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestImages:
    """One request's encoded images and the outputs it wants."""

    images: list[bytes]
    wanted: frozenset[str]

    def __len__(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class Preprocessed:
    """One request's rows of each image output it wanted, and how each of its images was decoded."""

    outputs: dict[str, Any]
    infos: list[ImageInfo]
    wanted: frozenset[str]

    def __len__(self) -> int:
        return len(self.infos)


def plan_rows(
    inputs: Sequence[RequestImages], image_outputs: Sequence[str]
) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
    """Which images each image output is computed for, and where each request's rows start in it.

    Returns ``wanted`` (``{output: image indices}``, only outputs some request asked for) and, per
    request, ``{output: first row}``: a request's images occupy consecutive rows of each output.
    """
    wanted: dict[str, list[int]] = {name: [] for name in image_outputs}
    first_rows: list[dict[str, int]] = []
    start = 0
    for x in inputs:
        first: dict[str, int] = {}
        for name in image_outputs:
            if name in x.wanted:
                first[name] = len(wanted[name])
                wanted[name].extend(range(start, start + len(x)))
        first_rows.append(first)
        start += len(x)
    return {name: rows for name, rows in wanted.items() if rows}, first_rows


class PreprocessStage:
    """Decodes and preprocesses the images of many requests as one batch: spec, executor, metrics.

    The parts :class:`~.isolation.RequestIsolation` runs: :meth:`read` (a request's images),
    :meth:`preprocess` (a step over the images of every standing request) and :meth:`tensors`
    (a request's output tensors).
    """

    def __init__(
        self, config: PreprocessConfig, args: Mapping[str, str], input_name: str = "IMAGE", *, warm_up: bool = True
    ) -> None:
        """``warm_up`` False: the caller runs :meth:`warm_up` before the first request (on any thread)."""
        self.config = config
        self.input_name = input_name
        self.image_outputs = [name for name, _ in config.outputs]
        self.offered = [*self.image_outputs, *config.provenance]
        executor = create_executor(
            config, args["model_instance_kind"], int(args["model_instance_device_id"]), warm_up=warm_up
        )
        self._warm_up = getattr(executor, "warm_up", None)  # the GPU executor's; the CPU one needs none
        self.executor = faults.FaultyExecutor(executor) if faults.enabled() else executor
        device = f"gpu{reports.host_gpu(executor.device.id)}" if executor.name == "gpu" else "cpu"
        self.metrics = PreprocessMetrics(args["model_name"], args["model_instance_name"], device)
        self.timer = PhaseTimer(args["model_instance_name"])  # logs phase times with TRITONPREP_PROFILE=1
        self.trimmer = HeapTrimmer()
        log.info(
            "preprocess instance %s (%s, device %s): %s; limits %s",
            args["model_instance_name"],
            args["model_instance_kind"],
            args["model_instance_device_id"],
            executor.describe(),
            config.limits,
        )

    def warm_up(self) -> None:
        """The executor's first call (decoders, kernels), where the constructor was told to leave it."""
        if self._warm_up is not None:
            self._warm_up()

    @contextmanager
    def executing(self, requests: int) -> Iterator[None]:
        """Around an ``execute()`` of ``requests``: the executing-requests gauge, then a heap trim when due."""
        self.metrics.executing(requests)
        try:
            yield
        finally:
            self.metrics.executing(0)
            self.trimmer.maybe_trim()

    def read(self, request: Any, wanted: frozenset[str] | None = None) -> RequestImages:
        """A request's images and the outputs it asked for (or ``wanted``, when the model decides)."""
        images = bytes_input(request, self.input_name)
        limit = self.config.limits.max_images_per_request
        if len(images) > limit:
            raise LimitExceeded(f"request carries {len(images)} images, over the limit max_images_per_request={limit}")
        if not images:
            raise RequestError("request carries no image")
        return RequestImages(images, requested_outputs(request, self.offered) if wanted is None else wanted)

    def preprocess(
        self, inputs: list[RequestImages], *, synchronize: bool = True
    ) -> list[Preprocessed | ImageRejected]:
        """The images of all ``inputs`` in one executor run; per request its rows, or its first bad image.
        ``synchronize`` False: a GPU executor's rows may still be computing on its stream (see its ``run``)."""
        images = [data for x in inputs for data in x.images]
        wanted, first_rows = plan_rows(inputs, self.image_outputs)
        result = self.executor.run(images, wanted, synchronize=synchronize)
        self.metrics.record_batch(result.decoded_by, result.timings)
        self.metrics.record_rejections(Counter(e.reason for e in result.errors.values()))
        self.timer.add(len(images), **result.timings)
        answers: list[Preprocessed | ImageRejected] = []
        start = 0
        for x, first in zip(inputs, first_rows):
            stop = start + len(x)
            bad = next((i for i in range(start, stop) if i in result.errors), None)
            if bad is not None:
                answers.append(ImageRejected(result.errors[bad], bad - start, len(x)))
            else:
                rows = {name: result.outputs[name][row : row + len(x)] for name, row in first.items()}
                answers.append(Preprocessed(rows, [result.images[i] for i in range(start, stop)], x.wanted))
            start = stop
        return answers

    def tensors(self, result: Preprocessed) -> list[Any]:
        """A request's output tensors: its rows of each image output, and the provenance outputs it asked for."""
        tensors = [output_tensor(name, rows) for name, rows in result.outputs.items()]
        return tensors + provenance_tensors(self.config, result.infos, result.wanted)

    def close(self) -> None:
        """Send the last metrics; release the executor's threads and device memory."""
        self.metrics.close()
        self.executor.close()


class PreprocessModel:
    """A ``preprocess`` model instance: the stage, answering each request on its own; ``execute`` never raises."""

    def __init__(self, args: Mapping[str, str], input_name: str = "IMAGE") -> None:
        self.stage = PreprocessStage(PreprocessConfig.from_model_config(model_config(args)), args, input_name)
        self.requests = RequestIsolation(
            args["model_name"],
            self.stage.read,
            [self.stage.preprocess],
            self.stage.tensors,
            on_rejections=self.stage.metrics.record_rejections,
            timer=self.stage.timer,
        )
        executor = self.stage.executor
        report_loaded(
            args,
            runtime=f"{executor.name} executor",
            gpu_memory_mb=self.stage.config.gpu_memory_mb or None,
            timings=getattr(executor, "timings", None),
        )

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        with self.stage.executing(len(requests)):
            return self.requests.execute(requests)

    def close(self) -> None:
        """Send the last metrics; release the executor's threads and device memory."""
        self.stage.close()
