"""The embedded server: runs the ``tritonserver`` binary that the ``nvidia-pytriton`` wheel ships.

``pip install tritonprep[server]`` gives a real Triton (2.51) with its Python backend and a
stub per Python version; this module assembles a backend directory for the running
Python, points the stub at this environment (``PATH``), starts ``tritonserver`` on the
repository's ``model_repository/`` bound to localhost, waits until every model is ready,
and stops it cleanly (SIGINT, Triton's exit timeout, then SIGKILL). The child dies with its
parent (``PR_SET_PDEATHSIG``), so a crashed launcher leaves no orphan server.

Secure defaults: localhost only, model control off, and the repository, model-config,
shared-memory, statistics, trace and logging APIs restricted (HTTP and gRPC) to clients
that send the admin header (``triton-admin-key``; its value is random per start unless
given). gRPC TLS is an option. ``tritonprep serve`` also supervises the server
(:mod:`tritonprep.supervise`) and restarts it when a model stops serving.

Command line: ``tritonprep serve --help``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ServerError

log = logging.getLogger(__name__)

_SOURCE_REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
#: the checkout's model_repository/ for a source install, else ./model_repository
DEFAULT_REPOSITORY = _SOURCE_REPOSITORY if _SOURCE_REPOSITORY.is_dir() else Path("model_repository")
_PR_SET_PDEATHSIG = 1
#: APIs that only clients with the admin header may use (Triton's --http-restricted-api names)
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")
ADMIN_HEADER = "triton-admin-key"
ADMIN_KEY_ENV = "TRITONPREP_ADMIN_KEY"
#: Triton checks a restricted gRPC protocol's header under this prefix
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class ServerOptions:
    """How to run tritonserver. Defaults are the secure, local ones."""

    model_repository: Path = DEFAULT_REPOSITORY
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_config_name: str | None = None
    log_verbose: int = 0
    #: per-GPU CUDA memory pool; Triton copies GPU outputs of Python models into it
    cuda_memory_pool_mb: int = 512
    pinned_memory_pool_mb: int = 256
    exit_timeout_s: int = 30
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    #: extra environment variables of tritonserver and its stubs
    env: tuple[tuple[str, str], ...] = ()
    #: APIs that need the admin header; () leaves every API open
    restricted_apis: tuple[str, ...] = RESTRICTED_APIS
    admin_header: str = ADMIN_HEADER
    #: the admin header's value; None: a random one per EmbeddedServer (the APIs are then closed to others)
    admin_key: str | None = None
    #: gRPC over TLS: PEM server certificate and key; with a root certificate, mutual TLS
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_root_cert: Path | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.restricted_apis) - set(RESTRICTED_APIS) - {"health", "metadata", "inference"})
        if unknown:
            raise ServerError(f"unknown API(s) to restrict {unknown}; known: {', '.join(RESTRICTED_APIS)}, "
                              "health, metadata, inference")
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ServerError("gRPC TLS needs both a certificate and a key (--grpc-tls-cert and --grpc-tls-key)")
        if self.grpc_tls_root_cert is not None and self.grpc_tls_cert is None:
            raise ServerError("mutual gRPC TLS (--grpc-tls-root-cert) needs --grpc-tls-cert and --grpc-tls-key")
        for name in ("admin_header", "admin_key"):
            value = getattr(self, name)
            if value is not None and (not value or any(c in value for c in ",:= \t\r\n")):
                raise ServerError(f"{name} must be non-empty without spaces, ',', ':' or '=' (Triton's flag syntax)")

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP endpoint."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint."""
        return f"{self.host}:{self.grpc_port}"


@dataclass(frozen=True)
class TritonInstall:
    """Where the pytriton wheel put tritonserver, its Python backend and its libraries."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path

    @classmethod
    def find(cls) -> TritonInstall:
        """Locate the files of the installed ``nvidia-pytriton`` wheel."""
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise ServerError(
                "the embedded server needs the nvidia-pytriton wheel: pip install 'tritonprep[server]' "
                "(or run `make serve`, which sets up .venv)"
            )
        root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        install = cls(
            binary=root / "bin" / "tritonserver",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / py / "triton_python_backend_stub",
            libs=root.parent.parent / "nvidia_pytriton.libs",
        )
        for path in (install.binary, install.python_backend, install.stub):
            if not path.exists():
                raise ServerError(f"{path} is missing: nvidia-pytriton has no Triton build for Python {py} here")
        return install

    def make_backend_dir(self, dest: Path) -> Path:
        """Copy the Python backend and this Python's stub into ``dest/python``; return ``dest``."""
        python_dir = dest / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        for src in list(self.python_backend.iterdir()) + [self.stub]:
            if src.is_file():
                shutil.copy2(src, python_dir / src.name)
        return dest


