"""Custom Prometheus metrics of the preprocess model, served by Triton on its metrics port.

Created through the Python backend's ``pb_utils.MetricFamily`` once per model instance
(each instance is its own stub process) and labelled with the model name and the device the
instance runs on (``gpu0``, ``gpu1``, ... or ``cpu``: instances on one device add up, one line
per GPU)::

    tritonprep_images_total{model, device, path}    images decoded, by decoder path
                                                    (cpu, gpu_hw, gpu_cuda, cpu_fallback)
    tritonprep_rejected_total{model, device, reason}
                                                    images and requests refused, by reason
                                                    (decode, format, limit, invalid, internal)
    tritonprep_decode_seconds_total{model, device}  seconds spent decoding (CPU executor:
                                                    summed over its worker threads)
    tritonprep_preprocess_seconds{model, device}    histogram: wall time of each batch
                                                    (decode + resize + normalize)
    tritonprep_executing_requests{model, device, instance}
                                                    requests inside execute() now (the
                                                    launcher's drain waits for 0)
    tritonprep_cupy_pool_bytes{model, device, instance, kind}
                                                    CuPy's default device memory pool
                                                    (kind: used, total), when CuPy is loaded

Every metric call of the Python backend is a round trip to the Triton process (~20-50 us,
holding the GIL), four or five per batch. So recording only accumulates the values in this
process, and a background thread sends them to Triton, coalesced, ``FLUSH_DELAY_S`` after
the first change: the round trips leave the request path, and under load one send covers
many batches. The metrics endpoint lags by at most that delay plus the sends.

Recording a metric never fails a request: without ``MetricFamily`` (older Triton) or
outside a stub, :class:`PreprocessMetrics` does nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..executors.base import DECODE_PATHS
from ..image_errors import REASONS

log = logging.getLogger(__name__)

#: seconds between samples of the CuPy pool gauges
POOL_SAMPLE_S = 1.0
#: seconds from the first recorded change to the send that carries it (and what comes meanwhile)
FLUSH_DELAY_S = 0.02
BATCH_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


class PreprocessMetrics:
    """The counters, gauges and histogram of one preprocess model instance.

    ``executing``, ``record_batch`` and ``record_rejections`` are called on the request path and
    only update values in this process; the sender thread started here sends them (see the module
    docstring). :meth:`close` sends what is left and stops it.
    """

    def __init__(self, model: str, instance: str = "", device: str = "cpu") -> None:
        self.model = model
        self.enabled = False
        self._pool_sampled = float("-inf")
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._counts: Counter[tuple[str, str]] = Counter()  # (family, label value) -> increment to send
        self._observations: list[float] = []
        self._gauges: dict[str, float] = {}
        self._send_failures = 0
        try:
            import triton_python_backend_utils as pb_utils

            family = pb_utils.MetricFamily
        except (ImportError, AttributeError) as e:
            log.info("custom metrics disabled: %s", e)
            return
        labels = {"model": model, "device": device}
        self._labels = labels
        images = family(
            name="tritonprep_images_total", description="Images decoded, by decoder path", kind=family.COUNTER
        )
        rejected = family(
            name="tritonprep_rejected_total", description="Images and requests refused, by reason", kind=family.COUNTER
        )
        decode = family(
            name="tritonprep_decode_seconds_total", description="Seconds spent decoding images", kind=family.COUNTER
        )
        batch = family(
            name="tritonprep_preprocess_seconds",
            description="Wall time of each preprocessed batch (decode, resize, normalize)",
            kind=family.HISTOGRAM,
        )
        executing = family(
            name="tritonprep_executing_requests", description="Requests inside execute() now", kind=family.GAUGE
        )
        pools = family(
            name="tritonprep_cupy_pool_bytes", description="CuPy memory pools of this instance", kind=family.GAUGE
        )
        self._families = {"images": (images, "path"), "rejected": (rejected, "reason")}
        self._all_families = (images, rejected, decode, batch, executing, pools)  # metrics live as long as these
        self._counters: dict[tuple[str, str], Any] = {
            **{("images", p): images.Metric(labels={**labels, "path": p}) for p in DECODE_PATHS},
            **{("rejected", r): rejected.Metric(labels={**labels, "reason": r}) for r in REASONS},
            ("decode", ""): decode.Metric(labels=labels),
        }
        self._batch = batch.Metric(labels=labels, buckets=BATCH_BUCKETS)
        self._gauge_metrics = {
            "executing": executing.Metric(labels={**labels, "instance": instance}),
            **{
                f"pool_{kind}": pools.Metric(labels={**labels, "instance": instance, "kind": kind})
                for kind in ("used", "total")
            },
        }
        self.enabled = True
        self._sender = threading.Thread(target=self._send_loop, name=f"metrics-{instance or model}", daemon=True)
        self._sender.start()

    def executing(self, n: int) -> None:
        """Set how many requests this instance is executing now."""
        if self.enabled:
            with self._lock:
                self._gauges["executing"] = float(n)
            self._wake.set()

    def record_batch(self, decoded_by: Mapping[str, int], timings: Mapping[str, float]) -> None:
        """Count decoded images by path and record the batch's timings."""
        if not self.enabled:
            return
        cupy = sys.modules.get("cupy")  # only if the executor loaded it: never import CuPy here
        now = time.monotonic()
        pool = None
        if cupy is not None and now - self._pool_sampled >= POOL_SAMPLE_S:  # read here: the pool is per device
            self._pool_sampled = now
            mempool = cupy.get_default_memory_pool()
            pool = (float(mempool.used_bytes()), float(mempool.total_bytes()))
        with self._lock:
            for path, n in decoded_by.items():
                if n:
                    self._counts["images", path] += float(n)
            if "decode_s" in timings:
                self._counts["decode", ""] += float(timings["decode_s"])
            if "total_s" in timings:
                self._observations.append(float(timings["total_s"]))
            if pool is not None:
                self._gauges["pool_used"], self._gauges["pool_total"] = pool
        self._wake.set()

    def record_rejections(self, reasons: Mapping[str, int]) -> None:
        """Count refused images or requests by reason."""
        if not self.enabled or not any(reasons.values()):
            return
        with self._lock:
            for reason, n in reasons.items():
                if n:
                    self._counts["rejected", reason] += float(n)
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is recorded, stop the sender thread, then delete the metrics and their families.

        Deleted here, in ``finalize``, while the stub can still tell the server: a ``MetricFamily`` left to
        the garbage collector is deleted while the stub is being torn down, and its destructor's message to
        the server has nowhere to go.
        """
        if not self.enabled:
            return
        if self._sender.is_alive():
            self._closing = True
            self._wake.set()
            self._sender.join(timeout_s)
        if self._sender.is_alive():
            return  # still sending (a stuck server): its metrics stay, rather than be deleted under it
        self.enabled = False
        self._counters.clear()  # the metrics first, then their families
        self._gauge_metrics.clear()
        self._batch = None
        self._families.clear()
        self._all_families = ()

    def _send_loop(self) -> None:
        while True:
            self._wake.wait()
            if not self._closing:
                time.sleep(FLUSH_DELAY_S)  # let what comes meanwhile ride along
            self._wake.clear()
            self._send()
            if self._closing:
                return

    def _send(self) -> None:
        """Send the accumulated values: one round trip per changed metric (one per histogram sample)."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
            observations, self._observations = self._observations, []
            gauges, self._gauges = self._gauges, {}
        try:
            for key, value in counts.items():
                self._counter(key).increment(value)
            for value in observations:
                self._batch.observe(value)
            for key, value in gauges.items():
                self._gauge_metrics[key].set(value)
        except Exception as e:  # noqa: BLE001 - metrics never take the instance down; say so once
            self._send_failures += 1
            if self._send_failures == 1:
                log.warning(
                    "sending custom metrics to Triton failed (%s: %s); later failures are not logged",
                    type(e).__name__,
                    e,
                )

    def _counter(self, key: tuple[str, str]) -> Any:
        if key not in self._counters:  # a path or reason this version does not know yet
            family, label = self._families[key[0]]
            self._counters[key] = family.Metric(labels={**self._labels, label: key[1]})
        return self._counters[key]
