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
servers left behind. The watchdog also owns the start's private CUDA MPS daemon (:mod:`.mps`),
and speaks with this process in the line protocol of :mod:`.protocol`.

Each start has a work folder (the copy of the Python backend, the MPS daemon's folders, the
instances' reports, :data:`tritonprep.reports.ENV`, and where a GPU memory budget applies, the
served copy of the repository with the chosen instance counts, :mod:`.served`).

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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .. import cache, reports
from ..errors import ServerError
from . import install, mps
from .admission import Admission
from .budget import TRITON_MB, auto_budget_mb, parse_budget
from .budget import Plan as BudgetPlan
from .command import GPU_CONFIG_NAME, config_name, tritonserver_args
from .endpoints import Endpoints
from .install import TritonInstall, visible_gpus
from .options import ADMIN_KEY_ENV, ServerOptions
from .protocol import Cleaned, Error, Exited, LineBuffer, Mps, Released, Started, Stop, parse_report
from .reaper import prefix_of, sweep, work_dir_prefix
from .retire import Retiring, finish_all, reap_done, remove_left
from .served import serve_copy

log = logging.getLogger(__name__)

__all__ = ["GPU_CONFIG_NAME", "EmbeddedServer"]
#: seconds the watchdog may need after the grace: stubs settle (1 s), leftovers are killed, regions removed
CLEANUP_S = 10.0
#: seconds for the watchdog to start tritonserver
WATCHDOG_START_S = 30.0


