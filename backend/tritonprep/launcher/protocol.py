"""The line protocol between the launcher (:class:`~.process.EmbeddedServer`) and its watchdog (:mod:`.watchdog`).

Two pipes, one message per line, words separated by single spaces, the last field free text:

Commands, launcher -> watchdog (the watchdog's stdin, the "lifeline"; EOF means the launcher is gone)::

    stop <grace seconds> [mps-fault]
                                    SIGINT to tritonserver, SIGKILL to its process group after the grace;
                                    ``mps-fault``: a sticky CUDA fault poisoned the MPS clients, so their MPS
                                    server is shut down at once (``shutdown_server -f``) before the SIGKILL

Reports, watchdog -> launcher (``--report-fd``), in this order::

    mps on <pipe folder>            the private MPS daemon runs (clients find it through that folder)
    mps off <reason>                no MPS for this start, and why (before tritonserver starts)
    started <server pid> <prefix>   tritonserver runs; its shared-memory regions are /dev/shm/<prefix>*
    exited <code>                   tritonserver ended (subprocess convention: -N for signal N)
    released                        every process of tritonserver's tree is gone (its ports are free) and the
                                    MPS daemon has quit; the regions and the work folder are next (not sent
                                    where a process survived SIGKILL)
    cleaned <pids> <regions> <mps>  what the clean-up after tritonserver had to do: the processes it
                                    SIGKILLed (comma-separated, "-" for none), how many regions it removed,
                                    and how the MPS daemon ended (quit, killed, none)
    error <message>                 something the launcher must tell the user (a start that failed)

A stop with nothing in flight ends ``exited 0`` and ``cleaned - 0 quit`` (or ``none`` without MPS): nothing
was left for the watchdog to kill. Both ends use :func:`parse_command` / :func:`parse_report` and the
messages' :meth:`encode`; :class:`LineBuffer` splits what a pipe delivers into lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..errors import ServerError


@dataclass(frozen=True)
class Stop:
    """Stop tritonserver, giving it ``grace_s`` before SIGKILL (``mps_fault``: its MPS clients are poisoned)."""

    grace_s: float
    mps_fault: bool = False

    def encode(self) -> str:
        """The line (without its newline)."""
        return f"stop {self.grace_s:g}{' mps-fault' if self.mps_fault else ''}"


@dataclass(frozen=True)
class Mps:
    """Whether this start runs a private MPS daemon: ``detail`` is its pipe folder, or why not."""

    enabled: bool
    detail: str

    def encode(self) -> str:
        """The line (without its newline)."""
        return f"mps {'on' if self.enabled else 'off'} {_one_line(self.detail)}"


@dataclass(frozen=True)
class Started:
    """tritonserver runs as ``pid``; its regions carry ``prefix``."""

    pid: int
    prefix: str

    def encode(self) -> str:
        """The line (without its newline)."""
        return f"started {self.pid} {self.prefix}"


@dataclass(frozen=True)
class Exited:
    """tritonserver ended with ``code`` (-N: signal N)."""

    code: int

    def encode(self) -> str:
        """The line (without its newline)."""
        return f"exited {self.code}"


@dataclass(frozen=True)
class Released:
    """tritonserver, every process of its tree and the MPS daemon are gone: a new start may begin while the
    watchdog removes the regions and the work folder."""

    def encode(self) -> str:
        """The line (without its newline)."""
        return "released"


@dataclass(frozen=True)
class Cleaned:
    """What the watchdog did after tritonserver ended."""

    killed: tuple[int, ...] = ()
    regions: int = 0
    #: how the MPS daemon ended: "quit" (it quit when asked), "killed" (it did not), "none" (no MPS)
    mps: str = "none"

    def encode(self) -> str:
        """The line (without its newline)."""
        pids = ",".join(map(str, self.killed)) or "-"
        return f"cleaned {pids} {self.regions} {self.mps}"

    @property
    def nothing_killed(self) -> bool:
        """True when every process ended by itself (and the MPS daemon quit when asked)."""
        return not self.killed and self.mps != "killed"


@dataclass(frozen=True)
class Error:
    """A failure the launcher reports to the user."""

    message: str

    def encode(self) -> str:
        """The line (without its newline)."""
        return f"error {_one_line(self.message)}"


Command = Stop
Report = Union[Mps, Started, Exited, Released, Cleaned, Error]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _bad(line: str, why: str) -> ServerError:
    return ServerError(f"watchdog protocol: {why} in {line!r}")


def parse_command(line: str) -> Command:
    """The command in ``line``; :class:`ServerError` if it is not one."""
    words = line.split()
    if len(words) in (2, 3) and words[0] == "stop" and words[2:] in ([], ["mps-fault"]):
        try:
            grace = float(words[1])
        except ValueError:
            raise _bad(line, "a grace that is not a number") from None
        if grace >= 0:
            return Stop(grace, len(words) == 3)
    raise _bad(line, "no command")


def parse_report(line: str) -> Report:
    """The report in ``line``; :class:`ServerError` if it is not one."""
    kind, _, rest = line.strip().partition(" ")
    try:
        if kind == "mps":
            state, _, detail = rest.partition(" ")
            if state in ("on", "off"):
                return Mps(state == "on", detail)
        elif kind == "started":
            pid, prefix = rest.split(" ")
            return Started(int(pid), prefix)
        elif kind == "exited":
            return Exited(int(rest))
        elif kind == "released" and not rest:
            return Released()
        elif kind == "cleaned":
            pids, regions, mps = rest.split(" ")
            killed = () if pids == "-" else tuple(int(p) for p in pids.split(","))
            return Cleaned(killed, int(regions), mps)
        elif kind == "error":
            return Error(rest)
    except ValueError:
        raise _bad(line, f"malformed {kind!r} report") from None
    raise _bad(line, "no report")


class LineBuffer:
    """Splits the bytes a pipe delivers into complete lines."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        """The lines that ``data`` completes (a partial last line waits for the next feed)."""
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        return [line.decode(errors="replace") for line in lines if line.strip()]