def gpu_count() -> int:
    """Number of visible GPUs (0 without a driver); used to size per-GPU memory pools."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports on ``host`` (for servers started by tests and benchmarks)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fetch_metrics(host: str, port: int, timeout: float = 2.0) -> str:
    """Triton's Prometheus metrics text from ``host:port`` (the metrics endpoint is not a restricted API)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:  # noqa: S310 - localhost
        return r.read().decode()


#: the metrics whose sum is how many requests are queued (Triton) or inside a preprocess execute() (tritonprep)
IN_FLIGHT_METRICS = ("nv_inference_pending_request_count", "tritonprep_executing_requests")


def in_flight(metrics_text: str, model: str | None = None) -> float:
    """Requests queued or executing according to ``metrics_text`` (all models, or only ``model``)."""
    label = None if model is None else f'model="{model}"'
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(IN_FLIGHT_METRICS) and (label is None or label in line):
            total += float(line.rpartition(" ")[2])
    return total


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EmbeddedServer:
    """A tritonserver child process serving one model repository."""

    def __init__(self, options: ServerOptions, log_path: Path | None = None) -> None:
        self.options = options
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._log_file = None
        self.admin_key = options.admin_key or secrets.token_urlsafe(24)

    @property
    def admin_headers(self) -> dict[str, str]:
        """The HTTP header that opens the restricted APIs (statistics, model config, ...)."""
        return {self.options.admin_header: self.admin_key}

    @property
    def grpc_admin_headers(self) -> dict[str, str]:
        """The same for gRPC: Triton expects the header name prefixed with ``triton-grpc-protocol-``."""
        return {GRPC_HEADER_PREFIX + self.options.admin_header: self.admin_key}

    # ------------------------------------------------------------------ lifecycle
    def command(self, backend_dir: Path) -> list[str]:
        """The tritonserver command line."""
        o = self.options
        cmd = [
            "--model-repository", str(o.model_repository),
            "--backend-directory", str(backend_dir),
            "--http-address", o.host, "--http-port", str(o.http_port),
            "--grpc-address", o.host, "--grpc-port", str(o.grpc_port),
            "--metrics-address", o.host, "--metrics-port", str(o.metrics_port),
            "--model-control-mode", "none",
            "--strict-readiness", "true",
            "--exit-timeout-secs", str(o.exit_timeout_s),
            "--log-verbose", str(o.log_verbose),
            "--pinned-memory-pool-byte-size", str(o.pinned_memory_pool_mb << 20),
            "--backend-config", "python,shm-default-byte-size=16777216",
            "--backend-config", "python,shm-growth-byte-size=67108864",
        ]
        for gpu in range(gpu_count()):
            cmd += ["--cuda-memory-pool-byte-size", f"{gpu}:{o.cuda_memory_pool_mb << 20}"]
        if o.model_config_name:
            cmd += ["--model-config-name", o.model_config_name]
        if o.restricted_apis:
            restriction = f"{','.join(o.restricted_apis)}:{o.admin_header}={self.admin_key}"
            cmd += [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]
        if o.grpc_tls_cert is not None and o.grpc_tls_key is not None:
            cmd += ["--grpc-server-cert", str(o.grpc_tls_cert), "--grpc-server-key", str(o.grpc_tls_key)]
            if o.grpc_tls_root_cert is not None:
                cmd += ["--grpc-use-ssl-mutual", "true", "--grpc-root-cert", str(o.grpc_tls_root_cert)]
            else:
                cmd += ["--grpc-use-ssl", "true"]
        return cmd + list(o.extra_args)

    def environment(self, install: TritonInstall) -> dict[str, str]:
        """Environment of the child: this Python first on PATH (the stub finds its env there)."""
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        libs = [str(install.libs)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else [])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        env.update(dict(self.options.env))
        env.pop(ADMIN_KEY_ENV, None)  # the stubs have no use for the admin key
        return env

    def start(self) -> None:
        """Start tritonserver in the background."""
        if self.process is not None:
            raise ServerError("server already started")
        if not (self.options.model_repository / "classify" / "config.pbtxt").is_file():
            log.warning("%s has no classify/config.pbtxt; is it a tritonprep model repository?", self.options.model_repository)
        install = TritonInstall.find()
        self._workdir = Path(tempfile.mkdtemp(prefix="tritonprep-server-"))
        backend_dir = install.make_backend_dir(self._workdir / "backends")
        cmd = [str(install.binary)] + self.command(backend_dir)
        log.debug("starting %s", " ".join(cmd))
        out = None
        if self.log_path is not None:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log_file
        self.process = subprocess.Popen(
            cmd, env=self.environment(install), stdout=out, stderr=subprocess.STDOUT if out else None,
            start_new_session=True, preexec_fn=_die_with_parent,
        )

    def _get(self, path: str, timeout: float = 2.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.options.http_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:  # noqa: S310 - localhost
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def is_ready(self) -> bool:
        """True when the server answers and every model is ready (strict readiness)."""
        try:
            return self._get("/v2/health/ready")[0] == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float = 300.0, cancel: threading.Event | None = None) -> None:
        """Block until ready; raise :class:`ServerError` with the log's tail if it dies, times out or is cancelled."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                raise ServerError("cancelled while waiting for tritonserver to be ready")
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ServerError(f"tritonserver exited with code {code} while starting{self._log_tail()}")
            if self.is_ready():
                return
            time.sleep(0.25)
        raise ServerError(f"tritonserver not ready after {timeout_s:.0f} s{self._log_tail()}")

    def model_states(self) -> dict[str, bool]:
        """Readiness of each model folder of the repository."""
        states = {}
        for cfg in sorted(self.options.model_repository.glob("*/config.pbtxt")):
            name = cfg.parent.name
            try:
                states[name] = self._get(f"/v2/models/{name}/ready")[0] == 200
            except (urllib.error.URLError, OSError):
                states[name] = False
        return states

    def metrics_text(self, timeout: float = 2.0) -> str:
        """Triton's Prometheus metrics (the metrics endpoint is not a restricted API)."""
        return fetch_metrics(self.options.host, self.options.metrics_port, timeout)

    def drain(self, timeout_s: float, quiet_s: float = 2.0) -> bool:
        """Wait until no request is queued or executing anywhere, for at most ``timeout_s``.

        Triton 2.51's own drain (on SIGINT) finishes what is queued or executing in each
        model but refuses the *next step* of an in-flight ensemble request ("Server is
        stopping"), so a ``classify`` request inside preprocess at shutdown would fail.
        Waiting first for quiescence lets those requests finish: quiet means every model's
        queue is empty (``nv_inference_pending_request_count``), the preprocess instances
        execute nothing (``tritonprep_executing_requests``) and no model's request or
        execution counters moved for ``quiet_s`` (which covers a classifier batch in
        flight). Returns False on timeout (traffic that never stops).
        """
        deadline = time.monotonic() + timeout_s
        last: tuple[float, ...] | None = None
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            try:
                text = self.metrics_text()
            except (urllib.error.URLError, OSError):
                return False
            busy = in_flight(text)
            counters = [float(line.rpartition(" ")[2]) for line in text.splitlines()
                        if line.startswith(("nv_inference_request_success", "nv_inference_request_failure",
                                            "nv_inference_exec_count"))]
            now = time.monotonic()
            if busy or tuple(counters) != last:
                quiet_since, last = now, tuple(counters)
            elif now - quiet_since >= quiet_s:
                return True
            time.sleep(0.1)
        return False

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop tritonserver (SIGINT, wait ``timeout_s``, by default Triton's exit timeout + 10 s, then
        SIGKILL); return its exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(timeout=self.options.exit_timeout_s + 10 if timeout_s is None else timeout_s)
                except subprocess.TimeoutExpired:
                    log.warning("tritonserver did not exit in time; killing it")
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
            self.process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        return code

    def _log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n--- tritonserver log (tail) ---\n" + "\n".join(tail)

    def __enter__(self) -> EmbeddedServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------- command line
