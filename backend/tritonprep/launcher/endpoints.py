"""What a server answers over localhost: its health, its models' readiness and configs, its metrics, the drain.

:class:`Endpoints` is what :class:`~.process.EmbeddedServer` (one tritonserver) and :class:`~.host.Host`
(every tritonserver of a host) share: the HTTP API on the options' port (the restricted ones with the admin
header) and the metrics text. A server that shares its HTTP port with others (``reuse_ports``) cannot tell
which of them a connection reaches, so its own readiness comes from its own metrics endpoint.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from ..errors import ServerError
from .options import GRPC_HEADER_PREFIX, ServerOptions
from .probes import drain, fetch_metrics, models_in


class Endpoints:
    """The HTTP API and metrics of a server on ``options``' ports, with the admin key ``admin_key``."""

    options: ServerOptions
    admin_key: str
    #: seconds from start() until ready, once ready
    ready_s: float | None = None
    started_at: float | None = None

    @property
    def admin_headers(self) -> dict[str, str]:
        """The HTTP header that opens the restricted APIs (statistics, model config, ...)."""
        return {self.options.admin_header: self.admin_key}

    @property
    def grpc_admin_headers(self) -> dict[str, str]:
        """The same for gRPC: Triton expects the header name prefixed with ``triton-grpc-protocol-``."""
        return {GRPC_HEADER_PREFIX + self.options.admin_header: self.admin_key}

    @property
    def running(self) -> bool:
        """Whether the server runs (a subclass knows)."""
        return True

    def poll(self) -> int | None:
        """The server's exit code once it has ended, None while it runs (a subclass knows)."""
        return None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log, headed, or "" (a subclass knows)."""
        return ""

    def _get(self, path: str, timeout: float = 2.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.options.http_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:  # noqa: S310 - localhost
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def is_ready(self) -> bool:
        """True when the server answers and every model is ready (strict readiness). On ports it shares with
        other servers (``reuse_ports``) the health API may reach another one, so this server's own metrics
        endpoint answers instead: Triton starts it once every model has loaded, and it lists them."""
        try:
            if self.options.reuse_ports:
                return self.running and set(self.model_names()) <= models_in(self.metrics_text())
            return self._get("/v2/health/ready")[0] == 200
        except (OSError, http.client.HTTPException, ValueError):  # URLError is an OSError; a body cut short
            return False

    def wait_ready(self, timeout_s: float = 300.0, cancel: threading.Event | None = None) -> None:
        """Block until ready; raise :class:`ServerError` with the log's tail if it dies, times out or is cancelled."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                raise ServerError("cancelled while waiting for tritonserver to be ready")
            if not self.running:
                raise ServerError(f"tritonserver exited with code {self.poll()} while starting{self.log_tail()}")
            if self.is_ready():
                if self.started_at is not None:
                    self.ready_s = time.monotonic() - self.started_at
                return
            time.sleep(0.1)
        raise ServerError(f"tritonserver not ready after {timeout_s:.0f} s{self.log_tail()}")

    def model_names(self) -> list[str]:
        """The models of the repository (its folders with a config.pbtxt)."""
        return sorted(cfg.parent.name for cfg in self.options.model_repository.glob("*/config.pbtxt"))

    def model_states(self) -> dict[str, bool]:
        """Readiness of each model folder of the repository."""
        states = {}
        for name in self.model_names():
            try:
                states[name] = self._get(f"/v2/models/{name}/ready")[0] == 200
            except (urllib.error.URLError, OSError):
                states[name] = False
        return states

    def model_config(self, name: str) -> dict[str, Any] | None:
        """The config tritonserver serves ``name`` with (the model-config API, with the admin header), or None."""
        try:
            status, body = self._get(f"/v2/models/{name}/config", headers=self.admin_headers)
            return json.loads(body) if status == 200 else None
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def metrics_text(self, timeout: float = 2.0) -> str:
        """Triton's Prometheus metrics (the metrics endpoint is not a restricted API)."""
        return fetch_metrics(self.options.host, self.options.metrics_port, timeout)

    def drain(self, timeout_s: float) -> bool:
        """Wait until no request is queued or executing anywhere, for at most ``timeout_s``; False on
        timeout (see :func:`.probes.drain`: it returns at once when nothing is in flight)."""
        return drain(self.metrics_text, timeout_s)
