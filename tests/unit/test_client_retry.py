"""The client's retries without a server: which errors are sent again, the backoff and its caps, the counts,
the connections a failure replaces, and the CLI's options for them.

The error texts are the ones Triton 2.51 and tritonclient gave in the e2e runs (two servers on shared ports,
one stopped or killed; a preprocess queue of 1).
"""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from tritonclient.utils import InferenceServerException

from tritonprep.image_errors import REASONS, ImageFailure
from tritonprep_client import ClassifyClient, RetryPolicy
from tritonprep_client.connections import GrpcConnections
from tritonprep_client.errors import ClientError, InferenceFailed, ServerUnavailable, WrongProtocol
from tritonprep_client.retry import (
    INSTANCE_FAILED,
    OVERLOADED,
    SERVER_GONE,
    Retrier,
    RetriesExhausted,
    renews_connection,
    retry_cause,
)

GRPC_UNAVAILABLE = "StatusCode.UNAVAILABLE"


def triton(message: str, status: str = GRPC_UNAVAILABLE) -> InferenceServerException:
    return InferenceServerException(msg=message, status=status)


QUEUE_FULL = "in ensemble 'classify', [request id: <id_unknown>] Exceeds maximum queue size"
SOCKET_CLOSED = "Stream removed (Socket closed)"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (triton(QUEUE_FULL), OVERLOADED),
        (triton(QUEUE_FULL, "503"), OVERLOADED),
        (triton("in ensemble 'classify', Request timeout expired"), OVERLOADED),
        (triton(SOCKET_CLOSED), SERVER_GONE),
        (
            triton("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused"),
            SERVER_GONE,
        ),  # fmt: skip
        (
            triton(
                "in ensemble 'classify', [request id: <id_unknown>] Server is stopping, scheduler for model has "
                "stopped accepting new inference requests"
            ),
            SERVER_GONE,
        ),  # fmt: skip
        (
            triton("Request for unknown model: 'classify' has no available versions", "StatusCode.NOT_FOUND"),
            SERVER_GONE,
        ),  # fmt: skip
        (triton("some new wording", GRPC_UNAVAILABLE), SERVER_GONE),
        (triton("some new wording", "503"), SERVER_GONE),
        (
            triton(
                "preprocess instance is out of service (injected fault: unrecoverable device error); the server is "
                "restarting it",
                "StatusCode.INTERNAL",
            ),
            INSTANCE_FAILED,
        ),  # fmt: skip
        (
            triton(
                "Failed to process the request(s) for model instance 'preprocess_0_0', message: Stub process "
                "'preprocess_0_0' is not healthy.",
                "StatusCode.INTERNAL",
            ),
            INSTANCE_FAILED,
        ),  # fmt: skip
        (HTTPConnectionClosed("connection closed."), SERVER_GONE),
        (ConnectionResetError(104, "Connection reset by peer"), SERVER_GONE),
        (ConnectionRefusedError(111, "Connection refused"), SERVER_GONE),
        (BrokenPipeError(32, "Broken pipe"), SERVER_GONE),
        # not retried: a client deadline, a wrong protocol, an unknown model, an internal error, our own verdicts
        (triton("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"), None),
        (TimeoutError("timed out"), None),
        (socket.gaierror(-2, "Name or service not known"), None),
        (triton("DNS resolution failed for nohost:8001: C-ares status is not ARES_SUCCESS"), None),
        (HTTPParseError("Expected HTTP/, RTSP/ or ICE/", 8), None),
        (triton("Request for unknown model: 'clasify' is not found", "StatusCode.NOT_FOUND"), None),
        (triton("classify failed: internal error: ValueError: x", "StatusCode.INTERNAL"), None),
        (triton("unexpected shape for input 'IMAGE'", "StatusCode.INVALID_ARGUMENT"), None),
        (ServerUnavailable("cannot reach Triton"), None),
    ],
)
def test_what_is_retried_and_why(error, cause):
    assert retry_cause(error) == cause
    assert renews_connection(error) == (cause in (SERVER_GONE, INSTANCE_FAILED))


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("status", [GRPC_UNAVAILABLE, "503", "StatusCode.INVALID_ARGUMENT", "400"])
@pytest.mark.parametrize("words", ["cannot decode", "Socket closed", "Exceeds maximum queue size", "out of service"])
def test_a_refused_image_is_never_retried_whatever_its_words(reason, status, words):
    failure = ImageFailure(2, 8, reason, f"{words}: connection reset while reading")
    error = triton(f"in ensemble 'classify', {failure}", status)
    assert retry_cause(error) is None and not renews_connection(error)


