"""Retries: which failed requests are worth sending again, how long to wait, when to stop, and the counts.

A request is sent again when it failed for a reason that says nothing about the request itself:

* ``server gone``: the connection broke or could not be made (gRPC ``UNAVAILABLE``, a socket closed or
  reset, a refused connection, an HTTP connection closed mid-answer), or the server is stopping ("Server is
  stopping", a model that "has no available versions" while it unloads). On ports that several
  tritonservers share, the kernel spreads *connections* over them, so such a request goes again on a fresh
  connection, which reaches a live server.
* ``instance failed``: the model instance that served it took itself out of service, or its stub died;
  the server is restarting, so this one goes again on a fresh connection too. A request whose batch took an
  instance out of service twice is not sent a third time: it may be what breaks them.
* ``overloaded``: Triton refused it ("Exceeds maximum queue size", a queue timeout); it goes again on the
  same connection, after the backoff.

Never sent again: an image the server refused (the per-image error contract,
:mod:`tritonprep.image_errors`, whatever its wording), a client deadline (the server may still be working
on it), an unknown model or host name, a protocol mismatch, and anything else. :class:`RetryPolicy`
bounds the retries of one request in number and time, with an exponential backoff and jitter;
:class:`Retrier` runs them for a blocking call or an asynchronous one and counts them by cause in
:class:`RetryCounts`.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tritonprep.image_errors import parse

from .errors import ClientError

log = logging.getLogger("tritonprep_client")

T = TypeVar("T")

#: the causes of a retry, as the counts and the CLI name them
SERVER_GONE = "server gone"
INSTANCE_FAILED = "instance failed"
OVERLOADED = "overloaded"
CAUSES = (SERVER_GONE, INSTANCE_FAILED, OVERLOADED)

_OVERLOADED = ("exceeds maximum queue size", "request timeout expired")
_INSTANCE_FAILED = ("out of service",)
_SERVER_GONE = (
    "socket closed",
    "stream removed",
    "connection reset",
    "connection refused",
    "connection closed",
    "broken pipe",
    "failed to connect",
    "connect failed",
    "server is stopping",
    "has no available versions",
    "end of tcp stream",
)


def error_text(error: BaseException) -> str:
    """An error's message on one line (tritonclient's ``message()`` where it has one)."""
    msg = getattr(error, "message", None)
    text = msg() if callable(msg) else str(error)
    return " ".join(str(text or type(error).__name__).split())


def _status(error: BaseException) -> str:
    status = getattr(error, "status", None)
    return str(status() if callable(status) else "")


def retry_cause(error: BaseException) -> str | None:
    """Why ``error`` is worth sending the request again (one of :data:`CAUSES`), or None when it is not."""
    if isinstance(error, (ClientError, TimeoutError, socket.timeout, socket.gaierror)):
        return None  # our own verdicts; a client-side timeout (the server may still be on it); an unknown host
    text = error_text(error)
    if parse(text) is not None:
        return None  # the server refused an image: the same request would fail the same way
    if isinstance(error, http.client.HTTPException):  # geventhttpclient's parse errors
        return SERVER_GONE if type(error).__name__ == "HTTPConnectionClosed" else None
    low = text.lower()
    if "deadline" in low or "dns resolution failed" in low or "name resolution" in low:
        return None
    if any(s in low for s in _OVERLOADED):
        return OVERLOADED
    if any(s in low for s in _INSTANCE_FAILED) or ("stub process" in low and "not healthy" in low):
        return INSTANCE_FAILED
    if any(s in low for s in _SERVER_GONE) or isinstance(error, (ConnectionError, EOFError)):
        return SERVER_GONE
    status = _status(error)
    if status.endswith("UNAVAILABLE") or status == "503":
        return SERVER_GONE
    if isinstance(error, OSError) and status == "":
        return SERVER_GONE  # a socket error under the HTTP client: no connection
    return None


def took_instance_down(error: BaseException) -> bool:
    """Whether ``error`` says that the request was in the batch that took its instance out of service (as opposed
    to reaching an instance that was already down)."""
    return any(s in error_text(error).lower() for s in _INSTANCE_FAILED)


def renews_connection(error: BaseException) -> bool:
    """Whether the connection that carried a request which failed with ``error`` should be replaced by a
    fresh one (the server behind it is gone or going)."""
    return retry_cause(error) in (SERVER_GONE, INSTANCE_FAILED)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long one request is sent again.

    Retry ``k`` (0-based) waits ``min(max_backoff_s, initial_backoff_s * multiplier**k)`` times a random
    factor in [0.5, 1] (jitter, so that clients cut off together do not come back together); no retry
    starts more than ``max_time_s`` after the first send, and at most ``retries`` are made. The defaults
    (12 retries, waits of 0.25 s doubling to 4 s, 40 s) keep a request going for 18-36 s of waits, beyond
    a server's restart after a fault (13-17 s measured on an H100), and on shared ports a retry usually
    reaches a live server at once.
    """

    retries: int = 12
    max_time_s: float = 40.0
    initial_backoff_s: float = 0.25
    max_backoff_s: float = 4.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ClientError(f"retries must be 0 (no retries) or more, got {self.retries}")
        if self.max_time_s < 0 or self.initial_backoff_s < 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ClientError(
                "retry times must be 0 or more with max_backoff_s >= initial_backoff_s, got "
                f"max_time_s={self.max_time_s}, initial_backoff_s={self.initial_backoff_s}, "
                f"max_backoff_s={self.max_backoff_s}"
            )
        if self.multiplier < 1:
            raise ClientError(f"multiplier must be 1 or more, got {self.multiplier}")

    @classmethod
    def of(cls, retry: RetryPolicy | int | None) -> RetryPolicy:
        """A policy from a policy, a number of retries (0: none; the default timing) or None (the defaults)."""
        if isinstance(retry, RetryPolicy):
            return retry
        return cls() if retry is None else cls(retries=int(retry))

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry ``retry`` (0-based), jitter included."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** min(retry, 64))
        return ceiling * rng.uniform(0.5, 1.0)

    def next_delay(self, retry: int, elapsed_s: float, rng: random.Random) -> float | None:
        """The wait before retry ``retry`` of a request first sent ``elapsed_s`` ago, or None: give up."""
        if retry >= self.retries:
            return None
        delay = self.backoff(retry, rng)
        return delay if elapsed_s + delay <= self.max_time_s else None


