"""The launcher's CUDA MPS orchestration (tritonprep.launcher.mps and the watchdog's part) against a fake
``nvidia-cuda-mps-control`` (tests/unit/fake_mps.py) first on PATH, with a stand-in tritonserver: the daemon
of each start lives in its work folder, its clients get its folders and no CUDA_VISIBLE_DEVICES, it quits
after tritonserver, a client is ``terminate_client``-ed before it is killed, a daemon that does not quit is
killed, a dead launcher's daemon is swept, and where MPS cannot start the server starts without it (auto)
or not at all (on). The real daemon runs in tests/gpu/test_gpu_launcher.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.fake_mps import environ_of, install, recorded
from tritonprep.errors import ServerError
from tritonprep.launcher import mps
from tritonprep.launcher.proctable import start_time
from tritonprep.launcher.protocol import (
    Cleaned,
    Error,
    Exited,
    LineBuffer,
    Mps,
    Released,
    Report,
    Started,
    parse_report,
)
from tritonprep.launcher.reaper import Owner, pid_namespace, sweep

FAKE_SERVER = """
import json, os, signal, sys, time
if os.environ.get("FAKE_SERVER_STUCK") == "1":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
else:
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
with open(os.environ["FAKE_SERVER_ENV"] + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "env": dict(os.environ)}, f)
os.rename(os.environ["FAKE_SERVER_ENV"] + ".tmp", os.environ["FAKE_SERVER_ENV"])
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake MPS control first on PATH; returns the file where its daemons record their commands."""
    bin_dir = install(tmp_path / "bin")
    server = bin_dir / "tritonserver"
    server.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    server.chmod(0o755)
    record = tmp_path / "mps-commands.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    monkeypatch.setenv("FAKE_SERVER_ENV", str(tmp_path / "server-env.json"))
    monkeypatch.setattr(mps, "READY_TIMEOUT_S", 3.0)
    monkeypatch.setattr(mps, "QUIT_TIMEOUT_S", 2.0)
    return record


@pytest.fixture
def work() -> Iterator[Path]:
    """A work folder with a short path (the daemon's socket lies inside); anything of MPS left in it is ended."""
    base = Path(tempfile.mkdtemp(prefix="tp-mps-"))
    try:
        yield base / "work"
    finally:
        mps.shut_down(base)
        shutil.rmtree(base, ignore_errors=True)


def started_client(pipe_dir: Path) -> subprocess.Popen[bytes]:
    """A process that the fake daemon counts as its client (its environment names the pipe folder)."""
    return subprocess.Popen(["sleep", "30"], env={**os.environ, mps.PIPE_ENV: str(pipe_dir)})


# ---------------------------------------------------------------------- the daemon
def test_the_daemon_lives_in_the_work_folder_and_quits_when_asked(fake, work):
    daemon = mps.MpsDaemon(work, {**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    daemon.start()
    client = started_client(daemon.pipe_dir)
    try:
        assert daemon.pipe_dir == work / "mps" / "pipe" and daemon.log_dir == work / "mps" / "log"
        assert daemon.running() and len(daemon.servers()) == 1  # its MPS server started with it
        assert {p.name for p in mps.mps_processes(work)} == {mps.CONTROL, mps.SERVER}
        env = daemon.client_env({"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin"})
        assert env == {"PATH": "/bin", mps.PIPE_ENV: str(daemon.pipe_dir), mps.LOG_ENV: str(daemon.log_dir)}
        assert environ_of(daemon.pid)["CUDA_VISIBLE_DEVICES"] == "1"  # type: ignore[arg-type]
        assert daemon.terminate_clients({client.pid}) == [client.pid]
        assert daemon.quit() == "quit"
    finally:
        client.kill()
        client.wait()
    assert mps.mps_processes(work) == []
    commands = recorded(fake)
    assert commands[0] == "daemon started 1"
    assert [c.split()[0] for c in commands[1:]].count("start_server") == 1
    assert any(c.startswith("terminate_client ") and c.endswith(f" {client.pid}") for c in commands)
    assert commands[-1] == "quit"


def test_a_daemon_that_does_not_quit_is_killed_by_pid(fake, work, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_IGNORE_QUIT", "1")
    daemon = mps.MpsDaemon(work, os.environ)
    daemon.start()
    assert daemon.quit() == "killed"
    assert recorded(fake)[-1] == "quit"  # asked first
    assert mps.mps_processes(work) == []


@pytest.mark.parametrize(
    ("fail", "needle"),
    [("daemon", "cannot start the control daemon (as asked)"), ("server", "server did not start")],
)
def test_a_daemon_or_server_that_fails_is_a_server_error_naming_why(fake, work, monkeypatch, fail, needle):
    monkeypatch.setenv("FAKE_MPS_FAIL", fail)
    daemon = mps.MpsDaemon(work, os.environ)
    with pytest.raises(ServerError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        daemon.start()
    assert mps.mps_processes(work) == []


def test_why_mps_cannot_run(tmp_path, work, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "nvidia-cuda-mps-control is not installed" in (mps.unavailable({"PATH": str(empty)}, work) or "")
    bin_dir = install(tmp_path / "bin")
    long_dir = Path("/tmp") / ("x" * 90)
    assert "too long for a Unix socket" in (mps.unavailable({"PATH": str(bin_dir)}, long_dir) or "")
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in\n  *--query-gpu=*) cat "$FAKE_SMI/gpus" ;;\n  *) cat "$FAKE_SMI/apps" ;;\nesac\n'
    )
    smi.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/bin:/usr/bin", "FAKE_SMI": str(tmp_path)}
    (tmp_path / "apps").write_text("GPU-bbb, 4242, nvidia-cuda-mps-server\n")
    (tmp_path / "gpus").write_text("0, GPU-aaa, Default\n1, GPU-bbb, Default\n")
    assert mps.unavailable(env, work) is None
    (tmp_path / "gpus").write_text("0, GPU-aaa, Default\n1, GPU-bbb, Exclusive_Process\n")
    assert "GPU 1 is in compute mode Exclusive_Process and already held by 4242 (nvidia-cuda-mps-server)" in (
        mps.unavailable(env, work) or ""
    )
    assert mps.unavailable({**env, "CUDA_VISIBLE_DEVICES": "0"}, work) is None  # not one of the chosen GPUs
    (tmp_path / "gpus").write_text("0, GPU-aaa, Prohibited\n")
    assert "compute mode Prohibited" in (mps.unavailable(env, work) or "")


# ---------------------------------------------------------------------- the watchdog's daemon
class Watched:
    """A watchdog started by this test process (its launcher) on the stand-in tritonserver."""

    def __init__(self, work: Path, *extra: str, grace: float = 5.0) -> None:
        self.work = work
        work.mkdir(parents=True)
        report_r, report_w = os.pipe()
        self.log = work.parent / "watchdog.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tritonprep.launcher.watchdog", "--launcher-pid", str(os.getpid())]
                + ["--grace", str(grace), "--report-fd", str(report_w), "--work-dir", str(work), *extra, "--"]
                + [shutil.which("tritonserver") or "tritonserver"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(report_w,),
            )
        os.close(report_w)
        self.reports: list[Report] = []
        self._fd, self._lines = report_r, LineBuffer()

    def wait_for(self, kind: type, timeout: float = 20.0) -> Report:
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.reports if isinstance(r, kind)]
            if found:
                return found[0]
            assert time.monotonic() < deadline, (kind, self.reports, self.log.read_text())
            data = os.read(self._fd, 4096)
            if not data:
                raise AssertionError(f"no {kind.__name__} report: {self.reports}\n{self.log.read_text()}")
            self.reports += [parse_report(line) for line in self._lines.feed(data)]

    def stop(self, grace: float = 5.0, suffix: str = "") -> int:
        self.proc.stdin.write(f"stop {grace}{suffix}\n".encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._fd)


@pytest.fixture
def watched(work: Path) -> Iterator[list[Watched]]:
    started: list[Watched] = []
    yield started
    for w in started:
        w.close()


def server_env(tmp_path: Path) -> dict[str, str]:
    """What the stand-in tritonserver recorded (once it handles SIGINT), waiting for it."""
    deadline = time.monotonic() + 10
    while not (tmp_path / "server-env.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return json.loads((tmp_path / "server-env.json").read_text())


def test_the_watchdog_starts_the_daemon_first_and_quits_it_after_tritonserver(fake, work, watched, tmp_path):
    w = Watched(work, "--mps", "on")
    watched.append(w)
    mps_report = w.wait_for(Mps)
    started = w.wait_for(Started)
    assert mps_report == Mps(True, str(work / "mps" / "pipe"))
    env = server_env(tmp_path)["env"]
    assert env[mps.PIPE_ENV] == str(work / "mps" / "pipe") and env[mps.LOG_ENV] == str(work / "mps" / "log")
    assert "CUDA_VISIBLE_DEVICES" not in env
    daemons = [p for p in mps.mps_processes(work) if p.name == mps.CONTROL]
    assert len(daemons) == 1 and daemons[0].ppid == w.proc.pid  # the watchdog's own child
    assert w.stop() == 0
    assert w.wait_for(Exited) == Exited(0)
    assert w.wait_for(Cleaned) == Cleaned((), 0, "quit")  # nothing left to kill
    kinds = [type(r) for r in w.reports]
    assert kinds[-3:] == [Exited, Released, Cleaned], w.reports  # after the daemon quit, before the folder goes
    assert Cleaned((), 0, "quit").nothing_killed
    assert recorded(fake)[-1] == "quit" and mps.mps_processes(work) == [] and not work.exists()
    assert not [c for c in recorded(fake) if c.startswith(("terminate_client", "shutdown_server"))]  # a clean stop
    assert start_time(started.pid) is None  # type: ignore[attr-defined]


def test_a_client_killed_after_the_grace_is_terminated_through_mps_first(fake, work, watched, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SERVER_STUCK", "1")  # tritonserver ignores SIGINT
    w = Watched(work, "--mps", "on", grace=1.0)
    watched.append(w)
    started = w.wait_for(Started)
    server_env(tmp_path)
    assert w.stop(grace=1.0) == 128 + signal.SIGKILL
    cleaned = w.wait_for(Cleaned)
    assert started.pid in cleaned.killed and cleaned.mps == "quit" and not cleaned.nothing_killed  # type: ignore[attr-defined]
    commands = recorded(fake)
    terminate = [
        i for i, c in enumerate(commands) if c.startswith("terminate_client") and c.endswith(f" {started.pid}")
    ]  # type: ignore[attr-defined]
    assert terminate and terminate[0] < commands.index("quit"), commands
    shutdown = [c for c in commands if c.startswith("shutdown_server ") and c.endswith(" -f")]
    assert shutdown and commands.index(shutdown[0]) < commands.index("quit"), commands  # a fault: no waiting
    assert mps.mps_processes(work) == []


def test_after_a_sticky_fault_the_mps_server_is_shut_down_at_once(fake, work, watched, tmp_path, monkeypatch):
    """A poisoned MPS server answers no terminate_client: the stop after a fault (``mps-fault``) forces the server
    down (shutdown_server -f) before the SIGKILL, and asks for nothing per client."""
    monkeypatch.setenv("FAKE_SERVER_STUCK", "1")
    monkeypatch.setenv("FAKE_MPS_HANG_TERMINATE", "1")  # were it asked, the stop would wait for it
    w = Watched(work, "--mps", "on", grace=1.0)
    watched.append(w)
    started = w.wait_for(Started)
    server_env(tmp_path)
    t0 = time.monotonic()
    assert w.stop(grace=0.2, suffix=" mps-fault") == 128 + signal.SIGKILL
    assert time.monotonic() - t0 < 5.0
    assert started.pid in w.wait_for(Cleaned).killed  # type: ignore[attr-defined]
    commands = recorded(fake)
    shutdown = [c for c in commands if c.startswith("shutdown_server ") and c.endswith(" -f")]
    assert shutdown and commands.index(shutdown[0]) < commands.index("quit"), commands
    assert not [c for c in commands if c.startswith("terminate_client")], commands
    assert "after a sticky CUDA fault" in w.log.read_text() and mps.mps_processes(work) == []


def test_a_terminate_client_never_answered_forces_the_mps_server_down(fake, work, watched, tmp_path, monkeypatch):
    """A stop that did not know of a fault: terminate_client gets TERMINATE_TIMEOUT_S, then the server is forced
    down, and the stop goes on."""
    monkeypatch.setenv("FAKE_SERVER_STUCK", "1")
    monkeypatch.setenv("FAKE_MPS_HANG_TERMINATE", "1")
    w = Watched(work, "--mps", "on", grace=1.0)
    watched.append(w)
    w.wait_for(Started)
    server_env(tmp_path)
    t0 = time.monotonic()
    assert w.stop(grace=0.2) == 128 + signal.SIGKILL
    assert time.monotonic() - t0 < 0.2 + mps.TERMINATE_TIMEOUT_S + 4.0
    commands = recorded(fake)
    terminate = next(i for i, c in enumerate(commands) if c.startswith("terminate_client"))
    shutdown = next(i for i, c in enumerate(commands) if c.startswith("shutdown_server ") and c.endswith(" -f"))
    assert terminate < shutdown < commands.index("quit"), commands
    assert "shutting its MPS server down at once" in w.log.read_text() and mps.mps_processes(work) == []


def test_the_launchers_death_stops_the_server_then_the_daemon(fake, work, watched, tmp_path):
    w = Watched(work, "--mps", "on")
    watched.append(w)
    w.wait_for(Started)
    server_env(tmp_path)
    w.proc.stdin.close()  # type: ignore[union-attr]  # the lifeline: EOF as when the launcher dies
    assert w.proc.wait(30) == 0
    assert w.wait_for(Cleaned).mps == "quit"  # type: ignore[attr-defined]
    assert "the launcher is gone" in w.log.read_text()
    assert mps.mps_processes(work) == [] and not work.exists()


def test_mps_on_that_cannot_start_fails_before_tritonserver(fake, work, watched, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "daemon")
    w = Watched(work, "--mps", "on")
    watched.append(w)
    error = w.wait_for(Error)
    assert error.message.startswith("MPS cannot start: the MPS control daemon exited")  # type: ignore[attr-defined]
    assert "cannot start the control daemon (as asked)" in error.message  # type: ignore[attr-defined]
    assert w.proc.wait(30) == 1
    assert not (tmp_path / "server-env.json").exists() and mps.mps_processes(work) == []


def test_mps_auto_that_cannot_start_serves_without_it(fake, work, watched, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "daemon")
    w = Watched(work, "--mps", "auto")
    watched.append(w)
    report = w.wait_for(Mps)
    assert not report.enabled and "cannot start the control daemon" in report.detail  # type: ignore[attr-defined]
    w.wait_for(Started)
    assert mps.PIPE_ENV not in server_env(tmp_path)["env"]
    assert w.stop() == 0 and w.wait_for(Cleaned) == Cleaned((), 0, "none")


def test_the_sweep_ends_the_daemon_of_a_dead_launchers_work_folder(fake, monkeypatch):
    """A watchdog killed with its launcher leaves its daemon running; the next start's sweep knows it by
    the pipe folder inside the dead launcher's work folder, asks it to quit and removes the folder."""
    gone = subprocess.Popen(["sleep", "30"])
    started = start_time(gone.pid)
    gone.kill()
    gone.wait()
    dead = Owner(pid_namespace(), gone.pid, started)  # type: ignore[arg-type]
    base = Path(tempfile.mkdtemp(prefix="tp-sw-"))
    try:
        folder = base / f"tritonprep-server-{dead.namespace}-{dead.pid}-{dead.start_time}-a1"
        daemon = mps.MpsDaemon(folder, os.environ)
        daemon.start()
        orphan = daemon.process
        daemon.process = None  # forgotten, as by a killed watchdog
        shm = base / "shm"
        shm.mkdir()
        swept = sweep(shm, base)
        assert swept.folders == [folder.name] and not folder.exists()
        assert orphan.wait(10) == 0  # type: ignore[union-attr]  # it quit when asked
        assert recorded(fake)[-1] == "quit" and mps.mps_processes(base) == []
    finally:
        mps.shut_down(base)
        shutil.rmtree(base, ignore_errors=True)


def test_the_leftovers_check_counts_mps_daemons_of_tritonprep_work_folders(fake):
    """scripts/leftovers.py (and of_host) list an MPS daemon and server whose pipe folder lies in a tritonprep
    work folder: here a live one, named after this process."""
    from tritonprep.launcher.reaper import work_dir_prefix
    from tritonprep_testkit.leftovers import mps_of_host

    folder = Path(tempfile.mkdtemp(prefix=work_dir_prefix(os.getpid())))
    daemon = mps.MpsDaemon(folder, os.environ)
    try:
        daemon.start()
        assert {p.name for p in mps_of_host()} >= {mps.CONTROL, mps.SERVER}
        root = Path(__file__).resolve().parents[2]
        r = subprocess.run(
            [sys.executable, "-m", "scripts.leftovers", "check", "--wait", "0"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1, r.stdout + r.stderr
        line = next(x for x in r.stdout.splitlines() if x.startswith("tritonprep MPS daemons and servers:"))
        assert f"{daemon.pid} {mps.CONTROL}" in line and mps.SERVER in line, r.stdout
    finally:
        daemon.quit()
        shutil.rmtree(folder, ignore_errors=True)
    assert mps.mps_processes(folder) == []