def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``tritonprep serve``."""
    p = parser or argparse.ArgumentParser(prog="tritonprep serve", description="Run the embedded Triton server.")
    p.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s; 0.0.0.0 exposes it)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--model-config-name", help="use <model>/configs/<NAME>.pbtxt where present")
    p.add_argument("--cuda-memory-pool-mb", type=int, default=512, help="per GPU (default: %(default)s)")
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--log-file", type=Path, help="write Triton's log here instead of the terminal")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the models")
    p.add_argument("--exit-timeout", type=int, default=30, help="seconds in-flight requests get on shutdown")
    sec = p.add_argument_group("security")
    sec.add_argument("--admin-key-file", type=Path,
                     help=f"file holding the value of the {ADMIN_HEADER} header that opens the repository, "
                          "model-config, shared-memory, statistics, trace and logging APIs "
                          f"(default: ${ADMIN_KEY_ENV}, else a random value per start, which closes them)")
    sec.add_argument("--unrestricted", action="store_true", help="leave every API open (trusted networks only)")
    sec.add_argument("--grpc-tls-cert", type=Path, help="PEM certificate: serve gRPC over TLS")
    sec.add_argument("--grpc-tls-key", type=Path, help="PEM private key of --grpc-tls-cert")
    sec.add_argument("--grpc-tls-root-cert", type=Path, help="PEM CA: require client certificates (mutual TLS)")
    sup = p.add_argument_group("supervision")
    sup.add_argument("--no-supervise", action="store_true", help="exit instead of restarting a failed server")
    sup.add_argument("--max-restarts", type=int, default=5, help="restarts allowed within 10 minutes (default: 5)")
    p.add_argument("triton_args", nargs=argparse.REMAINDER, help="after --: extra tritonserver arguments")
    return p


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Turn parsed arguments into :class:`ServerOptions`."""
    extra = [a for a in args.triton_args if a != "--"]
    if args.admin_key_file is not None:
        try:
            admin_key: str | None = args.admin_key_file.read_text().strip()
        except OSError as e:
            raise ServerError(f"cannot read --admin-key-file {args.admin_key_file}: {e.strerror}") from None
    else:
        admin_key = os.environ.get(ADMIN_KEY_ENV) or None
    return ServerOptions(
        model_repository=args.model_repository.resolve(), host=args.host, http_port=args.http_port,
        grpc_port=args.grpc_port, metrics_port=args.metrics_port, model_config_name=args.model_config_name,
        log_verbose=args.log_verbose, cuda_memory_pool_mb=args.cuda_memory_pool_mb, exit_timeout_s=args.exit_timeout,
        extra_args=tuple(extra), restricted_apis=() if args.unrestricted else RESTRICTED_APIS, admin_key=admin_key,
        grpc_tls_cert=args.grpc_tls_cert, grpc_tls_key=args.grpc_tls_key, grpc_tls_root_cert=args.grpc_tls_root_cert,
    )


