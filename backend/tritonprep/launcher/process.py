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
(:mod:`.supervise`) and restarts it when a model stops serving.

Command line: ``tritonprep serve --help`` (:mod:`.cli`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ServerError
from .install import TritonInstall, gpu_count
from .options import ADMIN_KEY_ENV, GRPC_HEADER_PREFIX, ServerOptions
from .probes import fetch_metrics, in_flight

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: the configuration name the launcher selects where it sees a GPU (``<model>/configs/gpu.pbtxt``)
GPU_CONFIG_NAME = "gpu"


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
            "--model-repository",
            str(o.model_repository),
            "--backend-directory",
            str(backend_dir),
            "--http-address",
            o.host,
            "--http-port",
            str(o.http_port),
            "--grpc-address",
            o.host,
            "--grpc-port",
            str(o.grpc_port),
            "--metrics-address",
            o.host,
            "--metrics-port",
            str(o.metrics_port),
            "--model-control-mode",
            "none",
            "--strict-readiness",
            "true",
            "--exit-timeout-secs",
            str(o.exit_timeout_s),
            "--log-verbose",
            str(o.log_verbose),
            "--pinned-memory-pool-byte-size",
            str(o.pinned_memory_pool_mb << 20),
            "--backend-config",
            "python,shm-default-byte-size=16777216",
            "--backend-config",
            "python,shm-growth-byte-size=67108864",
        ]
        gpus = gpu_count()
        for gpu in range(gpus):
            cmd += ["--cuda-memory-pool-byte-size", f"{gpu}:{o.cuda_memory_pool_mb << 20}"]
        config_name = o.model_config_name
        if config_name is None and gpus:
            config_name = GPU_CONFIG_NAME  # models with configs/gpu.pbtxt take their GPU configuration
        if config_name:
            cmd += ["--model-config-name", config_name]
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
            log.warning(
                "%s has no classify/config.pbtxt; is it a tritonprep model repository?", self.options.model_repository
            )
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
            cmd,
            env=self.environment(install),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,
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
                raise ServerError(f"tritonserver exited with code {code} while starting{self.log_tail()}")
            if self.is_ready():
                return
            time.sleep(0.25)
        raise ServerError(f"tritonserver not ready after {timeout_s:.0f} s{self.log_tail()}")

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
            counters = [
                float(line.rpartition(" ")[2])
                for line in text.splitlines()
                if line.startswith(
                    ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_exec_count")
                )
            ]
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

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of the server log, headed, or "" without a log file."""
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
