"""The host: every tritonserver of the machine, one per GPU, started, watched and stopped together.

A multi-GPU host runs one :class:`~.process.EmbeddedServer` per GPU (:mod:`.topology`), each a whole
tritonserver with its own watchdog, work folder, private CUDA MPS daemon, supervisor and metrics port, seeing
only its GPU. Why one server per GPU and not one server over all of them (docs/architecture.md):

* Triton 2.51 has no GPU affinity between the steps of an ensemble (server#7794), so in one server a batch
  decoded on GPU 0 can reach a classifier on GPU 1 (a peer copy); a server that sees one GPU cannot.
* One tritonserver is a CUDA client of every GPU it sees, and under MPS a fatal fault reaches every client of
  the GPUs that a client links: one server over all GPUs is one failure domain. One per GPU, a sticky fault,
  a killed stub or a failed instance on GPU k restarts GPU k's server alone; the others keep answering.

The servers share the public HTTP and gRPC ports (Triton's ``--reuse-http-port``/``--reuse-grpc-port``,
SO_REUSEPORT): clients keep one address, and the kernel gives each new connection to one of the servers
listening. A client spreads its load by opening several connections (the tritonprep client and perf_analyzer
do). A server that goes away takes its connections with it; new ones reach the others. Each server's metrics
port is its own (``--metrics-port`` + 1 + k by default); the host's metrics port serves the host endpoint
(:mod:`.front`): every GPU's metrics in one text, and the host's readiness (every GPU serves) and liveness.
Each server's ``--id`` is ``tritonprep-gpu<k>``, which ``GET /v2`` shows (the server a connection reached).

The GPUs start in parallel and stop in parallel, so the host's start and stop take about one GPU's. A one-GPU
or CPU host is one server on the ports as given, as before; ``--servers one`` keeps one server over every GPU.
"""

from __future__ import annotations

import http.client
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ServerError, StartRefused
from . import topology
from .endpoints import Endpoints
from .front import Front, GpuState, merge_metrics, merge_statistics
from .options import ServerOptions
from .process import EmbeddedServer
from .protocol import Cleaned
from .supervise import Event, Supervisor

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Part:
    """One tritonserver of the host: its slot (GPU), the server, its supervisor, and its state."""

    slot: topology.Slot
    server: EmbeddedServer
    supervisor: Supervisor | None = None
    #: starting, ready, restarting, failed (its supervisor gave up) or stopped
    state: str = "stopped"

    @property
    def gpu(self) -> str:
        """The GPU's number as ``--gpus`` counts them (a fake GPU's too), or "cpu"."""
        return self.slot.label.removeprefix("gpu") if self.slot.label.startswith("gpu") else self.slot.label


def check_ports(host: str, ports: Sequence[int]) -> None:
    """A StartRefused naming the first of ``ports`` on ``host`` that another process listens on.

    Triton's reuse-port flags would let a second host share a port with the first without a word; a test bind
    without SO_REUSEPORT (SO_REUSEADDR only, so a port in TIME_WAIT counts as free) finds any listener.
    """
    if len(set(ports)) != len(ports):
        raise StartRefused(f"the ports {list(ports)} must differ (HTTP, gRPC, metrics and each GPU's metrics)")
    for port in ports:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OverflowError:
                raise StartRefused(f"port {port} is not a TCP port (1-65535)") from None
            except OSError as e:
                raise StartRefused(
                    f"port {port} on {host} is in use ({e.strerror}): another tritonprep serve or Triton may hold "
                    "it; stop it, or choose free ports (--http-port, --grpc-port, --metrics-port)"
                ) from None


def _each(parts: Sequence[Part], call: Callable[[Part], T]) -> list[T]:
    """``call`` on every part at once (one thread each); the results in the parts' order."""
    if len(parts) <= 1:
        return [call(p) for p in parts]
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="tritonprep-host") as pool:
        return list(pool.map(call, parts))


