"""One response per request, whatever fails: the per-request isolation every model of the repository uses.

A model describes what its ``execute()`` does in three parts, and :class:`RequestIsolation` runs them
over the requests of each call:

* ``read(request)``: the request's input. What raises is that request's answer (a malformed request
  fails alone).
* ``steps``: functions over the inputs of all the requests still standing, as one batch, each
  returning one result per input, in order; the results are the next step's inputs. A result that is
  an :class:`~tritonprep.errors.InputError` (e.g. :class:`~.responses.ImageRejected`, a bad image) is
  its request's answer. A step that raises has failed the batch: it runs again on each request
  alone, and only a request that still fails gets an error. :func:`row_batched` makes a step of a
  function whose outputs hold the inputs' rows one after the other (the usual network call).
* ``respond(result)``: the request's output tensors. A failure while building one response fails
  that response alone.

:class:`~tritonprep.errors.InstanceFailed` from any part (a sticky CUDA error) takes the instance
out of service (:func:`~.health.fail_instance`): every request of the call, and of every later call,
gets an error naming the model and the reason. Anything else that escapes fails the call's requests
with an ``INTERNAL`` error. Nothing is raised out of ``execute``; there is exactly one response per
request, in request order.

Refusals by reason (:data:`tritonprep.image_errors.REASONS`) go to ``on_rejections``: those the
engine decides (a request that cannot be read, fails alone, or whose response cannot be built; every
request of a call that fails as a whole). A step counts the refusals it returns itself, since only it
sees every bad image of a request.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InputError, InstanceFailed, detach_errors
from .health import fail_instance, instance_failure
from .profiling import PhaseTimer
from .responses import error_response, error_response_for, response

log = logging.getLogger(__name__)

#: a step: the inputs of the requests still standing in, one result (or InputError) per input out
Step = Callable[[list[Any]], Sequence[Any]]


class RequestIsolation:
    """Answers each request of an ``execute()`` on its own: see the module docstring.

    ``model`` is the model's name (``args["model_name"]``), which every error that is not the
    client's names. ``timer`` (optional) gets the wall time of ``read``, each step (by its
    ``__name__``) and ``respond`` per call.
    """

    def __init__(
        self,
        model: str,
        read: Callable[[Any], Any],
        steps: Sequence[Step],
        respond: Callable[[Any], Sequence[Any]],
        *,
        on_rejections: Callable[[Mapping[str, int]], None] | None = None,
        timer: PhaseTimer | None = None,
    ) -> None:
        self.model = model
        self.read = read
        self.steps = list(steps)
        self.respond = respond
        self.on_rejections = on_rejections
        self.timer = timer

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        n = len(requests)
        problem = ""
        if instance_failure() is None:
            try:
                responses = self._answer(requests)
                if len(responses) == n:
                    return responses
                log.error("%s: internal error: %d responses for %d requests", self.model, len(responses), n)
                problem = "internal error: wrong number of responses"
            except InstanceFailed as e:
                fail_instance(str(e))
            except Exception as e:  # noqa: BLE001 - isolation boundary: never raise out of execute
                log.exception("%s failed for a batch of %d requests", self.model, n)
                problem = f"internal error: {type(e).__name__}: {e}"
        self._rejected(Counter({"internal": n}))
        failure = instance_failure()
        if failure is not None:
            message = f"{self.model} instance is out of service ({failure}); the server is restarting it"
        else:
            message = f"{self.model} failed: {problem}"
        return [error_response(message, invalid_argument=False) for _ in requests]

    def _answer(self, requests: Sequence[Any]) -> list[Any]:
        n = len(requests)
        t0 = time.perf_counter()
        standing: dict[int, Any] = {}
        caught: dict[int, BaseException] = {}  # failures the engine caught (it counts them)
        answers: dict[int, BaseException] = {}  # every failed request's error
        for r, request in enumerate(requests):
            try:
                standing[r] = self.read(request)
            except InstanceFailed:
                raise
            except Exception as e:  # noqa: BLE001 - isolation boundary: a request that cannot be read fails alone
                caught[r] = e
        phases = {"read": time.perf_counter() - t0}
        for step in self.steps:
            t0 = time.perf_counter()
            results, failed = self._run(step, standing, n) if standing else ({}, {})
            caught.update(failed)
            standing = {}
            for r, result in results.items():
                if isinstance(result, InputError):
                    answers[r] = result
                else:
                    standing[r] = result
            name = getattr(step, "__name__", "run")
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
        detach_errors(caught)
        answers.update(caught)
        rejected = Counter(e.reason if isinstance(e, InputError) else "internal" for e in caught.values())
        t0 = time.perf_counter()
        responses = []
        for r in range(n):
            if r in answers:
                responses.append(error_response_for(answers[r]))
            else:
                responses.append(self._response(standing[r], r, n, rejected))
        self._rejected(rejected)
        if self.timer is not None:
            phases["respond"] = phases.get("respond", 0.0) + time.perf_counter() - t0
            self.timer.record(n, **phases)
        return responses

    def _run(self, step: Step, standing: Mapping[int, Any], n: int) -> tuple[dict[int, Any], dict[int, BaseException]]:
        """``step`` over the standing inputs as one batch, else over each alone: (results, failures)."""
        inputs = list(standing.values())
        try:
            results = step(inputs)
            if len(results) != len(inputs):
                raise ValueError(f"{len(results)} results for {len(inputs)} requests")
            return dict(zip(standing, results)), {}
        except InstanceFailed:
            raise
        except Exception as e:  # noqa: BLE001 - isolation boundary: run each request alone
            log.warning(
                "%s: %s failed on a batch of %d requests (%s: %s); retrying each request alone",
                self.model,
                getattr(step, "__name__", "a step"),
                len(inputs),
                type(e).__name__,
                e,
                exc_info=True,
            )
        results: dict[int, Any] = {}
        failed: dict[int, BaseException] = {}
        for r, x in standing.items():
            try:
                [results[r]] = step([x])
            except InstanceFailed:
                raise
            except Exception as e:  # noqa: BLE001 - this request alone fails
                if not isinstance(e, InputError):
                    log.error("%s: request %d of %d fails alone", self.model, r + 1, n, exc_info=True)
                failed[r] = e
        return results, failed

    def _response(self, result: Any, r: int, n: int, rejected: Counter) -> Any:
        """The response of request ``r`` of ``n``; a failure while building it fails this request alone."""
        try:
            return response(self.respond(result))
        except InstanceFailed:
            raise
        except Exception as e:  # noqa: BLE001 - isolation boundary: this request fails, the others go on
            log.exception("%s: building the response of request %d of %d failed", self.model, r + 1, n)
            rejected["internal"] += 1
            return error_response(
                f"internal error building the response: {type(e).__name__}: {e}", invalid_argument=False
            )

    def _rejected(self, reasons: Mapping[str, int]) -> None:
        if self.on_rejections is not None and any(reasons.values()):
            self.on_rejections(reasons)


def row_batched(run: Callable[[list[Any]], Sequence[Any]]) -> Step:
    """A step of ``run(inputs) -> outputs`` whose every output holds the inputs' rows one after the other
    (its first axis: ``len(input)`` rows per input, in order): each request's result is the list of its
    rows of every output."""

    def step(inputs: list[Any]) -> list[list[Any]]:
        return split_rows(run(inputs), [len(x) for x in inputs])

    step.__name__ = getattr(run, "__name__", "run")
    return step


def split_rows(outputs: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    """Each input's rows of every output: ``counts[i]`` consecutive rows for input ``i``."""
    total = sum(counts)
    for out in outputs:
        if len(out) != total:
            raise ValueError(f"the model returned {len(out)} rows for {total} inputs")
    split, start = [], 0
    for count in counts:
        split.append([out[start : start + count] for out in outputs])
        start += count
    return split