def test_the_backoff_grows_to_its_cap_with_jitter():
    policy = RetryPolicy(retries=10, initial_backoff_s=0.25, max_backoff_s=4.0, max_time_s=1000)
    ceilings = [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    for seed in range(50):
        rng = random.Random(seed)
        for retry, ceiling in enumerate(ceilings):
            delay = policy.next_delay(retry, 0.0, rng)
            assert delay is not None and 0.5 * ceiling <= delay <= ceiling
    spread = {round(policy.backoff(3, random.Random(seed)), 6) for seed in range(20)}
    assert len(spread) > 10  # jitter: clients cut off together do not come back together


def test_the_caps_on_retries_and_time():
    rng = random.Random(0)
    policy = RetryPolicy(retries=3, max_time_s=10.0, initial_backoff_s=1.0, max_backoff_s=1.0)
    assert policy.next_delay(2, 0.0, rng) is not None and policy.next_delay(3, 0.0, rng) is None
    assert policy.next_delay(0, 8.9, rng) is not None  # at most 1 s more: 9.9 s
    assert policy.next_delay(0, 9.51, rng) is None  # a wait of at least 0.5 s would end past 10 s
    assert RetryPolicy(retries=0).next_delay(0, 0.0, rng) is None


def test_the_default_policy_rides_out_a_server_restart():
    """A single server's restart after a fault took 13-17 s: the default waits outlast it even when every
    jitter is at its lowest, and the time cap leaves room for them all at their longest."""
    policy = RetryPolicy()
    ceilings = [
        min(policy.max_backoff_s, policy.initial_backoff_s * policy.multiplier**k) for k in range(policy.retries)
    ]
    assert 0.5 * sum(ceilings) >= 17.0
    assert sum(ceilings) <= policy.max_time_s


@pytest.mark.parametrize(
    "kw", [{"retries": -1}, {"max_time_s": -1}, {"initial_backoff_s": 2, "max_backoff_s": 1}, {"multiplier": 0.5}]
)
def test_a_policy_refuses_what_cannot_work(kw):
    with pytest.raises(ClientError):
        RetryPolicy(**kw)


def test_a_policy_from_a_number():
    assert RetryPolicy.of(None) == RetryPolicy() and RetryPolicy.of(0).retries == 0
    assert RetryPolicy.of(5) == RetryPolicy(retries=5)
    custom = RetryPolicy(retries=2, max_time_s=1)
    assert RetryPolicy.of(custom) is custom


class FakeTime:
    """A clock that only the retrier's sleeps move."""

    def __init__(self) -> None:
        self.now, self.sleeps = 100.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def failing(errors: list[BaseException], result: object = "ok"):
    """A send that raises ``errors`` one per call, then returns ``result``."""
    calls = []

    def send():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return send, calls


def test_a_blocking_call_is_retried_after_growing_waits_and_counted_by_cause():
    t = FakeTime()
    retrier = Retrier(RetryPolicy(), clock=t.clock, sleep=t.sleep, rng=random.Random(1))
    send, calls = failing([triton(QUEUE_FULL), triton(SOCKET_CLOSED), triton(QUEUE_FULL)])
    assert retrier.call(send) == "ok" and len(calls) == 4
    assert [0.125 <= t.sleeps[0] <= 0.25, 0.25 <= t.sleeps[1] <= 0.5, 0.5 <= t.sleeps[2] <= 1.0] == [True] * 3
    assert retrier.counts.by_cause() == {SERVER_GONE: 1, OVERLOADED: 2} and retrier.counts.total == 3
    assert str(retrier.counts) == "1 server gone, 2 overloaded"


def test_what_is_not_retryable_fails_at_once():
    t = FakeTime()
    retrier = Retrier(RetryPolicy(), clock=t.clock, sleep=t.sleep)
    image = triton(f"in ensemble 'classify', {ImageFailure(0, 1, 'decode', 'cannot decode')}", GRPC_UNAVAILABLE)
    send, calls = failing([image])
    with pytest.raises(InferenceServerException) as caught:
        retrier.call(send)
    assert caught.value is image and len(calls) == 1 and t.sleeps == [] and retrier.counts.total == 0


def test_a_call_gives_up_at_the_retry_cap_with_the_last_error():
    t = FakeTime()
    retrier = Retrier(RetryPolicy(retries=4), clock=t.clock, sleep=t.sleep)
    errors = [triton(f"{SOCKET_CLOSED} {i}") for i in range(10)]
    send, calls = failing(errors)
    with pytest.raises(RetriesExhausted) as caught:
        retrier.call(send)
    assert len(calls) == 5 and caught.value.retries == 4 and caught.value.error is errors[4]
    assert caught.value.elapsed_s == pytest.approx(sum(t.sleeps))
    assert retrier.counts.by_cause() == {SERVER_GONE: 4}


def test_a_call_gives_up_at_the_time_cap():
    t = FakeTime()
    retrier = Retrier(RetryPolicy(retries=100, max_time_s=10.0), clock=t.clock, sleep=t.sleep)
    send, calls = failing([triton(QUEUE_FULL)] * 100)
    with pytest.raises(RetriesExhausted):
        retrier.call(send)
    assert sum(t.sleeps) <= 10.0 and 4 <= len(t.sleeps) < 100


OUT_OF_SERVICE = "preprocess instance is out of service (CUDA error cudaErrorIllegalAddress on GPU 0 ...)"
NOT_HEALTHY = (
    "Failed to process the request(s) for model instance 'preprocess_0_0', message: Stub process is not healthy."
)


def test_a_request_that_broke_two_instances_is_not_sent_a_third_time():
    """A request in a batch that took its instance down goes again once; if its next batch takes another instance
    down too, it may be the cause, so it fails then (a request reaching an instance already down is not counted)."""
    t = FakeTime()
    retrier = Retrier(RetryPolicy(), clock=t.clock, sleep=t.sleep)
    first, second = triton(OUT_OF_SERVICE), triton(OUT_OF_SERVICE + " again")
    send, calls = failing([first, triton(NOT_HEALTHY), second, triton(OUT_OF_SERVICE)])
    with pytest.raises(RetriesExhausted) as caught:
        retrier.call(send)
    assert len(calls) == 3 and caught.value.error is second and retrier.counts.by_cause() == {INSTANCE_FAILED: 2}
    send, calls = failing([triton(NOT_HEALTHY)] * 3 + [triton(OUT_OF_SERVICE)])
    assert retrier.call(send) == "ok" and len(calls) == 5  # instances already down: retried as long as allowed


def test_no_retries_raises_the_first_error_as_it_is():
    t = FakeTime()
    retrier = Retrier(RetryPolicy(retries=0), clock=t.clock, sleep=t.sleep)
    error = triton(SOCKET_CLOSED)
    send, calls = failing([error])
    with pytest.raises(InferenceServerException) as caught:
        retrier.call(send)
    assert caught.value is error and len(calls) == 1 and retrier.counts.total == 0


def async_send(errors: list[BaseException]):
    """A send(callback) that answers from another thread: ``errors`` one per call, then a result."""
    calls = []

    def send(callback):
        calls.append(1)
        n = len(calls)
        error = errors[n - 1] if n <= len(errors) else None
        threading.Thread(target=callback, args=(None if error else f"result {n}", error)).start()

    return send, calls


def wait_for(done: list, timeout: float = 10.0) -> tuple:
    deadline = time.monotonic() + timeout
    while not done and time.monotonic() < deadline:
        time.sleep(0.005)
    assert done, "no outcome"
    return done[0]


def test_an_async_request_is_retried_on_a_timer_until_it_succeeds():
    retrier = Retrier(RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02))
    send, calls = async_send([triton(QUEUE_FULL), triton("x out of service")])
    done = []
    retrier.submit(send, lambda result, error: done.append((result, error)))
    assert wait_for(done) == ("result 3", None) and len(calls) == 3
    assert retrier.counts.by_cause() == {INSTANCE_FAILED: 1, OVERLOADED: 1}


