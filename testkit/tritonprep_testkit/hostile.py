"""The hostile-input corpus through a real server: the reference answers, concurrent requests, the metrics."""

from __future__ import annotations

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tritonprep.executors import BatchResult
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.launcher.process import EmbeddedServer
from tritonprep.spec import OutputSpec
from tritonprep.triton.metrics import FLUSH_DELAY_S
from tritonprep_client import image_input

from .corpus import Item
from .loadgen import GrpcSender

log = logging.getLogger(__name__)


def metric_key(name: str, **labels: str) -> str:
    """A sample's key as :func:`metrics` returns it: ``name{a="1",b="2"}``, labels sorted by name."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of the ``name`` samples (keys of :func:`metric_key`) that carry ``labels``, whatever their other
    labels: over every GPU of a host (its metrics label each server's ``gpu`` and ``device``)."""
    want = {f'{k}="{v}"' for k, v in labels.items()}
    return sum(
        value
        for key, value in samples.items()
        if key.startswith(name + "{") and want <= set(key[len(name) + 1 : -1].split(","))
    )


def parse_metrics(text: str) -> dict[str, float]:
    """The tritonprep_* samples of a metrics text, keyed by :func:`metric_key` (whatever the label order)."""
    samples = {}
    for name, body, value in re.findall(r"^(tritonprep_\w+)\{([^}]*)\} ([0-9.e+-]+)$", text, re.M):
        samples[metric_key(name, **dict(re.findall(r'(\w+)="([^"]*)"', body)))] = float(value)
    return samples


def metrics(server: EmbeddedServer, settle_s: float = 10.0) -> dict[str, float]:
    """tritonprep_* samples of the metrics endpoint (:func:`parse_metrics`), once the counters have
    stopped moving (the instance sends them in the background, FLUSH_DELAY_S after a change)."""

    def read() -> dict[str, float]:
        return parse_metrics(server.metrics_text())

    deadline = time.monotonic() + settle_s
    last = read()
    while time.monotonic() < deadline:
        time.sleep(max(0.1, 5 * FLUSH_DELAY_S))
        now = read()
        if {k: v for k, v in now.items() if "_total" in k or "_count" in k} == {
            k: v for k, v in last.items() if "_total" in k or "_count" in k
        }:
            return now
        last = now
    return last


def library_results(items: list[Item]) -> list[BatchResult]:
    """What the CPU executor gives for each item's image alone (the reference)."""
    ex = CpuExecutor(OutputSpec())
    try:
        return [ex.run([it.data]) for it in items]
    finally:
        ex.close()


def preprocess_concurrently(server: EmbeddedServer, images: list[bytes], threads: int = 8) -> list[Any]:
    """One ``preprocess`` request per image, ``threads`` at a time (so that they share dynamic
    batches); each answer is the PIXELS array or the InferenceServerException.

    A request the server refused for overload (its queue full, or its front-queue timeout spent behind a batch
    that a decompression bomb held up) was never looked at: it is sent again alone, as a client retries such
    a refusal (``tritonprep_client.retry``), so that every image gets the server's own verdict."""
    from tritonclient.utils import InferenceServerException

    from tritonprep_client.retry import OVERLOADED, retry_cause

    sender = GrpcSender(server.options.grpc_url)

    def call(data: bytes):
        inp = image_input([data], sender.m)
        try:
            return sender.client.infer("preprocess", [inp], client_timeout=60).as_numpy("PIXELS")
        except InferenceServerException as e:
            return e

    try:
        with ThreadPoolExecutor(threads) as pool:
            answers = list(pool.map(call, images))
        for i, answer in enumerate(answers):
            for _ in range(5):  # alone now: only another client's burst could refuse it again
                if not (isinstance(answer, InferenceServerException) and retry_cause(answer) == OVERLOADED):
                    break
                log.info("image %d was refused for overload (%s): sent again alone", i, answer.message())
                answer = answers[i] = call(images[i])
        return answers
    finally:
        sender.close()
