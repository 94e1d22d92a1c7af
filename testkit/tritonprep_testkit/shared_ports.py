"""Several tritonservers on one HTTP and one gRPC port, as a multi-GPU host runs them (one per GPU), for the
client's tests: start them, tell them apart, count what each served, stop or kill one, start it again.

Each server runs with the launcher's ``reuse_ports`` (Triton's ``--reuse-http-port`` / ``--reuse-grpc-port``:
``SO_REUSEPORT``, the kernel spreads connections over them, and the gRPC connection age a host sets), its own
``server_id`` (``GET /v2``'s ``name``) and its own metrics port. The shared ports cannot say which server
answers, so each one's readiness and request counts come from its own metrics endpoint. Unlike
:class:`tritonprep.launcher.host.Host`, nothing supervises them: a server stopped or killed here stays down
until :meth:`SharedPortServers.start`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from tritonprep.launcher.options import ServerOptions
from tritonprep.launcher.process import EmbeddedServer

from .servers import MODEL_REPOSITORY, free_ports

#: seconds a server gets to load its models
READY_S = 180.0


def served(metrics_text: str, model: str) -> int:
    """Successful inferences of ``model`` in a Triton metrics text (0 when it has none)."""
    pattern = re.compile(r'^nv_inference_request_success\{[^}]*model="' + re.escape(model) + r'"[^}]*\}\s+(\S+)', re.M)
    return int(sum(float(m.group(1)) for m in pattern.finditer(metrics_text)))


class SharedPortServers:
    """``count`` embedded servers of ``repository`` on shared HTTP and gRPC ports; ids ``tritonprep-gpu<k>``.

    Use as a context manager: every server is ready inside, and none is left after it.
    """

    def __init__(self, log_dir: Path, count: int = 2, repository: Path = MODEL_REPOSITORY) -> None:
        self.log_dir, self.repository = log_dir, repository
        self.http_port, self.grpc_port, *self.metrics_ports = free_ports(2 + count)
        self.ids = [f"tritonprep-gpu{k}" for k in range(count)]
        self.servers: list[EmbeddedServer | None] = [None] * count

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the shared gRPC port."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        """``http://host:port`` of the shared HTTP port."""
        return f"http://127.0.0.1:{self.http_port}"

    def options(self, k: int) -> ServerOptions:
        """Server ``k``'s options: the shared ports, its own metrics port and id."""
        return ServerOptions(
            self.repository,
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            metrics_port=self.metrics_ports[k],
            reuse_ports=True,
            server_id=self.ids[k],
        )

    def start(self, k: int | None = None) -> None:
        """Start server ``k`` (every server that is not running, for None) and wait until it is ready."""
        todo = [k] if k is not None else [i for i, s in enumerate(self.servers) if s is None]
        for i in todo:
            if self.servers[i] is not None:
                raise RuntimeError(f"{self.ids[i]} runs already")
            server = EmbeddedServer(self.options(i), self.log_dir / f"{self.ids[i]}.log")
            self.servers[i] = server
            server.start()
        for i in todo:
            server = self.servers[i]
            if server is not None:  # readiness from its own metrics port (reuse_ports)
                server.wait_ready(READY_S)

    def served(self, model: str = "classify") -> dict[str, int]:
        """Successful inferences of ``model`` by each running server, by id."""
        return {self.ids[k]: served(s.metrics_text(), model) for k, s in enumerate(self.servers) if s is not None}

    def settled(self, model: str = "classify", quiet_s: float = 1.0, timeout_s: float = 15.0) -> dict[str, int]:
        """:meth:`served` once the counts held still for ``quiet_s`` (a server counts a request a little after
        its client has the answer: up to a metrics interval, 0.5 s, later)."""
        deadline = time.monotonic() + timeout_s
        last, since = self.served(model), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.served(model)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return last

    def served_since(
        self, before: dict[str, int], total: int, model: str = "classify", timeout_s: float = 10.0
    ) -> dict[str, int]:
        """What each server served of ``model`` since ``before`` (a :meth:`served`), read again until the counts
        add up to ``total`` or ``timeout_s`` passed (a response can reach the client before its server counts it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = self.served(model)
            since = {sid: now.get(sid, 0) - before.get(sid, 0) for sid in self.ids}
            if sum(since.values()) >= total or time.monotonic() >= deadline:
                return since
            time.sleep(0.05)

    def stop(self, k: int) -> int | None:
        """Stop server ``k`` as the launcher does (SIGINT, Triton finishes what it has); its exit code."""
        server = self.servers[k]
        if server is None:
            return None
        self.servers[k] = None
        return server.stop()

    def kill(self, k: int, frozen_s: float = 0.0) -> None:
        """SIGKILL server ``k``'s tritonserver (as a crash would end it), then clean up after it.

        With ``frozen_s``, SIGSTOP it that long first: what clients send it meanwhile waits unanswered, so
        requests are in flight on its connections when it dies (a kill between two requests breaks none)."""
        server = self.servers[k]
        if server is None or server.pid is None:
            raise RuntimeError(f"{self.ids[k]} does not run")
        if frozen_s > 0:
            os.kill(server.pid, signal.SIGSTOP)
            time.sleep(frozen_s)
        os.kill(server.pid, signal.SIGKILL)
        self.stop(k)

    def close(self) -> None:
        """Stop every server."""
        for k in range(len(self.servers)):
            self.stop(k)

    def __enter__(self) -> SharedPortServers:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