class EmbeddedServer(Endpoints):
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
        #: whether the last start runs under CUDA MPS (and its pipe folder), or why not
        self.mps: Mps | None = None
        #: what the watchdog had to do after the last stop (None before it reported)
        self.cleanup: Cleaned | None = None
        #: the GPU memory budget's plan of the last start (None where no budget applied)
        self.plan: BudgetPlan | None = None
        #: the admission's queue limits of the last start (None where the repository is served as it is)
        self.admission: Admission | None = None
        #: time.monotonic() of the last start, and seconds from it until ready
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self._returncode: int | None = None
        self._released = False  # the watchdog said: tritonserver's whole tree is gone
        #: stopped starts whose watchdog still cleans up (stop(retire=True), :mod:`.retire`)
        self._retiring: list[Retiring] = []
        self._errors: list[str] = []
        self._mps_mode = "off"  # the watchdog's --mps of the last start
        self._gpus = 0  # GPUs the last start serves on
        self._lifeline: int | None = None  # write end; the watchdog's stdin
        self._reports: int | None = None  # read end of the watchdog's report lines
        self._report_lines = LineBuffer()
        self._lock = threading.RLock()
        self._workdir: Path | None = None
        self._log_file = None
        self.admin_key = options.admin_key or secrets.token_urlsafe(24)

    @property
    def report_dir(self) -> Path | None:
        """Where the instances of the running start leave their reports (:mod:`tritonprep.reports`)."""
        return None if self._workdir is None else self._workdir / "reports"

    def wait_ready(self, timeout_s: float = 300.0, cancel: threading.Event | None = None) -> None:
        """:meth:`Endpoints.wait_ready`, then tell the start's instances (:func:`tritonprep.reports.mark_server_ready`):
        what they defer until the server is ready (late batch buckets) starts now."""
        super().wait_ready(timeout_s, cancel)
        if self.report_dir is not None:
            reports.mark_server_ready(self.report_dir)

    # ------------------------------------------------------------------ lifecycle
    def command(self, backend_dir: Path, repository: Path | None = None) -> list[str]:
        """The tritonserver command line (on ``repository``, by default the options' own)."""
        gpus = len(visible_gpus(self.options.gpus))  # tritonserver numbers the GPUs it sees 0..gpus-1
        repo = self.options.model_repository if repository is None else repository
        return tritonserver_args(self.options, backend_dir, repo, self.admin_key, gpus)

    def environment(self, install: TritonInstall) -> dict[str, str]:
        """Environment of the child: this Python first on PATH (the stub finds its env there)."""
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        libs = [str(install.libs)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else [])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        if self.options.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus(self.options.gpus))
        if self._gpus:  # the launcher's numbers of the GPUs, for the instances' reports and metrics
            numbers = self.options.gpus if self.options.gpus is not None else range(self._gpus)
            env[reports.GPUS_ENV] = ",".join(map(str, numbers))
        if self.report_dir is not None:
            env[reports.ENV] = str(self.report_dir)
        env.update(dict(self.options.env))
        cache.use_for_cuda(env)  # GPU code the driver compiles (cuDNN's fused convolutions) kept for the next start
        env.pop(ADMIN_KEY_ENV, None)  # the stubs have no use for the admin key
        return env

    def _choose_mps(self, gpus: int) -> str:
        """The watchdog's ``--mps`` for ``gpus`` visible GPUs (no GPU: off, or a ServerError for ``on``)."""
        if self.options.mps == "off":
            self.mps = Mps(False, "--mps off")
            return "off"
        if not gpus:
            if self.options.mps == "on":
                raise ServerError(
                    "--mps on: no GPU is visible here, and CUDA MPS shares a GPU between the instances; "
                    "use --mps auto (the default) or --mps off"
                )
            self.mps = Mps(False, "no GPU")
            return "off"
        return self.options.mps

    def _served_repository(self, gpu_ids: list[str]) -> Path:
        """The repository to serve: on GPUs, the served copy with the budget's choices and the admission's limits
        (:mod:`.served`); else the options' own."""
        o, self.plan, self.admission = self.options, None, None
        budget = parse_budget(o.gpu_memory_budget)
        gpus = install.gpu_info(gpu_ids)
        if not gpus or self._workdir is None:
            return o.model_repository  # no GPU (or nvidia-smi cannot tell): the queues and configs as they are
        budget_mb = (
            None
            if budget == "off"
            else budget
            if isinstance(budget, int)
            else min(auto_budget_mb(g.total_mb) for g in gpus)
        )
        repository, self.plan, self.admission = serve_copy(
            o.model_repository,
            self._workdir / "repository",
            config_name(o, len(gpu_ids)),
            budget_mb,
            TRITON_MB + o.cuda_memory_pool_mb,
            o.cuda_memory_pool_mb,
            len(gpu_ids),
            o.queue_timeout_ms or None,
        )
        return repository

    def start(self) -> None:
        """Start tritonserver in the background, under its watchdog."""
        if self.watchdog is not None:
            raise ServerError("server already started")
        if not (self.options.model_repository / "classify" / "config.pbtxt").is_file():
            log.warning(
                "%s has no classify/config.pbtxt; is it a tritonprep model repository?", self.options.model_repository
            )
        triton = TritonInstall.find()
        self.reap_retired()
        sweep()
        self.started_at, self.ready_s, self.mps, self.cleanup, self._errors = time.monotonic(), None, None, None, []
        self._workdir = Path(tempfile.mkdtemp(prefix=work_dir_prefix(os.getpid())))
        try:  # a GPU that is not there (--gpus), a budget that cannot fit: remove the folder, leave nothing behind
            gpu_ids = visible_gpus(self.options.gpus)
            self._gpus = len(gpu_ids)
            mps_mode = self._mps_mode = self._choose_mps(len(gpu_ids))
            repository = self._served_repository(gpu_ids)
            backend_dir = triton.make_backend_dir(self._workdir / "backends")
            server_cmd = [str(triton.binary)] + self.command(backend_dir, repository)
            env = self.environment(triton)
        except BaseException:
            self._halt()
            raise
        log.debug("starting %s", " ".join(server_cmd))
        self._launch(server_cmd, env, mps_mode)

    def _launch(self, server_cmd: list[str], env: dict[str, str], mps_mode: str) -> None:
        """Start the watchdog of ``server_cmd``; return once it started tritonserver (ServerError if it did not)."""
        out = None
        if self.log_path is not None:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log_file
        lifeline_r, self._lifeline = os.pipe()
        self._reports, report_w = os.pipe()
        os.set_blocking(self._reports, False)
        self._returncode, self._released, self._report_lines = None, False, LineBuffer()
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
            "--mps",
            mps_mode,
            *(["--quiet-cuda-probes"] if not self._gpus else []),
            *(["--label", self.options.log_label] if self.options.log_label else []),
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
            self._halt()
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
            code = self._halt()
            raise ServerError(self._start_failure(code))

    def _start_failure(self, code: int | None) -> str:
        """Why the watchdog did not start tritonserver, with what to do."""
        if not self._errors:
            return f"the watchdog did not start tritonserver (exit code {code}){self.log_tail()}"
        text = "; ".join(self._errors)
        if self.options.mps == "on" and text.startswith("MPS cannot start"):
            return (
                f"--mps on: {text}. Fix that, or use --mps auto (serves without MPS where it cannot start) or --mps off"
            )
        return f"cannot start tritonserver: {text}"

    def _on_report(self, line: str) -> None:
        try:
            message = parse_report(line)
        except ServerError as e:
            log.warning("%s", e)
            return
        if isinstance(message, Started):
            self.pid, self.prefix = message.pid, message.prefix
        elif isinstance(message, Exited):
            self._returncode = message.code
        elif isinstance(message, Released):
            self._released = True
        elif isinstance(message, Cleaned):
            self.cleanup = message
        elif isinstance(message, Mps) and self._mps_mode != "off":
            self.mps = message
            if message.enabled:
                log.info("CUDA MPS on: a private daemon for this server (%s)", message.detail)
            elif self._mps_mode == "auto":  # the launcher's own reasons (no GPU, --mps off) are set already
                quiet = message.detail == mps.NOT_INSTALLED  # auto means "where installed": not a problem
                (log.info if quiet else log.warning)("serving without CUDA MPS: %s", message.detail)
        elif isinstance(message, Error):
            self._errors.append(message.message)
            log.error("watchdog: %s", message.message)

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
            for line in self._report_lines.feed(data):
                self._on_report(line)
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

    def stop(self, timeout_s: float | None = None, *, retire: bool = False, mps_fault: bool = False) -> int | None:
        """Stop tritonserver and return its exit code: SIGINT, ``timeout_s`` (by default Triton's exit timeout
        + 10 s) for it to finish, then SIGKILL to its process group. Through the watchdog, which then kills what
        is left of the tree, quits the MPS daemon and removes the regions (:attr:`cleanup` says what it had to
        kill); should the watchdog fail to, this process does. ``retire`` (a restart): return at the watchdog's
        ``released`` and let it finish in the background (:mod:`.retire`); a stop without it also waits for the
        starts retired before. ``mps_fault``: a sticky CUDA fault poisoned the MPS clients (their MPS server is
        shut down at once)."""
        code = self._halt(timeout_s, retire, mps_fault)
        if not retire:
            self.reap_retired(wait=True)
        return code

    def _halt(self, timeout_s: float | None = None, retire: bool = False, mps_fault: bool = False) -> int | None:
        """:meth:`stop` without waiting for the retired starts (a start that failed uses it too)."""
        with self._lock:
            code = None
            if self.watchdog is not None:
                grace = self.options.exit_timeout_s + 10 if timeout_s is None else timeout_s
                if self.watchdog.poll() is None:
                    try:
                        os.write(self._lifeline, f"{Stop(grace, mps_fault).encode()}\n".encode())  # type: ignore[arg-type]
                    except OSError:
                        pass  # it is exiting anyway
                    deadline = time.monotonic() + grace + CLEANUP_S
                    while retire and not self._released and self.watchdog.poll() is None:
                        if time.monotonic() >= deadline:
                            break
                        self._read_reports(timeout=0.05)  # until "released" (or the watchdog's end)
                    try:
                        if not (retire and self._released):
                            self.watchdog.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        log.warning(
                            "the watchdog of tritonserver did not finish in %.0f s; killing it", grace + CLEANUP_S
                        )
                        self.watchdog.kill()
                        self.watchdog.wait()
                code = self.poll()
                if retire and self.watchdog.poll() is None:  # it removes the regions and the work folder
                    self._retiring.append(Retiring(self.watchdog, self._workdir, self.prefix))
                    self._workdir = None
                    self.prefix = None
                for _ in range(100):  # the rest of its reports (the clean-up's)
                    if not self._read_reports():
                        break
                remove_left(self.prefix, None, "the watchdog")  # normally nothing; if the watchdog failed, this
                self.watchdog = None
                self.pid = self.prefix = None
            self._close()
            return code

    def reap_retired(self, wait: bool = False) -> int:
        """Reap the retired starts' watchdogs that have finished (:mod:`.retire`), or with ``wait`` wait for
        each; return how many still clean up."""
        with self._lock:
            self._retiring = finish_all(self._retiring) if wait else reap_done(self._retiring)
            return len(self._retiring)

    def _close(self) -> None:
        """Close the pipes and the log, and remove the work folder (with a dead watchdog's MPS daemon)."""
        for fd in (self._lifeline, self._reports):
            if fd is not None:
                os.close(fd)
        self._lifeline = self._reports = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        # the daemon too where the watchdog did not get to quit it
        remove_left(None, self._workdir, "the watchdog", end_mps=self.cleanup is None)
        self._workdir = None

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
            self._halt()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
