"""What outlives a server or a test run: processes, /dev/shm regions, work folders, MPS daemons and GPU memory.

* :func:`of_server` - what is left of one server (given its region prefix): live processes that carry
  the prefix (tritonserver, its stubs, anything a model started with it), its watchdog, its regions,
  and given its work folder, the folder and the MPS daemon and servers whose pipe folder lies in it;
  :func:`wait_clean` waits until nothing is, within a bound
* :func:`of_session` - tritonserver, stub, watchdog and MPS processes whose environment carries a test
  session's marker (:data:`SESSION_ENV`, inherited by every server a session starts), tritonprep
  regions created since the session began whose watchdog is dead or carries the marker, and work
  folders created since then whose launcher is dead, is the session's process or carries the marker
* :func:`of_host` - every tritonprep server process (MPS daemons and servers of tritonprep work folders
  included), region and work folder of this pid namespace (after a suite on a machine of its own, such as
  the GPU machine)
* :func:`gpu_snapshot` / :func:`gpu_leftovers` - GPU memory in use and the processes holding a CUDA
  context (``nvidia-smi``), against a baseline; None without ``nvidia-smi``

Used by the test suite's session check (``tests/conftest.py``), ``tests/e2e/test_orphans.py`` and
``python -m scripts.leftovers``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tritonprep.launcher import mps, proctable, reaper

#: set by the test session; every process it starts inherits it
SESSION_ENV = "TRITONPREP_TEST_SESSION"
WATCHDOG_MODULE = "tritonprep.launcher.watchdog"


@dataclass
class Leftovers:
    """Processes (``"pid name"``), /dev/shm region names and work folders that should be gone."""

    processes: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.regions or self.folders)

    def __str__(self) -> str:
        text = f"processes {self.processes or 'none'}, regions {self.regions or 'none'}"
        return text + (f", work folders {self.folders}" if self.folders else "")

    def remove(self) -> None:
        """SIGKILL the processes, unlink the regions, remove the folders (after a failed check: nothing stays)."""
        for pid in self.pids:
            try:
                os.kill(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        for name in self.regions:
            (reaper.SHM_DIR / name).unlink(missing_ok=True)
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def label(p: proctable.Proc) -> str:
    """A process's name: its module for ``python -m <module>`` (the watchdog, the log filter), else its program."""
    if len(p.argv) > 2 and p.argv[1] == "-m":
        return p.argv[2]
    return p.name


def _describe(procs: list[proctable.Proc]) -> tuple[list[str], list[int]]:
    return [f"{p.pid} {label(p)}" for p in procs], [p.pid for p in procs]


def of_server(prefix: str, work_dir: Path | None = None) -> Leftovers:
    """What is left of the server whose regions are ``/dev/shm/<prefix>*`` (and its work folder with the
    MPS daemon of that folder, if given)."""
    procs = [p for p in proctable.processes() if p.alive and p.carries(prefix)]
    owner = reaper.owner_of(prefix)
    if owner is not None and owner.alive():
        procs += [p for p in proctable.processes() if p.pid == owner.pid]
    if work_dir is not None:
        procs += mps.mps_processes(work_dir)
    names, pids = _describe(procs)
    folders = [str(work_dir)] if work_dir is not None and work_dir.exists() else []
    return Leftovers(names, [r.name for r in reaper.regions(prefix)], pids, folders)


def work_dir_of(prefix: str) -> Path:
    """The work folder of the running server with ``prefix`` (from its tritonserver's ``--backend-directory``)."""
    for p in reaper.server_processes(prefix):
        if p.name == proctable.SERVER_BINARY and "--backend-directory" in p.argv:
            return Path(p.argv[p.argv.index("--backend-directory") + 1]).parent
    raise LookupError(f"no running tritonserver with the prefix {prefix}")


def wait_clean(prefix: str, bound_s: float, work_dir: Path | None = None) -> float:
    """Seconds until nothing of the server with ``prefix`` is left; AssertionError if something is after ``bound_s``."""
    start = time.monotonic()
    while True:
        left = of_server(prefix, work_dir)
        elapsed = time.monotonic() - start
        if not left:
            return elapsed
        if elapsed > bound_s:
            raise AssertionError(f"{bound_s:.0f} s after the server of {prefix} ended: {left}")
        time.sleep(0.05)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _is_mps(p: proctable.Proc) -> bool:
    """An MPS daemon or server (not a control command in flight)."""
    return p.name == mps.SERVER or (p.name == mps.CONTROL and bool({"-f", "-d"} & set(p.argv)))


def _is_server_process(p: proctable.Proc) -> bool:
    return p.name in (proctable.SERVER_BINARY, proctable.STUB_BINARY) or WATCHDOG_MODULE in p.argv or _is_mps(p)


def region_names() -> set[str]:
    """The tritonprep regions in /dev/shm now."""
    return {p.name for p in reaper.SHM_DIR.glob("tritonprep_*")} if reaper.SHM_DIR.is_dir() else set()


def work_dir_paths() -> set[str]:
    """The tritonprep work folders in the temporary directory now."""
    return {str(p) for p in reaper.work_dirs()}


