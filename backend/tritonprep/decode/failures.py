"""Per-image decode failures in the log: counted, at most one line a minute per kind, never one per image.

A flood of bad images (or of images the GPU decoders hand to Pillow) must not flood the server's
log. :class:`FailureLog` counts them by kind (``gpu_fallback``: the GPU decoders could not take an
image and Pillow did; ``gpu_error``: nvImageCodec raised on an image; and each refusal reason of
:class:`~tritonprep.errors.ImageError`: ``decode``, ``format``, ``limit``) and logs a kind at most
once per interval with how many it saw since, and one example message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: seconds between two lines of one kind
INTERVAL_S = 60.0


class FailureLog:
    """Counts failures by kind; logs each kind at most once per ``interval_s`` (see the module's description)."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.what, self.interval_s, self.clock = logger, what, interval_s, clock
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._examples: dict[str, str] = {}
        self._last: dict[str, float] = {}
        self._since: dict[str, float] = {}

    def count(self, kind: str, n: int = 1, example: str = "", level: int = logging.INFO) -> None:
        """Count ``n`` failures of ``kind``; log them (and the ones counted since the last line) if the kind's
        last line is older than the interval."""
        if n <= 0:
            return
        now = self.clock()
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + n
            self._since.setdefault(kind, now)
            if example:
                self._examples.setdefault(kind, example)
            if now - self._last.get(kind, -self.interval_s) < self.interval_s:
                return
            line = self._take(kind, now)
        self.logger.log(level, "%s", line)

    def flush(self) -> None:
        """Log what was counted and not logged yet (at close)."""
        now = self.clock()
        with self._lock:
            lines = [self._take(kind, now) for kind in sorted(self._counts)]
        for line in lines:
            self.logger.info("%s", line)

    def _take(self, kind: str, now: float) -> str:
        n = self._counts.pop(kind)
        since = now - self._since.pop(kind, now)
        example = self._examples.pop(kind, "")
        self._last[kind] = now
        span = f" in the last {since:.0f} s" if since >= 1 else ""
        return f"{self.what}: {n} image(s) {kind}{span}" + (f" (e.g. {example})" if example else "")
