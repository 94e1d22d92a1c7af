"""Connections: the two protocol adapters of :class:`~tritonprep_client.client.ClassifyClient`, each holding
several TCP connections to the server and replacing one whose server went away.

Several tritonservers may share one host's ports (one per GPU, ``SO_REUSEPORT``); the kernel then spreads
*connections*, not requests, over them. So the gRPC adapter opens ``connections`` channels, each with its
own TCP connection (``grpc.use_local_subchannel_pool``: by default gRPC Python shares one connection among
every channel to an address), and sends requests round robin over them. The HTTP adapter runs each request
on a worker thread with its own client, hence its own connection: up to ``concurrency`` of them (HTTP/1.1
carries one request at a time per connection). When a request fails because its server is gone or going
(:func:`~tritonprep_client.retry.renews_connection`), the connection that carried it is replaced, and the
next request on that slot connects afresh, which the kernel gives to a server that still listens.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import ClientError
from .retry import renews_connection

Done = Callable[[Any, "BaseException | None"], None]

#: the default number of gRPC connections: one per request in flight, at most this many
MAX_DEFAULT_CONNECTIONS = 16
#: tritonclient's unlimited message sizes (channel_args replaces its defaults) and a prompt reconnection
#: (gRPC's backoff otherwise grows to 2 minutes); a local subchannel pool: one TCP connection per channel
GRPC_CHANNEL_ARGS = (
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


def default_connections(concurrency: int) -> int:
    """gRPC connections for ``concurrency`` requests in flight: one each, at most :data:`MAX_DEFAULT_CONNECTIONS`."""
    return max(1, min(concurrency, MAX_DEFAULT_CONNECTIONS))


def _outputs_metadata(md: dict[str, Any]) -> dict[str, Any]:
    return {"outputs": [{"name": o["name"], "shape": [int(s) for s in o["shape"]]} for o in md.get("outputs", [])]}


@dataclass(eq=False)
class _Channel:
    """One gRPC client (one channel, one TCP connection), the requests it carries, whether it was replaced."""

    client: Any
    in_flight: int = 0
    retired: bool = False


class GrpcConnections:
    """gRPC adapter (tritonclient.grpc): ``connections`` channels, used round robin; callbacks for async calls."""

    def __init__(self, target: str, timeout_s: float, connections: int, ssl: bool = False) -> None:
        import tritonclient.grpc as grpcclient

        if connections < 1:
            raise ClientError(f"connections must be at least 1, got {connections}")
        self.m = grpcclient
        self.target, self.timeout_s, self._ssl = target, timeout_s, ssl
        self._lock = threading.Lock()
        self._slots: list[_Channel | None] = [self._connect() for _ in range(connections)]
        self._retired: list[_Channel] = []
        self._turn = itertools.count()
        #: connections replaced because their server went away
        self.renewed = 0

    def _connect(self) -> _Channel:
        client = self.m.InferenceServerClient(self.target, ssl=self._ssl, channel_args=list(GRPC_CHANNEL_ARGS))
        return _Channel(client)

    @property
    def connections(self) -> int:
        """How many channels requests are spread over."""
        return len(self._slots)

    def _acquire(self) -> tuple[int, _Channel]:
        """The next slot's channel (a fresh one where the last was replaced), counted as carrying a request."""
        with self._lock:
            idle = [c for c in self._retired if c.in_flight == 0]
            self._retired = [c for c in self._retired if c.in_flight > 0]
            i = next(self._turn) % len(self._slots)
            channel = self._slots[i]
            if channel is None:
                channel = self._slots[i] = self._connect()
            channel.in_flight += 1
        for old in idle:  # replaced channels that no request uses any more
            old.client.close()
        return i, channel

    def _release(self, i: int, channel: _Channel, error: BaseException | None) -> None:
        """The request on ``channel`` ended; a server gone or going retires the channel (the next request on slot
        ``i`` opens a new one; the old one closes once idle)."""
        with self._lock:
            channel.in_flight -= 1
            if error is None or channel.retired or not renews_connection(error):
                return
            channel.retired = True
            self._retired.append(channel)
            if self._slots[i] is channel:
                self._slots[i] = None
            self.renewed += 1

    def outputs(self, names: Sequence[str]) -> list[Any]:
        return [self.m.InferRequestedOutput(n) for n in names]

    def infer(self, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
        i, channel = self._acquire()
        try:
            result = channel.client.infer(model, inputs, outputs=outputs, client_timeout=self.timeout_s)
        except BaseException as e:
            self._release(i, channel, e)
            raise
        self._release(i, channel, None)
        return result

    def submit(self, model: str, inputs: list[Any], outputs: list[Any], done: Done) -> None:
        i, channel = self._acquire()

        def callback(result: Any, error: BaseException | None) -> None:
            self._release(i, channel, error)
            done(result, error)

        try:
            channel.client.async_infer(model, inputs, callback=callback, outputs=outputs, client_timeout=self.timeout_s)
        except BaseException as e:
            self._release(i, channel, e)
            raise

    def _probe(self, call: Callable[[Any], Any]) -> Any:
        """``call(client)`` on a channel of the pool (health and metadata: no retry, no renewal)."""
        i, channel = self._acquire()
        try:
            return call(channel.client)
        finally:
            self._release(i, channel, None)

    def live(self) -> bool:
        return self._probe(lambda c: c.is_server_live(client_timeout=min(self.timeout_s, 10)))

    def metadata(self, model: str) -> dict[str, Any]:
        timeout = min(self.timeout_s, 10)
        md = self._probe(lambda c: c.get_model_metadata(model, as_json=True, client_timeout=timeout))
        return _outputs_metadata(md)

    def close(self) -> None:
        with self._lock:
            channels = [c for c in self._slots if c is not None] + self._retired
            self._slots, self._retired = [None] * len(self._slots), []
        for channel in channels:
            channel.client.close()


class HttpConnections:
    """HTTP adapter (tritonclient.http). Its gevent-based client must stay on the thread that made it, so
    requests run on a pool of ``concurrency`` worker threads with one client, one connection, each; health and
    metadata go over the caller's own client."""

    def __init__(self, target: str, timeout_s: float, concurrency: int, ssl: bool = False) -> None:
        import tritonclient.http as httpclient

        self.m = httpclient
        self._kwargs = {"connection_timeout": timeout_s, "network_timeout": timeout_s, "ssl": ssl}
        self.target = target
        self.client = httpclient.InferenceServerClient(target, **self._kwargs)
        self._local = threading.local()
        self._workers = max(1, concurrency)
        self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="tritonprep-http")
        self._lock = threading.Lock()
        self._worker_clients: set[Any] = set()
        self._closed = False
        #: connections replaced because their server went away
        self.renewed = 0

    @property
    def connections(self) -> int:
        """How many connections requests may be spread over (one per worker thread)."""
        return self._workers

    def _thread_client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.m.InferenceServerClient(self.target, **self._kwargs)
            with self._lock:
                self._worker_clients.add(client)
        return client

    def _infer_here(self, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
        """One request on this worker thread's client; a server gone or going drops the client (the thread's
        next request connects afresh)."""
        client = self._thread_client()
        try:
            return client.infer(model, inputs, outputs=outputs)
        except Exception as e:
            if renews_connection(e):
                self._local.client = None
                with self._lock:
                    self._worker_clients.discard(client)
                    self.renewed += 1
                client.close()
            raise

    def outputs(self, names: Sequence[str]) -> list[Any]:
        return [self.m.InferRequestedOutput(n, binary_data=True) for n in names]

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("the client is closed")

    def infer(self, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
        self._check_open()
        return self._pool.submit(self._infer_here, model, inputs, outputs).result()

    def submit(self, model: str, inputs: list[Any], outputs: list[Any], done: Done) -> None:
        self._check_open()

        def call() -> None:
            try:
                result = self._infer_here(model, inputs, outputs)
            except Exception as e:  # noqa: BLE001 - any failure goes to the callback, which answers the images
                done(None, e)
            else:
                done(result, None)

        self._pool.submit(call)

    def live(self) -> bool:
        return self.client.is_server_live()

    def metadata(self, model: str) -> dict[str, Any]:
        return _outputs_metadata(self.client.get_model_metadata(model))

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True)
        with self._lock:
            clients, self._worker_clients = self._worker_clients, set()
        for client in clients:
            client.close()
        self.client.close()
