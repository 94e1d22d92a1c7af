"""Supervision of the embedded server: restart ``tritonserver`` when a model stops serving.

Since 24.06 Triton no longer restarts a crashed Python stub, and Triton 2.51 keeps
reporting the model ready while every request to it fails with "Stub process is not
healthy". So the supervisor watches three things, every ``poll_s``:

* the ``tritonserver`` process itself;
* the Python stub processes it started (one per model instance; a stub that exits, is
  killed or becomes a zombie is a dead model instance: ``fail_instance`` ends its stub on
  purpose after an unrecoverable GPU error);
* strict readiness (``/v2/health/ready``), for models that do report themselves unready.

On a failure it stops the server (SIGINT, ``grace_s`` for in-flight requests of the healthy
models, then SIGKILL: with a dead stub Triton would otherwise wait its whole exit timeout
for a model that can no longer unload) and starts a fresh server on the same ports, both
through :meth:`EmbeddedServer.stop` and :meth:`EmbeddedServer.start`: the server's watchdog
removes what is left of the old tree and its shared memory, and the new server is as
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

from ..errors import ServerError
from .process import EmbeddedServer

log = logging.getLogger(__name__)

STUB_NAME = "triton_python_backend_stub"


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


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def stub_processes(server_pid: int) -> list[Stub]:
    """The live Python stubs that ``server_pid`` started (from /proc)."""
    stubs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None or st[1] != server_pid or st[0] == "Z":
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(STUB_NAME.encode()) or len(argv) < 3:
            continue
        model_path = Path(argv[1].decode(errors="replace"))  # <repository>/<model>/<version>/model.py
        stubs.append(Stub(int(entry.name), model_path.parent.parent.name, argv[2].decode(errors="replace")))
    return sorted(stubs, key=lambda s: (s.model, s.pid))


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (VmRSS), or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Supervisor:
    """Watches an :class:`EmbeddedServer` from a background thread and restarts it on failure."""

    def __init__(
        self,
        server: EmbeddedServer,
        *,
        poll_s: float = 0.5,
        ready_failures: int = 3,
        grace_s: float = 2.0,
        max_restarts: int = 5,
        window_s: float = 600.0,
        ready_timeout_s: float = 300.0,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.server = server
        self.poll_s, self.ready_failures, self.grace_s = poll_s, ready_failures, grace_s
        self.max_restarts, self.window_s, self.ready_timeout_s = max_restarts, window_s, ready_timeout_s
        self.on_event = on_event
        self.events: list[Event] = []
        self.stubs: list[Stub] = []
        self.gave_up = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._restart_times: list[float] = []

    @property
    def restarts(self) -> int:
        """How many times the server was restarted."""
        return sum(1 for e in self.events if e.kind == "restarting")

    def _event(self, kind: str, detail: str) -> None:
        event = Event(time.monotonic(), kind, detail)
        self.events.append(event)
        (log.info if kind == "ready" else log.warning)("supervisor: %s: %s", kind, detail)
        if self.on_event is not None:
            self.on_event(event)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Record the stubs of the (ready) server and start watching it."""
        self._record_stubs()
        self._thread = threading.Thread(target=self._loop, name="tritonprep-supervisor", daemon=True)
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
        log.info(
            "supervisor: watching tritonserver pid %s and %d stubs (%s)",
            pid,
            len(self.stubs),
            ", ".join(f"{s.model}:{s.pid}" for s in self.stubs),
        )

    # ------------------------------------------------------------------ checks
    def check(self) -> str | None:
        """What is wrong with the server now, or None."""
        code = self.server.poll()
        if code is not None or self.server.pid is None:
            return f"tritonserver exited with code {code}"
        for stub in self.stubs:
            st = _stat(stub.pid)
            if st is None or st[0] == "Z" or st[1] != self.server.pid:
                return f"the Python stub of model {stub.model!r} (pid {stub.pid}) died"
        return None

    def _loop(self) -> None:
        unready = 0
        next_ready_check = 0.0
        while not self._stop.wait(self.poll_s):
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
        if len(self._restart_times) > self.max_restarts:
            self._event(
                "gave-up", f"{len(self._restart_times) - 1} restarts within {self.window_s:.0f} s; last: {reason}"
            )
            self.gave_up.set()
            return False
        self._event("restarting", reason)
        self.server.stop(timeout_s=self.grace_s)
        for attempt in range(1, 4):
            try:
                self.server.start()
                self.server.wait_ready(self.ready_timeout_s, cancel=self._stop)
                break
            except ServerError as e:
                self.server.stop(timeout_s=self.grace_s)
                if self._stop.is_set():
                    return False
                if attempt == 3:
                    self._event("gave-up", f"tritonserver does not start again: {e}")
                    self.gave_up.set()
                    return False
                self._event("retrying", f"start attempt {attempt} failed ({e}); trying again")
                time.sleep(1.0)
        self._record_stubs()
        self._event("ready", f"tritonserver pid {self.server.pid} is ready")
        return True
