"""Custom Prometheus metrics of the preprocess model, served by Triton on its metrics port.

Created through the Python backend's ``pb_utils.MetricFamily`` once per model instance
(each instance is its own stub process) and labelled with the model name::

    tritonprep_images_total{model, path}            images decoded, by decoder path
                                                    (cpu, gpu_hw, gpu_cuda, cpu_fallback)
    tritonprep_rejected_total{model, reason}        images and requests refused, by reason
                                                    (decode, format, limit, invalid, internal)
    tritonprep_decode_seconds_total{model}          seconds spent decoding (CPU executor:
                                                    summed over its worker threads)
    tritonprep_preprocess_seconds{model}            histogram: wall time of each batch
                                                    (decode + resize + normalize)
    tritonprep_executing_requests{model, instance}  requests inside execute() now (the
                                                    launcher's drain waits for 0)
    tritonprep_cupy_pool_bytes{model, instance, kind}
                                                    CuPy's default device memory pool
                                                    (kind: used, total), when CuPy is loaded

Recording a metric never fails a request: without ``MetricFamily`` (older Triton) or
outside a stub, :class:`PreprocessMetrics` does nothing.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: seconds between samples of the CuPy pool gauges
POOL_SAMPLE_S = 1.0
PATHS = ("cpu", "gpu_hw", "gpu_cuda", "cpu_fallback")
REASONS = ("decode", "format", "limit", "invalid", "internal")
BATCH_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


class PreprocessMetrics:
    """The counters and histogram of one preprocess model instance."""

    def __init__(self, model: str, instance: str = "") -> None:
        self.model = model
        self.enabled = False
        self._pool_sampled = float("-inf")
        try:
            import triton_python_backend_utils as pb_utils

            family = pb_utils.MetricFamily
        except (ImportError, AttributeError) as e:
            log.info("custom metrics disabled: %s", e)
            return
        labels = {"model": model}
        images = family(name="tritonprep_images_total", description="Images decoded, by decoder path",
                        kind=family.COUNTER)
        rejected = family(name="tritonprep_rejected_total", description="Images and requests refused, by reason",
                          kind=family.COUNTER)
        decode = family(name="tritonprep_decode_seconds_total", description="Seconds spent decoding images",
                        kind=family.COUNTER)
        batch = family(name="tritonprep_preprocess_seconds",
                       description="Wall time of each preprocessed batch (decode, resize, normalize)",
                       kind=family.HISTOGRAM)
        executing = family(name="tritonprep_executing_requests", description="Requests inside execute() now",
                           kind=family.GAUGE)
        pools = family(name="tritonprep_cupy_pool_bytes", description="CuPy memory pools of this instance",
                       kind=family.GAUGE)
        self._families = (images, rejected, decode, batch, executing, pools)  # metrics live as long as their families
        self._images = {p: images.Metric(labels={**labels, "path": p}) for p in PATHS}
        self._rejected = {r: rejected.Metric(labels={**labels, "reason": r}) for r in REASONS}
        self._images_family, self._rejected_family = images, rejected
        self._decode = decode.Metric(labels=labels)
        self._batch = batch.Metric(labels=labels, buckets=BATCH_BUCKETS)
        self._executing = executing.Metric(labels={**labels, "instance": instance})
        self._pools = {kind: pools.Metric(labels={**labels, "instance": instance, "kind": kind})
                       for kind in ("used", "total")}
        self.enabled = True

    def executing(self, n: int) -> None:
        """Set how many requests this instance is executing now."""
        if self.enabled:
            self._executing.set(float(n))

    def _metric(self, cache: dict[str, Any], family: Any, key: str, label: str) -> Any:
        if key not in cache:  # a path or reason this version does not know yet
            cache[key] = family.Metric(labels={"model": self.model, label: key})
        return cache[key]

    def record_batch(self, decoded_by: Mapping[str, int], timings: Mapping[str, float]) -> None:
        """Count decoded images by path and record the batch's timings."""
        if not self.enabled:
            return
        for path, n in decoded_by.items():
            if n:
                self._metric(self._images, self._images_family, path, "path").increment(float(n))
        if "decode_s" in timings:
            self._decode.increment(float(timings["decode_s"]))
        if "total_s" in timings:
            self._batch.observe(float(timings["total_s"]))
        cupy = sys.modules.get("cupy")  # only if the executor loaded it: never import CuPy here
        now = time.monotonic()
        # every metric call is a round trip to the Triton process (~20-50 us): sample the pool
        # gauges at most once per POOL_SAMPLE_S instead of on every batch
        if cupy is not None and now - self._pool_sampled >= POOL_SAMPLE_S:
            self._pool_sampled = now
            pool = cupy.get_default_memory_pool()
            self._pools["used"].set(float(pool.used_bytes()))
            self._pools["total"].set(float(pool.total_bytes()))

    def record_rejections(self, reasons: Mapping[str, int]) -> None:
        """Count refused images or requests by reason."""
        if not self.enabled:
            return
        for reason, n in reasons.items():
            if n:
                self._metric(self._rejected, self._rejected_family, reason, "reason").increment(float(n))