class Host(Endpoints):
    """The tritonservers of a host, one per GPU (see the module's description)."""

    def __init__(self, options: ServerOptions, log_path: Path | None = None) -> None:
        self.options = options
        self.log_path = log_path
        self.topology = topology.detect(options.gpus, options.servers)
        self.admin_key = options.admin_key or secrets.token_urlsafe(24)
        self.parts = [Part(slot, EmbeddedServer(self._part_options(k, slot), log_path)) for k, slot in enumerate(
            self.topology.slots)]  # fmt: skip
        self.front: Front | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ layout
    @property
    def shared(self) -> bool:
        """Whether several servers share the HTTP and gRPC ports (and the metrics port is the host endpoint)."""
        return self.topology.shared_ports

    @property
    def servers(self) -> list[EmbeddedServer]:
        """The host's tritonservers, in GPU order."""
        return [p.server for p in self.parts]

    def gpu_metrics_ports(self) -> tuple[int, ...]:
        """Each server's own metrics port (with one server: the metrics port)."""
        o = self.options
        if not self.shared:
            return (o.metrics_port,)
        ports = o.gpu_metrics_ports or tuple(o.metrics_port + 1 + k for k in range(self.topology.count))
        if len(ports) < self.topology.count:
            raise ServerError(
                f"{len(ports)} GPU metrics port(s) {list(ports)} for {self.topology.count} servers: give one per GPU"
            )
        return tuple(ports[: self.topology.count])

    def ports(self, front: bool = True) -> list[int]:
        """The ports the host listens on: HTTP, gRPC, metrics (the host endpoint's with several servers; without
        ``front``, left out then: it binds it itself) and each GPU's server's own metrics port."""
        o = self.options
        gpu_ports = self.gpu_metrics_ports() if self.shared else ()
        return [o.http_port, o.grpc_port, *([o.metrics_port] * (front or not self.shared)), *gpu_ports]

    def _part_options(self, k: int, slot: topology.Slot) -> ServerOptions:
        if not self.shared:  # one server on the ports as given: --gpus as given (all of them for --servers one)
            return replace(self.options, admin_key=self.admin_key)
        return replace(
            self.options,
            gpus=slot.gpus or None,  # a fake GPU's server sees no GPU
            metrics_port=self.gpu_metrics_ports()[k],
            admin_key=self.admin_key,
            reuse_ports=True,
            server_id=f"tritonprep-{slot.label}",
            log_label=slot.label,
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start every server at once, after checking that no other process holds the host's ports."""
        if any(p.server.watchdog is not None for p in self.parts):
            raise ServerError("server already started")
        o = self.options
        check_ports(o.host, self.ports(front=False))
        self.started_at, self.ready_s = time.monotonic(), None
        for part in self.parts:
            part.state = "starting"
        if self.shared:
            self.front = Front(o.host, o.metrics_port, self)
            log.info("%s; host endpoint http://%s:%d", self.topology.describe(), o.host, o.metrics_port)

        def start(part: Part) -> BaseException | None:
            part.state = "starting"
            try:
                part.server.start()
            except BaseException as e:  # noqa: BLE001 - every server's outcome first; the first failure is raised
                part.state = "stopped"
                return e
            return None

        try:
            errors = [(p, e) for p, e in zip(self.parts, _each(self.parts, start)) if e is not None]
        except BaseException:
            self.stop()
            raise
        if errors:
            self.stop()
            part, error = errors[0]
            if not isinstance(error, ServerError):
                raise error
            raise type(error)(self._named(part, str(error))) from error

    def _named(self, part: Part, text: str) -> str:
        return f"GPU {part.gpu}: {text}" if self.shared else text

    def wait_ready(self, timeout_s: float = 300.0, cancel: threading.Event | None = None) -> None:
        """Block until every server is ready; a ServerError naming the GPU whose server died, timed out or was
        cancelled (the others keep running: :meth:`stop` ends them)."""
        deadline = time.monotonic() + timeout_s
        for part in self.parts:
            try:
                part.server.wait_ready(max(0.0, deadline - time.monotonic()), cancel)
            except ServerError as e:
                raise ServerError(self._named(part, str(e))) from e
            part.state = "ready"
        if self.started_at is not None:
            self.ready_s = time.monotonic() - self.started_at

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop supervising, then stop every server at once (each as :meth:`EmbeddedServer.stop`); the first
        non-zero exit code, 0 when every server exited 0 (None if none ran)."""
        try:
            self.unsupervise()
            codes = _each(self.parts, lambda p: p.server.stop(timeout_s=timeout_s))
        finally:
            for part in self.parts:
                part.state = "stopped"
            if self.front is not None:
                self.front.close()
                self.front = None
        return next((c for c in codes if c), None if all(c is None for c in codes) else 0)

    def drain(self, timeout_s: float) -> bool:
        """Every server's drain at once (:meth:`EmbeddedServer.drain`); True when all are quiet."""
        return all(
            _each([p for p in self.parts if p.server.running], lambda p: p.server.drain(timeout_s))
        )  # [] -> True

    # ------------------------------------------------------------------ supervision
    def supervise(self, on_event: Callable[[Event], None] | None = None, **supervisor_kw: Any) -> None:
        """Give each server a :class:`Supervisor` (``supervisor_kw``: its settings; ``on_event``: called with each
        supervisor's events) and start them."""
        for part in self.parts:
            name = f"supervisor {part.slot.label}" if self.shared else "supervisor"
            part.supervisor = Supervisor(
                part.server, name=name, on_event=self._on_event(part, on_event), **supervisor_kw
            )
            part.supervisor.start()

    def _on_event(self, part: Part, then: Callable[[Event], None] | None) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            part.state = {"failure": "restarting", "restarting": "restarting", "ready": "ready",
                          "gave-up": "failed"}.get(event.kind, part.state)  # fmt: skip
            if event.kind == "gave-up" and self.shared:
                serving = sum(p.state == "ready" for p in self.parts)
                log.error(
                    "GPU %s's server gave up; the host serves on %d of %d GPUs", part.gpu, serving, len(self.parts)
                )
            if then is not None:
                then(event)

        return on_event

    def unsupervise(self) -> None:
        """Stop every supervisor at once (a restart in progress ends first; the servers keep running)."""
        _each([p for p in self.parts if p.supervisor is not None], lambda p: p.supervisor.stop())  # type: ignore[union-attr]

    @property
    def gave_up(self) -> bool:
        """Whether every server's supervisor gave up: nothing serves any more."""
        return all(p.supervisor is not None and p.supervisor.gave_up.is_set() for p in self.parts)

    @property
    def restarts(self) -> int:
        """Restarts of all the host's servers."""
        return sum(p.supervisor.restarts for p in self.parts if p.supervisor is not None)

    # ------------------------------------------------------------------ state
    @property
    def running(self) -> bool:
        """True while every server runs."""
        return all(p.server.running for p in self.parts)

    def poll(self) -> int | None:
        """The exit code of the first server that has ended, None while all run."""
        return next((c for c in (p.server.poll() for p in self.parts) if c is not None), None)

    def is_ready(self) -> bool:
        """Every server is ready."""
        return all(p.server.is_ready() for p in self.parts)

    def gpu_states(self) -> list[GpuState]:
        """Each GPU's server as the host endpoint shows it (every server asked at once)."""
        ports = dict(zip((p.gpu for p in self.parts), self.gpu_metrics_ports()))

        def state_of(part: Part) -> GpuState:
            state = part.state
            if state == "ready" and not part.server.is_ready():  # gone, and its supervisor has not seen it yet
                state = "restarting" if part.supervisor is not None else "stopped"
            url = f"http://{self.options.host}:{ports[part.gpu]}/metrics"
            restarts = part.supervisor.restarts if part.supervisor is not None else 0
            return GpuState(part.gpu, state, part.server.pid, url, restarts)

        return _each(self.parts, state_of)

    def gpu_metrics(self) -> list[tuple[str, str | None]]:
        """Each server's metrics text (None where it does not answer), read from all of them at once."""

        def read(part: Part) -> tuple[str, str | None]:
            try:
                return part.gpu, part.server.metrics_text() if part.server.running else None
            except (OSError, http.client.HTTPException, ValueError):  # gone, or cut short while stopping
                return part.gpu, None

        return _each(self.parts, read)

    @property
    def admin_header(self) -> str:
        """The name of the header that opens the restricted APIs."""
        return self.options.admin_header

    def running_ids(self) -> set[str]:
        """The ids (``tritonprep-gpu<k>``, GET /v2's name) of the servers that run now."""
        return {p.server.options.server_id or "" for p in self.parts if p.server.running}

    def each_server(
        self, path: str, headers: dict[str, str], tries: int = 64, deadline_s: float = 10.0
    ) -> dict[str, tuple[int, bytes]]:
        """``GET path`` from each server through the shared HTTP port: new connections until each server's id has
        answered one (the kernel picks the server of a connection; ``GET /v2`` names it), that connection then asks.
        ``{server id: (status, body)}``; a server that no connection reached in ``tries`` per server or within
        ``deadline_s`` is missing."""
        if not self.shared:
            server = self.parts[0].server
            return {server.options.server_id or "": server._get(path, headers=headers)}
        wanted = self.running_ids()
        found: dict[str, tuple[int, bytes]] = {}
        deadline = time.monotonic() + deadline_s
        for _ in range(tries * len(wanted)):
            left = deadline - time.monotonic()
            if set(found) >= wanted or left <= 0:
                break
            conn = http.client.HTTPConnection(self.options.host, self.options.http_port, timeout=min(5.0, left))
            try:
                conn.request("GET", "/v2")
                name = json.loads(conn.getresponse().read()).get("name", "")
                if name in wanted and name not in found:
                    conn.request("GET", path, headers=headers)
                    answer = conn.getresponse()
                    found[name] = (answer.status, answer.read())
            except (OSError, http.client.HTTPException, ValueError):
                continue  # a server going away: another connection
            finally:
                conn.close()
        return found

    def model_statistics(self, model: str = "") -> dict[str, Any]:
        """Triton's statistics of ``model`` (every model for "") summed over every server (the admin header's
        API); a ServerError if one refuses or cannot be reached."""
        path = f"/v2/models/{model}/stats" if model else "/v2/models/stats"
        try:
            answers = self.each_server(path, self.admin_headers)
        except OSError as e:
            raise ServerError(f"statistics of {model or 'every model'}: {e}") from e
        if not self.running_ids() <= set(answers) or any(c != 200 for c, _ in answers.values()):
            raise ServerError(f"statistics of {model or 'every model'}: {[(k, c) for k, (c, _) in answers.items()]}")
        return merge_statistics([json.loads(body) for _, body in answers.values()])

    def metrics_text(self, timeout: float = 2.0) -> str:
        """The host's metrics: with one server its own, else every server's labelled with its GPU."""
        if not self.shared:
            return self.parts[0].server.metrics_text(timeout)
        return merge_metrics(self.gpu_metrics())

    def log_tail(self, lines: int = 40) -> str:
        return self.parts[0].server.log_tail(lines)

    # the first server's (the only one's, on a one-GPU or CPU host)
    @property
    def pid(self) -> int | None:
        return self.parts[0].server.pid

    @property
    def mps(self) -> Any:
        return self.parts[0].server.mps

    @property
    def plan(self) -> Any:
        return self.parts[0].server.plan

    @property
    def report_dir(self) -> Path | None:
        return self.parts[0].server.report_dir

    @property
    def cleanups(self) -> list[Cleaned | None]:
        """What each server's watchdog had to do after the last stop."""
        return [p.server.cleanup for p in self.parts]

    def __enter__(self) -> Host:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
