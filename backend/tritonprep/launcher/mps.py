"""CUDA MPS for one tritonserver: a private control daemon per start, owned by that start's watchdog.

Every Python-backend instance is a process with its own CUDA context; without MPS the contexts
time-slice the GPU, with MPS their kernels run side by side (1.45-1.75x on ``classify``, measured).

**Owner and lifetime.** The watchdog (:mod:`.watchdog`) starts the control daemon
(``nvidia-cuda-mps-control -f``, its own child) before tritonserver, and quits it after tritonserver
and every stub are gone. It already owns the server's process tree and removes the work folder, so it
is the one process that outlives everything the daemon serves and can end it last, whoever dies first:
a launcher killed by SIGKILL (the watchdog sees its lifeline close, stops tritonserver, then quits the
daemon), a crashed tritonserver (the same clean-up) or a restart. A restart after a fault gets a fresh
MPS server with no poisoned clients: after a sticky CUDA error the MPS server of that GPU refuses new
clients (error 807) until every client of it has exited, and a per-start daemon is simply replaced. The
watchdog never SIGKILLs the daemon before it was asked to ``quit``; before it SIGKILLs a client it asks
the daemon to ``terminate_client`` it (a client killed by a signal without that is unsupported by MPS),
and after that it shuts the MPS server down at once (``shutdown_server <pid> -f``) before the ``quit``.
Should the watchdog die too, its launcher's :meth:`~.process.EmbeddedServer.stop`, or the next start's
sweep (:func:`~.reaper.sweep`, which knows a dead launcher's daemon by its pipe folder), ends it.

**One daemon per tritonserver, for all its GPUs.** One tritonserver serves every chosen GPU with one
environment, which its stubs inherit, so they find one pipe folder: one daemon (whose MPS server covers
all those GPUs). A fatal fault on one GPU is reported to the clients of that GPU, and the supervisor
restarts the whole tritonserver either way. Whoever wants one MPS server per GPU, isolated, runs one
``tritonprep serve --gpus N`` per GPU (each with its own ports).

**Where it lives.** Pipe and log folders are inside the start's work folder (``<work>/mps/pipe``,
``<work>/mps/log``), never the system's ``/tmp/nvidia-mps``: the daemon is this server's alone and leaves
with its folder. The daemon sees the chosen GPUs (``CUDA_VISIBLE_DEVICES``); its clients (tritonserver
and the stubs) get the two folders and no ``CUDA_VISIBLE_DEVICES`` (the MPS server already maps the
devices: a client that repeats the list would name GPUs that it does not see).

**When not.** ``--mps auto`` (the default) uses MPS where a GPU and ``nvidia-cuda-mps-control`` are
present; where it cannot start (the binaries are missing, a GPU is in a compute mode that forbids it or
held exclusively by another process such as another MPS daemon, the daemon or its server fails) the
server starts without it and says why in one line. ``--mps on`` fails the start with the reason
instead; ``--mps off`` never starts one.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import ServerError
from . import proctable

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
SERVER = "nvidia-cuda-mps-server"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
MODES = ("auto", "on", "off")  # ServerOptions.mps (options.MPS_MODES)
#: seconds one control command may take
COMMAND_TIMEOUT_S = 5.0
#: seconds for ``terminate_client``, which a server poisoned by a sticky fault never answers
TERMINATE_TIMEOUT_S = 1.0
#: seconds for the daemon to answer and its MPS server to start
READY_TIMEOUT_S = 15.0
#: seconds the daemon gets to quit before it is killed
QUIT_TIMEOUT_S = 5.0
#: a Unix socket's path holds at most 107 bytes; the daemon's sockets are named inside the pipe folder
MAX_PIPE_DIR = 80
#: why MPS does not run where its binaries are missing (``auto`` then means off, which is no problem)
NOT_INSTALLED = f"{CONTROL} is not installed (it comes with the NVIDIA driver's utilities)"


def folders(work_dir: Path) -> tuple[Path, Path]:
    """The pipe and log folders of the MPS daemon of the start whose work folder is ``work_dir``."""
    return work_dir / "mps" / "pipe", work_dir / "mps" / "log"


def _nvidia_smi(args: list[str], env: Mapping[str, str]) -> list[list[str]] | None:
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, *args, "--format=csv,noheader"], env=dict(env), capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def unavailable(env: Mapping[str, str], pipe_dir: Path) -> str | None:
    """Why MPS cannot run for a server with environment ``env`` (its GPUs), or None if it can be tried."""
    if shutil.which(CONTROL, path=env.get("PATH")) is None:
        return NOT_INSTALLED
    if len(str(pipe_dir)) > MAX_PIPE_DIR:
        return f"the pipe folder {pipe_dir} is too long for a Unix socket (set TMPDIR to a shorter folder)"
    return compute_mode_problem(env)


def compute_mode_problem(env: Mapping[str, str]) -> str | None:
    """A GPU of ``env`` whose compute mode keeps a new MPS server off it: Prohibited, or exclusive and held by
    another process (such as another MPS daemon's server); None without nvidia-smi."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    chosen = None if visible is None else [v.strip() for v in visible.split(",") if v.strip()]
    with ThreadPoolExecutor(2) as pool:  # side by side: each call costs a driver query (part of every start)
        apps_call = pool.submit(_nvidia_smi, ["--query-compute-apps=gpu_uuid,pid,process_name"], env)
        gpus_call = pool.submit(_nvidia_smi, ["--query-gpu=index,uuid,compute_mode"], env)
        apps, gpus = apps_call.result() or [], gpus_call.result() or []
    for row in gpus:
        index, uuid, mode = (row + ["", "", ""])[:3]
        if chosen is not None and not any(c == index or uuid.startswith(c) for c in chosen):
            continue
        if mode.lower() == "prohibited":
            return f"GPU {index} is in compute mode Prohibited (nvidia-smi -i {index} -c DEFAULT allows it)"
        holders = [f"{a[1]} ({a[2]})" for a in apps if len(a) >= 3 and a[0] == uuid]
        if mode.lower().startswith("exclusive") and holders:
            return (
                f"GPU {index} is in compute mode {mode} and already held by {', '.join(holders)} "
                f"(another MPS daemon?); nvidia-smi -i {index} -c DEFAULT lets several processes share it"
            )
    return None


def control(pipe_dir: Path, commands: list[str], env: Mapping[str, str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Send ``commands`` to the daemon of ``pipe_dir``; return what it answered. :class:`ServerError` if it
    cannot be reached."""
    exe = shutil.which(CONTROL, path=env.get("PATH")) or CONTROL
    try:
        r = subprocess.run(
            [exe],
            input="".join(f"{c}\n" for c in commands),
            env={**env, PIPE_ENV: str(pipe_dir)},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise ServerError(f"MPS control ({'; '.join(commands)}): {e}") from None
    if r.returncode != 0:
        raise ServerError(f"MPS control ({'; '.join(commands)}) failed: {(r.stdout + r.stderr).strip()}")
    return r.stdout


def _pids(text: str) -> list[int]:
    return [int(w) for w in text.split() if w.isdigit()]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


class MpsDaemon:
    """The private MPS control daemon of one server start (see the module's description)."""

    def __init__(self, work_dir: Path, env: Mapping[str, str]) -> None:
        self.pipe_dir, self.log_dir = folders(work_dir)
        #: the daemon's environment: the server's, with the chosen GPUs
        self.env = dict(env)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The daemon's pid while it was started."""
        return None if self.process is None else self.process.pid

    def client_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment of tritonserver and its stubs under this daemon."""
        out = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
        out.update({PIPE_ENV: str(self.pipe_dir), LOG_ENV: str(self.log_dir)})
        return out

    def start(self, preexec_fn: Callable[[], None] | None = None) -> None:
        """Start the daemon and its MPS server; :class:`ServerError` naming why not (nothing is left running)."""
        reason = unavailable(self.env, self.pipe_dir)
        if reason is not None:
            raise ServerError(reason)
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**self.env, PIPE_ENV: str(self.pipe_dir), LOG_ENV: str(self.log_dir)}
        out = self.log_dir / "daemon.out"
        with open(out, "ab") as f:
            try:
                self.process = subprocess.Popen(
                    [shutil.which(CONTROL, path=env.get("PATH")) or CONTROL, "-f"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # not in tritonserver's process group: signals to it miss the daemon
                    preexec_fn=preexec_fn,
                )
            except OSError as e:
                raise ServerError(f"cannot start {CONTROL}: {e}") from None
        try:
            self._wait_ready()
        except ServerError as e:
            self.quit()
            raise ServerError(f"{e}{self._logs()}") from None

    def _logs(self) -> str:
        parts = [f"{name}: {_tail(self.log_dir / name)}" for name in ("daemon.out", "control.log", "server.log")]
        shown = [p for p in parts if not p.endswith(": ")]
        return f" ({'; '.join(shown)})" if shown else ""

    def _wait_ready(self) -> None:
        """Until the daemon answers and its MPS server runs (started now, so that a failure shows here)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        asked = False
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ServerError(f"the MPS control daemon exited (code {code})")
            try:
                if self.servers():
                    return
                if not asked:
                    control(self.pipe_dir, [f"start_server -uid {os.getuid()}"], self.env)
                    asked = True
            except ServerError:
                pass  # not answering yet
            time.sleep(0.05)
        raise ServerError(f"the MPS daemon's server did not start within {READY_TIMEOUT_S:.0f} s")

    def command(self, *commands: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        """Send control commands; :class:`ServerError` if the daemon does not answer within ``timeout_s``."""
        return control(self.pipe_dir, list(commands), self.env, timeout_s)

    def servers(self) -> list[int]:
        """The pids of the daemon's MPS servers."""
        return _pids(self.command("get_server_list"))

    def clients(self, server: int) -> list[int]:
        """The pids of the clients of the MPS server ``server``."""
        return _pids(self.command(f"get_client_list {server}"))

    def terminate_clients(self, pids: Collection[int] | None = None) -> list[int]:
        """Ask the daemon to end the GPU work of its clients (those in ``pids``; all without); return them.

        MPS supports a client killed by a signal only after this; a sticky fault leaves the MPS server
        refusing new clients until every client of it has gone.
        """
        ended: list[int] = []
        try:
            for server in self.servers():
                clients = [c for c in self.clients(server) if pids is None or c in pids]
                for client in clients:
                    try:
                        self.command(f"terminate_client {server} {client}", timeout_s=TERMINATE_TIMEOUT_S)
                    except ServerError as e:  # a poisoned MPS server may never answer: end it at once instead
                        log.warning("MPS: %s; shutting its MPS server down at once", e)
                        self.shutdown_servers(TERMINATE_TIMEOUT_S)
                        return ended + [c for c in clients if c not in ended]
                    ended.append(client)
        except ServerError as e:
            log.warning("MPS: could not end the clients' GPU work: %s", e)
        return ended

    def shutdown_servers(self, timeout_s: float = COMMAND_TIMEOUT_S) -> list[int]:
        """Shut every MPS server of the daemon down at once (``shutdown_server <pid> -f``), ending its clients'
        GPU work, as CUDA's MPS documentation advises for work that cannot end (a sticky fault); return them."""
        done: list[int] = []
        try:
            self._force_shutdown(timeout_s, done)
        except ServerError as e:
            log.warning("MPS: could not shut the MPS server down: %s", e)
        if done:
            log.info("MPS: shut MPS server(s) %s down at once", done)
        return done

    def _force_shutdown(self, timeout_s: float, done: list[int] | None = None) -> None:
        """``shutdown_server <pid> -f`` for each MPS server (appended to ``done``); :class:`ServerError` at the
        first the daemon does not answer."""
        for server in self.servers():
            self.command(f"shutdown_server {server} -f", timeout_s=timeout_s)
            if done is not None:
                done.append(server)

    def running(self) -> bool:
        """True while the daemon process runs."""
        return self.process is not None and self.process.poll() is None

    def quit(self, force: bool = False) -> str:
        """End the daemon and its MPS servers: ``quit``, then SIGKILL by pid what is left.

        With ``force`` (clients had to be ended: a fault), each MPS server is first shut down at once
        (``shutdown_server <pid> -f``) instead of waiting for it to wind down. Returns "quit" when the
        daemon and its servers went when asked, "killed" when something had to be killed, "none" when no
        daemon was started.
        """
        if self.process is None:
            return "none"
        daemon = self.process
        servers = [p for p in proctable.processes() if p.name == SERVER and p.ppid == daemon.pid]
        outcome = "quit"
        if daemon.poll() is None:
            try:
                if force:
                    self._force_shutdown(COMMAND_TIMEOUT_S)
                self.command("quit")
                daemon.wait(QUIT_TIMEOUT_S)
            except (ServerError, subprocess.TimeoutExpired) as e:
                log.warning("MPS: the control daemon (pid %d) did not quit (%s): SIGKILL", daemon.pid, e)
                daemon.kill()
                daemon.wait()
                outcome = "killed"
        left = _wait_gone(servers + mps_processes(self.pipe_dir), QUIT_TIMEOUT_S)
        if left:  # the daemon shuts its servers down as it quits; one that stays is killed
            outcome = "killed"
            kill(left)
            _wait_gone(left, QUIT_TIMEOUT_S)  # SIGKILL lands when the process next runs: gone before we return
        return outcome


def _wait_gone(procs: list[proctable.Proc], timeout_s: float) -> list[proctable.Proc]:
    """Wait up to ``timeout_s`` for ``procs`` to end; return those still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in procs if p.still_running()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def mps_processes(pipe_dir: Path) -> list[proctable.Proc]:
    """The MPS daemons and servers (not control commands in flight) serving ``pipe_dir`` or any folder in it:
    those whose environment names such a folder, and the servers those daemons started."""
    candidates = [
        p
        for p in proctable.processes()
        if p.alive and (p.name == SERVER or (p.name == CONTROL and bool({"-f", "-d"} & set(p.argv))))
    ]
    found = []
    for p in candidates:
        folder = (proctable.environ(p.pid) or {}).get(PIPE_ENV)
        if folder is not None and (folder == str(pipe_dir) or folder.startswith(f"{pipe_dir}{os.sep}")):
            found.append(p)
    daemons = {p.pid for p in found if p.name == CONTROL}
    return found + [p for p in candidates if p.name == SERVER and p.ppid in daemons and p not in found]


def kill(procs: list[proctable.Proc]) -> list[int]:
    """SIGKILL ``procs``; return the pids that were still there."""
    killed = []
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
            killed.append(p.pid)
        except ProcessLookupError:
            continue
        except PermissionError:
            log.warning("cannot kill MPS process %d (another user's)", p.pid)
    return killed


def shut_down(folder: Path, env: Mapping[str, str] | None = None) -> list[int]:
    """End every MPS daemon whose pipe folder lies in ``folder`` (a dead server's work folder): ``quit``
    each, then SIGKILL what is left; return the pids that were there."""
    found = mps_processes(folder)
    base = dict(os.environ if env is None else env)
    for pipe in sorted({(proctable.environ(p.pid) or {}).get(PIPE_ENV, "") for p in found if p.name == CONTROL}):
        if not pipe:
            continue
        try:
            control(Path(pipe), ["quit"], base)
        except ServerError as e:
            log.warning("MPS daemon of %s: %s", pipe, e)
    kill(_wait_gone(found, QUIT_TIMEOUT_S))
    return [p.pid for p in found]
