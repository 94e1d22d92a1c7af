"""What a server leaves behind: the shared-memory prefix of each server, and the sweep of dead servers' debris.

Every tritonserver that :class:`~.process.EmbeddedServer` starts has a watchdog process
(:mod:`.watchdog`), and the Python backend names the server's shared-memory regions after it
(Triton's ``--backend-config python,shm-region-prefix-name=...``; Triton appends a UUID)::

    /dev/shm/tritonprep_<pid namespace>_<watchdog pid>_<watchdog start time>_<uuid4>

So a region names the process responsible for it, and anyone can tell whether that process still
lives: the same pid with the same start time (field 22 of ``/proc/PID/stat``) in the same pid
namespace. The prefix is also on tritonserver's command line and in every stub's (the stub's
second argument is its region), which is how :func:`server_processes` finds a server's processes.

:func:`sweep` runs before every start. It kills Python stubs whose watchdog and tritonserver are
both gone (a stub can deadlock in its own parent-death path and then ignores SIGTERM), and the log
filters of such servers (:mod:`.logfilter`, which would read the dead stub's output until it ends), and
removes regions that no live process can still use: the watchdog is dead, no process carries the
prefix on its command line, and none that can be inspected has the region open or mapped. (A
region is opened by name only by tritonserver and its stubs, which carry the prefix, and is
inherited only by children forked without exec, which carry it too. A process whose files cannot
be read, such as this VM's init even for root, would have to open the region by its name on
purpose; counting every such process as a user would keep every region forever.) It never
touches Triton's default names (``triton_python_backend_shm_region_*``) or a prefix of another
pid namespace: those may belong to servers that this process cannot see.

Each start also has a work folder (the copy of the Python backend tritonserver loads), named after
the launcher process, ``$TMPDIR/tritonprep-server-<pid namespace>-<pid>-<start time>-*`` (not in the
region prefix's form: the stubs' paths lie inside it, and their owner is the watchdog, not the launcher).
The watchdog removes it once its server is gone; :func:`sweep` removes those whose launcher is dead
and that no live process names on its command line (a watchdog killed with its launcher), after ending
the private MPS daemon whose pipe folder lies inside (:func:`.mps.shut_down`: its environment names it).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from . import mps
from .proctable import SERVER_BINARY, Proc, is_stub, processes, start_time

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
#: the start of every work folder's name, in the temporary directory
WORK_DIR_PREFIX = "tritonprep-server-"
_PREFIX = re.compile(r"tritonprep_(\d+)_(\d+)_(\d+)_")
_WORK_DIR = re.compile(r"^tritonprep-server-(\d+)-(\d+)-(\d+)-")


def pid_namespace() -> int:
    """The inode of this process's pid namespace (pids mean something only inside one)."""
    return os.stat("/proc/self/ns/pid").st_ino


@dataclass(frozen=True)
class Owner:
    """The watchdog that a prefix names."""

    namespace: int
    pid: int
    start_time: int

    @property
    def prefix(self) -> str:
        """The region prefix of this watchdog's server."""
        return f"tritonprep_{self.namespace}_{self.pid}_{self.start_time}_"

    def alive(self) -> bool:
        """True while the watchdog runs (the same pid with the same start time, not a zombie)."""
        return self.namespace == pid_namespace() and start_time(self.pid) == self.start_time


def prefix_of(watchdog_pid: int) -> str:
    """The region prefix of the server that the watchdog ``watchdog_pid`` runs."""
    started = start_time(watchdog_pid)
    if started is None:
        raise ServerError(f"the watchdog (pid {watchdog_pid}) is gone")
    return Owner(pid_namespace(), watchdog_pid, started).prefix


def work_dir_prefix(launcher_pid: int) -> str:
    """The name prefix of the work folders that the launcher process ``launcher_pid`` creates."""
    started = start_time(launcher_pid)
    if started is None:
        raise ServerError(f"the launcher (pid {launcher_pid}) is gone")
    return f"{WORK_DIR_PREFIX}{pid_namespace()}-{launcher_pid}-{started}-"


def work_dir_owner(name: str) -> Owner | None:
    """The launcher that the work folder ``name`` names, or None."""
    m = _WORK_DIR.match(name)
    return None if m is None else Owner(int(m[1]), int(m[2]), int(m[3]))


def work_dirs(tmp: Path | None = None) -> list[Path]:
    """Every tritonprep work folder in the temporary directory (``tmp``, by default Python's)."""
    base = Path(tmp or tempfile.gettempdir())
    return sorted(p for p in base.glob(WORK_DIR_PREFIX + "*") if p.is_dir())


def owner_of(text: str) -> Owner | None:
    """The owner named by the first tritonprep prefix in ``text`` (a region name, an argument), or None."""
    m = _PREFIX.search(text)
    return None if m is None else Owner(int(m[1]), int(m[2]), int(m[3]))


def server_processes(prefix: str, procs: list[Proc] | None = None) -> list[Proc]:
    """The live tritonserver and stub processes of the server with region prefix ``prefix``."""
    return [
        p
        for p in (processes() if procs is None else procs)
        if p.alive and (p.name == SERVER_BINARY or is_stub(p)) and p.carries(prefix)
    ]