def test_an_async_request_ends_with_its_last_error_at_the_cap_or_when_closed():
    retrier = Retrier(RetryPolicy(retries=2, initial_backoff_s=0.001, max_backoff_s=0.001))
    send, calls = async_send([triton(SOCKET_CLOSED)] * 5)
    done = []
    retrier.submit(send, lambda result, error: done.append((result, error)))
    result, error = wait_for(done)
    assert result is None and isinstance(error, RetriesExhausted) and error.retries == 2 and len(calls) == 3

    slow = Retrier(RetryPolicy(initial_backoff_s=30, max_backoff_s=30, max_time_s=100))
    send, calls = async_send([triton(SOCKET_CLOSED)] * 5)
    done = []
    slow.submit(send, lambda result, error: done.append((result, error)))
    time.sleep(0.2)
    assert done == [] and len(calls) == 1  # waiting 15-30 s for its retry
    t0 = time.monotonic()
    slow.close()
    result, error = wait_for(done, 2.0)
    assert isinstance(error, RetriesExhausted) and time.monotonic() - t0 < 1.0


def test_a_gone_server_replaces_the_connection_and_an_overload_keeps_it():
    """No server needed: gRPC channels connect on first use."""
    pool = GrpcConnections("127.0.0.1:1", 1.0, connections=2)
    try:
        i, first = pool._acquire()
        pool._release(i, first, triton(QUEUE_FULL))
        assert pool._slots[i] is first and pool.renewed == 0
        i, second = pool._acquire()
        assert second is not first  # round robin: the other slot
        pool._release(i, second, None)
        i, again = pool._acquire()
        assert again is first
        pool._release(i, first, triton(SOCKET_CLOSED))
        assert pool._slots[i] is None and first.retired and pool.renewed == 1
        pool._acquire()  # the other slot again
        i, fresh = pool._acquire()
        assert fresh is not first and not fresh.retired and pool._retired == []  # the old one closed, idle
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("kw", "want"),
    [({}, 8), ({"concurrency": 3}, 3), ({"concurrency": 64}, 16), ({"concurrency": 64, "connections": 40}, 40)],
)
def test_grpc_connections_default_to_one_per_request_in_flight_capped(kw, want):
    with ClassifyClient("127.0.0.1:1", "grpc", **kw) as client:
        assert client.connections == want
    with ClassifyClient("127.0.0.1:1", "http", **kw) as client:
        assert client.connections == kw.get("concurrency", 8)  # one per worker thread


