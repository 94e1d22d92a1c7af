"""Stopped starts whose watchdog still finishes its clean-up, so that a restart need not wait for it.

Once tritonserver and every process of its tree are gone and the start's MPS daemon has quit (the
watchdog's ``released`` report: no port, GPU client or MPS server of the old start is left, so a GPU in an
exclusive compute mode is free again), what is left of a stop is the watchdog's own clean-up: ending the log
filter, removing the shared-memory regions and the work folder, and exiting. None of it holds anything the
next start uses: that start has its own work folder, region prefix and MPS daemon. So
:meth:`~.process.EmbeddedServer.stop` with ``retire=True`` (the supervisor's restarts) returns at ``released``
and keeps the old watchdog here; it is reaped by the supervisor's loop and the next start, and waited for by
the final stop, which also removes whatever a watchdog that failed left behind.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import mps
from .reaper import kill_server, remove_regions

log = logging.getLogger(__name__)

#: seconds a retiring watchdog gets at the final stop: the MPS daemon's quit and its servers' end (5 s each)
FINISH_S = 15.0


@dataclass
class Retiring:
    """The watchdog of a stopped start, still cleaning up after it."""

    watchdog: subprocess.Popen[bytes]
    #: the start's work folder (the watchdog removes it; None if it was removed already)
    workdir: Path | None
    #: the start's region prefix (None if tritonserver never started)
    prefix: str | None
    since: float = field(default_factory=time.monotonic)

    def done(self) -> bool:
        """True once the watchdog has exited."""
        return self.watchdog.poll() is not None

    def finish(self, timeout_s: float = FINISH_S) -> None:
        """Wait up to ``timeout_s`` for the watchdog (SIGKILL after that), then remove what it did not."""
        try:
            self.watchdog.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "the retiring watchdog (pid %d) still cleans up after %.0f s: SIGKILL", self.watchdog.pid, timeout_s
            )
            self.watchdog.kill()
            self.watchdog.wait()
        if self.watchdog.returncode is not None and self.watchdog.returncode < 0:
            log.warning("the retiring watchdog (pid %d) died (code %d)", self.watchdog.pid, self.watchdog.returncode)
        workdir = self.workdir if self.workdir is not None and self.workdir.exists() else None
        remove_left(self.prefix, workdir, "a retired start")  # normally nothing is left


def remove_left(prefix: str | None, workdir: Path | None, after: str, end_mps: bool = True) -> None:
    """What a start's watchdog did not remove: the processes and regions of ``prefix``, and ``workdir``, with
    the MPS daemon whose pipe folder lies in it unless ``end_mps`` is False (the watchdog quit it); what had
    to be done is logged as ``after <after>: ...``."""
    if prefix is not None:
        killed, removed = kill_server(prefix), remove_regions(prefix)
        if killed or removed:
            log.warning("after %s: killed %s, removed regions %s", after, killed, removed)
    if workdir is not None:
        if end_mps:
            ended = mps.shut_down(workdir)
            if ended:
                log.warning("after %s: ended its MPS daemon %s", after, ended)
        shutil.rmtree(workdir, ignore_errors=True)


def finish_all(retiring: list[Retiring]) -> list[Retiring]:
    """Finish each (waiting for its watchdog, :data:`FINISH_S` at most); return the empty list."""
    for r in retiring:
        r.finish()
    return []


def reap_done(retiring: list[Retiring]) -> list[Retiring]:
    """Finish those whose watchdog has exited; return the others."""
    left = []
    for r in retiring:
        if r.done():
            r.finish(0.0)
        else:
            left.append(r)
    return left