def regions(prefix: str, shm_dir: Path = SHM_DIR) -> list[Path]:
    """The shared-memory regions of the server with ``prefix``."""
    return sorted(p for p in shm_dir.iterdir() if p.name.startswith(prefix)) if shm_dir.is_dir() else []


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(start_time(pid) is not None for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def kill_server(prefix: str, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every tritonserver and stub with ``prefix`` until none is left; return the pids killed.

    For the server's own launcher after its watchdog is gone; anyone else uses :func:`sweep`.
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        found = [p.pid for p in server_processes(prefix)]
        if not found:
            return killed
        if time.monotonic() > deadline:
            log.error("processes of %s* survive SIGKILL: %s", prefix, found)
            return killed
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            if pid not in killed:
                killed.append(pid)
        _wait_gone(found, 0.5)


def remove_regions(prefix: str, shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink the regions of the server with ``prefix``; return their names."""
    removed = []
    for path in regions(prefix, shm_dir):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
    return removed


@dataclass
class Swept:
    """What :func:`sweep` removed."""

    killed: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.killed or self.removed or self.folders)


def _orphaned_stubs(procs: list[Proc]) -> list[Proc]:
    """Stubs of this namespace's tritonprep servers whose watchdog is dead and whose tritonserver is gone."""
    by_pid = {p.pid: p for p in procs}
    namespace = pid_namespace()
    orphans = []
    for p in procs:
        if not p.alive or not is_stub(p):
            continue
        owner = next((o for o in map(owner_of, p.argv) if o is not None), None)
        if owner is None or owner.namespace != namespace or owner.alive():
            continue
        parent = by_pid.get(p.ppid)
        if parent is not None and parent.name == SERVER_BINARY and parent.carries(owner.prefix):
            continue  # its tritonserver still runs: it stops with its dead watchdog and finalizes the stub
        orphans.append(p)
    return orphans


#: the log filter of a server on a machine without a GPU (:mod:`.logfilter`): it carries the server's prefix
LOG_FILTER_MODULE = "tritonprep.launcher.logfilter"


def _orphaned_filters(procs: list[Proc]) -> list[Proc]:
    """Log filters of this namespace's servers whose watchdog is dead and whose tritonserver is gone (they end
    by themselves once the last orphaned stub that writes into them is gone; the sweep does not wait)."""
    namespace = pid_namespace()
    servers = [p for p in procs if p.alive and p.name == SERVER_BINARY]
    orphans = []
    for p in procs:
        if not p.alive or LOG_FILTER_MODULE not in p.argv:
            continue
        owner = next((o for o in map(owner_of, p.argv) if o is not None), None)
        if owner is None or owner.namespace != namespace or owner.alive():
            continue
        if not any(s.carries(owner.prefix) for s in servers):
            orphans.append(p)
    return orphans


def _targets(pid: int) -> set[str]:
    """Files that ``pid`` has open or mapped (raises OSError if they cannot be read)."""
    targets = set()
    for entry in os.scandir(f"/proc/{pid}/fd"):
        try:
            targets.add(os.readlink(entry.path))
        except FileNotFoundError:
            continue  # closed meanwhile
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6:
                targets.add(parts[5].strip())
    return {t.removesuffix(" (deleted)") for t in targets}


def _in_use(names: dict[str, Owner], shm_dir: Path) -> set[str]:
    """Which of the regions ``names`` a live process may still use: it carries the prefix on its
    command line, or has the region open or mapped."""
    paths = {str(shm_dir / n): n for n in names}
    used: set[str] = set()
    for p in processes():
        if not p.alive:
            continue
        used |= {n for n, o in names.items() if p.carries(o.prefix)}
        try:
            targets = _targets(p.pid)
        except OSError:  # it ended meanwhile, or cannot be inspected (see the module's description)
            continue
        used |= {paths[t] for t in targets if t in paths}
    return used


def _sweep_work_dirs(tmp: Path | None) -> list[str]:
    """Remove the work folders of dead launchers of this namespace that no live process names."""
    namespace = pid_namespace()
    stale = []
    for path in work_dirs(tmp):
        owner = work_dir_owner(path.name)
        if owner is not None and owner.namespace == namespace and not owner.alive():
            stale.append(path)
    if not stale:
        return []
    live = [p for p in processes() if p.alive]
    removed = []
    for path in stale:
        if not any(p.carries(str(path)) for p in live):  # a server (or watchdog) still stopping keeps its folder
            ended = mps.shut_down(path)
            if ended:
                log.warning("ended the MPS daemon of a dead server (%s): pids %s", path.name, ended)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def sweep(shm_dir: Path = SHM_DIR, tmp: Path | None = None) -> Swept:
    """Remove what dead tritonprep servers of this pid namespace left: orphaned stubs, unused regions,
    work folders."""
    swept = Swept()
    procs = processes()
    for p in _orphaned_stubs(procs) + _orphaned_filters(procs):
        try:
            os.kill(p.pid, signal.SIGKILL)
            swept.killed.append(p.pid)
        except ProcessLookupError:
            continue
        except PermissionError:
            log.warning("cannot kill orphaned %s %d (another user's)", p.name, p.pid)
    _wait_gone(swept.killed, 2.0)
    swept.folders = _sweep_work_dirs(tmp)
    if not shm_dir.is_dir():
        return swept
    namespace = pid_namespace()
    candidates = {}
    for path in shm_dir.iterdir():
        owner = owner_of(path.name) if path.name.startswith("tritonprep_") else None
        if owner is not None and owner.namespace == namespace and not owner.alive():
            candidates[path.name] = owner
    if candidates:
        used = _in_use(candidates, shm_dir)
        for name in sorted(set(candidates) - used):
            try:
                (shm_dir / name).unlink()
                swept.removed.append(name)
            except FileNotFoundError:
                continue
            except PermissionError:
                log.warning("cannot remove %s (another user's)", shm_dir / name)
    if swept:
        log.warning(
            "removed debris of dead servers: killed orphaned stub(s) %s, removed region(s) %s, work folder(s) %s",
            swept.killed or "none",
            swept.removed or "none",
            swept.folders or "none",
        )
    return swept
