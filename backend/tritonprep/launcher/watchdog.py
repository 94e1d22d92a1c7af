"""The watchdog of one tritonserver: the single owner of its processes and of its shared memory.

:class:`~.process.EmbeddedServer` starts one for every server start, restarts included::

    python -m tritonprep.launcher.watchdog --launcher-pid PID --grace S --report-fd FD --work-dir DIR \
        -- tritonserver ARGS...

It makes itself a child subreaper, so every process that tritonserver starts (the Python stubs,
and whatever a model starts) is re-parented to the watchdog, not to init, when its parent dies.
It starts tritonserver from its own (only) thread, in a new session, with the parent-death signal
SIGTERM (``PR_SET_PDEATHSIG`` follows the *thread* that forked, so it must be one that lives as
long as the watchdog) and with the region prefix of :mod:`.reaper` on the command line.

A stop is requested by ``stop <grace seconds>`` on stdin, by SIGTERM or SIGINT, or by the
launcher's death: stdin is a pipe whose write end only the launcher process holds (EOF: every
copy is closed), and the parent pid changes. The watchdog then sends tritonserver SIGINT (Triton
lets requests in flight finish and unloads its models) and SIGKILLs its process group after the
grace.

However tritonserver ends (stopped, crashed, killed), the watchdog reaps it, gives the stubs a
second to notice and exit by themselves (a healthy stub removes its own region), SIGKILLs every
descendant that remains (a stub can deadlock in its own parent-death path and ignores SIGTERM),
removes ``/dev/shm/<prefix>*`` and the launcher's work folder for this start (``--work-dir``), and
exits with the server's code (128+N for signal N).

Reports, one line each on the report fd: ``started <server pid> <prefix>`` and ``exited <code>``
(``subprocess`` convention: -N for signal N), or ``error <message>``.

If the watchdog itself is killed, tritonserver gets SIGTERM and stops gracefully; its launcher
(:meth:`~.process.EmbeddedServer.stop`) or the next start's :func:`~.reaper.sweep` removes what
remains.
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

from . import reaper

log = logging.getLogger("tritonprep.watchdog")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: how long stubs get to exit by themselves once tritonserver is gone (they notice within ~0.3 s)
SETTLE_S = 1.0
#: how often the watchdog checks its parent and reaps adopted processes
TICK_S = 0.5

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def children() -> list[int]:
    """This process's children, zombies included."""
    me = os.getpid()
    try:
        return [
            int(c)
            for tid in os.listdir(f"/proc/{me}/task")
            for c in Path(f"/proc/{me}/task/{tid}/children").read_text().split()
        ]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        found = []
        for entry in os.listdir("/proc"):
            try:
                text = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
            except OSError:
                continue
            if text and int(text[text.rindex(")") + 2 :].split()[1]) == me:
                found.append(int(entry))
        return found


def _reap(exclude: int | None = None) -> list[int]:
    """Reap the children that have ended (but not ``exclude``); return the ones still running."""
    running = []
    for pid in children():
        if pid == exclude:
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == 0:
            running.append(pid)
    return running


class Watchdog:
    """Runs one tritonserver and cleans up after it (see the module's description)."""

    def __init__(self, command: Sequence[str], launcher_pid: int, grace_s: float, report_fd: int | None) -> None:
        self.command = list(command)
        self.launcher_pid = launcher_pid
        self.grace_s = grace_s
        self.report_fd = report_fd
        self.stop_reason: str | None = None
        self._lifeline = b""

    def report(self, line: str) -> None:
        """One line to the launcher (which may be gone)."""
        if self.report_fd is not None:
            try:
                os.write(self.report_fd, f"{line}\n".encode())
            except OSError:
                pass

    def request_stop(self, reason: str, grace_s: float | None = None) -> None:
        """Stop tritonserver (the first request decides the grace)."""
        if self.stop_reason is None:
            self.stop_reason = reason
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
        self._lifeline += data
        *lines, self._lifeline = self._lifeline.split(b"\n")
        for line in lines:
            words = line.decode(errors="replace").split()
            try:
                if len(words) == 2 and words[0] == "stop":
                    self.request_stop("asked to stop", float(words[1]))
                    continue
            except ValueError:
                pass
            if words:
                log.warning("unknown command %r", line)
        return True

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
        me = os.getpid()

        def die_with_watchdog() -> None:  # in the child, between fork and exec
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != me:  # the watchdog died before the prctl
                os._exit(1)

        command = self.command + ["--backend-config", f"python,shm-region-prefix-name={prefix}"]
        try:
            server = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_watchdog
            )
        except (OSError, subprocess.SubprocessError) as e:
            log.error("cannot start %s: %s", self.command[0], e)
            self.report(f"error cannot start {self.command[0]}: {e}")
            return 127
        self.report(f"started {server.pid} {prefix}")
        log.info("tritonserver pid %d started; its shared-memory regions are /dev/shm/%s*", server.pid, prefix)
        self._watch(server, wakeup_r)
        if server.poll() is None:
            self._stop(server)
        code = server.returncode
        self.report(f"exited {code}")
        log.info("tritonserver pid %d exited with code %d", server.pid, code)
        self._clean_up(server.pid, prefix)
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
                _reap(exclude=server.pid)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _stop(self, server: subprocess.Popen[bytes]) -> None:
        log.info(
            "stopping tritonserver pid %d (%s): SIGINT, SIGKILL after %.0f s",
            server.pid,
            self.stop_reason,
            self.grace_s,
        )
        server.send_signal(signal.SIGINT)
        try:
            server.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "tritonserver pid %d still runs after %.0f s: SIGKILL to its process group", server.pid, self.grace_s
            )
            try:
                os.killpg(server.pid, signal.SIGKILL)  # not reaped yet, so the group id is still its own
            except ProcessLookupError:
                pass
            server.wait()

    def _clean_up(self, server_pid: int, prefix: str) -> None:
        """Everything the server left: descendants (re-parented here) and regions."""
        deadline = time.monotonic() + SETTLE_S
        while _reap() and time.monotonic() < deadline:
            time.sleep(0.05)
        killed: list[int] = []
        for _ in range(100):
            left = _reap()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        survivors = _reap()
        removed = reaper.remove_regions(prefix)
        if killed or removed:
            log.info(
                "after tritonserver pid %d: killed %s, removed %s",
                server_pid,
                f"{len(killed)} leftover process(es) {sorted(set(killed))}" if killed else "no process",
                f"{len(removed)} shared-memory region(s)" if removed else "no region",
            )
        if survivors:
            log.error("processes that survive SIGKILL: %s", survivors)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tritonprep.launcher.watchdog``."""
    parser = argparse.ArgumentParser(prog="python -m tritonprep.launcher.watchdog", description=__doc__.split("\n")[0])
    parser.add_argument("--launcher-pid", type=int, required=True, help="stop when this parent process is gone")
    parser.add_argument("--grace", type=float, default=40.0, help="seconds from SIGINT to SIGKILL (default: 40)")
    parser.add_argument("--report-fd", type=int, help="write started/exited lines to this file descriptor")
    parser.add_argument("--work-dir", type=Path, help="a folder to remove once tritonserver and its processes are gone")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the tritonserver command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no tritonserver command after --")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s tritonprep watchdog %(process)d: %(message)s", datefmt="%H:%M:%S"
    )
    try:
        return Watchdog(command, args.launcher_pid, args.grace, args.report_fd).run()
    finally:  # only tritonserver and its stubs used it, and they are gone (or never started)
        if args.work_dir is not None:
            shutil.rmtree(args.work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