def test_failures_become_client_errors_that_say_what_happened():
    with ClassifyClient("localhost:8001", "http", retry=3) as client:
        assert client.retry.retries == 3 and client.retries.total == 0
        wrong = client._wrap(HTTPParseError("Expected HTTP/, RTSP/ or ICE/", 8))
        assert isinstance(wrong, WrongProtocol) and "grpc://localhost:8001" in str(wrong) and "8001" in str(wrong)
        gone = client._wrap(RetriesExhausted(triton(SOCKET_CLOSED), 12, 38.5))
        assert isinstance(gone, ServerUnavailable) and str(gone).endswith("(still failing after 12 retries in 38.5 s)")
        busy = client._wrap(RetriesExhausted(triton(QUEUE_FULL), 12, 39.0))
        assert type(busy) is InferenceFailed and "Exceeds maximum queue size" in str(busy)
        image = client._wrap(triton(f"in ensemble 'classify', {ImageFailure(1, 3, 'decode', 'truncated')}"))
        assert isinstance(image, InferenceFailed) and image.image is not None and image.image.index == 1
    with ClassifyClient("localhost:8001", "grpc") as client:
        assert client.retry == RetryPolicy()
    with ClassifyClient("localhost:8000", "grpc", retry=0) as client:
        assert client.retry.retries == 0
        assert "8000 is usually Triton's HTTP port" in str(client._wrap(triton(SOCKET_CLOSED)))


def _args(*argv: str):
    from tritonprep_client.cli import build_parser

    return build_parser().parse_args(list(argv))


def test_cli_retries_option_and_npy_checked_before_anything_is_sent(tmp_path):
    from tritonprep_client.cli import UsageError, check_arguments

    assert _args("classify", "x.jpg").retries == RetryPolicy().retries
    assert _args("embed", "x.jpg", "--retries", "0").retries == 0
    with pytest.raises(UsageError, match="--retries must be 0"):
        check_arguments(_args("classify", "x.jpg", "--retries", "-1"))
    with pytest.raises(UsageError, match=r"--npy /missing/dir/e.npy: folder /missing/dir does not exist"):
        check_arguments(_args("embed", "x.jpg", "--npy", "/missing/dir/e.npy"))
    with pytest.raises(UsageError, match="is a folder"):
        check_arguments(_args("embed", "x.jpg", "--npy", str(tmp_path)))
    check_arguments(_args("embed", "x.jpg", "--npy", str(tmp_path / "e.npy")))
