"""Where the time of an ``execute()`` goes: per-phase wall-clock totals, logged periodically.

Enabled with ``TRITONPREP_PROFILE=1`` in the server's environment (the benchmark harness
does this); otherwise :meth:`PhaseTimer.record` returns at once. ``TRITONPREP_PROFILE_INTERVAL_S`` sets how
often a line is logged (default 10 s; the harness's ``latency`` phase asks for shorter). Each summary line gives,
for the last interval, executes, requests and images per second, the mean batch, and the
mean milliseconds per execute of each phase.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict

log = logging.getLogger(__name__)


#: seconds between two summary lines of an instance, where the environment does not say
DEFAULT_INTERVAL_S = 10.0
INTERVAL_ENV = "TRITONPREP_PROFILE_INTERVAL_S"


def profile_interval_s() -> float:
    """``TRITONPREP_PROFILE_INTERVAL_S`` if it is a positive number, else :data:`DEFAULT_INTERVAL_S`."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


class PhaseTimer:
    """Accumulates phase durations of one model instance and logs a summary every ``interval_s``."""

    def __init__(self, name: str, interval_s: float | None = None) -> None:
        self.name = name
        self.enabled = os.environ.get("TRITONPREP_PROFILE") == "1"
        self.interval_s = interval_s if interval_s is not None else profile_interval_s()
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self._start = now
        self._executes = self._requests = self._images = 0
        self._phases: dict[str, float] = defaultdict(float)

    def add(self, images: int = 0, **phases: float) -> None:
        """Add a part's own numbers to the execute in progress (its images, its inner phases)."""
        if not self.enabled:
            return
        self._images += images
        for k, v in phases.items():
            self._phases[k] += v

    def record(self, requests: int, images: int = 0, **phases: float) -> None:
        """Add one execute's numbers (phase durations in seconds) and log the summary when it is due."""
        if not self.enabled:
            return
        self._executes += 1
        self._requests += requests
        self.add(images, **phases)
        now = time.perf_counter()
        if now - self._start >= self.interval_s:
            dt, n = now - self._start, self._executes
            parts = " ".join(f"{k}={v / n * 1e3:.2f}ms" for k, v in sorted(self._phases.items()))
            log.info(
                "profile %s: %.0f exec/s %.0f req/s %.0f img/s, batch %.1f img, per execute: %s",
                self.name,
                n / dt,
                self._requests / dt,
                self._images / dt,
                self._images / n,
                parts,
            )
            self._reset(now)
