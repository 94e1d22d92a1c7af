"""The embedded server: runs the ``tritonserver`` binary that the ``nvidia-pytriton`` wheel ships.

``pip install tritonprep[server]`` gives a real Triton (2.51) with its Python backend and a
stub per Python version; this module assembles a backend directory for the running
Python, points the stub at this environment (``PATH``), starts ``tritonserver`` on the
repository's ``model_repository/`` bound to localhost, waits until every model is ready,
and stops it cleanly (SIGINT, Triton's exit timeout, then SIGKILL).

tritonserver runs under a watchdog process (:mod:`.watchdog`), one per start: it owns the
server's process tree and its shared-memory regions, whose names carry a prefix unique to
the start (:mod:`.reaper`), and removes both however the server ends. The watchdog holds a
pipe from this process (the "lifeline"): when this process dies, even by SIGKILL, the
watchdog stops the server gracefully. Nothing depends on the thread that called
:meth:`EmbeddedServer.start`. Before each start, :func:`~.reaper.sweep` removes what dead
servers left behind.

Secure defaults: localhost only, model control off, and the repository, model-config,
shared-memory, statistics, trace and logging APIs restricted (HTTP and gRPC) to clients
that send the admin header (``triton-admin-key``; its value is random per start unless
given). gRPC TLS is an option. ``tritonprep serve`` also supervises the server
(:mod:`.supervise`) and restarts it when a model stops serving.

Command line: ``tritonprep serve --help`` (:mod:`.cli`).
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ServerError
from .install import TritonInstall, visible_gpus
from .options import ADMIN_KEY_ENV, GRPC_HEADER_PREFIX, ServerOptions
from .probes import fetch_metrics, in_flight
from .reaper import kill_server, prefix_of, remove_regions, sweep, work_dir_prefix

log = logging.getLogger(__name__)

#: the configuration name the launcher selects where it sees a GPU (``<model>/configs/gpu.pbtxt``)
GPU_CONFIG_NAME = "gpu"
#: seconds the watchdog may need after the grace: stubs settle (1 s), leftovers are killed, regions removed
CLEANUP_S = 10.0
#: seconds for the watchdog to start tritonserver
WATCHDOG_START_S = 30.0


class EmbeddedServer:
    """A tritonserver child process serving one model repository."""

    def __init__(self, options: ServerOptions, log_path: Path | None = None) -> None:
        self.options = options
        self.log_path = log_path
        #: the watchdog process of the running server (:mod:`.watchdog`), None when stopped
        self.watchdog: subprocess.Popen[bytes] | None = None
        #: tritonserver's pid while started
        self.pid: int | None = None
        #: the prefix of this server's shared-memory regions (/dev/shm/<prefix>*) while started
        self.prefix: str | None = None
        self._returncode: int | None = None
        self._lifeline: int | None = None  # write end; the watchdog's stdin
        self._reports: int | None = None  # read end of the watchdog's report lines
        self._report_buffer = b""
        self._lock = threading.RLock()
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
        gpus = len(visible_gpus(o.gpus))  # tritonserver numbers the GPUs it sees 0..gpus-1
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
        if self.options.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus(self.options.gpus))
        env.update(dict(self.options.env))
        env.pop(ADMIN_KEY_ENV, None)  # the stubs have no use for the admin key
        return env

    def start(self) -> None:
        """Start tritonserver in the background, under its watchdog."""
        if self.watchdog is not None:
            raise ServerError("server already started")
        if not (self.options.model_repository / "classify" / "config.pbtxt").is_file():
            log.warning(
                "%s has no classify/config.pbtxt; is it a tritonprep model repository?", self.options.model_repository
            )
        install = TritonInstall.find()
        sweep()
        self._workdir = Path(tempfile.mkdtemp(prefix=work_dir_prefix(os.getpid())))
        try:  # a GPU that is not there (--gpus) fails here: remove the folder, leave nothing behind
            backend_dir = install.make_backend_dir(self._workdir / "backends")
            server_cmd = [str(install.binary)] + self.command(backend_dir)
            env = self.environment(install)
        except BaseException:
            self.stop()
            raise
        log.debug("starting %s", " ".join(server_cmd))
        out = None
        if self.log_path is not None:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log_file
        lifeline_r, self._lifeline = os.pipe()
        self._reports, report_w = os.pipe()
        os.set_blocking(self._reports, False)
        self._returncode, self._report_buffer = None, b""
        watchdog_cmd = [
            sys.executable,
            "-m",
            "tritonprep.launcher.watchdog",
            "--launcher-pid",
            str(os.getpid()),
            "--grace",
            str(self.options.exit_timeout_s + 10),
            "--report-fd",
            str(report_w),
            "--work-dir",
            str(self._workdir),
            "--",
            *server_cmd,
        ]
        try:
            self.watchdog = subprocess.Popen(
                watchdog_cmd,
                env=env,
                stdin=lifeline_r,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                pass_fds=(report_w,),
                start_new_session=True,  # Ctrl-C in a terminal reaches the launcher only, which drains first
            )
        except OSError as e:
            self.stop()
            raise ServerError(f"cannot start the watchdog of tritonserver: {e}") from e
        finally:
            os.close(lifeline_r)
            os.close(report_w)
        try:
            self.prefix = prefix_of(self.watchdog.pid)  # so that stop() can clean up whatever happens next
        except ServerError:
            pass
        deadline = time.monotonic() + WATCHDOG_START_S
        while self.pid is None and self._read_reports(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                break
        if self.pid is None:
            code = self.stop()
            raise ServerError(f"the watchdog did not start tritonserver (exit code {code}){self.log_tail()}")

    def _read_reports(self, timeout: float = 0.0) -> bool:
        """Read the watchdog's report lines (waiting up to ``timeout`` for some); False once it closed the pipe."""
        with self._lock:
            if self._reports is None:
                return False
            if timeout > 0:
                poller = select.poll()
                poller.register(self._reports, select.POLLIN)
                poller.poll(timeout * 1000)
            try:
                data = os.read(self._reports, 4096)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._report_buffer += data
            *lines, self._report_buffer = self._report_buffer.split(b"\n")
            for line in lines:
                kind, _, rest = line.decode(errors="replace").partition(" ")
                if kind == "started":
                    pid, _, prefix = rest.partition(" ")
                    self.pid, self.prefix = int(pid), prefix
                elif kind == "exited":
                    self._returncode = int(rest)
                elif kind == "error":
                    log.error("watchdog: %s", rest)
            return True

    def poll(self) -> int | None:
        """tritonserver's exit code once it has ended (-N: signal N), None while it runs.

        Should the watchdog die without a word, the watchdog's code (tritonserver is then stopping,
        on its parent-death signal).
        """
        with self._lock:
            if self.watchdog is None or self._returncode is not None:
                return self._returncode
            if self.watchdog.poll() is None:
                self._read_reports()
                return self._returncode
            for _ in range(100):  # it has exited: read what it said, up to the end of the pipe
                if not self._read_reports():
                    break
            if self._returncode is None:
                log.warning(
                    "the watchdog (pid %d) of tritonserver %s died (code %s)",
                    self.watchdog.pid,
                    self.pid,
                    self.watchdog.returncode,
                )
                self._returncode = self.watchdog.returncode
            return self._returncode

    @property
    def running(self) -> bool:
        """True from start() until tritonserver has ended."""
        return self.watchdog is not None and self.poll() is None

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
            if not self.running:
                raise ServerError(f"tritonserver exited with code {self.poll()} while starting{self.log_tail()}")
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
        """Stop tritonserver and return its exit code: SIGINT, ``timeout_s`` (by default Triton's exit
        timeout + 10 s) for it to finish, then SIGKILL to its process group.

        Through the watchdog, which then kills what is left of the tree and removes the server's
        shared-memory regions; should the watchdog fail to, this process does.
        """
        with self._lock:
            code = None
            if self.watchdog is not None:
                grace = self.options.exit_timeout_s + 10 if timeout_s is None else timeout_s
                if self.watchdog.poll() is None:
                    try:
                        os.write(self._lifeline, f"stop {grace}\n".encode())  # type: ignore[arg-type]
                    except OSError:
                        pass  # it is exiting anyway
                    try:
                        self.watchdog.wait(timeout=grace + CLEANUP_S)
                    except subprocess.TimeoutExpired:
                        log.warning(
                            "the watchdog of tritonserver did not finish in %.0f s; killing it", grace + CLEANUP_S
                        )
                        self.watchdog.kill()
                        self.watchdog.wait()
                code = self.poll()
                if self.prefix is not None:  # normally nothing is left; if the watchdog failed, this cleans up
                    killed, removed = kill_server(self.prefix), remove_regions(self.prefix)
                    if killed or removed:
                        log.warning("after the watchdog: killed %s, removed regions %s", killed, removed)
                self.watchdog = None
                self.pid = self.prefix = None
            for fd in (self._lifeline, self._reports):
                if fd is not None:
                    os.close(fd)
            self._lifeline = self._reports = None
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
