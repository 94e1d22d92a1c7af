"""The host endpoint: one metrics and health address for the tritonservers of a multi-GPU host.

The servers of a host (one per GPU, :mod:`.host`) share the HTTP and gRPC ports, where the kernel hands
each new connection to one of them, but each serves its metrics on a port of its own. On the host's metrics
port (``--metrics-port``, 8002) the launcher answers instead, in plain HTTP:

``GET /metrics``
    Every server's Prometheus metrics in one text, each sample labelled with its GPU (``gpu="1"``), the
    families' ``HELP``/``TYPE`` lines once; then the host's own gauges: ``tritonprep_host_gpu_ready{gpu}``
    (1 while that GPU's server serves) and ``tritonprep_host_restarts_total{gpu}``.
``GET /v2/health/ready``
    200 when every GPU's server serves; 503 otherwise (starting, restarting after a fault, or given up).
``GET /v2/health/live``
    200 while at least one GPU's server serves, or all of them are starting; 503 when none can.
``GET /tritonprep/gpus``
    JSON: per GPU its state (``starting``, ``ready``, ``restarting``, ``failed``, ``stopped``), tritonserver's
    pid, its own metrics URL and its restarts; and the host's ``ready`` and ``degraded``.
``GET /v2/models[/NAME[/versions/V]]/stats``
    Triton's statistics API (with the admin header, which it passes on) of every server at once: each count and
    duration added up. Through the shared HTTP port the same API answers for the one server a connection reached,
    whose ``GET /v2`` names it (``tritonprep-gpu1``).

It reads the servers through :class:`Backends` (the host), so it knows nothing of how they run.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ..errors import StartRefused

log = logging.getLogger(__name__)

#: Triton's statistics API, which the host endpoint answers for every server at once
_STATS = re.compile(r"^/v2/models(/[^/]+(/versions/[^/]+)?)?/stats$")
#: the statistics of every server are read for at most this many clients at once (each may take seconds)
_STATS_SLOTS = threading.BoundedSemaphore(2)
#: a sample line of the Prometheus text format: name, optional {labels}, the rest (value and timestamp)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S.*)$")
_COMMENT = re.compile(r"^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (.*))?$")


@dataclass(frozen=True)
class GpuState:
    """One GPU's server as the host endpoint shows it."""

    gpu: str  # the GPU's number (as --gpus counts them), the value of the ``gpu`` label
    state: str  # starting, ready, restarting, failed, stopped
    pid: int | None
    metrics_url: str
    restarts: int

    @property
    def serving(self) -> bool:
        return self.state == "ready"


class Backends(Protocol):
    """What the endpoint needs of the host."""

    def gpu_states(self) -> list[GpuState]: ...

    def gpu_metrics(self) -> list[tuple[str, str | None]]: ...

    def each_server(self, path: str, headers: dict[str, str]) -> dict[str, tuple[int, bytes]]: ...

    def running_ids(self) -> set[str]: ...

    @property
    def admin_header(self) -> str: ...


def label_sample(line: str, gpu: str) -> str:
    """``line`` (a sample) with ``gpu="<gpu>"`` as its first label."""
    m = _SAMPLE.match(line)
    if m is None:
        return line
    name, labels, rest = m.groups()
    inner = labels[1:-1].strip().rstrip(",") if labels else ""
    return f'{name}{{gpu="{gpu}"{"," + inner if inner else ""}}} {rest}'


def merge_metrics(texts: Sequence[tuple[str, str | None]]) -> str:
    """One Prometheus text of several servers' (``(gpu, text)``; None: it did not answer): the samples of each
    family together, labelled with their GPU, under the family's HELP and TYPE lines (the first server's)."""
    families: dict[str, list[str]] = {}
    heads: dict[str, list[str]] = {}
    for gpu, text in texts:
        family = ""
        for line in (text or "").splitlines():
            comment = _COMMENT.match(line)
            if comment is not None:
                family = comment[2]
                seen = heads.setdefault(family, [])
                if not any(h.startswith(f"# {comment[1]} ") for h in seen):
                    seen.append(line)
                families.setdefault(family, [])
            elif line.strip() and not line.startswith("#"):
                families.setdefault(family, []).append(label_sample(line, gpu))
    out: list[str] = []
    for family, samples in families.items():
        out += heads.get(family, []) + samples
    return "\n".join(out) + "\n"