def of_session(marker: str, regions_before: set[str], folders_before: set[str] | None = None) -> Leftovers:
    """What the test session with ``marker`` left (see the module's description)."""
    needle = f"{SESSION_ENV}={marker}".encode()
    candidates = [p for p in proctable.processes() if p.alive and _is_server_process(p)]
    procs = _with_servers([p for p in candidates if needle in _environ(p.pid)], candidates)
    names, pids = _describe(procs)
    namespace = reaper.pid_namespace()
    regions = []
    for name in sorted(region_names() - regions_before):
        owner = reaper.owner_of(name)
        if owner is None or owner.namespace != namespace:
            continue
        if not owner.alive() or needle in _environ(owner.pid):
            regions.append(name)
    folders = []
    for path in sorted(work_dir_paths() - (folders_before or set())):
        owner = reaper.work_dir_owner(Path(path).name)
        if owner is None or owner.namespace != namespace:
            continue
        # the launcher is this process (its /proc environ predates the marker) or one it started
        if not owner.alive() or owner.pid == os.getpid() or needle in _environ(owner.pid):
            folders.append(path)
    return Leftovers(names, regions, pids, folders)


def of_host() -> Leftovers:
    """Every tritonprep server process (tritonserver or stub with a tritonprep prefix, a watchdog, an MPS
    daemon or server whose pipe folder is in a tritonprep work folder) and region of this pid namespace."""
    head = f"tritonprep_{reaper.pid_namespace()}_"
    procs = [
        p
        for p in proctable.processes()
        if p.alive and (WATCHDOG_MODULE in p.argv or (_is_server_process(p) and p.carries(head)))
    ]
    procs += mps_of_host()
    names, pids = _describe(procs)
    regions = sorted(n for n in region_names() if n.startswith(head))
    folders = sorted(p for p in work_dir_paths() if f"{reaper.WORK_DIR_PREFIX}{reaper.pid_namespace()}-" in p)
    return Leftovers(names, regions, pids, folders)


def mps_of_host() -> list[proctable.Proc]:
    """MPS daemons and servers of tritonprep servers of this pid namespace (their pipe folder is in a work folder)."""
    head = f"{reaper.WORK_DIR_PREFIX}{reaper.pid_namespace()}-"
    candidates = [p for p in proctable.processes() if p.alive and _is_mps(p)]
    found = [p for p in candidates if head in (proctable.environ(p.pid) or {}).get(mps.PIPE_ENV, "")]
    return _with_servers(found, candidates)


def _with_servers(found: list[proctable.Proc], candidates: list[proctable.Proc]) -> list[proctable.Proc]:
    """``found`` and the MPS servers its daemons started (whatever their environment says)."""
    daemons = {p.pid for p in found if p.name == mps.CONTROL}
    return found + [p for p in candidates if p.name == mps.SERVER and p.ppid in daemons and p not in found]


def foreign_regions() -> list[str]:
    """Regions with Triton's default names: other servers' (not tritonprep's to judge); for reports."""
    return sorted(p.name for p in reaper.SHM_DIR.glob("triton_python_backend_shm_region_*"))


# ---------------------------------------------------------------------- GPU
@dataclass
class GpuSnapshot:
    """Memory in use per GPU (MiB) and the processes holding a CUDA context (pid -> MiB)."""

    memory_used_mb: dict[int, int]
    compute_apps: dict[int, int]

    def to_json(self) -> dict[str, dict[str, int]]:
        """JSON-friendly form (keys as strings)."""
        return {
            "memory_used_mb": {str(k): v for k, v in self.memory_used_mb.items()},
            "compute_apps": {str(k): v for k, v in self.compute_apps.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, dict[str, int]]) -> GpuSnapshot:
        """The inverse of :meth:`to_json`."""
        return cls(
            {int(k): int(v) for k, v in data["memory_used_mb"].items()},
            {int(k): int(v) for k, v in data["compute_apps"].items()},
        )


def _query(args: list[str]) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def _mb(text: str) -> int:
    return int(text) if text.isdigit() else 0  # "[N/A]" where the driver cannot tell


def gpu_snapshot() -> GpuSnapshot | None:
    """GPU memory in use and the CUDA processes now, or None without ``nvidia-smi`` (or a GPU)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        memory = {int(i): _mb(used) for i, used in _query(["--query-gpu=index,memory.used"])}
        apps: dict[int, int] = {}
        for pid, used in _query(["--query-compute-apps=pid,used_memory"]):
            apps[int(pid)] = apps.get(int(pid), 0) + _mb(used)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return GpuSnapshot(memory, apps) if memory else None


def gpu_leftovers(baseline: GpuSnapshot | None, now: GpuSnapshot, tolerance_mb: int = 64) -> list[str]:
    """What is wrong with ``now`` against ``baseline``: CUDA processes that were not there, GPU memory
    above the baseline by more than ``tolerance_mb`` (without a baseline: any CUDA process)."""
    problems = []
    known = set() if baseline is None else set(baseline.compute_apps)
    for pid, used in sorted(now.compute_apps.items()):
        if pid not in known:
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "not visible here"
            problems.append(f"process {pid} ({name}) holds a CUDA context ({used} MiB)")
    if baseline is not None:
        for gpu, used in sorted(now.memory_used_mb.items()):
            before = baseline.memory_used_mb.get(gpu)
            if before is not None and used - before > tolerance_mb:
                problems.append(f"GPU {gpu}: {used} MiB in use, {before} MiB at the baseline (+{used - before} MiB)")
    return problems
