"""The watchdog of one tritonserver: the single owner of its processes, its shared memory and its MPS daemon.

:class:`~.process.EmbeddedServer` starts one for every server start, restarts included::

    python -m tritonprep.launcher.watchdog --launcher-pid PID --grace S --report-fd FD --work-dir DIR \
        --mps auto|on|off [--quiet-cuda-probes] [--label gpu1] -- tritonserver ARGS...

It makes itself a child subreaper, so every process that tritonserver starts (the Python stubs,
and whatever a model starts) is re-parented to the watchdog, not to init, when its parent dies.
Unless ``--mps off``, it first starts the start's private CUDA MPS daemon (:mod:`.mps`, which says
why the watchdog owns it) and gives tritonserver the daemon's folders. It starts tritonserver from its
own (only) thread, in a new session, with the parent-death signal SIGTERM (``PR_SET_PDEATHSIG``
follows the *thread* that forked, so it must be one that lives as long as the watchdog) and with the
region prefix of :mod:`.reaper` on the command line.

A stop is requested by ``stop <grace seconds> [mps-fault]`` on stdin, by SIGTERM or SIGINT, or by the
launcher's death: stdin is a pipe whose write end only the launcher process holds (EOF: every
copy is closed), and the parent pid changes. The watchdog then sends tritonserver SIGINT (Triton
lets requests in flight finish and unloads its models) and SIGKILLs its process group after the
grace.

However tritonserver ends (stopped, crashed, killed), the watchdog reaps it, gives the stubs a
second to notice and exit by themselves (a healthy stub removes its own region), SIGKILLs every
descendant that remains (a stub can deadlock in its own parent-death path and ignores SIGTERM; under
MPS the daemon first ends each one's GPU work, ``terminate_client``, or after a sticky CUDA fault
(``mps-fault``), whose poisoned MPS server answers no such command, shuts that server down at once),
asks the MPS daemon to quit and kills it by pid only if it does not, reports ``released`` (a restart may
begin), removes ``/dev/shm/<prefix>*`` and the launcher's work folder for this start (``--work-dir``), and
exits with the server's code (128+N for signal N).

With ``--quiet-cuda-probes`` (the launcher sees no GPU) tritonserver's output goes through
:mod:`.logfilter`, which leaves out Triton's failed CUDA probes; the filter ends when the output does,
after everything else. With ``--label`` (one server of several on a host) it goes through the filter too,
which starts each line with ``[label] ``, and the watchdog's own lines name the label.

It reports on the report fd in the line protocol of :mod:`.protocol`: ``mps``, ``started``,
``exited``, ``released``, ``cleaned`` (what it had to kill: nothing, after a clean stop) or ``error``.

If the watchdog itself is killed, tritonserver gets SIGTERM and stops gracefully; its launcher
(:meth:`~.process.EmbeddedServer.stop`) or the next start's :func:`~.reaper.sweep` removes what
remains, the MPS daemon included.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import ServerError
from . import logs, mps, proctable, reaper
from .protocol import Cleaned, Error, Exited, LineBuffer, Mps, Released, Report, Started, Stop, parse_command

log = logging.getLogger("tritonprep.watchdog")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: how long stubs get to exit by themselves once tritonserver is gone (they notice within ~0.3 s)
SETTLE_S = 1.0
#: how often the watchdog checks its parent and reaps adopted processes
TICK_S = 0.5
#: how long the log filter may take to finish once tritonserver's processes are gone
FILTER_S = 5.0

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _reap(exclude: set[int]) -> list[int]:
    """Reap the children that have ended (but not those in ``exclude``); return the ones still running."""
    running = []
    for pid in proctable.children(os.getpid()):
        if pid in exclude:
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == 0:
            running.append(pid)
    return running


class Watchdog:
    """Runs one tritonserver (and its MPS daemon) and cleans up after it (see the module's description)."""

    def __init__(
        self,
        command: Sequence[str],
        launcher_pid: int,
        grace_s: float,
        report_fd: int | None,
        *,
        work_dir: Path | None = None,
        mps_mode: str = "off",
        quiet_cuda_probes: bool = False,
        label: str = "",
    ) -> None:
        self.command = list(command)
        self.launcher_pid = launcher_pid
        self.grace_s = grace_s
        self.report_fd = report_fd
        self.work_dir = work_dir
        self.mps_mode = mps_mode
        self.mps: mps.MpsDaemon | None = None
        self.quiet_cuda_probes = quiet_cuda_probes
        self.label = label
        self.log_filter: subprocess.Popen[bytes] | None = None
        #: processes the watchdog SIGKILLed (tritonserver after its grace, leftovers)
        self.killed: list[int] = []
        self._clients_ended = False  # MPS clients had their GPU work ended: their MPS server is shut down at once
        self._mps_fault = False  # the stop follows a sticky CUDA fault under MPS (``stop <grace> mps-fault``)
        self.stop_reason: str | None = None
        self._lifeline = LineBuffer()

    def report(self, message: Report) -> None:
        """One line to the launcher (which may be gone)."""
        if self.report_fd is not None:
            try:
                os.write(self.report_fd, f"{message.encode()}\n".encode())
            except OSError:
                pass

    def request_stop(self, reason: str, grace_s: float | None = None, mps_fault: bool = False) -> None:
        """Stop tritonserver (the first request decides the grace; ``mps_fault``: its MPS clients are poisoned)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self._mps_fault = mps_fault
            if grace_s is not None:
                self.grace_s = grace_s

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_stop(f"received {signal.Signals(signum).name}")

    def _read_lifeline(self) -> bool:
        """Read commands from stdin; False at EOF (the launcher is gone)."""
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:
            self.request_stop("the launcher is gone (lifeline closed)")
            return False
        for line in self._lifeline.feed(data):
            try:
                command = parse_command(line)
            except ServerError as e:
                log.warning("%s", e)
                continue
            if isinstance(command, Stop):
                self.request_stop(
                    "asked to stop after a sticky CUDA fault" if command.mps_fault else "asked to stop",
                    command.grace_s,
                    command.mps_fault,
                )
        return True

    def _own(self, scan: bool = False) -> set[int]:
        """Children that are not tritonserver's: the MPS daemon and the log filter; with ``scan``, also the
        MPS servers of the daemon's pipe folder (should the daemon have left one to this subreaper)."""
        own = {self.mps.pid} if self.mps is not None and self.mps.pid is not None else set()
        if scan and self.mps is not None:
            own |= {p.pid for p in mps.mps_processes(self.mps.pipe_dir)}
        return own | ({self.log_filter.pid} if self.log_filter is not None else set())

    def _server_output(self, prefix: str) -> int | None:
        """Where tritonserver writes its log: the log filter's pipe (``--quiet-cuda-probes``, ``--label``), or
        None (the watchdog's own output)."""
        if not self.quiet_cuda_probes and not self.label:
            return None
        read_fd, write_fd = os.pipe()
        try:
            self.log_filter = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tritonprep.launcher.logfilter",
                    prefix,
                    *(["--label", self.label] * bool(self.label)),
                    *(["--keep-cuda-probes"] * (not self.quiet_cuda_probes)),  # a GPU server: they are real errors
                ],
                stdin=read_fd,
                start_new_session=True,  # it outlives a killed watchdog until tritonserver's output ends
            )
        except OSError as e:
            log.warning("tritonserver's output goes unfiltered: cannot start the log filter: %s", e)
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        return write_fd

    def _end_log_filter(self) -> None:
        """Wait for the log filter to reach the end of tritonserver's output (everything that wrote it is gone)."""
        if self.log_filter is None:
            return
        try:
            self.log_filter.wait(FILTER_S)
        except subprocess.TimeoutExpired:
            log.warning("the log filter (pid %d) still reads after %.0f s: SIGKILL", self.log_filter.pid, FILTER_S)
            self.log_filter.kill()
            self.log_filter.wait()

    def _start_mps(self, env: dict[str, str]) -> dict[str, str] | None:
        """Start the MPS daemon unless ``--mps off``; tritonserver's environment, or None if it must not start."""
        if self.mps_mode == "off" or self.work_dir is None:
            self.report(Mps(False, "not asked for"))
            return env
        daemon = mps.MpsDaemon(self.work_dir, env)
        t0 = time.monotonic()
        try:
            daemon.start()
        except ServerError as e:
            if self.mps_mode == "on":
                log.error("MPS cannot start: %s", e)
                self.report(Error(f"MPS cannot start: {e}"))
                return None
            log.info("CUDA MPS off: %s", e)  # the launcher says it to the user, at the level it deserves
            self.report(Mps(False, str(e)))
            return env
        self.mps = daemon
        log.info(
            "CUDA MPS: control daemon pid %s, pipe folder %s, its server ready in %.2f s",
            daemon.pid,
            daemon.pipe_dir,
            time.monotonic() - t0,
        )
        self.report(Mps(True, str(daemon.pipe_dir)))
        return daemon.client_env(env)

    def run(self) -> int:
        """Start tritonserver, watch it, stop it when asked, clean up; return the exit status for the watchdog."""
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if os.getppid() != self.launcher_pid:
            log.error("the launcher (pid %d) is gone before tritonserver started", self.launcher_pid)
            return 1
        prefix = reaper.prefix_of(os.getpid())
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_r, False)
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        env = self._start_mps(dict(os.environ))
        if env is None:
            return 1
        me = os.getpid()

        def die_with_watchdog() -> None:  # in the child, between fork and exec
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != me:  # the watchdog died before the prctl
                os._exit(1)

        command = self.command + ["--backend-config", f"python,shm-region-prefix-name={prefix}"]
        output = self._server_output(prefix)
        try:
            server: subprocess.Popen[bytes] | None = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_watchdog,
            )
        except (OSError, subprocess.SubprocessError) as e:
            log.error("cannot start %s: %s", self.command[0], e)
            self.report(Error(f"cannot start {self.command[0]}: {e}"))
            server = None
        finally:
            if output is not None:  # tritonserver holds it now: the filter sees the end when its tree is gone
                os.close(output)
        if server is None:
            self.report(Cleaned(mps=self._quit_mps()))
            self._end_log_filter()
            return 127
        self.report(Started(server.pid, prefix))
        log.info("tritonserver pid %d started; its shared-memory regions are /dev/shm/%s*", server.pid, prefix)
        self._watch(server, wakeup_r)
        if server.poll() is None:
            self._stop(server)
        code = server.returncode
        self.report(Exited(code))
        log.info("tritonserver pid %d exited with code %d", server.pid, code)
        self.report(self._clean_up(server.pid, prefix))
        return code if code >= 0 else 128 - code

    def _watch(self, server: subprocess.Popen[bytes], wakeup_r: int) -> None:
        """Until tritonserver exits or a stop is requested."""
        poller = select.poll()
        poller.register(0, select.POLLIN)
        poller.register(wakeup_r, select.POLLIN)
        pidfd = None
        try:
            pidfd = os.pidfd_open(server.pid)
            poller.register(pidfd, select.POLLIN)
        except (AttributeError, OSError):  # before Linux 5.3: the tick notices the exit
            pidfd = None
        mps_lost = False
        try:
            while server.poll() is None and self.stop_reason is None:
                for fd, _ in poller.poll(TICK_S * 1000):
                    if fd == 0 and not self._read_lifeline():
                        poller.unregister(0)
                    elif fd == wakeup_r:
                        while True:
                            try:
                                if not os.read(wakeup_r, 64):
                                    break
                            except BlockingIOError:
                                break
                if os.getppid() != self.launcher_pid:
                    self.request_stop(f"the launcher (pid {self.launcher_pid}) is gone")
                if self.mps is not None and not mps_lost and not self.mps.running():
                    mps_lost = True
                    log.error("the MPS control daemon (pid %s) exited while tritonserver runs", self.mps.pid)
                _reap({server.pid} | self._own())
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _end_gpu_work(self, pids: Sequence[int]) -> None:
        """Under MPS, have the daemon end the GPU work of ``pids`` before they are SIGKILLed: ``terminate_client``
        each, or after a sticky fault (whose MPS server does not answer that) shut the MPS server down at once."""
        if self.mps is not None and self.mps.running():
            if self._mps_fault:
                self.mps.shutdown_servers(mps.TERMINATE_TIMEOUT_S)
                self._clients_ended = True
                return
            ended = self.mps.terminate_clients(set(pids))
            if ended:
                self._clients_ended = True
                log.info("MPS: ended the GPU work of clients %s before killing them", ended)

    def _stop(self, server: subprocess.Popen[bytes]) -> None:
        at_once = self._mps_fault and self.grace_s <= 0
        if at_once:  # its MPS clients are poisoned: no request on this GPU can finish, so nothing is waited for
            log.info("stopping tritonserver pid %d (%s): its GPU work ends now, then SIGKILL", server.pid,
                     self.stop_reason)  # fmt: skip
        else:
            log.info(
                "stopping tritonserver pid %d (%s): SIGINT, SIGKILL after %g s",
                server.pid,
                self.stop_reason,
                self.grace_s,
            )
            server.send_signal(signal.SIGINT)
        try:
            if at_once:
                raise subprocess.TimeoutExpired(server.args, 0)
            server.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            if not at_once:
                log.warning(
                    "tritonserver pid %d still runs after %.1f s: SIGKILL to its process group",
                    server.pid,
                    self.grace_s,
                )
            t0 = time.monotonic()
            self._end_gpu_work([server.pid, *proctable.children(server.pid)])
            if self._clients_ended:
                log.info("MPS: the clients' GPU work was ended in %.2f s", time.monotonic() - t0)
            try:
                os.killpg(server.pid, signal.SIGKILL)  # not reaped yet, so the group id is still its own
                self.killed.append(server.pid)
            except ProcessLookupError:
                pass
            server.wait()

    def _quit_mps(self) -> str:
        """Quit the MPS daemon (after tritonserver and its stubs are gone); how it ended."""
        if self.mps is None:
            return "none"
        t0 = time.monotonic()
        outcome = self.mps.quit(force=self._clients_ended)
        log.info(
            "CUDA MPS: control daemon pid %s %s in %.2f s",
            self.mps.pid,
            "quit" if outcome == "quit" else "killed",
            time.monotonic() - t0,
        )
        return outcome

    def _clean_up(self, server_pid: int, prefix: str) -> Cleaned:
        """Everything the server left: descendants (re-parented here), the MPS daemon, regions."""
        t0 = time.monotonic()
        own = self._own(scan=True)
        deadline = t0 + SETTLE_S
        while _reap(own) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed: list[int] = []
        for _ in range(100):
            left = _reap(own)
            if not left:
                break
            if not killed:
                self._end_gpu_work(left)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        survivors = _reap(own)
        log.info(
            "tritonserver pid %d and its processes are gone %.2f s after it exited", server_pid, time.monotonic() - t0
        )
        mps_outcome = self._quit_mps()
        if not survivors:  # a restart may begin now: no port, GPU client or MPS server of this start is left
            self.report(Released())
        self._end_log_filter()
        _reap(set())
        removed = reaper.remove_regions(prefix)
        if killed or removed:
            log.info(
                "after tritonserver pid %d: killed %s, removed %s",
                server_pid,
                f"{len(set(killed))} leftover process(es) {sorted(set(killed))}" if killed else "no process",
                f"{len(removed)} shared-memory region(s)" if removed else "no region",
            )
        if survivors:
            log.error("processes that survive SIGKILL: %s", survivors)
        return Cleaned(tuple(sorted(set(self.killed + killed))), len(removed), mps_outcome)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tritonprep.launcher.watchdog``."""
    parser = argparse.ArgumentParser(prog="python -m tritonprep.launcher.watchdog", description=__doc__.split("\n")[0])
    parser.add_argument("--launcher-pid", type=int, required=True, help="stop when this parent process is gone")
    parser.add_argument("--grace", type=float, default=40.0, help="seconds from SIGINT to SIGKILL (default: 40)")
    parser.add_argument("--report-fd", type=int, help="write the protocol's reports to this file descriptor")
    parser.add_argument("--work-dir", type=Path, help="a folder to remove once tritonserver and its processes are gone")
    parser.add_argument("--mps", choices=mps.MODES, default="off", help="the start's private CUDA MPS daemon")
    parser.add_argument(
        "--quiet-cuda-probes", action="store_true", help="no GPU: leave Triton's failed CUDA probes out of its log"
    )
    parser.add_argument("--label", default="", help="one server of several: its name, before each line of its log")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the tritonserver command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no tritonserver command after --")
    logs.setup(f"tritonprep watchdog {os.getpid()}" + (f" {args.label}" if args.label else ""))
    try:
        watchdog = Watchdog(
            command,
            args.launcher_pid,
            args.grace,
            args.report_fd,
            work_dir=args.work_dir,
            mps_mode=args.mps,
            quiet_cuda_probes=args.quiet_cuda_probes,
            label=args.label,
        )
        return watchdog.run()
    finally:  # only tritonserver, its stubs and the MPS daemon used it, and they are gone (or never started)
        if args.work_dir is not None:
            shutil.rmtree(args.work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