def merge_statistics(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several servers' statistics answers (``{"model_stats": [...]}``) as one: per model and version, every count
    and duration added up (``batch_stats`` per batch size), the latest ``last_inference``."""

    def add(a: Any, b: Any, key: str = "") -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: add(a.get(k), b.get(k), k) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
        if key == "batch_stats" and isinstance(a, list) and isinstance(b, list):
            by_size = {s.get("batch_size"): s for s in a}
            for s in b:
                size = s.get("batch_size")
                by_size[size] = add(by_size[size], s) if size in by_size else s
            return [by_size[k] for k in sorted(by_size, key=lambda v: int(v or 0))]
        if key in ("name", "version", "batch_size"):
            return a
        if key == "last_inference":
            return max(int(a), int(b))
        if isinstance(a, (int, float, str)) and str(a).isdigit() and str(b).isdigit():
            return int(a) + int(b)  # Triton's JSON writes the 64-bit counts as numbers or strings
        return a

    models: dict[tuple[str, str], dict[str, Any]] = {}
    for answer in answers:
        for stat in answer.get("model_stats", []):
            key = (stat.get("name", ""), stat.get("version", ""))
            models[key] = add(models[key], stat) if key in models else stat
    return {"model_stats": list(models.values())}


def host_gauges(states: Sequence[GpuState]) -> str:
    """The host's own metrics: which GPU's server serves, and how often each was restarted."""
    lines = [
        "# HELP tritonprep_host_gpu_ready Whether the tritonserver of the GPU serves (1) or not (0: starting, "
        "restarting after a fault, given up)",
        "# TYPE tritonprep_host_gpu_ready gauge",
        *(f'tritonprep_host_gpu_ready{{gpu="{s.gpu}"}} {int(s.serving)}' for s in states),
        "# HELP tritonprep_host_restarts_total Restarts of the GPU's tritonserver by its supervisor",
        "# TYPE tritonprep_host_restarts_total counter",
        *(f'tritonprep_host_restarts_total{{gpu="{s.gpu}"}} {s.restarts}' for s in states),
    ]
    return "\n".join(lines) + "\n"


def health(states: Sequence[GpuState]) -> dict[str, Any]:
    """The host's readiness and liveness, and each GPU's state."""
    serving = sum(s.serving for s in states)
    starting = all(s.state == "starting" for s in states)
    return {
        "ready": bool(states) and serving == len(states),
        "live": serving > 0 or starting,
        "degraded": 0 < serving < len(states),
        "gpus": [
            {"gpu": s.gpu, "state": s.state, "pid": s.pid, "metrics": s.metrics_url, "restarts": s.restarts}
            for s in states
        ],
    }


class Front:
    """The host endpoint's HTTP server on ``host:port``, answering from ``backends`` on its own threads."""

    def __init__(self, host: str, port: int, backends: Backends) -> None:
        handler = _handler(backends)
        server_class = _Server6 if ":" in host else ThreadingHTTPServer
        try:
            self.httpd = server_class((host, port), handler)
        except OSError as e:
            raise StartRefused(
                f"cannot serve the host's metrics and health on {host}:{port}: {e.strerror} "
                "(choose another --metrics-port)"
            ) from None
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="tritonprep-front", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


class _Server6(ThreadingHTTPServer):
    """The host endpoint on an IPv6 address."""

    address_family = socket.AF_INET6


def _handler(backends: Backends) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tritonprep-host"
        timeout = 10  # a client that connects and sends nothing does not hold a thread

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0].rstrip("/")
            try:
                if path == "/metrics":
                    states = backends.gpu_states()
                    body = merge_metrics(backends.gpu_metrics()) + host_gauges(states)
                    self._send(200, body.encode(), "text/plain; version=0.0.4; charset=utf-8")
                elif _STATS.match(path):
                    self._statistics()
                elif path in ("/v2/health/ready", "/v2/health/live", "/tritonprep/gpus"):
                    state = health(backends.gpu_states())
                    if path == "/tritonprep/gpus":
                        self._send(200, json.dumps(state).encode(), "application/json")
                    else:
                        ok = state["ready" if path.endswith("ready") else "live"]
                        self._send(200 if ok else 503, b"", "text/plain")
                else:
                    known = b"/metrics, /v2/health/ready, /v2/health/live, /tritonprep/gpus, /v2/models/.../stats"
                    self._send(404, b"not found: the host endpoint serves " + known + b"\n", "text/plain")
            except (BrokenPipeError, ConnectionResetError):
                return  # the client left
            except (OSError, http.client.HTTPException, ValueError) as e:  # a server that went away while being read
                self._send(503, f"{e}\n".encode(), "text/plain")

        def _statistics(self) -> None:
            """Every server's statistics added up; only the admin header is passed on (Triton checks it)."""
            header = backends.admin_header
            value = self.headers.get(header)
            if not _STATS_SLOTS.acquire(blocking=False):
                self._send(
                    503, b"busy: the statistics of every server are being read for another client\n", "text/plain"
                )
                return
            try:
                answers = backends.each_server(self.path, {header: value} if value is not None else {})
            finally:
                _STATS_SLOTS.release()
            missing = sorted(backends.running_ids() - set(answers))
            codes = {code for code, _ in answers.values()}
            if codes - {200}:  # refused (the admin header): the servers' own answer
                code = max(codes - {200})
                self._send(code, next((b for c, b in answers.values() if c == code), b""), "application/json")
            elif missing or not answers:  # a sum without them would lie
                self._send(503, f"no answer from {', '.join(missing) or 'any server'}\n".encode(), "text/plain")
            else:
                merged = merge_statistics([json.loads(body) for _, body in answers.values()])
                self._send(200, json.dumps(merged).encode(), "application/json")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting: nothing to answer
                log.debug("host endpoint: %s left before its answer", self.client_address)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            log.debug("host endpoint: " + format, *args)

    return Handler