def serve(args: argparse.Namespace) -> int:
    """Run the server in the foreground until SIGINT/SIGTERM; return an exit code.

    On SIGINT/SIGTERM tritonserver gets Triton's exit timeout to finish the requests in
    flight. While it runs, a :class:`~tritonprep.supervise.Supervisor` restarts it when a
    model stops serving (unless ``--no-supervise``).
    """
    from .supervise import Supervisor

    options = options_from_args(args)
    server = EmbeddedServer(options, args.log_file)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping tritonserver", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    server.start()
    supervisor = None
    try:
        deadline = time.monotonic() + args.ready_timeout
        while not server.is_ready():
            if stopping.is_set():
                return 130
            if server.process is not None and server.process.poll() is not None:
                raise ServerError(f"tritonserver exited with code {server.process.returncode} while starting"
                                  f"{server._log_tail()}")
            if time.monotonic() > deadline:
                raise ServerError(f"models not ready after {args.ready_timeout:.0f} s")
            time.sleep(0.25)
        states = server.model_states()
        log.info("tritonserver ready: HTTP %s  gRPC %s%s  metrics http://%s:%d/metrics", options.http_url,
                 options.grpc_url, " (TLS)" if options.grpc_tls_cert else "", options.host, options.metrics_port)
        log.info("models ready: %s", ", ".join(n for n, ok in states.items() if ok) or "none")
        if options.restricted_apis:
            source = ("--admin-key-file" if args.admin_key_file else f"${ADMIN_KEY_ENV}") if options.admin_key else \
                "a random value (set --admin-key-file or $" + ADMIN_KEY_ENV + " to use them)"
            log.info("restricted APIs (%s) need the header %s: %s", ",".join(options.restricted_apis),
                     options.admin_header, source)
        log.info("try: .venv/bin/tritonprep classify photo.jpg --url %s", options.grpc_url)
        if not args.no_supervise:
            supervisor = Supervisor(server, max_restarts=args.max_restarts, ready_timeout_s=args.ready_timeout)
            supervisor.start()
        while not stopping.is_set():
            if supervisor is not None and supervisor.gave_up.is_set():
                log.error("tritonserver keeps failing; giving up")
                return 1
            if supervisor is None and server.process is not None and server.process.poll() is not None:
                log.error("tritonserver exited unexpectedly with code %s", server.process.returncode)
                return 1
            stopping.wait(0.5)
        return 0
    finally:
        if supervisor is not None:
            supervisor.stop()
        if stopping.is_set() and server.process is not None and server.process.poll() is None:
            t0 = time.monotonic()
            drained = server.drain(options.exit_timeout_s)
            log.info("requests in flight %s after %.1f s", "finished" if drained else "still running",
                     time.monotonic() - t0)
        code = server.stop()
        log.info("tritonserver stopped (exit code %s)", code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tritonprep.server``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tritonprep: %(message)s", datefmt="%H:%M:%S", force=True)
    args = build_parser().parse_args(argv)
    try:
        return serve(args)
    except ServerError as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())

