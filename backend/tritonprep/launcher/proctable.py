"""The process table as ``/proc`` shows it: the launcher's one reader of processes.

The supervisor (which stubs tritonserver started), the reaper (whose processes and regions are these), the
watchdog (its children) and MPS (whose daemon is this) all read processes through here:

* :func:`stat` / :func:`start_time` - state, parent and start time of one process
* :func:`processes` - every process with its command line
* :func:`children` - the children of one process
* :func:`environ` - one process's environment (where it can be read)
* :func:`is_stub` - whether a process is a Python-backend stub

A process that ends while it is read is left out, never an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SERVER_BINARY = "tritonserver"
STUB_BINARY = "triton_python_backend_stub"
#: states of a process that has ended (a zombie waits for its parent to reap it)
ENDED = ("Z", "X")


@dataclass(frozen=True)
class Stat:
    """Fields of ``/proc/PID/stat``."""

    state: str
    ppid: int
    #: clock ticks after boot (with the pid, it names one process for good)
    start_time: int

    @property
    def ended(self) -> bool:
        """True for a zombie (or a process being reaped)."""
        return self.state in ENDED


def stat(pid: int) -> Stat | None:
    """State, parent and start time of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return Stat(fields[0], int(fields[1]), int(fields[19]))


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), or None if it is gone or a zombie."""
    st = stat(pid)
    return None if st is None or st.ended else st.start_time


@dataclass(frozen=True)
class Proc:
    """A process as ``/proc`` shows it."""

    pid: int
    ppid: int
    state: str
    argv: tuple[str, ...]
    start_time: int = 0

    @property
    def name(self) -> str:
        """The base name of the program (argv[0])."""
        return os.path.basename(self.argv[0]) if self.argv else ""

    @property
    def alive(self) -> bool:
        """False for a zombie."""
        return self.state not in ENDED

    def carries(self, text: str) -> bool:
        """True if an argument contains ``text``."""
        return any(text in a for a in self.argv)

    def still_running(self) -> bool:
        """True while this very process runs (not a later one with its pid)."""
        return start_time(self.pid) == self.start_time


def processes() -> list[Proc]:
    """Every process visible in ``/proc`` (kernel threads and processes that vanish meanwhile left out)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = stat(int(entry.name))
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if st is None or not raw:
            continue
        argv = tuple(a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0"))
        found.append(Proc(int(entry.name), st.ppid, st.state, argv, st.start_time))
    return found


def children(pid: int) -> list[int]:
    """The children of ``pid``, zombies included ([] once it is gone)."""
    try:
        return [int(c) for tid in os.listdir(f"/proc/{pid}/task") for c in _read(f"/proc/{pid}/task/{tid}/children")]
    except FileNotFoundError:  # gone, or a kernel without CONFIG_PROC_CHILDREN
        if not os.path.exists(f"/proc/{pid}"):
            return []
    found = []
    for entry in os.listdir("/proc"):
        st = stat(int(entry)) if entry.isdigit() else None
        if st is not None and st.ppid == pid:
            found.append(int(entry))
    return found


def _read(path: str) -> list[str]:
    try:
        return Path(path).read_text().split()
    except FileNotFoundError:
        if not os.path.exists(os.path.dirname(path)):  # this thread ended meanwhile
            return []
        raise


def environ(pid: int) -> dict[str, str] | None:
    """The environment ``pid`` started with, or None if it is gone or not readable (another user's)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def is_stub(p: Proc) -> bool:
    """True for a Python-backend stub, and for the shell Triton starts it through (``bash -c "exec <stub> ..."``)
    in the moment before its exec."""
    return p.name == STUB_BINARY or (p.name == "bash" and len(p.argv) > 2 and STUB_BINARY in p.argv[2])
