"""Probes of a running server over localhost: the metrics text, requests in flight, and the drain before a stop."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable


def fetch_metrics(host: str, port: int, timeout: float = 2.0) -> str:
    """Triton's Prometheus metrics text from ``host:port`` (the metrics endpoint is not a restricted API)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:  # noqa: S310 - localhost
        return r.read().decode()


#: the metrics whose sum is how many requests are queued (Triton) or inside a preprocess execute() (tritonprep)
IN_FLIGHT_METRICS = ("nv_inference_pending_request_count", "tritonprep_executing_requests")
#: counters that move whenever a request or a batch finishes anywhere
COMPLETION_METRICS = ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_exec_count")
#: cumulative execution time of each model's batches (input, compute, output)
EXECUTION_METRICS = (
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
#: the quiet time :func:`drain` asks for at least, and at most
MIN_QUIET_S, MAX_QUIET_S = 0.1, 2.0
_MODEL = re.compile(r'model="([^"]*)"')


def in_flight(metrics_text: str, model: str | None = None) -> float:
    """Requests queued or executing according to ``metrics_text`` (all models, or only ``model``)."""
    label = None if model is None else f'model="{model}"'
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(IN_FLIGHT_METRICS) and (label is None or label in line):
            total += float(line.rpartition(" ")[2])
    return total


def _per_model(metrics_text: str, names: tuple[str, ...]) -> dict[str, float]:
    sums: dict[str, float] = defaultdict(float)
    for line in metrics_text.splitlines():
        if line.startswith(names):
            m = _MODEL.search(line)
            sums[m[1] if m else ""] += float(line.rpartition(" ")[2])
    return sums


def models_in(metrics_text: str) -> set[str]:
    """The models a server's metrics text counts requests of: every model it loaded, ensembles included."""
    lines = (line for line in metrics_text.splitlines() if line.startswith("nv_inference_request_success{"))
    return {m[1] for line in lines if (m := _MODEL.search(line))}


def quiet_window(metrics_text: str) -> float:
    """How long nothing may move before a drain counts the server as idle: three times the longest mean
    batch execution of any model so far (a batch in a model without a queue or an executing gauge, such
    as the classifier between two ensemble steps, shows only when it ends), within MIN/MAX_QUIET_S."""
    executions = _per_model(metrics_text, ("nv_inference_exec_count",))
    durations = _per_model(metrics_text, EXECUTION_METRICS)
    mean = max((durations.get(m, 0.0) / n for m, n in executions.items() if n > 0), default=0.0) / 1e6
    return min(MAX_QUIET_S, max(MIN_QUIET_S, 3 * mean))


def drain(metrics: Callable[[], str], timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait until no request is queued or executing anywhere, for at most ``timeout_s``; True when quiet.

    Triton 2.51's own drain (on SIGINT) finishes what is queued or executing in each model but refuses
    the *next step* of an in-flight ensemble request ("Server is stopping"), so a ``classify`` request
    inside preprocess at shutdown would fail. Waiting first for quiescence lets those requests finish:
    quiet means every model's queue is empty (``nv_inference_pending_request_count``), the preprocess
    instances execute nothing (``tritonprep_executing_requests``) and no model's request or execution
    counters moved for :func:`quiet_window` (0.1 s on a server that has run nothing, so a stop with
    nothing in flight does not wait). False on timeout (traffic that never stops) or when the metrics
    cannot be read.
    """
    deadline = time.monotonic() + timeout_s
    last: tuple[float, ...] | None = None
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        try:
            text = metrics()
        except (urllib.error.URLError, OSError):
            return False
        busy = in_flight(text)
        counters = tuple(
            float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(COMPLETION_METRICS)
        )
        now = time.monotonic()
        if busy or counters != last:
            quiet_since, last = now, counters
        elif now - quiet_since >= quiet_window(text):
            return True
        time.sleep(poll_s)
    return False
