"""Supervision of the embedded server: restart ``tritonserver`` when a model stops serving.

Since 24.06 Triton no longer restarts a crashed Python stub, and Triton 2.51 keeps
reporting the model ready while every request to it fails with "Stub process is not
healthy". So the supervisor watches four things, every ``poll_s`` (0.1 s: a few reads of /proc and of a folder;
every request sent to a broken server until it is stopped fails, so a fault is acted on at once):

* the ``tritonserver`` process itself;
* the fault reports of the instances (:func:`tritonprep.reports.read_faults`): an instance that
  takes itself out of service (``fail_instance``, after an unrecoverable error) says why, and
  whether a sticky CUDA error hit which GPU, before its stub exits;
* the Python stub processes it started (one per model instance; a stub that exits, is
  killed or becomes a zombie is a dead model instance);
* strict readiness (``/v2/health/ready``), for models that do report themselves unready.

A sticky CUDA error under CUDA MPS is reported to every client of that GPU's MPS server (the other
stubs on that GPU and tritonserver itself), and the MPS server then refuses new clients until all of
them have exited, and answers no ``terminate_client`` for them. So the restart after one does not wait for a
graceful stop (``fault_grace_s``, 0: the server's listening sockets close at once, so that no request reaches the
broken GPU's server meanwhile; on a multi-GPU host they go to the other GPUs): the watchdog shuts that MPS server
down at once (``shutdown_server
-f``, as CUDA's MPS documentation advises for GPU work that cannot end), kills the clients and quits the
daemon; the new start gets a fresh daemon and MPS server with no poisoned client.

On a failure it stops the server (SIGINT, ``grace_s`` for in-flight requests of the healthy
models, then SIGKILL: with a dead stub Triton would otherwise wait its whole exit timeout
for a model that can no longer unload) and starts a fresh server on the same ports, both
through :meth:`EmbeddedServer.stop` and :meth:`EmbeddedServer.start`: the server's watchdog
removes what is left of the old tree and its shared memory (the new start begins as soon as the
old tree and MPS daemon are gone, while the old watchdog still removes its regions and folder: :mod:`.retire`),
and the new server is as
independent of the supervisor's thread as the first (it stops just as gracefully). More than
``max_restarts`` restarts within ``window_s`` is a crash loop: the supervisor gives up and
reports it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import reports
from ..errors import ServerError
from . import proctable
from .process import EmbeddedServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stub:
    """A Python-backend stub process: one model instance."""

    pid: int
    model: str
    shm_region: str


@dataclass(frozen=True)
class Event:
    """Something the supervisor saw or did (``time`` is ``time.monotonic()``)."""

    time: float
    kind: str  # "failure", "restarting", "retrying", "ready", "gave-up"
    detail: str


def stub_processes(server_pid: int) -> list[Stub]:
    """The live Python stubs that ``server_pid`` started (from the process table)."""
    stubs = []
    for p in proctable.processes():
        if p.ppid != server_pid or not p.alive or p.name != proctable.STUB_BINARY or len(p.argv) < 3:
            continue
        model_path = Path(p.argv[1])  # <repository>/<model>/<version>/model.py
        stubs.append(Stub(p.pid, model_path.parent.parent.name, p.argv[2]))
    return sorted(stubs, key=lambda s: (s.model, s.pid))


class Supervisor:
    """Watches an :class:`EmbeddedServer` from a background thread and restarts it on failure."""

    def __init__(
        self,
        server: EmbeddedServer,
        *,
        poll_s: float = 0.1,
        ready_failures: int = 3,
        grace_s: float = 2.0,
        fault_grace_s: float = 0.0,
        max_restarts: int = 5,
        window_s: float = 600.0,
        ready_timeout_s: float = 300.0,
        on_event: Callable[[Event], None] | None = None,
        name: str = "supervisor",
    ) -> None:
        self.server = server
        self.poll_s, self.ready_failures, self.grace_s, self.fault_grace_s = (
            poll_s,
            ready_failures,
            grace_s,
            fault_grace_s,
        )
        self.max_restarts, self.window_s, self.ready_timeout_s = max_restarts, window_s, ready_timeout_s
        self.on_event = on_event
        #: how its log lines begin ("supervisor gpu1" for one of a host's servers)
        self.name = name
        self.events: list[Event] = []
        self.stubs: list[Stub] = []
        self.gave_up = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._restart_times: list[float] = []
        self._faults_seen: set[int] = set()
        #: the fault report behind the failure being handled (None for a failure without one)
        self.fault: reports.FaultReport | None = None

    @property
    def restarts(self) -> int:
        """How many times the server was restarted."""
        return sum(1 for e in self.events if e.kind == "restarting")

    def _event(self, kind: str, detail: str) -> None:
        event = Event(time.monotonic(), kind, detail)
        self.events.append(event)
        (log.info if kind == "ready" else log.warning)("%s: %s: %s", self.name, kind, detail)
        if self.on_event is not None:
            self.on_event(event)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Record the stubs of the (ready) server and start watching it."""
        self._record_stubs()
        self._thread = threading.Thread(target=self._loop, name=f"tritonprep-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the server keeps running)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _record_stubs(self) -> None:
        pid = self.server.pid
        self.stubs = stub_processes(pid) if pid is not None else []
        self._faults_seen = set()
        log.info(
            "%s: watching tritonserver pid %s and %d stubs (%s)",
            self.name,
            pid,
            len(self.stubs),
            ", ".join(f"{s.model}:{s.pid}" for s in self.stubs),
        )

    # ------------------------------------------------------------------ checks
    def new_fault(self) -> reports.FaultReport | None:
        """The first fault report of the running start not seen before, or None."""
        folder = self.server.report_dir
        if folder is None:
            return None
        for fault in reports.read_faults(folder):
            if fault.pid not in self._faults_seen:
                self._faults_seen.add(fault.pid)
                return fault
        return None

    def check(self) -> str | None:
        """What is wrong with the server now, or None."""
        self.fault = None
        code = self.server.poll()
        if code is not None or self.server.pid is None:
            return f"tritonserver exited with code {code}"
        fault = self.fault = self.new_fault()
        if fault is not None:
            where = f" on GPU {fault.device}" if fault.device is not None else ""
            what = "a sticky CUDA error" if fault.sticky_cuda else "an unrecoverable error"
            return f"{what}{where} took instance {fault.instance} (pid {fault.pid}) out of service: {fault.reason}"
        for stub in self.stubs:
            st = proctable.stat(stub.pid)
            if st is None or st.ended or st.ppid != self.server.pid:
                return f"the Python stub of model {stub.model!r} (pid {stub.pid}) died"
        return None

    def _loop(self) -> None:
        try:
            self._watch()
        except Exception as e:  # noqa: BLE001 - a supervisor that dies silently would leave its server unwatched
            log.exception("%s: stopped watching after an unexpected error", self.name)
            self._event("gave-up", f"the supervisor failed: {type(e).__name__}: {e}")
            self.gave_up.set()

    def _watch(self) -> None:
        unready = 0
        next_ready_check = 0.0
        while not self._stop.wait(self.poll_s):
            self.server.reap_retired()
            reason = self.check()
            if reason is None and time.monotonic() >= next_ready_check:
                next_ready_check = time.monotonic() + max(self.poll_s, 1.0)
                unready = 0 if self.server.is_ready() else unready + 1
                if unready >= self.ready_failures:
                    reason = f"server not ready for {unready} checks in a row: {self.server.model_states()}"
            if reason is None:
                continue
            unready = 0
            self._event("failure", reason)
            if not self._restart(reason):
                return

    def _restart(self, reason: str) -> bool:
        now = time.monotonic()
        self._restart_times = [t for t in self._restart_times if now - t < self.window_s] + [now]
        poisoned = (
            self.fault is not None
            and self.fault.sticky_cuda
            and self.server.mps is not None
            and self.server.mps.enabled
        )
        grace = self.fault_grace_s if poisoned else self.grace_s
        if len(self._restart_times) > self.max_restarts:
            self._event(
                "gave-up", f"{len(self._restart_times) - 1} restarts within {self.window_s:.0f} s; last: {reason}"
            )
            # the failed server must not keep its share of the connections (the host's others serve on)
            self.server.stop(timeout_s=grace, retire=True, mps_fault=poisoned)
            self.gave_up.set()
            return False
        self._event("restarting", reason)
        self.server.stop(timeout_s=grace, retire=True, mps_fault=poisoned)
        released = time.monotonic()
        for attempt in range(1, 4):
            try:
                self.server.start()
                self.server.wait_ready(self.ready_timeout_s, cancel=self._stop)
                break
            except ServerError as e:
                self.server.stop(timeout_s=self.grace_s, retire=True)
                if self._stop.is_set():
                    return False
                if attempt == 3:
                    self._event("gave-up", f"tritonserver does not start again: {e}")
                    self.gave_up.set()
                    return False
                self._event("retrying", f"start attempt {attempt} failed ({e}); trying again")
                time.sleep(1.0)
        self._record_stubs()
        done = time.monotonic()
        self._event(
            "ready",
            f"tritonserver pid {self.server.pid} is ready {done - now:.1f} s after the failure "
            f"(the old server's processes were gone after {released - now:.1f} s, the new start took "
            f"{done - released:.1f} s)",
        )
        return True