class RetryCounts:
    """How many requests were sent again, by cause (thread-safe); each re-send counts once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, cause: str) -> None:
        """Count one re-send for ``cause``."""
        with self._lock:
            self._counts[cause] += 1

    @property
    def total(self) -> int:
        """Re-sends of every cause."""
        with self._lock:
            return sum(self._counts.values())

    def by_cause(self) -> dict[str, int]:
        """``{cause: re-sends}``, causes in the order of :data:`CAUSES`, only those that happened."""
        with self._lock:
            return {c: self._counts[c] for c in CAUSES if self._counts[c]}

    def __str__(self) -> str:
        """``9 server gone, 3 overloaded`` (empty when nothing was retried)."""
        return ", ".join(f"{n} {cause}" for cause, n in self.by_cause().items())


class RetriesExhausted(Exception):
    """The last error of a request that was sent again ``retries`` times in ``elapsed_s`` and still failed."""

    def __init__(self, error: BaseException, retries: int, elapsed_s: float) -> None:
        super().__init__(error_text(error))
        self.error, self.retries, self.elapsed_s = error, retries, elapsed_s


Done = Callable[[Any, "BaseException | None"], None]


class Retrier:
    """Sends requests again as :class:`RetryPolicy` allows, and counts the retries by cause.

    ``clock``, ``sleep`` and ``rng`` are there for tests. A failure that outlives its retries is delivered
    as :class:`RetriesExhausted` (holding the last error) when it was retried at least once, as it is
    otherwise.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self.counts = RetryCounts()
        self._clock, self._sleep = clock, sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._timers: dict[threading.Timer, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _delay(self, error: BaseException, retry: int, start: float, broke: int = 0) -> tuple[str, float] | None:
        """The cause and wait of the next retry, or None. ``broke``: how often this request was already in a batch
        that took its instance out of service; once is a retry, twice is the request's own doing (a request that
        crashes every instance it reaches would otherwise take each GPU down in turn)."""
        cause = retry_cause(error)
        if cause is None or (broke and took_instance_down(error)):
            return None
        with self._rng_lock:
            delay = self.policy.next_delay(retry, self._clock() - start, self._rng)
        if delay is None:
            return None
        self.counts.add(cause)
        log.info("retry %d of a request in %.2f s (%s): %s", retry + 1, delay, cause, error_text(error))
        return cause, delay

    def _final(self, error: BaseException, retries: int, start: float) -> BaseException:
        return RetriesExhausted(error, retries, self._clock() - start) if retries else error

    def call(self, send: Callable[[], T]) -> T:
        """``send()``, again after each retryable failure while the policy allows; raises the last failure."""
        start, retry, broke = self._clock(), 0, 0
        while True:
            try:
                return send()
            except Exception as e:  # noqa: BLE001 - classified here; what is not retried is raised as it is
                wait = self._delay(e, retry, start, broke)
                if wait is None:
                    if retry:
                        raise self._final(e, retry, start) from e
                    raise
                broke += took_instance_down(e)
            self._sleep(wait[1])
            retry += 1

    def submit(self, send: Callable[[Done], None], done: Done) -> None:
        """``send(callback)`` starts a request that ends in ``callback(result, error)``; each retryable failure
        starts it again after the backoff (on a timer thread), and ``done`` gets the final outcome."""
        start = self._clock()
        retry, broke = [0], [0]

        def finished(result: Any, error: BaseException | None) -> None:
            if error is not None:
                wait = None if self._closed else self._delay(error, retry[0], start, broke[0])
                if wait is not None:
                    retry[0] += 1
                    broke[0] += took_instance_down(error)
                    last = error
                    self._later(wait[1], attempt, lambda: done(None, self._final(last, retry[0], start)))
                    return
                error = self._final(error, retry[0], start)
            done(result, error)

        def attempt() -> None:
            try:
                send(finished)
            except Exception as e:  # noqa: BLE001 - a failure to send is that request's outcome
                finished(None, e)

        attempt()

    def _later(self, delay: float, fn: Callable[[], None], give_up: Callable[[], None]) -> None:
        """``fn()`` after ``delay`` seconds on a timer thread; ``give_up()`` instead if :meth:`close` comes first."""

        def fire() -> None:
            with self._lock:
                if self._timers.pop(timer, None) is None:
                    return  # close() took it
            fn()

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self._lock:
            closed = self._closed
            if not closed:
                self._timers[timer] = give_up
        if closed:
            give_up()
        else:
            timer.start()

    def close(self) -> None:
        """Stop retrying: the requests that wait for a retry end with their last error; no new retry starts."""
        with self._lock:
            self._closed = True
            timers, self._timers = self._timers, {}
        for timer, give_up in timers.items():
            timer.cancel()
            give_up()
