"""The rules of tritonprep.launcher.reaper, on regions in a temporary folder and on stand-in processes (a
shell named ``triton_python_backend_stub`` or ``tritonserver``): no Triton; /dev/shm and the real temporary
directory are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonprep.launcher.proctable import start_time
from tritonprep.launcher.reaper import (
    Owner,
    kill_server,
    owner_of,
    pid_namespace,
    prefix_of,
    remove_regions,
    sweep,
    work_dir_owner,
    work_dir_prefix,
    work_dirs,
)

LOOP = "trap '' TERM; while :; do sleep 0.1; done"  # ignores SIGTERM, like a deadlocked stub


def dead_owner() -> Owner:
    """The identity of a process that has ended (and been reaped)."""
    p = subprocess.Popen(["sleep", "30"])
    started = start_time(p.pid)
    assert started is not None
    p.kill()
    p.wait()
    return Owner(pid_namespace(), p.pid, started)


def live_owner() -> Owner:
    return Owner(pid_namespace(), os.getpid(), start_time(os.getpid()))  # type: ignore[arg-type]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[object]:
    """Start a shell under a name of Triton's (argv[0]); everything started is killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def run(name: str, script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        exe = tmp_path / "bin" / name
        exe.parent.mkdir(exist_ok=True)
        if not exe.exists():
            exe.symlink_to("/bin/sh")
        p = subprocess.Popen([str(exe), "-c", script, *args], env={**os.environ, **(env or {})})
        started.append(p)
        return p

    yield run
    for p in started:
        for child in children(p.pid):
            os.kill(child, signal.SIGKILL)
        p.kill()
        p.wait()


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def wait_running(pid: int, argv_part: str) -> None:
    """Until ``pid``'s command line shows ``argv_part`` (the shell has started)."""
    deadline = time.monotonic() + 10
    while argv_part.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_prefix_names_its_watchdog():
    me = live_owner()
    assert prefix_of(os.getpid()) == me.prefix == f"tritonprep_{pid_namespace()}_{os.getpid()}_{me.start_time}_"
    assert owner_of(me.prefix + "0dccf1da-5a01-4a97-9199-688d8dcfe9ee") == me
    assert owner_of("python,shm-region-prefix-name=" + me.prefix) == me  # found inside an argument too
    assert owner_of("triton_python_backend_shm_region_0dccf1da") is None
    assert me.alive()


def test_an_owner_is_dead_once_gone_reused_or_a_zombie():
    assert not dead_owner().alive()
    me = live_owner()
    assert not Owner(me.namespace, me.pid, me.start_time + 1).alive()  # the pid, reused by another process
    assert not Owner(me.namespace + 1, me.pid, me.start_time).alive()  # another pid namespace
    p = subprocess.Popen(["sleep", "0.1"])
    started = start_time(p.pid)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
    assert not Owner(pid_namespace(), p.pid, started).alive()  # type: ignore[arg-type]
    p.wait()


def test_sweep_removes_only_regions_that_nothing_can_use(tmp_path, spawn):
    shm = tmp_path / "shm"
    shm.mkdir()
    dead, carried, held = dead_owner(), dead_owner(), dead_owner()
    other_namespace = Owner(pid_namespace() + 1, dead.pid, dead.start_time)
    names = {
        "dead": dead.prefix + "0dccf1da-5a01-4a97-9199-688d8dcfe9ee",
        "live": live_owner().prefix + "5a8a2c91-ce6c-4840-ae13-9f3518923ddf",
        "held": held.prefix + "b68c4894-d955-4947-a23b-63bf01788efd",  # open in this process
        "carried": carried.prefix + "4fb05ff3-b265-4527-ac46-894f7450d3f9",  # a live process carries the prefix
        "other-namespace": other_namespace.prefix + "203f235a-9e6f-47a4-9579-2a323df79be8",
        "default-name": "triton_python_backend_shm_region_fe743be4-d9db-405d-bae6-4ab3d9efc28d",
    }
    for name in names.values():
        (shm / name).write_bytes(b"\0" * 64)
    helper = spawn("sh", "sleep 30", carried.prefix)
    wait_running(helper.pid, carried.prefix)
    with open(shm / names["held"], "rb"):
        swept = sweep(shm, tmp_path)
    assert swept.removed == [names["dead"]]
    assert sorted(p.name for p in shm.iterdir()) == sorted(n for k, n in names.items() if k != "dead")
    assert sweep(shm, tmp_path).removed == [names["held"]]  # closed now


