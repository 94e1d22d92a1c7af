"""Everything a ``preprocess`` model instance does; its ``model.py`` only forwards to it.

* images arrive as a BYTES tensor of shape ``[n, 1]`` per request (``n`` images of any
  sizes, no padding); all requests of an ``execute()`` call are preprocessed as one batch;
* each image is decoded once; each image output (one spec each, :class:`~tritonprep.spec.PreprocessConfig`)
  is computed only for the requests that asked for it (``requested_output_names``: an ensemble
  step asks for what its ``output_map`` names), in one kernel launch per output; provenance
  outputs (:mod:`.provenance`) likewise only where requested;
* every request gets exactly one response. A bad image fails only the request that carried
  it; an unexpected exception of the executor is retried request by request (only the
  request that still fails gets an error); an error while building one response fails only
  that response; nothing is raised out of ``execute``;
* an instance that hits an unrecoverable error takes itself out of service
  (:func:`~.health.fail_instance`): its stub exits and the launcher's supervisor restarts the server.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ImageError, InputError, InstanceFailed, LimitExceeded, PreprocessError
from ..executors import BatchResult, create_executor
from ..spec import PreprocessConfig
from . import faults
from .health import HeapTrimmer, fail_instance, instance_failure
from .metrics import PreprocessMetrics
from .pb import model_config
from .profiling import PhaseTimer
from .provenance import provenance_tensors
from .responses import detach_errors, error_response, error_response_for, guarded, response
from .tensors import bytes_input, output_tensor, requested_outputs

log = logging.getLogger(__name__)


@dataclass
class ImageBatch:
    """The images of all requests of one ``execute()`` call, flattened in request order."""

    images: list[bytes] = field(default_factory=list)
    #: (start, stop) of each request's images in ``images``
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: requests rejected before preprocessing (bad shape, too many images)
    request_errors: dict[int, InputError] = field(default_factory=dict)
    #: the output names each request asked for
    requested: list[frozenset[str]] = field(default_factory=list)


def gather_images(
    requests: Sequence[Any], input_name: str, max_images_per_request: int, outputs: Sequence[str] = ()
) -> ImageBatch:
    """Collect the encoded images of every request into one :class:`ImageBatch`."""
    batch = ImageBatch()
    for r, request in enumerate(requests):
        start = len(batch.images)
        batch.requested.append(requested_outputs(request, outputs))
        try:
            items = bytes_input(request, input_name)
            if len(items) > max_images_per_request:
                raise LimitExceeded(
                    f"request carries {len(items)} images, over the limit "
                    f"max_images_per_request={max_images_per_request}"
                )
            batch.images.extend(items)
        except InputError as e:
            batch.request_errors[r] = e
        batch.spans.append((start, len(batch.images)))
    return batch


def plan_rows(batch: ImageBatch, image_outputs: Sequence[str]) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
    """Which images each image output is computed for, and where each request's rows start in it.

    Returns ``wanted`` (``{output: image indices}``, only outputs some request asked for) and, per
    request, ``{output: first row}``: a request's images occupy consecutive rows of each output.
    """
    wanted: dict[str, list[int]] = {name: [] for name in image_outputs}
    first_rows: list[dict[str, int]] = []
    for r, (start, stop) in enumerate(batch.spans):
        first: dict[str, int] = {}
        if r not in batch.request_errors:
            for name in image_outputs:
                if name in batch.requested[r]:
                    first[name] = len(wanted[name])
                    wanted[name].extend(range(start, stop))
        first_rows.append(first)
    return {name: rows for name, rows in wanted.items() if rows}, first_rows


def _request_response(
    config: PreprocessConfig,
    result: BatchResult,
    start: int,
    stop: int,
    first_rows: Mapping[str, int],
    requested: frozenset[str],
) -> Any:
    """The response of one request whose images are ``[start, stop)`` of ``result``."""
    bad = next((i for i in range(start, stop) if i in result.errors), None)
    if bad is not None:
        return error_response_for(result.errors[bad], prefix=f"image {bad - start + 1} of {stop - start}: ")
    if stop == start:
        return error_response("request carries no image")
    k = stop - start
    tensors = [output_tensor(name, result.outputs[name][row : row + k]) for name, row in first_rows.items()]
    tensors += provenance_tensors(config, [result.images[i] for i in range(start, stop)], requested)
    return response(tensors)


def image_responses(
    config: PreprocessConfig, batch: ImageBatch, result: BatchResult, first_rows: Sequence[Mapping[str, int]]
) -> list[Any]:
    """One response per request: its rows of each output it asked for, or the error of its first bad image."""
    n = len(batch.spans)
    responses = []
    for r, (start, stop) in enumerate(batch.spans):
        if r in batch.request_errors:
            responses.append(error_response_for(batch.request_errors[r]))
        else:
            responses.append(
                guarded(
                    lambda r=r, s=start, e=stop: _request_response(
                        config, result, s, e, first_rows[r], batch.requested[r]
                    ),
                    r,
                    n,
                )
            )
    return responses


@dataclass
class _RequestResult:
    """The outcome for one request when a batch had to be retried request by request."""

    result: BatchResult | None = None
    failure: PreprocessError | None = None


class PreprocessModel:
    """A preprocess model instance: spec, executor, metrics; ``execute`` never raises."""

    def __init__(self, args: Mapping[str, str], input_name: str = "IMAGE") -> None:
        config = model_config(args)
        self.input_name = input_name
        self.config = PreprocessConfig.from_model_config(config)
        self.image_outputs = [name for name, _ in self.config.outputs]
        self.all_outputs = [*self.image_outputs, *self.config.provenance]
        executor = create_executor(self.config, args["model_instance_kind"], int(args["model_instance_device_id"]))
        self.executor = faults.FaultyExecutor(executor) if faults.enabled() else executor
        device = f"gpu{executor.device.id}" if executor.name == "gpu" else "cpu"
        self.metrics = PreprocessMetrics(
            args.get("model_name", config.get("name", "preprocess")), args["model_instance_name"], device
        )
        self.trimmer = HeapTrimmer()
        self.timer = PhaseTimer(args["model_instance_name"])  # logs phase times with TRITONPREP_PROFILE=1
        log.info(
            "preprocess instance %s (%s, device %s): %s; limits %s",
            args["model_instance_name"],
            args["model_instance_kind"],
            args["model_instance_device_id"],
            executor.describe(),
            self.config.limits,
        )

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

    def gather(self, requests: Sequence[Any]) -> ImageBatch:
        """The images of ``requests`` and the outputs each asked for (a subclass may want others)."""
        return gather_images(requests, self.input_name, self.config.limits.max_images_per_request, self.all_outputs)

    def respond(self, batch: ImageBatch, result: BatchResult, first_rows: Sequence[Mapping[str, int]]) -> list[Any]:
        """One response per request of ``batch`` from the executor's ``result`` (a subclass may run more on it)."""
        return image_responses(self.config, batch, result, first_rows)

    def _execute(self, requests: Sequence[Any]) -> list[Any]:
        t0 = time.perf_counter()
        batch = self.gather(requests)
        wanted, first_rows = plan_rows(batch, self.image_outputs)
        t1 = time.perf_counter()
        rejected = Counter(e.reason for e in batch.request_errors.values())
        try:
            result = self.executor.run(batch.images, wanted)
            t2 = time.perf_counter()
        except InstanceFailed:
            raise
        except Exception as e:  # noqa: BLE001 - an executor bug or device error: isolate it request by request
            log.warning(
                "executor failed on %d images from %d requests (%s: %s); retrying each request alone",
                len(batch.images),
                len(requests),
                type(e).__name__,
                e,
                exc_info=True,
            )
            return self._retry_per_request(batch, first_rows, rejected)
        detach_errors(result.errors)
        detach_errors(batch.request_errors)
        rejected.update(e.reason for e in result.errors.values())
        self.metrics.record_batch(result.decoded_by, result.timings)
        self.metrics.record_rejections(rejected)
        t3 = time.perf_counter()
        responses = self.respond(batch, result, first_rows)
        self.timer.record(
            len(requests),
            len(batch.images),
            gather=t1 - t0,
            run=t2 - t1,
            metrics=t3 - t2,
            respond=time.perf_counter() - t3,
            **result.timings,
        )
        return responses

    def _retry_per_request(
        self, batch: ImageBatch, first_rows: Sequence[Mapping[str, int]], rejected: Counter
    ) -> list[Any]:
        results: list[_RequestResult] = []
        for r, (start, stop) in enumerate(batch.spans):
            if r in batch.request_errors or start == stop:
                results.append(_RequestResult())
                continue
            try:
                res = self.executor.run(batch.images[start:stop], {name: range(stop - start) for name in first_rows[r]})
            except InstanceFailed:
                raise
            except ImageError as e:
                detach_errors({0: e})
                results.append(_RequestResult(failure=e))
                rejected[e.reason] += 1
                continue
            except Exception as e:  # noqa: BLE001 - this request alone fails
                log.error(
                    "request %d of %d fails alone (%s: %s)", r + 1, len(batch.spans), type(e).__name__, e, exc_info=True
                )
                results.append(_RequestResult(failure=PreprocessError(f"internal error: {type(e).__name__}: {e}")))
                rejected["internal"] += 1
                continue
            detach_errors(res.errors)
            rejected.update(e.reason for e in res.errors.values())
            self.metrics.record_batch(res.decoded_by, res.timings)
            results.append(_RequestResult(res))
        self.metrics.record_rejections(rejected)
        n = len(batch.spans)
        responses = []
        for r, ((start, stop), res) in enumerate(zip(batch.spans, results)):
            if r in batch.request_errors:
                responses.append(error_response_for(batch.request_errors[r]))
            elif res.failure is not None:
                responses.append(error_response(str(res.failure), invalid_argument=isinstance(res.failure, InputError)))
            elif res.result is None:
                responses.append(error_response("request carries no image"))
            else:  # this request alone, as a batch of one
                alone = ImageBatch(batch.images[start:stop], [(0, stop - start)], {}, [batch.requested[r]])
                responses.append(
                    guarded(
                        lambda a=alone, res=res.result, r=r: self.respond(a, res, [dict.fromkeys(first_rows[r], 0)])[0],
                        r,
                        n,
                    )
                )
        return responses

    def close(self) -> None:
        """Send the last metrics; release the executor's threads and device memory."""
        self.metrics.close()
        self.executor.close()