def test_sweep_kills_stubs_whose_watchdog_and_server_are_gone(tmp_path, spawn):
    dead, other = dead_owner(), dead_owner()
    orphan = spawn("triton_python_backend_stub", LOOP, "model.py", dead.prefix + "a")
    with_watchdog = spawn("triton_python_backend_stub", LOOP, "model.py", live_owner().prefix + "b")
    stub = str(tmp_path / "bin" / "triton_python_backend_stub")
    # a tritonserver (whose watchdog is gone) still running its stub: it stops by itself, the sweep leaves it
    server = spawn(
        "tritonserver",
        '"$STUB" -c "$LOOP" model.py "$0"c & wait',
        other.prefix,
        env={"STUB": stub, "LOOP": LOOP},
    )
    for p in (orphan, with_watchdog):
        wait_running(p.pid, "model.py")
    deadline = time.monotonic() + 10
    while not children(server.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    swept = sweep(tmp_path, tmp_path)
    assert swept.killed == [orphan.pid]
    assert orphan.wait(5) == -9
    assert with_watchdog.poll() is None and server.poll() is None


def test_kill_server_kills_tritonserver_and_stubs_carrying_the_prefix(tmp_path, spawn):
    dead = dead_owner()
    server = spawn("tritonserver", LOOP, "--backend-config", f"python,shm-region-prefix-name={dead.prefix}")
    stub = spawn("triton_python_backend_stub", LOOP, "model.py", dead.prefix + "a")
    bystander = spawn("sh", "sleep 30", dead.prefix)  # someone's `ls /dev/shm/<prefix>*`: not the server's
    for p in (server, stub, bystander):
        wait_running(p.pid, dead.prefix)
    assert sorted(kill_server(dead.prefix)) == sorted([server.pid, stub.pid])
    assert server.wait(5) == -9 and stub.wait(5) == -9
    assert bystander.poll() is None
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / (dead.prefix + "a")).write_bytes(b"")
    (shm / "triton_python_backend_shm_region_a").write_bytes(b"")
    assert remove_regions(dead.prefix, shm) == [dead.prefix + "a"]
    assert [p.name for p in shm.iterdir()] == ["triton_python_backend_shm_region_a"]


def test_sweep_removes_work_folders_of_dead_launchers_that_nothing_names(tmp_path, spawn):
    shm = tmp_path / "shm"
    shm.mkdir()
    dead, stopping = dead_owner(), dead_owner()
    me = live_owner()
    assert work_dir_prefix(os.getpid()) == f"tritonprep-server-{me.namespace}-{me.pid}-{me.start_time}-"
    assert work_dir_owner(work_dir_prefix(os.getpid()) + "x1") == me
    assert owner_of(work_dir_prefix(os.getpid())) is None  # never taken for a region prefix (stubs live inside)
    folders = {
        "dead": tmp_path / f"tritonprep-server-{dead.namespace}-{dead.pid}-{dead.start_time}-a1",
        "live": tmp_path / (work_dir_prefix(os.getpid()) + "b2"),  # this process is its launcher
        "stopping": tmp_path / f"tritonprep-server-{stopping.namespace}-{stopping.pid}-{stopping.start_time}-c3",
    }
    for folder in folders.values():
        (folder / "backends").mkdir(parents=True)
    helper = spawn("tritonserver", "sleep 30", f"--backend-directory={folders['stopping']}/backends")
    wait_running(helper.pid, str(folders["stopping"]))  # a server still stopping names its folder
    assert work_dirs(tmp_path) == sorted(folders.values())
    swept = sweep(shm, tmp_path)
    assert swept.folders == [folders["dead"].name]
    assert work_dirs(tmp_path) == sorted([folders["live"], folders["stopping"]])


def test_sweep_kills_log_filters_of_dead_servers_only(tmp_path, spawn):
    """A log filter (tritonprep.launcher.logfilter, on machines without a GPU) reads until its server's last
    process is gone; a server SIGKILLed with its watchdog leaves it waiting on a deadlocked stub."""
    dead, stopping = dead_owner(), dead_owner()
    module = "tritonprep.launcher.logfilter"
    orphan = spawn("python3", LOOP, module, dead.prefix)
    alive = spawn("python3", LOOP, module, live_owner().prefix)
    still_serving = spawn("python3", LOOP, module, stopping.prefix)
    server = spawn("tritonserver", LOOP, "--backend-config", f"python,shm-region-prefix-name={stopping.prefix}")
    for p in (orphan, alive, still_serving, server):
        wait_running(p.pid, "_")
    swept = sweep(tmp_path, tmp_path)
    assert swept.killed == [orphan.pid]
    assert orphan.wait(5) == -9
    assert alive.poll() is None and still_serving.poll() is None and server.poll() is None
